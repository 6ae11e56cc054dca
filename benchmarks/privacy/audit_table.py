"""Markdown rows from audit.json files: python benchmarks/privacy/audit_table.py LABEL=RUN_DIR/audit.json ...

Each row names its scale (shadows, attacked records, classifier epochs) and the confidence of its
bounds, so that a number never travels without them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _f(x, digits: int = 3) -> str:
    if x is None:
        return "∞ (not private)"
    if isinstance(x, str):
        return x
    return f"{x:.{digits}f}"


def rows(label: str, report: dict) -> list[str]:
    s = report["settings"]
    scale = f"S={s['shadows']}, {report['protocol']['records_attacked']} records, {s['epochs']} ep"
    conf = f"{report['confidence_per_bound']:.4f}"
    out = []
    for name, entry in [(f"target{t}", e) for t, e in enumerate(report["targets"])] + [
        ("bundle", report["bundle"])
    ]:
        for attack, m in entry["attacks"].items():
            # Bundle attacks (training vs test records) are attack strength only: no ε bound, no claim.
            bound = (
                _f(m["epsilon_lower_bound"]["epsilon"])
                if "epsilon_lower_bound" in m
                else "n/a (strength)"
            )
            claim = _f(entry["accounted_epsilon"]) if "accounted_epsilon" in entry else "n/a"
            out.append(
                f"| {label} | {name} | {attack} | {_f(m['auc'])} | {_f(m['tpr_at_fpr']['0.001'])} | "
                f"{_f(m['tpr_at_fpr']['0.01'])} | {_f(m['advantage'])} | {bound} | {claim} | {scale} | {conf} |"
            )
        if "one_run_bound" in entry:
            o = entry["one_run_bound"]
            out.append(
                f"| {label} | {name} | one-run (Steinke), {o['correct']}/{o['guesses']} right | | | | | "
                f"{_f(o['epsilon_lower_bound'])} | {_f(entry['accounted_epsilon'])} | {scale} | {conf} |"
            )
        if name.startswith("target"):
            lt = entry["loss_threshold_split"]
            out.append(
                f"| {label} | {name} | loss threshold, split-half advantage | | | | {_f(lt['advantage'])} | | "
                f"{_f(entry['accounted_epsilon'])} | {scale} | |"
            )
    if "canary" in report:
        c = report["canary"]
        out.append(
            f"| {label} | canary run | {c['canaries']} canaries, {c['correct']}/{c['guesses']} right | | | | | "
            f"{_f(c['epsilon_lower_bound'])} | {_f(c['accounted_epsilon'])} | one condensation | {conf} |"
        )
    return out


def main(argv: list[str]) -> None:
    print(
        "| run | target | attack | AUC | TPR@0.1% | TPR@1% | advantage | ε lower bound | accounted ε | scale | confidence |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    extra = []
    for arg in argv:
        label, _, path = arg.rpartition("=")
        report = json.loads(Path(path).read_text())
        print("\n".join(rows(label, report)))
        v = report["visual"]
        extra.append(
            f"| {label} | {_f(v['synthetic_to_private_l2']['q00'])} | {_f(v['synthetic_to_private_l2']['q50'])} | "
            f"{_f(v['synthetic_to_test_l2']['q50'])} | {_f(v['test_to_private_l2_reference']['q50'])} | "
            f"{_f(v['synthetic_best_ssim_with_private']['q50'])} | "
            f"{_f(report['shadows'][0]['test_accuracy'])} / {_f(report['bundle']['test_accuracy'])} |"
        )
    print(
        "\n| run | syn→private L2 min | syn→private L2 median | syn→test L2 median | test→private L2 median "
        "(reference) | best SSIM median | accuracy shadow0 / bundle classifier |"
    )
    print("|---|---|---|---|---|---|---|")
    print("\n".join(extra))


if __name__ == "__main__":
    main(sys.argv[1:])
