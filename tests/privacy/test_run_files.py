"""The run folder has one owner (dpdc_lightning/privacy/receipts/run_files.py): no other module of
the package spells a run folder's file name, and the owner-only files are created owner-only."""

from __future__ import annotations

import ast
import os
import re
import stat
from pathlib import Path

import pytest

from dpdc_lightning.privacy.receipts import run_files

PACKAGE = Path(run_files.__file__).resolve().parents[2]
OWNER = Path(run_files.__file__).resolve()
# Module constants of the owner that are not file names: the kinds, who may read a file, and the
# audit stems ("audit" is also a seed label; their file names are caught by the patterns below).
NOT_NAMES = {
    "RELEASE",
    "READER",
    "OWNER",
    "SECRET",
    "ANYONE",
    "THE_OWNER",
    "AUDIT_MIA",
    "AUDIT_WHITEBOX",
    "AUDIT_RELEASE",
    "AUDIT_ROC",
    "AUDIT_NEIGHBOURS",
}
# (file, literal): the same name used for something that is no run folder's file
ELSEWHERE = {("dpdc_lightning/config/help.py", "config.yaml")}  # conf/config.yaml, Hydra's root
NAMES = {
    value
    for key, value in vars(run_files).items()
    if re.fullmatch(r"[A-Z][A-Z_]*", key) and isinstance(value, str) and key not in NOT_NAMES
}


def _spelled(node: ast.expr) -> str | None:
    """A string literal as written, an f-string with ``*`` for each of its placeholders."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value if isinstance(part, ast.Constant) else "*" for part in node.values
        )
    return None


def run_folder_literals(source: str) -> list[tuple[int, str]]:
    """(line, literal) of every string in ``source`` that names a run folder's file: one of the
    owner's names, or a literal (an f-string with ``*`` for its placeholders) its patterns match."""
    tree = ast.parse(source)
    # an f-string is judged whole (its placeholders as "*"), never by its constant parts
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    found = []
    for node in ast.walk(tree):
        text = None if id(node) in parts else _spelled(node)
        if text is not None and (text in NAMES or (" " not in text and run_files.kinds_of(text))):
            found.append((node.lineno, text))
    return found


def test_no_module_but_the_owner_spells_a_run_folder_file_name():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.resolve() != OWNER
        for line, text in run_folder_literals(path.read_text())
        if (path.relative_to(PACKAGE.parent).as_posix(), text) not in ELSEWHERE
    ]
    assert found == [], "take these names from privacy/receipts/run_files.py:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        'path = run_dir / "privacy.json"',
        'tmp = run_dir / "checkpoints" / "last.ckpt"',
        'out = run_dir / f"audit{suffix}.json"',
        'page = f"{run}/report.html".rsplit("/", 1)[1] if run else "report.html"',
        'SECRET = ".private_seed"',
    ],
)
def test_the_scan_finds_a_spelled_name(line):
    """The scan can fail: each of these lines re-adds a literal the owner holds."""
    assert run_folder_literals(line) != []


def test_the_scan_passes_prose_and_other_names():
    source = (
        'a = "see privacy.json"\nb = derive_seed(1, "audit", "records")\n'
        'c = f"{PRIVACY_REPORT}:epsilon"\nd = "sweep.json"\n'
    )
    assert run_folder_literals(source) == []


def test_every_file_has_a_writer_readers_and_a_permission():
    for entry in run_files.RUN_FILES:
        assert entry.writer and entry.readers and entry.what, entry
        assert entry.mode in (run_files.OWNER_ONLY, run_files.READABLE), entry
        # an owner-only file is never released: its permission and its kind agree
        assert (entry.mode == run_files.OWNER_ONLY) <= (run_files.RELEASE not in entry.kinds)
    owner_only = {e.pattern for e in run_files.RUN_FILES if e.permission == run_files.THE_OWNER}
    assert owner_only == {
        run_files.PROVENANCE_FILE,
        run_files.SECRET_FILE,
        run_files.DIGEST_FILE,
    }
    assert run_files.mode_of("checkpoints/last.ckpt") == run_files.READABLE
    assert run_files.mode_of("not-a-run-file.txt") == run_files.READABLE


def test_the_patterns_name_what_the_writers_write():
    assert run_files.kinds_of("synthetic.pt") == (run_files.RELEASE,)
    assert run_files.kinds_of(run_files.numbered(run_files.AUDIT_MIA, 3)) == (run_files.READER,)
    assert run_files.kinds_of(run_files.numbered(run_files.AUDIT_ROC, 1, ".png")) == (
        run_files.READER,
    )
    assert run_files.kinds_of(f"{run_files.EVAL_TENSORBOARD_DIR}/events.out.x") == (
        run_files.READER,
    )
    assert run_files.kinds_of(f".{run_files.AUXILIARY_FILE}{run_files.TEMPORARY_SUFFIX}") == (
        run_files.OWNER,
    )
    assert run_files.kinds_of("tensorboard/eval/deeper/x") == ()  # "*" stays in its folder
    assert run_files.numbered("audit", 1) == "audit.json"
    assert run_files.numbered("audit", 2) == "audit-2.json"


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_the_owner_only_files_are_created_owner_only(tmp_path):
    from dpdc_lightning.privacy.mechanisms.secret import store_data_digest, store_secret

    old = os.umask(0)  # the most permissive umask: the permission must come from the owner list
    try:
        store_secret(tmp_path, 7)
        store_data_digest(tmp_path, "abc")
    finally:
        os.umask(old)
    for name in (run_files.SECRET_FILE, run_files.DIGEST_FILE):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == run_files.OWNER_ONLY
