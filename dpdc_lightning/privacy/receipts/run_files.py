"""The files of a run folder, in one list: who writes each, and whether it is released.

Every other list of a run folder's files reads this one: the manifest that seals the release
(privacy/receipts/manifest.py), ``dpdc-privacy verify`` (which refuses a file this list does not
name), the bundle writer and the readers (engine/bundle.py). Four kinds:

- ``release``: what train.py (or a private selection) releases, sealed byte for byte in
  manifest.json when the bundle is written; the owner's signature covers exactly these;
- ``reader``: what a reader that adds to a verified bundle writes (evaluate, the audits): sealed by
  that reader in manifest.json's ``readers`` section, never signed by the owner. ``report.html`` is
  both: released by train.py, re-rendered (from the verified files, never copied) by each reader;
- ``owner``: the owner's own state, never released and never verified: what a resume needs
  (checkpoints, the data's provenance) and an interrupted write's temporary file. Not to be handed
  on; verify lists the ones it finds;
- ``secret``: the run's noise secret and its keyed data digest: verify fails a folder holding one.

Paths are relative to the run folder, with ``/`` separators; patterns are fnmatch patterns whose
``*`` does not cross a ``/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import translate

from dpdc_lightning.privacy.mechanisms.secret import DIGEST_FILE, SECRET_FILE
from dpdc_lightning.privacy.receipts.digests import (
    BUNDLE_TENSORS,
    CONFIG_FILE,
    PLAN_FILE,
    PRIVACY_REPORT,
)

RELEASE, READER, OWNER, SECRET = "release", "reader", "owner", "secret"
GRID_IMAGE = "synthetic.png"
REPORT_PAGE = "report.html"
MANIFEST_FILE = "manifest.json"
SIGNATURE_FILE = "manifest.sig"
PROVENANCE_FILE = ".provenance.json"
AUXILIARY_FILE = "auxiliary.pt"  # a DP auxiliary set kept in the run folder for a resumed run
TENSORBOARD_DIR = "tensorboard"
# evaluate.py's TensorBoard scalars: a folder of their own, so the report's curves read the sealed
# training log only (report/events.py) and a reader's file never mixes with the owner's.
EVAL_TENSORBOARD_DIR = f"{TENSORBOARD_DIR}/eval"


@dataclass(frozen=True)
class RunFile:
    pattern: str
    kinds: tuple[str, ...]
    writer: str
    what: str


RUN_FILES: tuple[RunFile, ...] = (
    RunFile(BUNDLE_TENSORS, (RELEASE,), "train", "the synthetic images and their labels"),
    RunFile(GRID_IMAGE, (RELEASE,), "train", "a picture of the synthetic images"),
    RunFile(CONFIG_FILE, (RELEASE,), "train", "the config, less data and run locations"),
    RunFile(PLAN_FILE, (RELEASE,), "train", "the privacy plan fixed before the data was read"),
    RunFile(PRIVACY_REPORT, (RELEASE,), "train", "the privacy receipt"),
    RunFile(f"{TENSORBOARD_DIR}/events.out.tfevents.*", (RELEASE,), "train", "ε, loss, grids"),
    RunFile(f"{TENSORBOARD_DIR}/hparams.yaml", (RELEASE,), "train", "the run's settings"),
    RunFile(REPORT_PAGE, (RELEASE, READER), "train, evaluate, audit", "the release on one page"),
    RunFile(MANIFEST_FILE, (RELEASE,), "train, evaluate, audit", "the digests of the files"),
    RunFile(SIGNATURE_FILE, (RELEASE,), "dpdc-privacy sign", "the owner's HMAC of the release"),
    RunFile("eval.json", (READER,), "evaluate", "accuracies of networks trained on the release"),
    RunFile(f"{EVAL_TENSORBOARD_DIR}/*", (READER,), "evaluate", "the accuracies for TensorBoard"),
    RunFile("audit*.json", (READER,), "audit.py", "an audit's numbers (reads private records)"),
    RunFile("audit_*.png", (READER,), "audit.py", "an audit's pictures (reads private records)"),
    RunFile(PROVENANCE_FILE, (OWNER,), "train", "where the private data lives"),
    RunFile("checkpoints/*", (OWNER,), "train", "resumable state"),
    RunFile(AUXILIARY_FILE, (OWNER,), "train", "a DP auxiliary set, kept for a resumed run"),
    RunFile(".*.tmp", (OWNER,), "any", "a write interrupted before its rename"),
    RunFile(SECRET_FILE, (SECRET,), "train", "the noise secret of an unfinished run"),
    RunFile(DIGEST_FILE, (SECRET,), "train", "the keyed digest of the private data"),
)
# Written by verify's readers of the manifest itself, never listed in it.
UNLISTED = (MANIFEST_FILE, SIGNATURE_FILE)


def _regex(pattern: str) -> re.Pattern[str]:
    # fnmatch's "*" also matches "/": a pattern one folder deep must not match deeper paths.
    return re.compile(translate(pattern).replace(".*", "[^/]*"))


_MATCHERS = tuple((_regex(f.pattern), f) for f in RUN_FILES)


def kinds_of(path: str) -> tuple[str, ...]:
    """The kinds of a relative path (``()`` for a file this list does not name)."""
    for matcher, entry in _MATCHERS:
        if matcher.fullmatch(path):
            return entry.kinds
    return ()


def released_names(paths: list[str]) -> list[str]:
    """Of ``paths`` (relative), the ones a bundle releases and its manifest seals, sorted."""
    return sorted(p for p in paths if RELEASE in kinds_of(p) and p not in UNLISTED)
