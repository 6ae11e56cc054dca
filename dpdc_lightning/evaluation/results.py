"""Evaluation results: per-model accuracies, a markdown table and the eval.json payload.

Every table and JSON document carries the protocol that produced it; a reduced protocol (fewer
epochs or runs than the papers') is flagged in capitals so a number can never be quoted as a
paper-protocol result by mistake.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importing it loads Lightning; these functions only read its fields
    from dpdc_lightning.evaluation.train_eval import EvalProtocol

REDUCED_BANNER = "REDUCED PROTOCOL"


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
            f"**{REDUCED_BANNER} (not comparable with the papers' numbers):** "
            f"{protocol.describe()}"
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
