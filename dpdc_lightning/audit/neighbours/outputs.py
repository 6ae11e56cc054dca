"""Everything a run of ``python train.py`` shows, flattened to ``output:field`` keys, for the
neighbouring-run harness (:mod:`.compare` compares two runs against the release ledger).

A run folder (or sweep folder) becomes ``relative/path:key`` entries: JSON and YAML by key, tensor
files and checkpoints by nested key (tensors as values), TensorBoard events by ``tag@step`` (wall
times and hparams session times dropped), summary tables by ``member.column`` (their time column
dropped), report.html by the ``data-source`` of each value it shows (the rest of the page whole),
any other file whole. stdout, stderr, warnings and log records are text (times removed
before comparing); the exit code and the list of files are outputs too.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import re
import shutil
import warnings
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import Tensor

# The comparison lives in compare.py; its two entry points stay importable from here.
from dpdc_lightning.audit.neighbours.compare import differences, in_ledger
from dpdc_lightning.audit.neighbours.patches import Patches, patched
from dpdc_lightning.data import clear_dataset_cache
from dpdc_lightning.errors import run
from dpdc_lightning.privacy.receipts.run_files import MANIFEST_FILE, PROVENANCE_FILE, REPORT_PAGE

__all__ = ["differences", "in_ledger", "run_cli", "snapshot"]
_EVENT_NAME = re.compile(r"events\.out\.tfevents\.[^/]*$")


class _Logs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname}: {record.getMessage()}")


def run_cli(
    tokens: list[str],
    *,
    folder: Path,
    work: Path,
    patches: Callable[[Patches], None],
    runner: Callable[[list[str]], int | None],
) -> tuple[int, dict[str, Any]]:
    """``runner(TOKENS)`` (train.py's main) in process, errors handled as the command line does
    (``errors.run``), with ``patches`` applied; returns the exit code and every output, ``work``
    written as ``<work>``. The run folder ``folder`` is read and deleted."""
    clear_dataset_cache()
    out, err, logs = io.StringIO(), io.StringIO(), _Logs()
    loggers = [
        logging.getLogger(name)
        for name in ("", "lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning")
    ]
    with patched() as patch, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patches(patch)
        for logger in loggers:
            logger.addHandler(logs)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = run(runner, tokens)
        finally:
            for logger in loggers:
                logger.removeHandler(logs)
    clear_dataset_cache()
    stdout = out.getvalue()
    summary = folder / "summary.md"
    if (
        summary.is_file()
    ):  # a sweep prints its summary.md, which is compared as a file (its times dropped)
        stdout = stdout.replace(summary.read_text(), "<summary.md>\n")
    outputs = snapshot(folder, prefix=str(work))
    outputs["exit_code"] = code
    for name, text in (
        ("stdout", stdout),
        ("stderr", err.getvalue()),
        ("warnings", "\n".join(f"{w.category.__name__}: {w.message}" for w in caught)),
        ("log", "\n".join(logs.lines)),
    ):
        outputs[name] = text.replace(str(work), "<work>")
    shutil.rmtree(folder, ignore_errors=True)
    return code, outputs


def _flatten(value: Any, prefix: str, into: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), into)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _flatten(item, f"{prefix}.{index}" if prefix else str(index), into)
        if not value:
            into[prefix] = type(value)()
    else:
        into[prefix] = value.detach().clone() if isinstance(value, Tensor) else value


def _table(rows: list[dict[str, str]], key: str) -> dict[str, Any]:
    """Rows by member; the time column dropped."""
    return {
        row.get(key, str(i)): {k: v for k, v in row.items() if k not in ("seconds", "time (s)")}
        for i, row in enumerate(rows)
    }


def _markdown_rows(text: str) -> tuple[list[str], list[dict[str, str]]]:
    lines = text.splitlines()
    table = [line for line in lines if line.startswith("|")]
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    rows = [
        dict(zip(header, (cell.strip() for cell in line.strip("|").split("|"))))
        for line in table[2:]
    ]
    return [line for line in lines if not line.startswith("|")], rows


def _events(path: Path) -> dict[str, Any]:
    """TensorBoard events without wall times: ``tag@step`` -> value (hparams without their
    times)."""
    from google.protobuf.json_format import MessageToDict
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    values: dict[str, Any] = {}
    for event in EventFileLoader(str(path)).Load():
        for value in event.summary.value:
            key = f"{value.tag}@{event.step}"
            if value.metadata.plugin_data.plugin_name == "hparams":
                data = HParamsPluginData.FromString(value.metadata.plugin_data.content)
                tree = MessageToDict(data)
                for info in ("sessionStartInfo", "sessionEndInfo"):
                    for stamp in ("startTimeSecs", "endTimeSecs"):
                        tree.get(info, {}).pop(stamp, None)
                _flatten(tree, key, values)
            elif value.HasField("image"):
                values[key] = value.image.encoded_image_string
            elif value.HasField("tensor"):
                values[key] = value.tensor.SerializeToString()
            else:
                values[key] = value.simple_value
    return values


class _Page(HTMLParser):
    """report.html (dpdc_lightning/report/): each value shown with ``data-source="FILE:FIELD"`` (an
    image with ``data-source="FILE"``) under that source, in page order; the page with those values
    left out under ``page``. A value whose source the ledger does not name must then be equal."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.fields: dict[str, list[str]] = {}
        self.page: list[str] = []
        self.inside: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        source = found.pop("data-source", None)
        if source is not None and tag == "img":
            self.fields.setdefault(source, []).append(found.pop("src", ""))
        elif source is not None:
            self.inside = source
        self.page.append(f"<{tag} {sorted(found.items())} {source}>")

    def handle_endtag(self, tag: str) -> None:
        self.inside = None
        self.page.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if self.inside is not None:
            self.fields.setdefault(self.inside, []).append(data)
        else:
            self.page.append(data)


def _report_page(text: str) -> dict[str, Any]:
    parser = _Page()
    parser.feed(text)
    parser.close()
    return {"page": "".join(parser.page), **parser.fields}


def snapshot(folder: Path, *, prefix: str) -> dict[str, Any]:
    """Every file under ``folder`` as ``relative/path:field`` -> value (files listed under
    ``files``)."""
    outputs: dict[str, Any] = {}
    if not folder.exists():
        outputs["files"] = None
        return outputs
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    names = []
    for path in files:
        rel = path.relative_to(folder).as_posix()
        if "tfevents" in path.name:
            rel = (
                rel.rsplit("/", 1)[0] + "/events"
            )  # the name holds a time, a host and a process id
        names.append(rel)
        flat: dict[str, Any] = {}
        if path.suffix == ".json":
            tree = json.loads(path.read_text().replace(prefix, "<work>"))
            if path.name == "sweep.json":
                tree["members"] = _table(tree["members"], "member")
            if path.name == PROVENANCE_FILE:  # owner-only: the random ids of the private
                # cache's entries forget deletes (data/cache_bounds.py) are never released
                tree.pop("decoded", None)
            _flatten(tree, "", flat)
            if path.name == MANIFEST_FILE:  # an event file's digest hashes its wall times:
                # the files themselves are compared without them
                flat = {k: v for k, v in flat.items() if not _EVENT_NAME.search(k)}
        elif path.suffix == ".yaml":
            _flatten(yaml.safe_load(path.read_text().replace(prefix, "<work>")), "", flat)
        elif path.suffix in (".pt", ".ckpt"):
            _flatten(torch.load(path, map_location="cpu", weights_only=True), "", flat)
            flat = {
                k: v.replace(prefix, "<work>") if isinstance(v, str) else v for k, v in flat.items()
            }
        elif path.name == "summary.csv":
            _flatten(
                _table(list(csv.DictReader(io.StringIO(path.read_text()))), "member"), "", flat
            )
        elif path.name == "summary.md":
            lines, rows = _markdown_rows(path.read_text().replace(prefix, "<work>"))
            _flatten({"text": lines, **_table(rows, "member")}, "", flat)
        elif "tfevents" in path.name:
            flat = _events(path)
        elif path.name == REPORT_PAGE:
            flat = _report_page(path.read_text(encoding="utf-8"))
        else:
            flat["*"] = path.read_bytes()
        outputs.update({f"{rel}:{key}": value for key, value in flat.items()})
    outputs["files"] = names
    return outputs
