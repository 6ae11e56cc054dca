"""How tight is every accounted ε? White-box and black-box audits on digits (REDUCED), with resume.

    OMP_NUM_THREADS=1 python benchmarks/privacy/audit_tightness.py          # every row not yet in the cache
    python benchmarks/privacy/audit_tightness.py --table                    # only rewrite the tables from the cache
    python benchmarks/privacy/audit_tightness.py --only ndpdc-eps4          # one row (ids: see ROWS)
    OMP_NUM_THREADS=1 python benchmarks/privacy/audit_tightness.py --whitebox   # the white-box table only

``--whitebox`` (issue 33): the white-box audit alone (defaults of ``audit.py whitebox``) of every
private method at target ε 1, 4 and 8, DP-MERF (the example plug-in, at its check size) included:
the model bound, the Clopper–Pearson bound, the GDP estimate and the one-run bound against the
accounted ε, with CPU and wall time, in audit_tightness_cpu.json / .md (the same resume).

Rows: NDPDC, LDPDC, Dosser and PSG (digits presets; PSG on a width-16 ConvNet) at target ε 1, 4 and 16
(δ 1e-5): the white-box audit (defaults of ``audit.py whitebox``) and the black-box release audit
(``audit.py release``: the bundle and one target condensation); the self-test's planted-bug rows;
DM with ``method.init=real`` and ``init=noise`` under the black-box attacks. Each finished part is
stored at once in benchmarks/results/privacy/audit_tightness_digits.json, so a killed run resumes where it
stopped; the tables go between the markers of audit_tightness_digits.md (the text around them stays).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks" / "common")]
RESULTS = ROOT / "benchmarks" / "results" / "privacy"
CACHE, TABLE = RESULTS / "audit_tightness_digits.json", RESULTS / "audit_tightness_digits.md"
START, END = "<!-- tables -->", "<!-- /tables -->"
PRESETS = {
    "ndpdc": ["method=ndpdc"],
    "ldpdc": ["method=ldpdc"],
    "dosser": ["method=dosser"],
    "psg": ["method=psg", "model.width=16"],
}
ROWS: dict[str, list[str]] = {
    f"{m}-eps{e}": [*t, f"privacy.target_epsilon={e}"]
    for m, t in PRESETS.items()
    for e in (1, 4, 16)
}
ROWS.update(
    {
        "dm-init-real": ["method=dm", "method.init=real"],
        "dm-init-noise": ["method=dm", "method.init=noise"],
    }
)


WHITEBOX_ROWS: dict[str, list[str]] = {
    f"{m}-eps{e}": [*t, f"privacy.target_epsilon={e}"]
    for m, t in {**PRESETS, "dp_merf": ["method=dp_merf", "method.features=256"]}.items()
    for e in (1, 4, 8)
}
WB_CACHE, WB_TABLE = RESULTS / "audit_tightness_cpu.json", RESULTS / "audit_tightness_cpu.md"


def load(path: Path = CACHE) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def save(cache: dict, path: Path = CACHE) -> None:
    from dpdc_lightning.cli.audit import finite

    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(finite(cache), indent=1, default=float) + "\n")
    os.replace(tmp, path)


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_row(row: str, cache: dict) -> None:
    from dpdc_lightning.audit.blackbox.release import release_audit
    from dpdc_lightning.audit.settings import ReleaseConfig, WhiteboxConfig
    from dpdc_lightning.audit.whitebox.audit import summary_line, whitebox_audit
    from dpdc_lightning.audit.whitebox.transcripts import Transcript
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.condense import condense
    from dpdc_lightning.engine.planning import load_data
    from dpdc_lightning.engine.resolved import resolve_run

    config = compose([*ROWS[row], "trainer.enable_progress_bar=false"])
    run = resolve_run(config)
    data = load_data(run.dataset)
    entry = cache.setdefault(row, {"configuration": ROWS[row]})
    if "whitebox" not in entry and not row.startswith("dm-"):
        say(f"{row}: white-box")
        started = time.monotonic()
        [report] = whitebox_audit(
            Transcript(run, data, others=16, seed=0), WhiteboxConfig(), progress=say
        )
        report["wall_seconds"] = time.monotonic() - started  # building the method included
        entry["whitebox"] = report
        print(summary_line(report), flush=True)
        save(cache)
    if "release" not in entry:
        say(f"{row}: release audit (bundle + 1 target condensation)")
        started = time.monotonic()
        bundle = condense(config, data)
        report = release_audit(
            bundle.images, bundle.labels, run, data, ReleaseConfig(), progress=say
        )
        report["accounted_epsilon"] = bundle.report.get("epsilon")
        report["wall_seconds"] = time.monotonic() - started
        entry["release"] = report
        save(cache)


def run_selftest(cache: dict) -> None:
    from dpdc_lightning.audit.settings import WhiteboxConfig
    from dpdc_lightning.audit.whitebox.selftest import default_methods
    from dpdc_lightning.audit.whitebox.selftest import run_selftest as selftest

    for method in default_methods():
        if f"selftest-{method}" not in cache:
            say(f"self-test {method}")
            cache[f"selftest-{method}"] = {
                "reports": selftest(WhiteboxConfig(), methods=[method], progress=say)
            }
            save(cache)


def _f(x, digits: int = 2) -> str:
    from audit_table import (
        _f as number,
    )  # benchmarks/privacy/audit_table.py: None reads "∞ (not private)"

    return number(x, digits)


def tables(cache: dict) -> str:
    out = [
        "| method | target ε | accounted ε RDP / PRV | white-box bound (CP) | GDP estimate [95 % CI] | "
        "one-run bound | black-box bound pixel / feature | bundle AUC pixel / feature | trials x canaries | "
        "wall white-box / release |",
        "|" + "---|" * 10,
    ]
    for row in ROWS:
        entry = cache.get(row, {})
        wb, rel = entry.get("whitebox"), entry.get("release")
        if wb is None or rel is None or row.startswith("dm-"):
            continue
        eps, cp, gdp, one = (
            wb["accounted_epsilon"],
            wb["clopper_pearson"],
            wb["gaussian_dp"],
            wb["one_run"],
        )
        bounds = rel["targets"][0]["bounds"]
        auc = rel["bundle_strength"]
        out.append(
            f"| {wb['method']} | {row.split('eps')[1]} | {_f(eps['rdp'])} / {_f(eps['prv'])} | "
            f"{_f(cp['epsilon'])} ({cp['statistic']}) | {_f(gdp['epsilon'])} [{_f(gdp['interval'][0])}, "
            f"{_f(gdp['interval'][1])}] | {_f(one['epsilon'])} ({one['correct']}/{one['guesses']}) | "
            f"{_f(bounds['pixel']['epsilon'])} / {_f(bounds['feature']['epsilon'])} | "
            f"{_f(auc['pixel']['auc'], 3)} / {_f(auc['feature']['auc'], 3)} | "
            f"{wb['trials']} x {wb['canaries_per_trial']} | {wb['wall_seconds']:.0f} s / "
            f"{rel['wall_seconds']:.0f} s |"
        )
    out += [
        "",
        "| self-test | release | claimed ε | white-box bound (CP) | GDP estimate | one-run bound | verdict |",
        "|" + "---|" * 7,
    ]
    for key in ("selftest-ndpdc", "selftest-psg"):
        for r in cache.get(key, {}).get("reports", []):
            out.append(
                f"| {r['method']} | {r['release']} | {_f(r['claimed_epsilon'])} | "
                f"{_f(r['clopper_pearson']['epsilon'])} ({r['clopper_pearson']['statistic']}) | "
                f"{_f(r['gaussian_dp']['epsilon'])} | {_f(r['one_run']['epsilon'])} | {r['verdict']} |"
            )
    out += [
        "",
        "| DM | accounted ε | bundle AUC pixel / feature | bundle TPR@0.1 % pixel / feature | "
        "bundle advantage pixel / feature | init records vs test AUC pixel / feature | "
        "black-box bound pixel / feature (correct/guesses) | wall |",
        "|" + "---|" * 8,
    ]
    for row in ("dm-init-real", "dm-init-noise"):
        rel = cache.get(row, {}).get("release")
        if rel is None:
            continue
        s, init, b = (
            rel["bundle_strength"],
            rel.get("initialisation_strength"),
            rel["targets"][0]["bounds"],
        )
        pair = lambda key, d=s: f"{_f(d['pixel'][key], 3)} / {_f(d['feature'][key], 3)}"  # noqa: E731
        tpr = f"{_f(s['pixel']['tpr_at_fpr']['0.001'], 3)} / {_f(s['feature']['tpr_at_fpr']['0.001'], 3)}"
        out.append(
            f"| {row.replace('dm-', '').replace('-', '=')} | ∞ (not private) | {pair('auc')} | {tpr} | "
            f"{pair('advantage')} | {pair('auc', init) if init else 'n/a'} | "
            f"{_f(b['pixel']['epsilon'])} ({b['pixel']['correct']}/{b['pixel']['guesses']}) / "
            f"{_f(b['feature']['epsilon'])} ({b['feature']['correct']}/{b['feature']['guesses']}) | "
            f"{rel['wall_seconds']:.0f} s |"
        )
    return "\n".join(out)


def write_table(cache: dict, path: Path = TABLE, render=tables) -> None:
    text = (
        path.read_text()
        if path.exists()
        else f"# Audit tightness on digits (REDUCED)\n\n{START}\n{END}\n"
    )
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    path.write_text(f"{head}{START}\n{render(cache)}\n{END}{tail}")


def run_whitebox_row(row: str, cache: dict, *, trials: int = 48) -> None:
    """The white-box audit alone, with the CPU time of this process (building the method included)."""
    from dpdc_lightning.audit.settings import WhiteboxConfig
    from dpdc_lightning.audit.whitebox.audit import summary_line, whitebox_audit
    from dpdc_lightning.audit.whitebox.transcripts import Transcript
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.planning import load_data
    from dpdc_lightning.engine.resolved import resolve_run

    if row in cache:
        return
    say(f"{row}: white-box")
    run = resolve_run(compose([*WHITEBOX_ROWS[row], "trainer.enable_progress_bar=false"]))
    started, cpu = time.monotonic(), time.process_time()
    [report] = whitebox_audit(
        Transcript(run, load_data(run.dataset), others=16, seed=0),
        WhiteboxConfig(trials=trials),
        progress=say,
    )
    report["wall_seconds"] = time.monotonic() - started
    report["cpu_seconds"] = time.process_time() - cpu
    cache[row] = {"configuration": WHITEBOX_ROWS[row], "whitebox": report}
    print(summary_line(report), flush=True)
    save(cache, WB_CACHE)


def whitebox_table(cache: dict) -> str:
    out = [
        "| method | target ε | accounted ε RDP / PRV | model bound (share of accounted) | "
        "measured noise std / stated, effect | model checks |z| (lag, shape, spread) | "
        "Clopper–Pearson bound (share) | GDP estimate [95 % CI] | one-run bound | "
        "trials x canaries | CPU s / wall s |",
        "|" + "---|" * 11,
    ]
    for row in WHITEBOX_ROWS:
        wb = cache.get(row, {}).get("whitebox")
        if wb is None:
            continue
        eps, cp, gdp, one, model = (
            wb[k]
            for k in ("accounted_epsilon", "clopper_pearson", "gaussian_dp", "one_run", "model")
        )
        claim, z = wb["claimed_epsilon"], model["checks"]["z"]
        checks = ", ".join(
            f"{abs(z[k]):.1f}" if k in z else "-" for k in ("lag", "shape", "spread")
        )
        out.append(
            f"| {wb['method']} | {row.split('eps')[1]} | {_f(eps['rdp'])} / {_f(eps['prv'])} | "
            f"**{_f(model['epsilon'])}** ({model['epsilon'] / claim:.0%}) | "
            f"{model['noise_std_measured']:.4g} / {model['noise_std_stated']:.4g}, "
            f"x{model['effect_measured']:.3f} | {checks} "
            f"{'REJECTED' if model['checks']['rejected'] else '(pass)'} | "
            f"{_f(cp['epsilon'])} ({cp['epsilon'] / claim:.0%}) | {_f(gdp['epsilon'])} "
            f"[{_f(gdp['interval'][0])}, {_f(gdp['interval'][1])}] | {_f(one['epsilon'])} | "
            f"{wb['trials']} x {wb['canaries_per_trial']} | {wb['cpu_seconds']:.0f} / "
            f"{wb['wall_seconds']:.0f} |"
        )
    return "\n".join(out)


def meta() -> dict:
    import torch

    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    models = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return {
        "started": time.strftime("%Y-%m-%d %H:%M"),
        "torch": torch.__version__,
        "cpu": models[0] if models else "unknown",
        "cores": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "load_average_at_start": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--table", action="store_true", help="only rewrite the tables from the cache"
    )
    parser.add_argument("--only", choices=[*ROWS, *WHITEBOX_ROWS, "selftest"], help="run one row")
    parser.add_argument(
        "--whitebox", action="store_true", help="the white-box table (audit_tightness_cpu.*)"
    )
    parser.add_argument(
        "--trials", type=int, default=48, help="--whitebox: audit.trials (default 48)"
    )
    args = parser.parse_args()
    if args.whitebox:
        cache = load(WB_CACHE)
        cache.setdefault("meta", meta())
        for row in [args.only] if args.only else list(WHITEBOX_ROWS):
            if not args.table:
                run_whitebox_row(row, cache, trials=args.trials)
            write_table(cache, WB_TABLE, whitebox_table)
        return
    cache = load()
    if not args.table:
        cache.setdefault("meta", meta())
        for row in [args.only] if args.only else list(ROWS):
            if row == "selftest":
                continue
            run_row(row, cache)
            write_table(cache)
        if args.only in (None, "selftest"):
            run_selftest(cache)
    write_table(cache)


if __name__ == "__main__":
    main()
