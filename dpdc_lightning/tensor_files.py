"""Reading a tensor file a user or a run handed us, without ever unpickling code.

Every ``.pt`` the framework reads (bundles, checkpoints, own data, auxiliary sets, ``--images``)
goes through :func:`load_plain`: ``torch.load(weights_only=True)`` with torch's warnings silenced,
and every failure turned into one ``UserError`` line of ours. torch's own message for a pickled
file advises re-running with ``weights_only=False``, i.e. executing the file's code: wrong advice in
a privacy tool, so it never reaches the user. ``.npz`` files are read with ``allow_pickle=False``.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import warnings
import zipfile
from pathlib import Path
from typing import Any

from dpdc_lightning.errors import UserError

PLAIN_SAVE_HINT = (
    "save plain tensors only, e.g. torch.save({'images': images, 'labels': labels}, path)"
)


def load_plain(path: Path | str, *, what: str, map_location: Any = "cpu") -> Any:
    """The content of a ``.pt`` (or ``.npz``) file made of tensors, numbers, strings, lists and
    dicts.

    ``what`` names the file in messages ("checkpoint", "dataset.root=", ...). A missing file, a
    pickled Python object, and a truncated, corrupt or foreign file each end in one ``UserError``
    line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} {path} does not exist")
    if path.suffix == ".npz":
        return _load_npz(path, what=what)
    import torch

    try:
        with (
            warnings.catch_warnings()
        ):  # e.g. "Detected pickle protocol 4": torch's business, not the user's
            warnings.simplefilter("ignore")
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        culprit = _first_foreign_global(path)
        refused = "weights only" in str(err).lower() and zipfile.is_zipfile(
            path
        )  # torch's format, refused content
        if culprit is None and not refused:  # not a pickle at all (e.g. "invalid load key")
            raise UserError(
                f"{what} {path} is truncated, corrupt or not a tensor file (neither torch.save's "
                "format nor a pickle)"
            ) from None
        held = f" (a {culprit})" if culprit else ""
        raise UserError(
            f"{what} {path} holds pickled Python objects{held}; they are never loaded, since "
            f"unpickling can run code: {PLAIN_SAVE_HINT}"
        ) from None
    except Exception as err:  # anything else: the bytes are not a complete tensor file
        raise UserError(
            f"{what} {path} is truncated, corrupt or not a tensor file ({_short(err)})"
        ) from None


def _load_npz(path: Path, *, what: str) -> dict[str, Any]:
    """Numeric arrays become tensors, other arrays (e.g. class names) lists of strings."""
    import numpy as np
    import torch

    # np.load takes whatever is not a zip archive for a pickle, so a text or .npy file named .npz
    # would be reported as pickled objects: say what it is not instead.
    if not zipfile.is_zipfile(path):
        raise UserError(
            f"{what} {path} is not a valid .npz file (not a zip archive); save arrays with "
            "np.savez(path, images=images, labels=labels)"
        )
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {
                key: torch.from_numpy(np.array(archive[key]))
                if archive[key].dtype.kind in "biuf"
                else [str(x) for x in archive[key]]
                for key in archive.files
            }
    except ValueError as err:
        if "pickle" in str(err).lower():
            raise UserError(
                f"{what} {path} holds pickled Python objects; they are never loaded "
                "(np.savez arrays of numbers or strings only)"
            ) from None
        raise UserError(
            f"{what} {path} is truncated, corrupt or not a tensor file ({_short(err)})"
        ) from None
    except Exception as err:
        raise UserError(
            f"{what} {path} is truncated, corrupt or not a tensor file ({_short(err)})"
        ) from None


def _short(err: Exception) -> str:
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return first.split(". ")[0].rstrip(".")[:160]


def _first_foreign_global(path: Path) -> str | None:
    """The first class or function outside torch the file's pickles refer to (for the message
    only; found by reading the opcodes, nothing is executed). Reads torch's zip format and the
    legacy one (several pickles in a row, then raw storage bytes). None when there is none or it
    cannot be told."""
    try:
        raw = path.read_bytes()
        if zipfile.is_zipfile(io.BytesIO(raw)):
            with zipfile.ZipFile(io.BytesIO(raw)) as archive:
                raw = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
    except (OSError, StopIteration, zipfile.BadZipFile):
        return None
    start, strings = 0, []
    while start < len(raw):
        try:
            for opcode, arg, position in pickletools.genops(raw[start:]):
                name = None
                if opcode.name == "GLOBAL":
                    name = str(arg).replace(" ", ".")
                elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                    name = f"{strings[-2]}.{strings[-1]}"
                elif isinstance(arg, str):
                    strings.append(arg)
                if name and not name.startswith(("torch", "collections.OrderedDict", "builtins.")):
                    return name
                if opcode.name == "STOP":
                    start += position + 1
        except ValueError:  # bytes that are not a pickle (a legacy file's storages, or junk): done
            return None
    return None
