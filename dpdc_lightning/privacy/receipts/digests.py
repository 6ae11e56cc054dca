"""Digests that tie a run's files together: the released tensors, the plan, the private data.

- :func:`tensors_digest` (sha256 of the synthetic images and labels) is written into privacy.json
  as ``bundle.sha256``; :func:`plan_digest` (sha256 of the plan's canonical JSON) as
  ``plan_sha256``. Both are digests of released or public content: ``dpdc-privacy verify`` checks
  that privacy.json, plan.json and synthetic.pt belong together.
- :func:`config_digest` (sha256 of the released config, config.yaml, without the run's own location)
  is written into privacy.json as ``config_sha256``: verify checks config.yaml against it, so a
  config edited after the run (another σ, another clip norm) is refused by every reader.
- :func:`data_digest` is the content digest of the PRIVATE data a run started on. It is keyed
  (BLAKE2b, RFC 7693, in its keyed mode: a MAC) with a key derived from the run's 256-bit secret, so
  that without the secret nobody can test a guessed data set against it; it lives beside the secret
  in the run folder's private state and is deleted with it (privacy/mechanisms/secret.py), never
  released. A resumed run recomputes it and refuses data that changed since the run started:
  otherwise a copied unfinished run folder could condense two data sets with the same noise.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch-free at import: config/ hashes its config with config_digest
    from torch import Tensor

# Where the run lives: not part of what it computed, so not part of the config's digest.
RUN_LOCATION_KEYS = ("run_dir", "runs_root", "resume")
DATA_DIGEST_PURPOSE = "data-digest"  # the derive_secret purpose of the data digest's key
DATA_DIGEST_NAME = "blake2b-256-keyed"


def tensors_digest(images: Tensor, labels: Tensor) -> str:
    """sha256 of the images (as float32) and labels (as int64), in C order: the bundle's digest."""
    digest = hashlib.sha256()
    digest.update(images.detach().cpu().float().contiguous().numpy().tobytes())
    digest.update(labels.detach().cpu().long().contiguous().numpy().tobytes())
    return digest.hexdigest()


def plan_digest(plan: Mapping[str, Any]) -> str:
    """sha256 of a plan's ``to_dict()`` as canonical JSON (sorted keys, no spaces): the same for
    plan.json however it is indented, different for any changed value."""
    text = json.dumps(dict(plan), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def config_digest(tree: Mapping[str, Any]) -> str:
    """sha256 of a config tree (config.yaml as parsed, or the config as a plain dict) as canonical
    JSON, without :data:`RUN_LOCATION_KEYS`: the same for the file however YAML lays it out,
    different for any changed value."""
    kept = {key: value for key, value in dict(tree).items() if key not in RUN_LOCATION_KEYS}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def data_digest(tensors: Sequence[Tensor], *, key: int) -> str:
    """Keyed BLAKE2b-256 of ``tensors`` (their dtype, shape and bytes, each length-prefixed, so no
    two different lists of tensors feed the same bytes). ``key`` is a 256-bit integer derived from
    the run's secret; without it the digest says nothing about the data."""
    from dpdc_lightning.mapped_files import byte_chunks  # numpy: not at import (config/ reads us)

    mac = hashlib.blake2b(key=int(key).to_bytes(32, "little"), digest_size=32)
    for tensor in tensors:
        tensor = tensor.detach().cpu().contiguous()
        array = tensor.numpy()
        header = f"{array.dtype.str}{list(array.shape)}".encode()
        mac.update(len(header).to_bytes(8, "little"))
        mac.update(header)
        # The bytes of array.tobytes(), fed in slices: a memory-mapped set larger than memory is
        # read from its file once (never through the map, which would count as resident memory)
        # and never copied whole.
        mac.update((array.size * array.itemsize).to_bytes(8, "little"))
        for chunk in byte_chunks(tensor):
            mac.update(chunk)
    return f"{DATA_DIGEST_NAME}:{mac.hexdigest()}"
