"""Explicit random generators derived from a seed and a purpose.

No code in the package touches torch's global RNG. Every random draw takes a
``torch.Generator`` derived here from (seed, purpose, step, class, ...), so a draw depends only on
what it is for: resumed runs, and runs sharded over any number of processes, draw the same values.
"""

from __future__ import annotations

import hashlib

import torch


def derive_seed(seed: int, *keys: str | int) -> int:
    """A 63-bit seed that depends on ``seed`` and every key, in order."""
    text = "/".join([str(int(seed)), *(str(k) for k in keys)])
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def derive_generator(
    seed: int, *keys: str | int, device: str | torch.device = "cpu"
) -> torch.Generator:
    """A fresh generator seeded by ``derive_seed(seed, *keys)``."""
    generator = torch.Generator(device=device)
    generator.manual_seed(derive_seed(seed, *keys))
    return generator
