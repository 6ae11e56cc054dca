"""``load_dataset``: the one call that turns ``dataset.*`` into an ``ImageData``.

It checks the arguments (an embedded data set refuses a ``root``, own data needs one), resolves the
loader by name (data/registry.py: built-in, own data, or registered), and caches the result
in-process. The loaders themselves are in data/loaders/.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from dpdc_lightning.data.image_data import ImageData
from dpdc_lightning.data.loaders.protocol import LoadRequest
from dpdc_lightning.data.registry import DATASETS, OWN_DATA
from dpdc_lightning.errors import UserError

_EMBEDDED = frozenset({"digits", "toy"})


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/dpdc_lightning``, i.e. ``~/.cache/dpdc_lightning`` by default."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dpdc_lightning"


def _absolute(path: str | os.PathLike[str] | None, key: str) -> str | None:
    if path is None or path == "":
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise UserError(f"{key} must be a folder path, got {path!r}")
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def load_dataset(
    name: str,
    *,
    root: str | os.PathLike[str] | None = None,
    download: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_max_gb: float | None = None,
    **options: Any,
) -> ImageData:
    """Load dataset ``name`` (one of ``DATASETS``), normalised to [-1, 1] with fixed constants.

    ``root`` is the folder holding the files (``dataset.root``); ``download`` lets torchvision fetch
    missing files into ``root`` or the cache (``dataset.download``); ``cache_dir`` is where
    decompressed and downloaded files go, and an image folder's decoded cache (default
    ``default_cache_dir()``). Results are cached
    in-process per argument tuple; the returned tensors are shared and must be treated as read-only.
    ``options`` (``image_size``, ``channels``, ``test_root``, ``test_fraction``, ``split_seed``) go
    to the own-data readers ``imagefolder`` and ``tensors`` (data/loaders/). ``cache_max_gb``
    bounds the decoded cache (data/cache_bounds.py).
    """
    from dpdc_lightning.data.cache_bounds import set_limit

    set_limit(cache_max_gb)
    if not isinstance(name, str) or name not in DATASETS:
        raise UserError(f"unknown dataset {name!r}; allowed: {', '.join(DATASETS)}")
    if not isinstance(download, bool):
        raise UserError(f"dataset.download must be true or false, got {download!r}")
    if name not in OWN_DATA and any(
        options.get(key) is not None for key in ("image_size", "channels", "test_root")
    ):
        raise UserError(
            f"dataset.image_size, dataset.channels and dataset.test_root apply to "
            f"dataset=imagefolder or dataset=tensors, not to dataset={name}"
        )
    if name in _EMBEDDED:  # no files involved: one cache entry regardless of the location arguments
        if _absolute(root, "dataset.root") is not None:
            # Ignoring it would condense the embedded data while the user believes their folder was
            # read.
            raise UserError(
                f"dataset.root={root} is set but dataset {name} is embedded and reads no files; "
                f"drop dataset.root, or select the data set its files belong to (dataset=NAME)"
            )
        return _load_cached(name, None, False, None, ())
    if name in OWN_DATA:
        if _absolute(root, "dataset.root") is None:
            if name == "imagefolder":
                wanted = "DIR (a folder with one sub-folder of images per class)"
            else:
                wanted = "FILE.npz, FILE.pt or a folder of images.npy + labels.npy"
            raise UserError(f"dataset={name} reads your own data: set dataset.root={wanted}")
        if options.get("test_root") is not None:
            options = {**options, "test_root": _absolute(options["test_root"], "dataset.test_root")}
    extra = tuple(sorted(options.items())) if name in OWN_DATA else ()
    return _load_cached(
        name,
        _absolute(root, "dataset.root"),
        download,
        _absolute(cache_dir, "dataset.cache_dir"),
        extra,
    )


@functools.lru_cache(maxsize=2)
def _load_cached(
    name: str,
    root: str | None,
    download: bool,
    cache_dir: str | None,
    options: tuple[tuple[str, Any], ...],
) -> ImageData:
    request = LoadRequest(
        name,
        root=Path(root) if root is not None else None,
        download=download,
        cache_dir=Path(cache_dir) if cache_dir is not None else default_cache_dir(),
        options=dict(options),
    )
    data = DATASETS[name](request)  # every loader alike (data/loaders/protocol.py)
    if not isinstance(data, ImageData):
        raise UserError(
            f"the loader of dataset {name!r} returned {type(data).__name__}, not ImageData"
        )
    return data


def clear_dataset_cache() -> None:
    """Drop the in-process cache of loaded datasets (frees their memory)."""
    _load_cached.cache_clear()
