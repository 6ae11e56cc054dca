"""The names ``dataset=NAME`` accepts, known without importing torch (so the command line can be
checked in a fraction of a second), and :func:`register_dataset` for data sets added from Python.

A built-in loader is imported from :mod:`dpdc_lightning.data.loaders` on first use. A registered
loader is called as ``loader(root)`` with ``dataset.root`` (a ``Path`` or None) and returns an
:class:`~dpdc_lightning.data.image_data.ImageData`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from dpdc_lightning.errors import UserError

# name -> module of dpdc_lightning.data.loaders holding its load_<name>
BUILTIN = {
    "digits": "embedded",
    "toy": "embedded",
    "fashion_mnist": "idx",
    "mnist": "idx",
    "cifar10": "torchvision_sets",
    "celeba": "torchvision_sets",
}
# Own data read from dataset.root (a folder of images, or a tensor file); they take more options.
OWN_DATA = ("imagefolder", "tensors")
_REGISTERED: dict[str, Callable[..., Any]] = {}


def register_dataset(name: str, loader: Callable[..., Any], *, replace: bool = False) -> None:
    """Make ``dataset.name=NAME`` load ``loader(root)`` (``root``: ``dataset.root`` as a Path, or
    None).

    The loader returns an ``ImageData`` with pixels already normalised to [-1, 1] by fixed constants
    (never by statistics of the private data). A name already registered is refused (two pieces of
    code would silently disagree about what ``dataset=NAME`` means) unless ``replace=True``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise UserError(
            f"dataset name {name!r} must be a Python identifier (letters, digits, underscores)"
        )
    if name in BUILTIN or name in OWN_DATA:
        raise UserError(f"dataset name {name!r} is built in; choose another name")
    if not callable(loader):
        raise UserError(f"register_dataset({name!r}, ...): the loader must be callable")
    if name in _REGISTERED and not replace:
        existing = _REGISTERED[name]
        where = f"{getattr(existing, '__module__', '?')}.{getattr(existing, '__qualname__', '?')}"
        raise UserError(
            f"dataset name {name!r} is already registered (loader {where}); choose another name "
            "or pass replace=True"
        )
    _REGISTERED[name] = loader


def is_registered(name: str) -> bool:
    return name in _REGISTERED


class _Loaders(Mapping[str, Callable[..., Any]]):
    """Read-only view: built-in loaders (imported on first access), own-data readers, registered
    ones."""

    def __getitem__(self, name: str) -> Callable[..., Any]:
        if name in BUILTIN or name in OWN_DATA:
            module = BUILTIN.get(name, name)  # the own-data readers are modules of their own name
            return getattr(
                importlib.import_module(f"dpdc_lightning.data.loaders.{module}"), f"load_{name}"
            )
        return _REGISTERED[name]

    def __contains__(self, name: object) -> bool:
        return name in BUILTIN or name in OWN_DATA or name in _REGISTERED

    def __iter__(self) -> Iterator[str]:
        return iter([*BUILTIN, *OWN_DATA, *_REGISTERED])

    def __len__(self) -> int:
        return len(BUILTIN) + len(OWN_DATA) + len(_REGISTERED)


DATASETS: Mapping[str, Callable[..., Any]] = _Loaders()
