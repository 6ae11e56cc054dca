"""Evaluation results: per-model accuracies, a markdown table and the eval.json payload.

Every table and JSON document carries the protocol that produced it; a reduced protocol (fewer
epochs or runs than the papers') is flagged in capitals so a number can never be quoted as a
paper-protocol result by mistake.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpdc_lightning.privacy.display import epsilon_text

if TYPE_CHECKING:  # importing it loads Lightning; these functions only read its fields
    from dpdc_lightning.evaluation.protocol import EvalProtocol

REDUCED_BANNER = "REDUCED PROTOCOL"
PRIVATE_TEST_NOTE = (
    "NOT covered by the privacy guarantee: the test split was held out from the private data, so "
    "this accuracy is a function of private records; keep this file private (it is not part of "
    "the public bundle)"
)


@dataclass
class ModelResult:
    """Test accuracies (fractions in [0, 1], one per run) of one architecture."""

    model: str
    accuracies: list[float] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return len(self.accuracies)

    @property
    def mean(self) -> float:
        """Mean accuracy in percent (NaN without runs)."""
        if not self.accuracies:
            return math.nan
        return 100.0 * sum(self.accuracies) / len(self.accuracies)

    @property
    def std(self) -> float:
        """Population standard deviation (ddof=0, as ``np.std`` in the papers) in percent."""
        if not self.accuracies:
            return math.nan
        mean = sum(self.accuracies) / len(self.accuracies)
        variance = sum((a - mean) ** 2 for a in self.accuracies) / len(self.accuracies)
        return 100.0 * math.sqrt(variance)

    def cell(self, digits: int = 2) -> str:
        """``"mean ± std"`` in percent, as the papers print it."""
        if not self.accuracies:
            return "n/a"
        return f"{self.mean:.{digits}f} ± {self.std:.{digits}f}"


def protocol_line(protocol: EvalProtocol) -> str:
    """The one-line protocol statement placed above every table."""
    if protocol.is_reduced():
        return (
            f"**{REDUCED_BANNER} (not comparable with the papers' numbers):** {protocol.describe()}"
        )
    return f"Protocol: {protocol.describe()}"


def format_table(
    results: list[ModelResult],
    *,
    title: str,
    protocol: EvalProtocol,
    extra: dict[str, str] | None = None,
) -> str:
    """A markdown section: title, protocol line, optional ``key: value`` lines, then the table
    ``| model | accuracy (%) | runs |`` with ``mean ± std`` cells."""
    lines = [f"### {title}", "", protocol_line(protocol), ""]
    for key, value in (extra or {}).items():
        lines.append(f"- {key}: {value}")
    if extra:
        lines.append("")
    lines += ["| model | accuracy (%) | runs |", "|---|---|---|"]
    lines += [f"| {r.model} | {r.cell()} | {r.runs} |" for r in results]
    return "\n".join(lines) + "\n"


def results_to_json(
    results: list[ModelResult],
    *,
    protocol: EvalProtocol,
    extra: dict[str, str] | None = None,
) -> dict:
    """The eval.json payload.

    ``{"unit": "percent", "protocol": {<EvalProtocol fields>, "reduced", "description"},
    "results": {model: {"mean", "std", "runs", "accuracies"}}, "extra": {...}}``;
    mean, std and every accuracy are in percent.
    """
    protocol_fields = dataclasses.asdict(protocol)
    protocol_fields["reduced"] = protocol.is_reduced()
    protocol_fields["description"] = protocol.describe()
    return {
        "unit": "percent",
        "protocol": protocol_fields,
        "results": {
            r.model: {
                # None rather than NaN, which strict JSON cannot hold.
                "mean": r.mean if r.runs else None,
                "std": r.std if r.runs else None,
                "runs": r.runs,
                "accuracies": [100.0 * a for a in r.accuracies],
            }
            for r in results
        },
        "extra": dict(extra or {}),
    }


def append_eval_json(
    path: Path, *, title: str, results: list[Any], protocol: Any, seed: int, note: dict[str, str]
) -> None:
    """Add this evaluation to ``eval.json``: ``evaluations`` keeps every one (never overwritten),
    ``by_protocol[protocol][model]`` lists each evaluation's seed and accuracies; ``results`` and
    ``protocol`` repeat the latest for quick reading."""
    from dpdc_lightning.engine.bundle import atomic_write_text
    from dpdc_lightning.errors import UserError

    payload: dict[str, Any] = {}
    if path.is_file():
        try:
            payload = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise UserError(
                f"{path} is not valid JSON ({err}); move it away to start a new one"
            ) from None
    latest = results_to_json(results, protocol=protocol, extra=note or None)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    evaluations = payload.get("evaluations")
    if evaluations is None:  # a file from an earlier version: keep its one evaluation
        evaluations = (
            [{k: payload[k] for k in ("title", "protocol", "results") if k in payload}]
            if payload
            else []
        )
    evaluations.append({"title": title, "date": stamp, "seed": seed, **latest})
    by_protocol = payload.get("by_protocol", {})
    key = protocol.describe() + (
        "; PEA expansion" if "pea" in note else ""
    )  # PEA results never mix with plain ones
    for model, entry in latest["results"].items():
        by_protocol.setdefault(key, {}).setdefault(model, []).append(
            {
                "seed": seed,
                "date": stamp,
                "mean": entry["mean"],
                "std": entry["std"],
                "accuracies": entry["accuracies"],
            }
        )
    document = {
        "title": title,
        **note,
        "pea": "pea" in note,
        "unit": "percent",
        "protocol": latest["protocol"],
        "results": latest["results"],
        "by_protocol": by_protocol,
        "evaluations": evaluations,
    }
    atomic_write_text(path, json.dumps(document, indent=2) + "\n")


def comparison_table(outcomes: list[dict[str, Any]]) -> str:
    """One markdown table over several bundles: run, method, ε, δ, seed, then a column per
    model."""
    models = sorted({r.model for o in outcomes for r in o["results"]})
    lines = ["### comparison", "", protocol_line(outcomes[0]["protocol"]), ""]
    if any(o["private_test"] for o in outcomes):
        lines += [
            f"- note: some rows are {PRIVATE_TEST_NOTE.split(':')[0]} "
            "(test split held out from private data)",
            "",
        ]
    lines += [
        "| run | method | dataset | ε | δ | seed | "
        + " | ".join(f"{m} (%)" for m in models)
        + " |",
        "|---" * (6 + len(models)) + "|",
    ]
    for o in outcomes:
        cells = {r.model: r.cell() for r in o["results"]}
        eps = epsilon_text(o["epsilon"], decimals=3)
        delta = "-" if o["delta"] is None else f"{o['delta']:g}"
        lines.append(
            f"| {o['path'].name} | {o['method']} | {o['dataset']} | {eps} | {delta} | "
            f"{o['seed']} | " + " | ".join(cells.get(m, "-") for m in models) + " |"
        )
    return "\n".join(lines) + "\n"
