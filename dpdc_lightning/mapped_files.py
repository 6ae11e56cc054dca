"""Arrays read in place from files through a memory map, and passes over them that read the file.

A data owner's ``.npy`` file, or a member of an uncompressed ``.npz`` (a zip archive that stores
each array as a ``.npy`` file as is), is mapped copy-on-write (``mmap_mode="c"``): a set larger
than memory is paged in as the private steps sample it, and no write reaches the file.
``np.load(mmap_mode=...)`` maps ``.npy`` files but reads every ``.npz`` member into memory, so the
member's place in the archive is found here from the zip's local file header (PKWARE APPNOTE 4.3.7:
a 30-byte header, then the name and the extra field, then the stored bytes), and the ``.npy``
header there gives its shape and type (numpy's format, ``numpy.lib.format``).

A pass over every record (a digest, a held-out split, a search for shared records) must not go
through the map: each page it touches counts in the process's resident memory until it is unmapped,
so one pass over a 3 GB set would show 3 GB resident. :func:`row_blocks` and :func:`byte_chunks`
read a mapped tensor's bytes from its file with plain reads instead (the page cache holds them, the
process does not), and slice any other tensor in memory.
"""

from __future__ import annotations

import os
import struct
import weakref
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # APPNOTE 4.3.7, 30 bytes
_LOCAL_SIGNATURE = b"PK\x03\x04"
CHUNK_BYTES = 1 << 24  # 16 MiB read at once by a pass over a mapped set


class Stored(NamedTuple):
    """Where a ``.npy`` array lies: its file, the offset of its data, its shape and type, and
    whether it can be mapped (stored uncompressed, C order, plain numbers)."""

    path: str
    offset: int  # of the array's data in the file
    shape: tuple[int, ...]
    dtype: np.dtype
    mappable: bool


def npy_layout(path: str | os.PathLike[str], start: int = 0) -> Stored:
    """The layout of the ``.npy`` array whose magic string begins at byte ``start`` of ``path``."""
    with open(path, "rb") as handle:
        handle.seek(start)
        shape, fortran, dtype = _read_header(handle)
        offset = handle.tell()
    plain = not dtype.hasobject and dtype.kind in "biuf"
    if offset + int(np.prod(shape)) * dtype.itemsize > os.path.getsize(path):
        raise ValueError("the file ends before the array's data does (truncated)")
    return Stored(os.fspath(path), offset, tuple(shape), dtype, plain and not fortran)


def _read_header(handle) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(handle)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
    return shape, bool(fortran and len(shape) > 1), np.dtype(dtype)


def npz_layout(path: str | os.PathLike[str]) -> dict[str, Stored | None]:
    """Every member of an ``.npz`` by its array name: its layout where it is stored uncompressed,
    None where it is compressed (``np.savez_compressed``: it must be decompressed to be read)."""
    found: dict[str, Stored | None] = {}
    with zipfile.ZipFile(path) as archive, open(path, "rb") as handle:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            if info.compress_type != zipfile.ZIP_STORED:
                found[name] = None
                continue
            handle.seek(info.header_offset)
            fields = _LOCAL_HEADER.unpack(handle.read(_LOCAL_HEADER.size))
            if fields[0] != _LOCAL_SIGNATURE:
                raise zipfile.BadZipFile(f"no local header for {info.filename}")
            start = info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
            stored = npy_layout(path, start)
            if stored.offset + int(np.prod(stored.shape)) * stored.dtype.itemsize > (
                start + info.compress_size
            ):
                raise zipfile.BadZipFile(f"{info.filename} ends before its array's data does")
            found[name] = stored
    return found


# data_ptr of a mapped array -> (file, offset of its data, its length, the array while alive)
_MAPPED: dict[int, tuple[str, int, int, weakref.ref]] = {}


def map_stored(stored: Stored) -> np.ndarray:
    """The array mapped copy-on-write (``stored.mappable`` must hold), remembered so that passes
    over it read its file (:func:`byte_chunks`)."""
    count = int(np.prod(stored.shape))
    if count == 0:
        return np.zeros(stored.shape, dtype=stored.dtype)
    array = np.memmap(
        stored.path, dtype=stored.dtype, mode="c", offset=stored.offset, shape=stored.shape
    )
    _MAPPED[array.ctypes.data] = (stored.path, stored.offset, array.nbytes, weakref.ref(array))
    return array


def _file_range(tensor: Tensor) -> tuple[str, int] | None:
    """(file, offset) of a contiguous tensor whose bytes all lie in one mapped array, else None."""
    if not tensor.is_contiguous() or not tensor.is_cpu:
        return None
    address, length = tensor.data_ptr(), tensor.numel() * tensor.element_size()
    for base, (path, offset, size, alive) in list(_MAPPED.items()):
        if alive() is None:
            del _MAPPED[base]
        elif base <= address and address + length <= base + size:
            return path, offset + address - base
    return None


def byte_chunks(tensor: Tensor, size: int = CHUNK_BYTES) -> Iterator[memoryview | bytes]:
    """The bytes of ``tensor`` in C order, ``size`` at a time: read from the file where it is
    mapped, sliced from memory otherwise."""
    length = tensor.numel() * tensor.element_size()
    where = _file_range(tensor)
    if where is None:
        flat = memoryview(tensor.detach().cpu().contiguous().numpy().reshape(-1)).cast("B")
        for start in range(0, length, size):
            yield flat[start : start + size]
        return
    with open(where[0], "rb") as handle:
        handle.seek(where[1])
        for start in range(0, length, size):
            yield handle.read(min(size, length - start))


def row_blocks(tensor: Tensor, rows: int) -> Iterator[np.ndarray]:
    """``tensor``'s records ``rows`` at a time as numpy arrays (read from its file where mapped)."""
    where = _file_range(tensor)
    if where is None:
        for start in range(0, len(tensor), rows):
            yield tensor[start : start + rows].detach().cpu().numpy()
        return
    dtype, shape = tensor.numpy().dtype, tuple(tensor.shape[1:])
    with open(where[0], "rb") as handle:
        handle.seek(where[1])
        for start in range(0, len(tensor), rows):
            block = np.empty((min(rows, len(tensor) - start), *shape), dtype=dtype)
            handle.readinto(memoryview(block.reshape(-1)).cast("B"))
            yield block


def is_mapped(tensor: Tensor) -> bool:
    """Whether ``tensor``'s bytes are read from a file through a map (see the module docstring)."""
    return _file_range(tensor) is not None


def file_digest(path: str | os.PathLike[str], digest) -> None:
    """Feed the bytes of the file ``path`` to ``digest`` (a hashlib object), 16 MiB at a time."""
    with open(Path(path), "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
