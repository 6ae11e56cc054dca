"""The arrays of a data owner's ``.npz`` file or folder of ``.npy`` files, each read where it lies.

:func:`open_arrays` names every array of the file (``images``, ``labels``, ...) without reading
one: an array stored uncompressed is mapped in place (mapped_files.py), a compressed member is
decompressed as a stream, a block of records at a time, so that neither ever needs the whole set in
memory. Small arrays (labels, class names) are read whole with ``allow_pickle=False``.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from dpdc_lightning.errors import UserError
from dpdc_lightning.mapped_files import Stored, map_stored, npy_layout, npz_layout

NPY_NAMES = ("images", "labels", "test_images", "test_labels", "class_names")


@dataclass(frozen=True)
class Source:
    """One array of the owner's file: where it lies, and its shape and type from its header."""

    path: Path  # the .npz, or the .npy file
    member: str | None  # the zip member holding it (None: a .npy file of its own)
    shape: tuple[int, ...]
    dtype: np.dtype
    stored: Stored | None  # its layout where it is stored uncompressed, else None
    fortran: bool = False  # stored in Fortran order: read whole, never by blocks of records

    @property
    def mappable(self) -> bool:
        return self.stored is not None and self.stored.mappable

    def mapped(self) -> np.ndarray:
        assert self.stored is not None
        return map_stored(self.stored)

    def read(self) -> np.ndarray:
        """The whole array in memory (labels, class names, a small set)."""
        if self.member is None:
            return np.load(self.path, allow_pickle=False)
        with np.load(self.path, allow_pickle=False) as archive:
            return np.asarray(archive[self.member.removesuffix(".npy")])

    def blocks(self, rows: int) -> Iterator[np.ndarray]:
        """The records ``rows`` at a time, read from the file (never through the map: each page a
        pass touches there would count as resident) or decompressed as a stream."""
        if self.fortran:
            array = self.read()
            for start in range(0, len(array), rows):
                yield np.ascontiguousarray(array[start : start + rows])
            return
        with self._stream() as stream:
            for start in range(0, self.shape[0], rows):
                block = np.empty((min(rows, self.shape[0] - start), *self.shape[1:]), self.dtype)
                if _fill(stream, memoryview(block.reshape(-1)).cast("B")) != block.nbytes:
                    raise UserError(f"{self.path}: '{self.member or self.path.name}' is truncated")
                yield block

    @contextmanager
    def _stream(self) -> Iterator[BinaryIO]:
        """The array's bytes from their first one: the file at its offset, or the zip member."""
        if self.stored is not None:
            with open(self.stored.path, "rb") as handle:
                handle.seek(self.stored.offset)
                yield handle
            return
        with zipfile.ZipFile(self.path) as archive, archive.open(str(self.member)) as stream:
            _header(stream)
            yield stream  # type: ignore[misc]


def _fill(stream: BinaryIO, view: memoryview) -> int:
    """Read into ``view`` until it is full or the stream ends; the bytes read."""
    done = 0
    while done < len(view):
        count = stream.readinto(view[done:])
        if not count:
            break
        done += count
    return done


def _header(stream) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(stream)
    read = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    shape, fortran, dtype = read(stream)
    return tuple(shape), bool(fortran and len(shape) > 1), np.dtype(dtype)


def open_arrays(path: Path) -> dict[str, Source]:
    """name -> :class:`Source` of every array of an ``.npz`` file or a folder of ``.npy`` files
    (``images.npy``, ``labels.npy``, optionally ``test_images.npy``, ``test_labels.npy``,
    ``class_names.npy``)."""
    try:
        if path.is_dir():
            return {
                name: _npy_source(path / f"{name}.npy")
                for name in NPY_NAMES
                if (path / f"{name}.npy").is_file()
            }
        if not zipfile.is_zipfile(path):
            raise UserError(
                f"dataset file {path} is not a valid .npz file (not a zip archive); save arrays "
                "with np.savez(path, images=images, labels=labels)"
            )
        return _npz_sources(path)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as err:
        raise UserError(
            f"dataset file {path} is truncated, corrupt or not an array file ({err})"
        ) from None


def _npy_source(path: Path) -> Source:
    with open(path, "rb") as handle:
        shape, fortran, dtype = _header(handle)
    if dtype.hasobject:
        raise UserError(f"{path} holds pickled Python objects; they are never loaded")
    return Source(path, None, shape, dtype, npy_layout(path), fortran)


def _npz_sources(path: Path) -> dict[str, Source]:
    found = {}
    with zipfile.ZipFile(path) as archive:
        for name, stored in npz_layout(path).items():
            member = f"{name}.npy"
            with archive.open(member) as stream:
                shape, fortran, dtype = _header(stream)
            if dtype.hasobject:
                raise UserError(
                    f"dataset file {path} holds pickled Python objects; they are never loaded "
                    "(np.savez arrays of numbers or strings only)"
                )
            found[name] = Source(path, member, shape, dtype, stored, fortran)
    return found
