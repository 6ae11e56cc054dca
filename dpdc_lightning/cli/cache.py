"""``dpdc-cache list|clear [--cache-dir DIR] [ENTRY ...]``: the private decoded cache shown and
emptied (data/cache_bounds.py). ``list`` prints every entry (its size, when it was last used, the
data it holds: owner-only information, on the owner's console); ``clear`` deletes the entries named,
or every entry. ``python train.py forget=RUN_DIR`` deletes just the copies one run read."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from dpdc_lightning.errors import UserError


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one ``error:`` line (exit code 2), as every command's."""

    def error(self, message: str) -> NoReturn:
        usage = self.format_usage().strip().removeprefix("usage: ")
        raise UserError(f"{message}; usage: {usage}")


def cache_main(argv: list[str]) -> int:
    from dpdc_lightning.data.cache_bounds import DEFAULT_MAX_GB, age, entries
    from dpdc_lightning.data.decoded_cache import STORE_FOLDER, remove_entries
    from dpdc_lightning.data.load import default_cache_dir

    parser = _Parser(prog="dpdc-cache", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("list", "clear"))
    parser.add_argument("entries", nargs="*", help="entries to clear (default: every entry)")
    parser.add_argument("--cache-dir", help="dataset.cache_dir (default: ~/.cache/dpdc_lightning)")
    try:
        args = parser.parse_args(argv)
    except SystemExit:  # --help, printed
        return 0
    folder = Path(args.cache_dir or default_cache_dir()) / STORE_FOLDER
    found = entries(folder)
    if args.action == "list":
        if args.entries:
            raise UserError("dpdc-cache list takes no entries")
        for entry in found:
            source = entry.meta.get("source", "an image folder")
            print(
                f"{entry.path}  {entry.bytes / 1e9:.2f} GB  used {age(entry.last_used)}  {source}"
            )
        total = sum(entry.bytes for entry in found) / 1e9
        print(
            f"{len(found)} entr{'y' if len(found) == 1 else 'ies'}, {total:.2f} GB in {folder} "
            f"(bound: dataset.cache_max_gb, default {DEFAULT_MAX_GB:g})"
        )
        return 0
    named = [Path(name).resolve() for name in args.entries]
    known = {entry.path.resolve() for entry in found}
    for name in named:
        if name not in known:
            raise UserError(f"{name} is not an entry of {folder}; dpdc-cache list shows them")
    removed = remove_entries(named or [entry.path for entry in found])
    print(f"deleted {len(removed)} entr{'y' if len(removed) == 1 else 'ies'} of {folder}")
    return 0


if __name__ == "__main__":  # python -m dpdc_lightning.cli.cache list
    from dpdc_lightning.errors import main_entry

    main_entry(cache_main)
