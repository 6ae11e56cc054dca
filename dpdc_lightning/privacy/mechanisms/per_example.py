"""Private gradients of a network: per-example gradients, clipped and summed, one Gaussian release.

PRIVACY-CRITICAL. The real-data gradient of PSG (Chen, Kerkouche & Fritz, "Private Set Generation
with Discriminative Information", supplement Alg. 2; the DP-SGD step of Abadi et al. 2016):

- every sampled record's gradient of its own cross-entropy loss is computed alone
  (``torch.func.vmap`` over ``grad`` of ``functional_call`` on a batch of one) and flattened over
  ALL parameters into one vector;
- that vector is clipped to L2 norm ``max_norm`` = C (:func:`.mechanisms.clip_rows`, float64);
- the clipped vectors are summed. Add/remove one record changes the sum by that record's clipped
  vector only, so the L2 sensitivity of the sum is C, provided no record's gradient depends on
  another record: a network with batch norm is refused (:func:`refuse_batch_norm`);
- :func:`.mechanisms.gaussian_sum` adds N(0, (σC)² I) from the run's NoiseStream, and the release
  is divided by the EXPECTED batch size B = q·N, a public constant (post-processing). The public
  PSG code divides by the realised Poisson batch size, a data-dependent number outside the stated
  sensitivity; this module never does.
- over several processes, each clips its share of the ONE sample, the float64 sums are all-reduced
  and the noise is added once to the total (:func:`.mechanisms.gaussian_sum` with ``reduce_sum``).

Records are processed in chunks of ``chunk_size``: vmap holds one chunk's activations at a time and
clipping one chunk's float64 copy; the float32 gradient rows of the whole sample are kept, since the
method's release (methods/release.py) is a function of rows that the white-box audit calls too
(benchmarks/results/speed/psg_speed_cpu.md measures the trade-off).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.mechanisms.gaussian import (
    PrivacyEvent,
    _positive_finite,
    clip_rows,
    finite_rows,
    gaussian_sum,
)
from dpdc_lightning.privacy.mechanisms.noise import NoiseStream


def refuse_batch_norm(network: nn.Module, *, method: str) -> None:
    """Refuse a network holding any batch-norm layer (any ``_BatchNorm``: BatchNorm1d/2d/3d,
    SyncBatchNorm, lazy variants) for a private method.

    Batch norm normalises each record by statistics of the whole sample, so one record moves every
    other record's features and gradients: a bound on one record's clipped contribution no longer
    bounds how far the released sum moves (measured on toy: a release clipped to 0.5 moved by ~10).
    The check looks at the module types, not at a configuration string, so a network built any
    other way is caught too."""
    for name, module in network.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            where = name or "the network itself"
            raise UserError(
                f"method {method} is private, and its network has a batch-norm layer ({where}: "
                f"{type(module).__name__}; model.norm=batchnorm): batch norm mixes the records of "
                "a sample and breaks the sensitivity bound; choose model.norm=instancenorm, "
                "groupnorm, layernorm or none"
            )


def per_example_gradients(network: nn.Module, inputs: Tensor, labels: Tensor) -> Tensor:
    """``[n, P]``: row i is the gradient of CE(network(inputs[i:i+1]), labels[i]) with respect to
    every parameter of ``network`` (in ``named_parameters`` order), flattened. The network's own
    parameters and their ``.grad`` are left untouched."""
    params = {name: p.detach() for name, p in network.named_parameters()}
    buffers = {name: b.detach() for name, b in network.named_buffers()}

    def loss_of_one(weights: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
        logits = functional_call(network, (weights, buffers), (x.unsqueeze(0),))
        return F.cross_entropy(logits, y.unsqueeze(0))

    if len(inputs) == 0:
        return inputs.new_zeros((0, sum(p.numel() for p in params.values())))
    grads = vmap(grad(loss_of_one), in_dims=(None, 0, 0))(params, inputs, labels)
    return torch.cat([g.flatten(1) for g in grads.values()], dim=1)


def per_example_rows(
    network: nn.Module, inputs: Tensor, labels: Tensor, *, chunk_size: int = 64
) -> Tensor:
    """``[n, P]`` per-example gradients (:func:`per_example_gradients`), ``chunk_size`` records per
    vmap call: a chunk's activations are what vmap holds at once; the rows are float32."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    refuse_batch_norm(network, method="per-example clipping")
    if len(inputs) == 0:
        return per_example_gradients(network, inputs, labels)
    return torch.cat(
        [
            per_example_gradients(
                network, inputs[start : start + chunk_size], labels[start : start + chunk_size]
            )
            for start in range(0, len(inputs), chunk_size)
        ]
    )


def clipped_row_sum(rows: Tensor, *, max_norm: float, chunk_size: int = 64) -> Tensor:
    """Σ_i clip_C(rows[i]) in float64 ``[P]`` on the rows' device, ``chunk_size`` rows clipped at
    a time (a float64 copy of a chunk, not of the whole batch). A row that is not finite counts as
    a zero row: the run never stops for it. Sensitivity ``max_norm`` under add/remove-one."""
    max_norm = _positive_finite(max_norm, name="max_norm")
    total = torch.zeros(rows.shape[1], dtype=torch.float64, device=rows.device)
    for start in range(0, len(rows), chunk_size):
        # Clip in float64: a float32 row rounded after clipping may end a few ulps above C.
        chunk = finite_rows(rows[start : start + chunk_size].double())
        total += clip_rows(chunk, max_norm=max_norm).sum(dim=0)
    return total


def clipped_gradient_sum(
    network: nn.Module, inputs: Tensor, labels: Tensor, *, max_norm: float, chunk_size: int = 64
) -> Tensor:
    """Σ_i clip_C(per-example gradient of record i), float64 ``[P]`` on the inputs' device.

    L2 sensitivity under add/remove-one: ``max_norm`` (each record adds one row of norm <= C and
    nothing else, batch norm excluded by :func:`refuse_batch_norm`). ``chunk_size`` records at a
    time; the result depends on it only through float32 rounding: the batched kernels of another
    chunk size round each per-example gradient differently (a few eps32 of its norm)."""
    max_norm = _positive_finite(max_norm, name="max_norm")
    rows = per_example_rows(network, inputs, labels, chunk_size=chunk_size)
    return clipped_row_sum(rows, max_norm=max_norm, chunk_size=chunk_size)


def noisy_gradient_mean(
    rows: Tensor,
    *,
    max_norm: float,
    noise_multiplier: float,
    sample_rate: float,
    expected_batch_size: float,
    noise: NoiseStream,
    chunk_size: int = 64,
    reduce_sum: Callable[[Tensor], Tensor] | None = None,
) -> tuple[Tensor, PrivacyEvent]:
    """(Σ_i clip_C(rows[i]) + N(0, (σC)² I)) / B for per-example gradient ``rows`` ``[n, P]``,
    flat, and the event of the release: clipped and summed on the rows' device in float64
    (:func:`clipped_row_sum`), noised once by :func:`.mechanisms.gaussian_sum` after ``reduce_sum``
    (the sum over processes of their shares of the one sample), divided by the EXPECTED batch size
    B = q·N, never the realised sample size. Noise std σC with σ = ``noise_multiplier``."""
    expected_batch_size = _positive_finite(expected_batch_size, name="expected_batch_size")
    clipped = clipped_row_sum(rows, max_norm=max_norm, chunk_size=chunk_size)
    released, event = gaussian_sum(
        clipped,
        reduce_sum=reduce_sum,
        sensitivity=max_norm,
        noise_multiplier=noise_multiplier,
        sample_rate=sample_rate,
        noise=noise,
        expected_size=expected_batch_size,
        mechanism="Poisson-subsampled Gaussian sum of per-example gradients clipped to L2 norm "
        f"{max_norm:g} (all parameters flattened)",
    )
    return released / expected_batch_size, event


def private_gradient(
    network: nn.Module,
    inputs: Tensor,
    labels: Tensor,
    *,
    max_norm: float,
    noise_multiplier: float,
    sample_rate: float,
    expected_batch_size: float,
    noise: NoiseStream,
    chunk_size: int = 64,
    reduce_sum: Callable[[Tensor], Tensor] | None = None,
) -> tuple[list[Tensor], PrivacyEvent]:
    """(Σ_i clip_C(g_i) + N(0, (σC)² I)) / B, split into tensors shaped like the network's
    parameters, and the event of the release (:func:`per_example_rows`, then
    :func:`noisy_gradient_mean`).

    Over several processes, ``inputs``/``labels`` are this process's share of the one sample and
    ``reduce_sum`` sums over processes: the clipped sums are all-reduced and the noise is added
    once, after the reduce (:func:`.mechanisms.gaussian_sum` with ``reduce_sum``); every process
    returns the same release.

    ``inputs``/``labels`` are a Poisson sample at ``sample_rate`` = q; B = ``expected_batch_size``
    is q·N, never the realised sample size (an empty sample releases noise / B; a sample of 2B
    records is still divided by B). Noise std σC with σ = ``noise_multiplier``: sensitivity C."""
    rows = per_example_rows(network, inputs, labels, chunk_size=chunk_size)
    mean, event = noisy_gradient_mean(
        rows,
        max_norm=max_norm,
        noise_multiplier=noise_multiplier,
        sample_rate=sample_rate,
        expected_batch_size=expected_batch_size,
        noise=noise,
        chunk_size=chunk_size,
        reduce_sum=reduce_sum,
    )
    return unflatten_like(mean, [p for p in network.parameters()]), event


def unflatten_like(
    flat: Tensor, like: list[Tensor], *, dtype: torch.dtype | None = None
) -> list[Tensor]:
    """Split a flat vector into tensors of the shapes of ``like`` (in order)."""
    sizes = [t.numel() for t in like]
    if flat.numel() != sum(sizes):
        raise ValueError(
            f"a flat vector of {flat.numel()} values cannot fill tensors of {sum(sizes)} values"
        )
    parts = torch.split(flat, sizes)
    return [part.reshape(t.shape).to(dtype or t.dtype) for part, t in zip(parts, like)]
