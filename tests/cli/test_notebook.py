"""The Python API as a notebook user runs it: examples/api_tour.ipynb executed end to end in a real
Jupyter kernel (nbclient), every call in one process: two condensations, a run and its evaluation,
a sweep, and a bad config that raises UserError, after which the next cell still runs. Then "Run
All" again in the same folder: each run and sweep goes to a new folder, nothing is refused."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.slow


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def _execute(repo_root, folder):
    """A fresh kernel runs every cell of the notebook in ``folder``; returns the code cells."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    notebook = nbformat.read(repo_root / "examples" / "api_tour.ipynb", as_version=4)
    # The kernel imports this checkout, whatever is installed, with one torch thread (2-core CI).
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(repo_root), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    client = nbclient.NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
    )
    client.execute(env=env)  # a cell that raises without the raises-exception tag fails here
    return [c for c in notebook.cells if c.cell_type == "code"]


def test_the_api_tour_notebook_runs_end_to_end_in_one_kernel_and_again(tmp_path, repo_root):
    for time in (1, 2):
        code = _execute(repo_root, tmp_path)
        texts = [_text(c) for c in code]
        spent = [float(line.rsplit(" ", 1)[1]) for line in texts[1].splitlines()]
        assert texts[1].count("condensed (20, 1, 16, 16) epsilon") == 2
        assert 0 < spent[0] <= 1 < spent[1] <= 5  # each within its own target, ε = 1 and ε = 5
        assert "evaluated convnet" in texts[2] and "swept member" in texts[3]
        # every run and sweep in a folder of its own: the second "Run All" adds, never refuses
        assert len(list(tmp_path.glob("runs/ndpdc-digits-*/eval.json"))) == time
        assert len(list(tmp_path.glob("runs/sweep-*/summary.md"))) == time
        (error,) = [o for o in code[4].outputs if o.output_type == "error"]
        assert error.ename == "UserError" and "method.ipc" in error.evalue
        assert error.traceback == [f"error: {error.evalue}"]  # one line, as on the command line
        assert "refused: " in texts[5] and "the kernel goes on: (20, 1, 16, 16)" in texts[5]
        others = [o for c in code if c is not code[4] for o in c.outputs]
        assert not any(o.output_type == "error" for o in others)
