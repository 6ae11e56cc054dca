"""Hugging Face ``datasets`` on disk (``save_to_disk`` folders of Arrow files) and parquet files,
read with pyarrow (formats.py's docstring says which columns and splits)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dpdc_lightning.data.loaders.formats import flat_labels, needs
from dpdc_lightning.errors import UserError

GREY = ("1", "L", "LA", "I", "I;16", "F")


class Column:
    """One column of an Arrow table as a source of records (images decoded, arrays reshaped)."""

    mappable = False

    def __init__(self, path: Path, table: Any, name: str, *, image_size: int | None) -> None:
        self.path, self.name, self.image_size = path, name, image_size
        self.column = table.column(name)
        self.images = _is_image(self.column.type)
        if not self.images:
            self.dtype = np.dtype(self.column.type.to_pandas_dtype())
            self.shape = (len(self.column),)
            return
        self.dtype = np.dtype(np.uint8)
        kind = self.column.type
        while hasattr(kind, "value_type"):  # the numbers of a nested list (Array2D/3D)
            kind = kind.value_type
        if not pa_struct(self.column.type):
            self.dtype = np.dtype(np.float32 if "float" in str(kind) else np.uint8)
            if str(kind) not in ("uint8", "float", "double"):
                raise UserError(f"{path}: {name} holds {kind}: store uint8 0..255 or float 0..1")
        first = self._decode(self.column.slice(0, 1), 0, None)
        self.mode = "L" if first.shape[1] == 1 else "RGB"
        self.shape = (len(self.column), *first.shape[1:])

    def read(self) -> np.ndarray:
        if not self.images:
            return self.column.to_numpy()
        return np.concatenate(list(self.blocks(4096)))

    def blocks(self, rows: int) -> Iterator[np.ndarray]:
        for start in range(0, self.shape[0], rows):
            yield self._decode(self.column.slice(start, rows), start, self.shape[1:])

    def _decode(self, chunk: Any, start: int, shape: tuple[int, ...] | None) -> np.ndarray:
        """Records [n, C, H, W] uint8 of a slice of the column."""
        import pyarrow as pa

        values = chunk.combine_chunks() if isinstance(chunk, pa.ChunkedArray) else chunk
        if pa.types.is_struct(values.type):
            records = [self._picture(row, start + i) for i, row in enumerate(values.field("bytes"))]
        else:
            records = [np.asarray(row.as_py(), dtype=self.dtype) for row in values]
            records = [r[None] if r.ndim == 2 else r.transpose(2, 0, 1) for r in records]
        for offset, record in enumerate(records):
            if shape is not None and record.shape != tuple(shape):
                raise UserError(
                    f"{self.path}: {self.name} of row {start + offset} is {record.shape}, the "
                    f"first row's {tuple(shape)}; set dataset.image_size=N to resize all"
                )
        return np.stack(records)

    def _picture(self, encoded: Any, row: int) -> np.ndarray:
        from PIL import Image

        try:
            with Image.open(io.BytesIO(encoded.as_py())) as image:
                mode = getattr(self, "mode", "L" if image.mode in GREY else "RGB")
                image = image.convert(mode)
                if self.image_size is not None:
                    image = image.resize((self.image_size, self.image_size), Image.BILINEAR)
                pixels = np.asarray(image, dtype=np.uint8)
        except (OSError, ValueError, TypeError) as err:
            raise UserError(
                f"{self.path}: {self.name} of row {row} is not a readable image ({err})"
            ) from None
        return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)


def pa_struct(kind: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_struct(kind)


def _is_image(kind: Any) -> bool:
    import pyarrow as pa

    return (pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0) or (
        pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind)
    )


def _table(path: Path) -> tuple[Any, dict]:
    """The Arrow table of a parquet file or a save_to_disk folder (memory-mapped Arrow files), and
    its features (for class names)."""
    pa = needs("pyarrow", path)
    if path.is_file():
        parquet = needs("pyarrow.parquet", path)
        table = parquet.read_table(path, memory_map=True)
        meta = (table.schema.metadata or {}).get(b"huggingface", b"{}")
        return table, json.loads(meta).get("info", {}).get("features", {})
    files = sorted(path.glob("*.arrow"))
    if not files:
        raise UserError(f"{path} holds no .arrow files (a folder saved by save_to_disk)")
    tables = [pa.ipc.open_stream(pa.memory_map(str(file))).read_all() for file in files]
    info = path / "dataset_info.json"
    features = json.loads(info.read_text()).get("features", {}) if info.is_file() else {}
    return pa.concat_tables(tables), features


def arrow_sources(path: Path, keys: dict[str, str], *, image_size: int | None) -> dict[str, Any]:
    """Our names -> sources of a parquet file or a save_to_disk folder (with splits: ``train``,
    and ``test`` as the public test split)."""
    splits = {"": path}
    if path.is_dir() and (path / "dataset_dict.json").is_file():
        names = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
        if "train" not in names:
            raise UserError(f"{path} has the splits {names}; the private data must be 'train'")
        splits = {"": path / "train"} | ({"test_": path / "test"} if "test" in names else {})
    found: dict[str, Any] = {}
    try:
        for prefix, folder in splits.items():
            table, features = _table(folder)
            for ours in ("images", "labels"):
                theirs = keys[ours]
                if theirs not in table.column_names:
                    raise UserError(
                        f"{folder} has no column '{theirs}' (it has: "
                        f"{', '.join(table.column_names)}); name yours with dataset.{ours}_key=NAME"
                    )
                found[prefix + ours] = Column(folder, table, theirs, image_size=image_size)
            names = features.get(keys["labels"], {}).get("names")
            if not prefix and names:
                found["class_names"] = _Names(names)
    except OSError as err:
        raise UserError(f"{path} is not a readable Arrow or parquet file ({err})") from None
    for key in ("labels", "test_labels"):
        if key in found:
            found[key] = flat_labels(found[key], path, keys["labels"])
    return found


class _Names:
    def __init__(self, names: list[str]) -> None:
        self.names = names

    def read(self) -> np.ndarray:
        return np.array([str(name) for name in self.names])
