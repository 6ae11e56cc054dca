"""The one calling convention of every loader behind ``dataset=NAME``: :class:`Loader`.

A loader is called with one :class:`LoadRequest` (``dataset.*`` checked and resolved by
data/load.py) and returns an :class:`~dpdc_lightning.data.image_data.ImageData` whose pixels are
normalised to [-1, 1] by fixed constants (never by statistics of the private data). The built-in
loaders (data/loaders/: ``load_<name>`` in the module data/registry.py names) and a plug-in added
with :func:`~dpdc_lightning.data.registry.register_loader` follow it alike. Torch-free, so that the
registry stays importable without torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from dpdc_lightning.errors import UserError

if TYPE_CHECKING:
    from dpdc_lightning.data.image_data import ImageData


@dataclass(frozen=True)
class LoadRequest:
    """What a loader is asked for: the data set's name and its ``dataset.*`` settings."""

    name: str
    root: Path | None = None  # dataset.root, absolute (None: the loader's default, or no files)
    download: bool = False  # dataset.download: may torchvision fetch missing files
    cache_dir: Path | None = None  # dataset.cache_dir, or load.default_cache_dir()
    # the own-data readers' options (image_size, channels, test_root, test_fraction, split_seed,
    # images_key, labels_key); empty for the other loaders (data/load.py refuses them there)
    options: Mapping[str, Any] = field(default_factory=dict)

    def own_root(self) -> Path:
        """``root`` for a loader of the user's own files, which has nothing to read without one."""
        if self.root is None:
            raise UserError(f"dataset={self.name} reads your own data: set dataset.root")
        return self.root


@runtime_checkable
class Loader(Protocol):
    """``loader(request) -> ImageData``: every loader, built in or plugged in."""

    def __call__(self, request: LoadRequest, /) -> ImageData: ...


@dataclass(frozen=True)
class RootLoader:
    """A plug-in of the older convention, ``loader(root)`` (``register_dataset``), as a
    :class:`Loader`: it is handed ``request.root`` only."""

    plugin: Callable[[Path | None], ImageData]

    def __call__(self, request: LoadRequest, /) -> ImageData:
        return self.plugin(request.root)
