"""A reduced FashionMNIST for CPU benchmarks: the first ``--per-class`` training images of every
class and the first ``--test`` test images, as a ``dataset=tensors`` .npz (uint8 0..255).

    python benchmarks/common/fashion_subset.py --root FASHION_MNIST_DIR --out fashion_subset.npz

FASHION_MNIST_DIR holds the four idx files (Debian's dataset-fashion-mnist installs them under
/usr/share/datasets/fashion-mnist). The subset is public and chosen by position only (no record is
looked at), so a table made on it is a reduced protocol, not a different data set.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np

CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot")  # fmt: skip


def read_idx(path: Path) -> np.ndarray:
    """An idx file (gzip or plain): big-endian header, dims, then uint8 data."""
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def first_per_class(labels: np.ndarray, *, per_class: int) -> np.ndarray:
    """Positions of the first ``per_class`` records of every class, in file order."""
    picks = [np.flatnonzero(labels == c)[:per_class] for c in range(int(labels.max()) + 1)]
    return np.sort(np.concatenate(picks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-class", type=int, default=500)
    parser.add_argument("--test", type=int, default=2000)
    args = parser.parse_args()
    found = {p.name.split(".")[0]: p for p in args.root.iterdir()}
    images = read_idx(found["train-images-idx3-ubyte"])
    labels = read_idx(found["train-labels-idx1-ubyte"])
    keep = first_per_class(labels, per_class=args.per_class)
    np.savez(
        args.out,
        images=images[keep],
        labels=labels[keep].astype(np.int64),
        test_images=read_idx(found["t10k-images-idx3-ubyte"])[: args.test],
        test_labels=read_idx(found["t10k-labels-idx1-ubyte"])[: args.test].astype(np.int64),
        class_names=np.array(CLASSES),
    )


if __name__ == "__main__":
    main()
