"""``forget=RUN_DIR`` and the private decoded cache: the decoded copies of the data a run read
(data/decoded_cache.py) lie outside the run folder, shared by the runs on that data; forget deletes
them with the run's secret (engine/run_folder.py's forget_run). They are found from the run's own
record (the random ids its .provenance.json keeps, data/cache_bounds.py): the copies the run read,
whatever its data folder holds now. A run recorded before those ids existed is found again by
hashing its image folder."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from dpdc_lightning.config.locations import with_locations
from dpdc_lightning.data.cache_bounds import remove_by_id
from dpdc_lightning.data.decoded_cache import remove_entries, store_folder
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.receipts.run_files import CONFIG_FILE, PROVENANCE_FILE


def forget_decoded(run_dir: Path) -> str:
    """Delete the decoded-cache entries the run read (data/decoded_cache.py): copies of the private
    data outside the run folder, found by the ids the run recorded. Another run on the data decodes
    it again. Returns the sentence to add to forget's line ("" for a run that read no copy)."""
    recorded = _recorded_copies(run_dir)
    if recorded is not None:
        folder, ids = recorded
        removed = remove_by_id(folder, ids)
        if not removed:
            return "; no decoded copy of its data was left in the private cache"
        listed = ", ".join(map(str, removed))
        return f"; deleted the decoded copy of its data from the private cache ({listed})"
    return _forget_by_hashing(run_dir)


def _recorded_copies(run_dir: Path) -> tuple[Path, list[str]] | None:
    """(cache folder, entry ids) the run's .provenance.json records; None for a run without one."""
    try:
        found = json.loads((Path(run_dir) / PROVENANCE_FILE).read_text()).get("decoded")
        return Path(found["cache"]), [str(i) for i in found["ids"]]
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return None


def _forget_by_hashing(run_dir: Path) -> str:
    """A run recorded before the ids: its image folder's entries found again by hashing it."""
    from omegaconf import OmegaConf

    from dpdc_lightning.data.load import default_cache_dir
    from dpdc_lightning.data.loaders.imagefolder import decoded_entries

    if not (Path(run_dir) / CONFIG_FILE).is_file():
        return ""
    saved = with_locations(OmegaConf.load(Path(run_dir) / CONFIG_FILE), Path(run_dir))
    if OmegaConf.select(saved, "dataset.name", default=None) != "imagefolder":
        return ""
    setting = functools.partial(OmegaConf.select, saved, default=None)
    cache = _absolute(setting("dataset.cache_dir")) or default_cache_dir()
    root = _recorded_folder(run_dir) or _absolute(setting("dataset.root"))
    try:
        removed = remove_entries(
            decoded_entries(
                Path(root),
                cache_dir=Path(cache),
                image_size=setting("dataset.image_size"),
                channels=setting("dataset.channels"),
                test_root=_absolute(setting("dataset.test_root")),
            )
        )
    except (UserError, TypeError) as err:  # the folder is gone or changed, or nothing recorded
        return (
            f"; its image folder cannot be read ({err}), so its decoded copy is not found: "
            f"delete {store_folder(Path(cache))} to remove every decoded copy"
        )
    if not removed:
        return "; no decoded copy of its images was in the private cache"
    return f"; deleted the decoded copy of its images from the private cache ({', '.join(removed)})"


def _absolute(path: str | None) -> str | None:
    return None if path is None else os.path.abspath(os.path.expanduser(str(path)))


def _recorded_folder(run_dir: Path) -> str | None:
    """The data folder the run's owner-only .provenance.json records (None without one)."""
    try:
        found = json.loads((Path(run_dir) / PROVENANCE_FILE).read_text()).get("data")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None
