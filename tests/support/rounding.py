"""Float tolerances that follow from the arithmetic, for tests that compare two float32 results.

Two evaluations of one float32 computation by different kernels (batched or one by one, vmapped,
chunked, channels-last, padded, another thread count, AVX2 or AVX-512 vector widths) add their
terms in different orders. A sum of n terms is then off by at most about n·u·Σ|terms|, u = eps32/2
(Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., §4.2). Element-wise tolerances
break where a coordinate cancels (Σ|terms| ≫ |Σ terms|: one PSG gradient coordinate summed to
1.3e-10 and moved by 1.3e-8 between chunk sizes on an AVX-512 CPU), so these tests compare whole
vectors norm-wise, relative to the scale of what is compared. Bit equality stays where the compared
results come from the same sequence of operations (a resumed step, keyed noise, one code path run
twice).
"""

from __future__ import annotations

import torch

EPS32 = torch.finfo(torch.float32).eps  # 2^-23 ≈ 1.19e-7


def float32_rounding(longest_reduction: int) -> float:
    """Relative norm-wise error allowed for a float32 computation whose longest reduction adds
    ``longest_reduction`` terms: n·eps32 = 2·n·u, twice Higham's worst-case bound for one sum.
    Measured errors are a few eps32 (AVX2 and AVX-512, 1 and 2 threads), far below it, and a real
    bug (a dropped term, a wrong scale) moves a result by O(1) of its norm, far above it."""
    return longest_reduction * EPS32


def assert_close_normwise(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    rel: float,
    scale: float | None = None,
    what: str = "",
) -> None:
    """‖actual − expected‖₂ ≤ rel · scale; ``scale`` is ‖expected‖₂ unless given (e.g. n·C for a
    sum of n rows clipped to C)."""
    assert actual.shape == expected.shape, (
        f"{what}: shapes {tuple(actual.shape)} and {tuple(expected.shape)}"
    )
    actual, expected = actual.detach().double(), expected.detach().double()
    scale = float(expected.norm()) if scale is None else float(scale)
    error = float((actual - expected).norm())
    assert error <= rel * scale, (
        f"{what}: ‖actual − expected‖ = {error:.3g} exceeds {rel:.3g} × {scale:.3g} "
        f"({error / (rel * scale):.3g} times the allowed rounding)"
    )
