"""The work a decoding process does on one chunk of an image folder (data/decoded_cache.py runs it
on every core): hash the files' bytes, read their headers, decode them into the cache's memory map.

Every function takes (first row, paths) and returns (one value a file, problem or None). They use
PIL, numpy and hashlib only (no torch, no thread or device of the parent process). Errors come back
as values (the file and a reason), never as exceptions: the parent turns the first into one
``error:`` line and removes the half-written cache.
"""

from __future__ import annotations

import hashlib

import numpy as np

CHUNK_BYTES = 1 << 20  # a file is hashed in reads of 1 MiB: a huge image never sits in memory twice
FILE_DIGEST_BYTES = 16  # 128 bits a file: collisions are out of reach even for 10^9 files

Problem = tuple[str, str]  # (file, what is wrong with it)


def file_digests(start: int, paths: list[str]) -> tuple[list[tuple[int, bytes]], Problem | None]:
    """(size in bytes, BLAKE2b of the bytes) of every file, in order; stops at an unreadable one."""
    found: list[tuple[int, bytes]] = []
    for path in paths:
        digest, size = hashlib.blake2b(digest_size=FILE_DIGEST_BYTES), 0
        try:
            with open(path, "rb") as handle:
                while block := handle.read(CHUNK_BYTES):
                    digest.update(block)
                    size += len(block)
        except OSError as err:
            return found, (path, f"cannot be read ({err.strerror or err}); check its permissions")
        found.append((size, digest.digest()))
    return found, None


def headers(
    start: int, paths: list[str]
) -> tuple[list[tuple[str, tuple[int, int]]], Problem | None]:
    """(mode, (width, height)) of every image from its header alone; stops at a non-image."""
    from PIL import Image, UnidentifiedImageError

    found: list[tuple[str, tuple[int, int]]] = []
    for path in paths:
        try:
            with Image.open(path) as image:
                found.append((image.mode, image.size))
        except (UnidentifiedImageError, OSError, ValueError) as err:
            return found, (
                path,
                f"is not a readable image ({type(err).__name__}); "
                "remove it or convert it to PNG/JPEG",
            )
    return found, None


def decode_into(
    start: int, paths: list[str], *, store: str, mode: str, size: tuple[int, int] | None
) -> tuple[list[None], Problem | None]:
    """Decode ``paths`` (converted to ``mode``, resized bilinearly to ``size`` when given) into
    rows ``start``.. of the [N, C, H, W] uint8 array in the .npy file ``store``, opened read-write
    as a memory map: the pixels go straight to the file, not through the parent process."""
    from PIL import Image

    rows = np.load(store, mmap_mode="r+")
    try:
        for offset, path in enumerate(paths):
            try:
                with Image.open(path) as image:
                    image = image.convert(mode)
                    if size is not None:
                        image = image.resize(size, Image.BILINEAR)
                    pixels = np.asarray(image, dtype=np.uint8)
            except (OSError, ValueError) as err:  # e.g. a truncated file whose header was fine
                return [], (
                    path,
                    f"cannot be decoded ({type(err).__name__}: {err}); remove or replace it",
                )
            if pixels.shape[:2] != rows.shape[2:]:  # a size the header pass did not see
                return [], (
                    path,
                    f"decodes to {pixels.shape[1]}x{pixels.shape[0]}, not the size its header "
                    "gave; replace it",
                )
            rows[start + offset] = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
        rows.flush()
    finally:
        del rows
    return [], None
