"""Refusals decidable from the config and the file system alone, made before torch is imported:
a data folder or file that is not there answers in about a second, not after the seconds torch,
Lightning and the loaders take to import. The loaders check the same again (a Python caller
reaches them without this); the messages are theirs."""

from __future__ import annotations

from pathlib import Path

from dpdc_lightning.config.schema import RunConfig
from dpdc_lightning.errors import UserError

TENSOR_FILES = (".pt", ".pth", ".npz", ".h5", ".hdf5", ".parquet")
TENSORS_WANTED = (
    "dataset=tensors expects FILE.npz, FILE.pt, FILE.h5, FILE.parquet or a folder (.npy files, "
    "or a Hugging Face save_to_disk folder)"
)


def refuse_missing_data(config: RunConfig) -> None:
    """The own data's ``dataset.root`` and ``dataset.test_root`` must exist, as files or folders of
    the kind the reader takes."""
    dataset = config.dataset
    if dataset.name not in ("imagefolder", "tensors") or not dataset.root:
        return
    for key, value in (("dataset.root", dataset.root), ("dataset.test_root", dataset.test_root)):
        if value:
            _refuse_missing(key, Path(str(value)).expanduser().absolute(), dataset.name)


def _refuse_missing(key: str, path: Path, name: str) -> None:
    if name == "imagefolder":
        if not path.is_dir():
            raise UserError(
                f"{key}={path} is not a folder (imagefolder expects DIR/<class>/<image>)"
            )
        return
    if path.is_dir():
        return
    if not path.is_file():
        raise UserError(f"{key}={path} is not a file ({TENSORS_WANTED})")
    if path.suffix not in TENSOR_FILES:
        raise UserError(f"{key}={path}: {TENSORS_WANTED}")
