"""The names ``dataset=NAME`` accepts, known without importing torch (so the command line can be
checked in a fraction of a second), and :func:`register_loader` for data sets added from Python.

Every loader, built in or registered, follows one protocol (data/loaders/protocol.py):
``loader(request: LoadRequest) -> ImageData``. A built-in loader is ``load_<name>`` of the module of
:mod:`dpdc_lightning.data.loaders` that :data:`BUILTIN` names, imported on first use.
``register_dataset(name, loader)``, whose loader takes ``dataset.root`` only, is the older form of
:func:`register_loader`: it still works, and warns.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dpdc_lightning.data.loaders.protocol import Loader, RootLoader
from dpdc_lightning.errors import UserError

if TYPE_CHECKING:
    from dpdc_lightning.data.image_data import ImageData

# name -> module of dpdc_lightning.data.loaders holding its load_<name>
BUILTIN = {
    "digits": "embedded",
    "toy": "embedded",
    "fashion_mnist": "idx",
    "mnist": "idx",
    "cifar10": "torchvision_sets",
    "celeba": "torchvision_sets",
    "imagefolder": "imagefolder",
    "tensors": "tensors",
}
# Own data read from dataset.root (a folder of images, or a tensor file); they take more options.
OWN_DATA = ("imagefolder", "tensors")
_REGISTERED: dict[str, Loader] = {}


def register_loader(name: str, loader: Loader, *, replace: bool = False) -> None:
    """Make ``dataset.name=NAME`` call ``loader(request)`` (data/loaders/protocol.py): the request
    carries ``dataset.root`` (a Path, or None), ``dataset.download``, the cache folder and, for own
    data, the reader's options.

    The loader returns an ``ImageData`` with pixels already normalised to [-1, 1] by fixed constants
    (never by statistics of the private data). A name already registered is refused (two pieces of
    code would silently disagree about what ``dataset=NAME`` means) unless ``replace=True``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise UserError(
            f"dataset name {name!r} must be a Python identifier (letters, digits, underscores)"
        )
    if name in BUILTIN:
        raise UserError(f"dataset name {name!r} is built in; choose another name")
    if not callable(loader):
        raise UserError(f"register_loader({name!r}, ...): the loader must be callable")
    if name in _REGISTERED and not replace:
        existing = _REGISTERED[name]
        existing = existing.plugin if isinstance(existing, RootLoader) else existing
        where = f"{getattr(existing, '__module__', '?')}.{getattr(existing, '__qualname__', '?')}"
        raise UserError(
            f"dataset name {name!r} is already registered (loader {where}); choose another name "
            "or pass replace=True"
        )
    _REGISTERED[name] = loader


def register_dataset(
    name: str, loader: Callable[[Path | None], ImageData], *, replace: bool = False
) -> None:
    """Deprecated: ``register_loader(name, lambda request: loader(request.root))``. Makes
    ``dataset.name=NAME`` load ``loader(root)`` (``root``: ``dataset.root`` as a Path, or None)."""
    warnings.warn(
        "register_dataset(name, loader) with loader(root) is deprecated; use "
        "register_loader(name, loader) with loader(request) -> ImageData (request.root is "
        "dataset.root; docs/adding_a_method.md)",
        DeprecationWarning,
        stacklevel=2,
    )
    if not callable(loader):
        raise UserError(f"register_dataset({name!r}, ...): the loader must be callable")
    register_loader(name, RootLoader(loader), replace=replace)


class _Loaders(Mapping[str, Loader]):
    """Read-only view: built-in loaders (imported on first access), then registered ones."""

    def __getitem__(self, name: str) -> Loader:
        if name in BUILTIN:
            module = importlib.import_module(f"dpdc_lightning.data.loaders.{BUILTIN[name]}")
            return getattr(module, f"load_{name}")
        return _REGISTERED[name]

    def __contains__(self, name: object) -> bool:
        return name in BUILTIN or name in _REGISTERED

    def __iter__(self) -> Iterator[str]:
        return iter([*BUILTIN, *_REGISTERED])

    def __len__(self) -> int:
        return len(BUILTIN) + len(_REGISTERED)


DATASETS: Mapping[str, Loader] = _Loaders()
