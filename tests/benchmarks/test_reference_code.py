"""The side-by-side scripts' handling of a reference checkout (benchmarks/common/reference_code.py): the
checkout is copied and patched, never modified; a checkout that is not the expected one, or whose
text to patch is gone, ends in one error line and exit code 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "common"))

from reference_code import commit_of, patched_copy  # noqa: E402


def _checkout(tmp_path: Path) -> Path:
    folder = tmp_path / "ref"
    folder.mkdir()
    (folder / "a.py").write_text("device = 'cuda'\n")
    return folder


def test_a_patched_copy_leaves_the_checkout_alone(tmp_path):
    ref = _checkout(tmp_path)
    copy = patched_copy(ref, required=("a.py",), patches={"a.py": [("'cuda'", "'cpu'")]})
    assert (copy / "a.py").read_text() == "device = 'cpu'\n"
    assert (ref / "a.py").read_text() == "device = 'cuda'\n"


@pytest.mark.parametrize(
    "required, patches, message",
    [
        (("a.py", "b.py"), {}, "lacks b.py"),
        (("a.py",), {"a.py": [("'gpu'", "'cpu'")]}, "the text to patch is gone"),
    ],
)
def test_an_unexpected_checkout_is_one_error_line(tmp_path, capsys, required, patches, message):
    with pytest.raises(SystemExit) as exit_:
        patched_copy(_checkout(tmp_path), required=required, patches=patches)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error:") and message in err
    assert len(err.strip().splitlines()) == 1


def test_the_commit_of_a_folder_without_git_must_be_given(tmp_path, capsys):
    ref = _checkout(tmp_path)
    assert commit_of(ref, "abc1234") == "abc1234"
    with pytest.raises(SystemExit) as exit_:
        commit_of(ref, None)
    assert exit_.value.code == 2 and "give its commit with --commit" in capsys.readouterr().err
