"""The files of a run folder, in one list: each one's name, writer, readers, permission and kind.

This module owns the run folder: every module that writes or reads a file in it takes the name (and,
for an owner-only file, the permission) from here, and no other module of the package spells a run
folder's file name (tests/privacy/test_run_files.py reads the package's source to keep it so). The
manifest that seals the release (privacy/receipts/manifest.py), ``dpdc-privacy verify`` (which
refuses a file this list does not name), the bundle writer (engine/bundle.py), the run's own state
(engine/run_folder.py, privacy/mechanisms/secret.py) and the readers (evaluate, the audits, the
report) all read it. Four kinds:

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
``*`` does not cross a ``/``. This module imports nothing of the package: every floor may read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import translate

RELEASE, READER, OWNER, SECRET = "release", "reader", "owner", "secret"
# Permissions: an owner-only file is created with OWNER_ONLY (never readable by another account,
# whatever the umask); every other file with READABLE less the process's umask.
OWNER_ONLY, READABLE = 0o600, 0o666
ANYONE, THE_OWNER = "0666 less the umask", "0600: the owner only"

# ---- names (the only place the package spells them)
BUNDLE_TENSORS = "synthetic.pt"
GRID_IMAGE = "synthetic.png"
CONFIG_FILE = "config.yaml"
PLAN_FILE = "plan.json"
PRIVACY_REPORT = "privacy.json"
REPORT_PAGE = "report.html"
MANIFEST_FILE = "manifest.json"
SIGNATURE_FILE = "manifest.sig"
TENSORBOARD_DIR = "tensorboard"
HPARAMS_FILE = "hparams.yaml"  # inside TENSORBOARD_DIR
# evaluate.py's TensorBoard scalars: a folder of their own, so the report's curves read the sealed
# training log only (report/events.py) and a reader's file never mixes with the owner's.
EVAL_TENSORBOARD_DIR = f"{TENSORBOARD_DIR}/eval"
EVAL_FILE = "eval.json"
# audit.py's outputs: STEM.json, or STEM-k.json for the k-th audit of that kind (never replaced)
AUDIT_MIA, AUDIT_WHITEBOX, AUDIT_RELEASE = "audit", "audit_whitebox", "audit_release"
AUDIT_ROC, AUDIT_NEIGHBOURS = "audit_roc", "audit_neighbours"  # pictures (.png) of the MIA audit
PROVENANCE_FILE = ".provenance.json"
CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"  # inside CHECKPOINT_DIR: where a resume starts
AUXILIARY_FILE = "auxiliary.pt"  # a DP auxiliary set kept in the run folder for a resumed run
TEMPORARY_SUFFIX = ".tmp"  # a file being written, renamed onto its name when complete
SECRET_FILE = ".private_seed"
DIGEST_FILE = ".data_digest"
SECRET_FILES = (SECRET_FILE, DIGEST_FILE)


@dataclass(frozen=True)
class RunFile:
    """One file (or pattern of files) of a run folder."""

    pattern: str
    kinds: tuple[str, ...]
    writer: str  # the command or module that writes it
    readers: str  # the commands that read it back
    mode: int  # OWNER_ONLY or READABLE
    what: str

    @property
    def permission(self) -> str:
        return THE_OWNER if self.mode == OWNER_ONLY else ANYONE


def _released(pattern: str, writer: str, readers: str, what: str) -> RunFile:
    return RunFile(pattern, (RELEASE,), writer, readers, READABLE, what)


def _read(pattern: str, writer: str, what: str, readers: str = "verify, report") -> RunFile:
    return RunFile(pattern, (READER,), writer, readers, READABLE, what)


_VERIFIED = "verify, evaluate, audit, report"
RUN_FILES: tuple[RunFile, ...] = (
    _released(BUNDLE_TENSORS, "train", _VERIFIED, "the synthetic images and their labels"),
    _released(GRID_IMAGE, "train", "verify, report", "a picture of the synthetic images"),
    _released(
        CONFIG_FILE,
        "train",
        f"{_VERIFIED}, resume, forget",
        "the config, less data and run locations",
    ),
    _released(
        PLAN_FILE,
        "train",
        "verify, resume, report",
        "the privacy plan fixed before the data was read",
    ),
    _released(PRIVACY_REPORT, "train", _VERIFIED, "the privacy receipt"),
    _released(f"{TENSORBOARD_DIR}/events.out.tfevents.*", "train", "report", "ε, loss, grids"),
    _released(f"{TENSORBOARD_DIR}/{HPARAMS_FILE}", "train", "TensorBoard", "the run's settings"),
    RunFile(
        REPORT_PAGE,
        (RELEASE, READER),
        "train, evaluate, audit",
        "a browser",
        READABLE,
        "the release on one page",
    ),
    _released(MANIFEST_FILE, "train, evaluate, audit", "verify", "the digests of the files"),
    _released(
        SIGNATURE_FILE, "dpdc-privacy sign", "verify --key", "the owner's HMAC of the release"
    ),
    _read(EVAL_FILE, "evaluate", "accuracies of networks trained on the release"),
    _read(
        f"{EVAL_TENSORBOARD_DIR}/*",
        "evaluate",
        "the accuracies for TensorBoard",
        "verify, TensorBoard",
    ),
    _read(f"{AUDIT_MIA}*.json", "audit.py", "an audit's numbers (reads private records)"),
    _read(f"{AUDIT_MIA}_*.png", "audit.py", "an audit's pictures (reads private records)"),
    RunFile(
        PROVENANCE_FILE,
        (OWNER,),
        "train",
        "resume, evaluate, audit, forget",
        OWNER_ONLY,
        "where the private data lives",
    ),
    RunFile(f"{CHECKPOINT_DIR}/*", (OWNER,), "train", "resume", READABLE, "resumable state"),
    RunFile(
        AUXILIARY_FILE,
        (OWNER,),
        "train",
        "resume",
        READABLE,
        "a DP auxiliary set, kept for a resumed run",
    ),
    RunFile(
        f".*{TEMPORARY_SUFFIX}",
        (OWNER,),
        "any",
        "none",
        READABLE,
        "a write interrupted before its rename",
    ),
    RunFile(
        SECRET_FILE,
        (SECRET,),
        "train",
        "resume",
        OWNER_ONLY,
        "the noise secret of an unfinished run",
    ),
    RunFile(
        DIGEST_FILE,
        (SECRET,),
        "train",
        "resume",
        OWNER_ONLY,
        "the keyed digest of the private data",
    ),
)
# Written by verify's readers of the manifest itself, never listed in it.
UNLISTED = (MANIFEST_FILE, SIGNATURE_FILE)


def _regex(pattern: str) -> re.Pattern[str]:
    # fnmatch's "*" also matches "/": a pattern one folder deep must not match deeper paths.
    return re.compile(translate(pattern).replace(".*", "[^/]*"))


_MATCHERS = tuple((_regex(f.pattern), f) for f in RUN_FILES)


def entry_of(path: str) -> RunFile | None:
    """The entry naming a relative path (None for a file this list does not name)."""
    for matcher, entry in _MATCHERS:
        if matcher.fullmatch(path):
            return entry
    return None


def kinds_of(path: str) -> tuple[str, ...]:
    """The kinds of a relative path (``()`` for a file this list does not name)."""
    entry = entry_of(path)
    return () if entry is None else entry.kinds


def mode_of(path: str) -> int:
    """The permission a writer creates ``path`` (relative) with, before the umask: OWNER_ONLY for
    the owner-only files, READABLE for the rest (and for a file this list does not name)."""
    entry = entry_of(path)
    return READABLE if entry is None else entry.mode


def released_names(paths: list[str]) -> list[str]:
    """Of ``paths`` (relative), the ones a bundle releases and its manifest seals, sorted."""
    return sorted(p for p in paths if RELEASE in kinds_of(p) and p not in UNLISTED)


def numbered(stem: str, k: int, suffix: str = ".json") -> str:
    """A reader's k-th output of one kind: ``STEM.json`` for the first, ``STEM-k.json`` after."""
    return f"{stem}{'' if k == 1 else f'-{k}'}{suffix}"
