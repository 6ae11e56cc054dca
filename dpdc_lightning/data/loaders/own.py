"""Your own data (``dataset=imagefolder``, ``dataset=tensors``): what the two readers share.

The readers (imagefolder.py, tensors.py) decode the files into pixels normalised with the fixed
constants (0.5, 0.5), never statistics of the data; here the records become an ``ImageData``.

Test split: ``dataset.test_root`` (a second folder or file of the same kind, declared public by the
user, and refused if it shares a record with the private data) or, without it, about
``dataset.test_fraction`` of every class held out from the private data, each record on its own by
a hash keyed with ``dataset.split_seed`` (:func:`hold_out`). The held-out records are not
condensed; they are private: accuracy on them is NOT covered by the guarantee
(``ImageData.test_is_private``; eval.json says so), and no method may read them as public data
(Dosser's ``method.aux.source=public_split`` is refused).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from dpdc_lightning.data.image_data import ImageData, normalised
from dpdc_lightning.errors import UserError
from dpdc_lightning.mapped_files import row_blocks

# (records, labels, held-out mask on demand) -> (train images, train labels, test images, labels)
Selector = Callable[[Tensor, Tensor, Callable[[], Tensor]], tuple[Tensor, Tensor, Tensor, Tensor]]


def hold_out(images: Tensor, labels: Tensor, *, fraction: float, seed: int) -> Tensor:
    """A boolean mask of held-out records, each record decided on its own.

    Privacy-critical: a draw over the whole set (a permutation of every class) couples the records,
    so removing one record from the file moves OTHER records between the splits, and the
    neighbouring data set D' would condense other records than D minus one (the guarantee would
    then cover a group, not one record). Here record i is held out iff a BLAKE2b hash keyed by
    ``split_seed`` of its label and its pixels (quantised to 8 bits, so that float rounding of a
    resize on another CPU flips nothing) falls below ``fraction``: removing or adding a record
    changes no other record's side. The held-out share is ``fraction`` on average (binomial), not
    exactly."""
    key = hashlib.blake2b(str(int(seed)).encode(), digest_size=32).digest()
    if images.dtype == torch.uint8:  # stored 8-bit levels: the quantisation is the identity
        levels = images.flatten(1).numpy()
    else:
        levels = torch.round((images.clamp(-1, 1) + 1) * 127.5).to(torch.uint8).flatten(1).numpy()
    threshold = fraction * 2.0**64
    held = [
        int.from_bytes(
            hashlib.blake2b(
                int(label).to_bytes(4, "little") + row.tobytes(), key=key, digest_size=8
            ).digest(),
            "little",
        )
        < threshold
        for label, row in zip(labels.tolist(), levels)
    ]
    return torch.tensor(held, dtype=torch.bool)


def refuse_shared_records(
    images: Tensor, test_images: Tensor, *, root: Path, test_source: str
) -> None:
    """Refuse a test set declared public that holds a record of the private data.

    Privacy-critical: such a test set is read as public (an auxiliary set, a split to evaluate on)
    while it carries private records. Records are compared by a content hash of their decoded
    pixels, so the same folder or file named twice (``dataset.test_root`` = ``dataset.root``), a
    shared image file or a copied record are all caught; the private set is read from its file a
    block at a time where it is mapped (mapped_files.py), never whole into memory. The position of
    the first shared record is named for the owner's console only (this error is never written to
    a file)."""

    tests = [row for rows in row_blocks(test_images, 4096) for row in rows]
    wanted = {_record_digest(row): index for index, row in enumerate(tests)}
    prints = set(np.concatenate([_fingerprints(rows) for rows in row_blocks(test_images, 1024)]))
    shared = []
    for rows in row_blocks(images, 1024):
        # a vectorised fingerprint first: the digest (one Python call a record) only where it
        # matches a test record's, so a million private records cost seconds, not minutes
        for row in rows[np.isin(_fingerprints(rows), list(prints))]:
            if _record_digest(row) in wanted:
                shared.append(wanted[_record_digest(row)])
    if shared:
        raise UserError(
            f"{test_source} shares records with the private data in {root} "
            f"(test record {min(shared)} has the content of a training record): a test set "
            "declared public must hold no private record; remove the shared ones, or drop "
            "it to hold out a private split"
        )


_WEIGHTS = np.random.default_rng(42).integers(1, 2**63, size=1 << 16, dtype=np.uint64) | 1


def _fingerprints(rows: np.ndarray) -> np.ndarray:
    """A 64-bit fingerprint of every record of a block, equal for records with equal digests
    (:func:`_record_digest`: of the 8-bit levels where a record has them, else of its floats): a
    weighted sum with wraparound. Records larger than the weights are folded onto them."""
    flat = rows.reshape(len(rows), -1)
    if flat.dtype == np.uint8:
        levels, exact, values = flat, np.ones(len(flat), dtype=bool), None
    else:
        values = flat.astype(np.float32, copy=False)
        levels = np.rint((np.clip(values, -1, 1) + 1) * 127.5).astype(np.uint8)
        exact = (normalised(torch.from_numpy(levels)).numpy() == values).all(axis=1)
    found = _weighted(levels)
    if values is not None and not exact.all():
        found[~exact] = _weighted(values[~exact]) ^ np.uint64(0x5A5A5A5A)
    return found


def _weighted(rows: np.ndarray) -> np.ndarray:
    """The rows' bytes read as 64-bit words (zero-padded), summed with odd weights, wrapping."""
    raw = np.ascontiguousarray(rows).view(np.uint8).reshape(len(rows), -1)
    if raw.shape[1] % 8:
        raw = np.pad(raw, ((0, 0), (0, 8 - raw.shape[1] % 8)))
    words = raw.view(np.uint64)
    return (words * np.resize(_WEIGHTS, words.shape[1])).sum(axis=1, dtype=np.uint64)


def _record_digest(row: np.ndarray) -> bytes:
    """A record's digest, the same whether it is stored as 8-bit levels or as normalised floats:
    the digest of its levels where it has 8-bit levels (a float record exactly equal to some levels
    / 255, normalised), else of its float32 values (tagged, so the two kinds never collide)."""
    if row.dtype == np.uint8:
        return hashlib.blake2b(b"u" + row.tobytes(), digest_size=16).digest()
    values = row.astype(np.float32, copy=False)
    levels = np.rint((np.clip(values, -1, 1) + 1) * 127.5).astype(np.uint8)
    if np.array_equal(normalised(torch.from_numpy(levels)).numpy(), values):
        return hashlib.blake2b(b"u" + levels.tobytes(), digest_size=16).digest()
    return hashlib.blake2b(b"f" + values.tobytes(), digest_size=16).digest()


def _check_test_split(
    test: tuple[Tensor, Tensor], images: Tensor, *, root: Path, num_classes: int
) -> None:
    """The test split must have the training images' shape and labels among ``root``'s classes."""
    if test[0].shape[1:] != images.shape[1:]:
        raise UserError(
            f"the test images are {tuple(test[0].shape[1:])}, the training images "
            f"{tuple(images.shape[1:])}; give both the same dataset.image_size and dataset.channels"
        )
    if int(test[1].max()) >= num_classes:
        raise UserError(
            f"the test split has labels up to {int(test[1].max())} but {root} has "
            f"{num_classes} classes"
        )


def assemble(
    name: str,
    root: Path,
    images: Tensor,
    labels: Tensor,
    names: tuple[str, ...],
    test: tuple[Tensor, Tensor] | None,
    *,
    test_fraction: float,
    split_seed: int,
    test_source: str,
    select: Selector | None = None,
    cache_entries: tuple[str, ...] = (),
) -> ImageData:
    """The ``ImageData`` of a reader's records: held-out split (``select`` keeps it, e.g. in the
    decoded cache; default: in memory) or a public test split checked against the records."""
    num_classes = len(names)
    sizes = torch.bincount(labels, minlength=num_classes)
    if num_classes < 2 or int(sizes.min()) == 0:
        empty = int(torch.nonzero(sizes == 0)[0]) if int(sizes.min()) == 0 else 0
        raise UserError(
            f"{root}: class {names[empty] if num_classes else '?'} has no records "
            "(condensation needs at least two classes, each with records)"
        )
    private_test = test is None
    declared = None
    if private_test:
        if not 0 < test_fraction < 1:
            raise UserError(f"dataset.test_fraction must be in (0, 1), got {test_fraction}")

        def held() -> Tensor:
            return hold_out(images, labels, fraction=test_fraction, seed=split_seed)

        images, labels, *rest = (select or _split_in_memory)(images, labels, held)
        test = (rest[0], rest[1])
        kept = torch.bincount(labels, minlength=num_classes)
        if int(kept.min()) == 0:
            empty = names[int(torch.nonzero(kept == 0)[0])]
            raise UserError(
                f"dataset.test_fraction={test_fraction} with dataset.split_seed={split_seed} "
                f"holds out every record of class {empty}; lower dataset.test_fraction, or give a "
                "public dataset.test_root"
            )
        declared = tuple((1 - test_fraction) * float(n) for n in sizes)
    else:
        refuse_shared_records(images, test[0], root=root, test_source=test_source)
    _check_test_split(test, images, root=root, num_classes=num_classes)
    return ImageData(
        name,
        images,
        labels,
        test[0],
        test[1],
        num_classes,
        names,
        source=str(root),
        test_is_private=private_test,
        declared_class_sizes=declared,
        cache_entries=cache_entries,
    )


def _split_in_memory(
    images: Tensor, labels: Tensor, held: Callable[[], Tensor]
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    mask = held()
    return (
        images[~mask].contiguous(),
        labels[~mask].contiguous(),
        images[mask].contiguous(),
        labels[mask].contiguous(),
    )
