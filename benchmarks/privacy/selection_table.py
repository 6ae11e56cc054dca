"""Issue 34's measured table: private selection against the default, the composed sweep and the
leaky choice, every row run through the CLI exactly as a user runs it (train.py, evaluate.py).

    python benchmarks/privacy/selection_table.py --work WORK_DIR --out benchmarks/results/privacy/selection_digits_cpu \
        --epsilons 4 1 --trials-mean 4 --eval-epochs 100 --eval-runs 2

Per total ε (δ the default 1e-5), one private method (NDPDC), the embedded digits data:

(a) the default settings at that ε, evaluated;
(b) ``select=private`` over the grid (geometric law, ``--trials-mean``), the winner evaluated;
(c) the same grid, every member released, each at the per-member ε whose composition (RDP, the
    project's accountant) is the total: the mean over members (a private number: no choice) and
    the best member by test accuracy, labelled NOT private;
(d) the same grid, every member at the total ε (a sweep nobody composes), the member with the best
    TEST accuracy: the leaky choice, labelled NOT private.

Every evaluation uses the same reduced protocol (``eval=quick`` with ``--eval-epochs``,
``--eval-runs``, ConvNet) on the real test split. Results go to ``OUT.json`` after every row (a
partial table survives an interruption) and ``OUT.md`` at the end of each ε.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
METHOD = "method=ndpdc"
# lr_img and the number of iterations: against a fixed ε, more iterations mean more noise per step,
# and the step size decides how far the noisy gradient moves the images; both plausibly matter.
# The default grid holds the default setting (lr_img 1, 300 iterations) and its neighbours the
# 2026-11-28 digits table found competitive (lr_img 1-3 did as well as the default per member).
GRID = {"method.lr_img": "1,2,3,5", "method.iterations": "100,300"}
DEFAULT = {"method.lr_img": 1.0, "method.iterations": 300}
DEFAULT_DELTA = 1e-5


def base_tokens() -> list[str]:
    """The method and the --extra overrides (data set, reduced model) every command carries."""
    return [METHOD, *EXTRA]


EXTRA: list[str] = []  # set from --extra in main()


def grid_tokens(grid: dict[str, str]) -> list[str]:
    """The grid as the command line's comma lists."""
    return [f"{key}={values}" for key, values in grid.items()]


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and (population) std of the evaluation runs' accuracies."""
    array = np.asarray(values, dtype=np.float64)
    return float(array.mean()), float(array.std())


def grid_members(grid: dict[str, str]) -> list[str]:
    """Every combination of the grid's values, as 'v1,v2' strings (the sweep's order)."""
    import itertools

    return [",".join(c) for c in itertools.product(*(v.split(",") for v in grid.values()))]


def format_accuracy(values: list[float] | None) -> str:
    """'93.1 ± 0.4' of accuracies in percent (as eval.json records them); '—' when none."""
    if not values:
        return "—"
    mean, std = mean_std(values)
    return f"{mean:.1f} ± {std:.1f}"


def public_command(command: str, *, work: str) -> str:
    """A command as the table prints it: ``python`` for this interpreter, ``WORK`` for the runs'
    folder (no path of the measuring machine in a committed file)."""
    return command.replace(sys.executable, "python").replace(work.rstrip("/"), "WORK")


def run(command: list[str], *, log: Path) -> float:
    """Run one CLI command (one torch thread, niced) as a user would; returns its wall time."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    start = time.perf_counter()
    with log.open("w") as handle:
        handle.write("$ " + shlex.join(command) + "\n")
        handle.flush()
        done = subprocess.run(
            ["nice", "-n", "10", *command], cwd=ROOT, env=env, stdout=handle, stderr=handle
        )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed (exit {done.returncode}); see {log}")
    return wall


def accuracies(run_dir: Path) -> list[float]:
    """The latest evaluation's ConvNet accuracies (one per evaluation run) from eval.json."""
    record = json.loads((run_dir / "eval.json").read_text())
    results = record["results"]
    found = _find_accuracies(results)
    if found is None:
        raise RuntimeError(f"no accuracies in {run_dir / 'eval.json'}: {results!r}")
    return found


def _find_accuracies(node: Any) -> list[float] | None:
    # eval.json nests the runs' accuracies under the model; take the first list of numbers found
    if isinstance(node, dict):
        for key in ("accuracies", "accuracy_runs", "runs"):
            value = node.get(key)
            if isinstance(value, list) and value and all(isinstance(v, float) for v in value):
                return [float(v) for v in value]
        for value in node.values():
            found = _find_accuracies(value)
            if found is not None:
                return found
    if isinstance(node, list):
        for value in node:
            found = _find_accuracies(value)
            if found is not None:
                return found
    return None


def per_member_epsilon(total: float, *, delta: float) -> float:
    """The per-member target t at which the grid's members, every one released (no score),
    compose (RDP, the project's accountant and conversion) to ``total``: bisection on log t."""
    from dpdc_lightning.cli.sweep import expand
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.planning import load_data
    from dpdc_lightning.engine.resolved import resolve_run
    from dpdc_lightning.methods import DataSpec
    from dpdc_lightning.privacy.accounting.analysis import RDP_ORDERS
    from dpdc_lightning.privacy.selection.budget import composed_rdp, epsilon_at
    from dpdc_lightning.selection.trials import member_plan, plan_events

    members, _ = expand([*base_tokens(), *grid_tokens(GRID), f"privacy.target_epsilon={total}"])
    configs = [compose(m) for m in members]
    spec = DataSpec.of(load_data(configs[0].dataset))  # public class sizes: no record is read

    def cost(t: float) -> float:
        events = [plan_events(member_plan(resolve_run(c), spec, target_epsilon=t)) for c in configs]
        rdp = composed_rdp(orders=RDP_ORDERS, members=events, score_noise_multiplier=None)
        return float(epsilon_at(orders=RDP_ORDERS, rdp=rdp, delta=delta))

    low, high = total / 64, total
    while high > low * 1.001:  # invariant: cost(low) <= total < cost(high)
        middle = float(np.sqrt(low * high))
        if cost(middle) <= total:
            low = middle
        else:
            high = middle
    return low


def composed_of(run_dirs: list[Path], *, delta: float) -> float:
    """ε of the released members composed, recomputed from their privacy.json histories."""
    from dpdc_lightning.privacy.accounting.analysis import RDP_ORDERS
    from dpdc_lightning.privacy.selection.budget import epsilon_at, history_rdp

    total = np.zeros(len(RDP_ORDERS))
    for run_dir in run_dirs:
        for phase in json.loads((run_dir / "privacy.json").read_text())["phases"]:
            history = [tuple(event) for event in phase["history"]]
            total = total + history_rdp(history, orders=RDP_ORDERS)
    return float(epsilon_at(orders=RDP_ORDERS, rdp=total, delta=delta))


def evaluate_command(run_dirs: list[Path], args: argparse.Namespace) -> list[str]:
    return [
        sys.executable, "evaluate.py", *map(str, run_dirs), "eval=quick",
        f"eval.epochs={args.eval_epochs}", f"eval.runs={args.eval_runs}", "--no-progress",
    ]  # fmt: skip


def member_dirs(sweep_dir: Path) -> list[Path]:
    """A sweep's member folders (NNN-<values>), in grid order."""
    return sorted(p for p in sweep_dir.iterdir() if p.is_dir() and (p / "privacy.json").exists())


def swept_values(run_dir: Path) -> dict[str, Any]:
    """The member's grid values, read back from its config.yaml."""
    import yaml

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    return {key: config[key.split(".")[0]][key.split(".")[1]] for key in GRID}


def row_a(epsilon: float, work: Path, args: argparse.Namespace, log: list[dict]) -> dict:
    run_dir = work / f"a-eps{epsilon:g}"
    train = [sys.executable, "train.py", *base_tokens(), f"privacy.target_epsilon={epsilon}",
             f"run_dir={run_dir}"]  # fmt: skip
    wall = run(train, log=work / f"a-eps{epsilon:g}.train.log")
    log.append({"command": shlex.join(train), "wall_s": wall})
    evaluate = evaluate_command([run_dir], args)
    eval_wall = run(evaluate, log=work / f"a-eps{epsilon:g}.eval.log")
    log.append({"command": shlex.join(evaluate), "wall_s": eval_wall})
    privacy = json.loads((run_dir / "privacy.json").read_text())
    return {"row": "a", "label": "default settings (lr_img 1, 300 iterations)",
            "private": True, "epsilon": privacy["epsilon"], "accuracies": accuracies(run_dir),
            "train_wall_s": wall, "eval_wall_s": eval_wall}  # fmt: skip


def row_b(epsilon: float, work: Path, args: argparse.Namespace, log: list[dict]) -> dict:
    run_dir = work / f"b-eps{epsilon:g}"
    train = [sys.executable, "train.py", "-m", *base_tokens(), *grid_tokens(GRID),
             "select=private", f"select.distribution={args.distribution}",
             f"select.trials_mean={args.trials_mean}", *args.select_extra,
             *score_noise(epsilon, args),
             f"privacy.target_epsilon={epsilon}",
             f"run_dir={run_dir}"]  # fmt: skip
    wall = run(train, log=work / f"b-eps{epsilon:g}.train.log")
    log.append({"command": shlex.join(train), "wall_s": wall})
    if not (run_dir / "privacy.json").exists():
        return {"row": "b", "label": "private selection: nothing released (K = 0)",
                "private": True, "epsilon": None, "accuracies": None, "train_wall_s": wall}  # fmt: skip
    evaluate = evaluate_command([run_dir], args)
    eval_wall = run(evaluate, log=work / f"b-eps{epsilon:g}.eval.log")
    log.append({"command": shlex.join(evaluate), "wall_s": eval_wall})
    privacy = json.loads((run_dir / "privacy.json").read_text())
    section = privacy["selection"]
    winner = section["winner"]
    return {"row": "b", "label": "private selection, the winner", "private": True,
            "epsilon": privacy["epsilon"], "accuracies": accuracies(run_dir),
            "winner": section["grid"][winner["member"]], "noisy_score": winner["noisy_score"],
            "trial_epsilon": section.get("trial_epsilon"),
            "composed_epsilon_of_selection_section": section.get("composed_epsilon"),
            "law": section["law"], "score": section["score"],
            "train_wall_s": wall, "eval_wall_s": eval_wall}  # fmt: skip


def score_noise(epsilon: float, args: argparse.Namespace) -> list[str]:
    """``select.score_noise_multiplier`` where --score-noise sets it for this ε (else the default)."""
    known = dict(pair.split("=") for pair in args.score_noise)
    value = known.get(f"{epsilon:g}")
    return [] if value is None else [f"select.score_noise_multiplier={value}"]


def sweep_rows(
    epsilon: float, work: Path, args: argparse.Namespace, log: list[dict], *, name: str,
    member_epsilon: float,
) -> dict:  # fmt: skip
    sweep_dir = work / f"{name}-eps{epsilon:g}"
    train = [sys.executable, "train.py", "-m", *base_tokens(), *grid_tokens(GRID),
             f"privacy.target_epsilon={member_epsilon:.6g}", f"run_dir={sweep_dir}"]  # fmt: skip
    wall = run(train, log=work / f"{name}-eps{epsilon:g}.train.log")
    log.append({"command": shlex.join(train), "wall_s": wall})
    evaluate = evaluate_command([sweep_dir], args)
    eval_wall = run(evaluate, log=work / f"{name}-eps{epsilon:g}.eval.log")
    log.append({"command": shlex.join(evaluate), "wall_s": eval_wall})
    members = []
    for run_dir in member_dirs(sweep_dir):
        privacy = json.loads((run_dir / "privacy.json").read_text())
        members.append({"values": swept_values(run_dir), "epsilon": privacy["epsilon"],
                        "accuracies": accuracies(run_dir)})  # fmt: skip
    return {"member_epsilon_target": member_epsilon, "members": members,
            "composed_epsilon": composed_of(member_dirs(sweep_dir), delta=DEFAULT_DELTA),
            "train_wall_s": wall, "eval_wall_s": eval_wall}  # fmt: skip


def default_of(members: list[dict]) -> dict | None:
    """The member whose grid values are the default setting's (None when the grid lacks it)."""
    wanted = {key: float(value) for key, value in DEFAULT.items() if key in GRID}
    for member in members:
        if {key: float(member["values"][key]) for key in wanted} == wanted:
            return member
    return None


def row_a_from_d(block: dict) -> dict | None:
    """Row (a) read off sweep (d): its default member IS a default run at the total ε (same
    command, same ε), so it is not condensed twice."""
    member = default_of(block.get("sweep_d", {}).get("members", []))
    if member is None:
        return None
    return {"row": "a", "label": f"default settings {member['values']} (the default member of "
            "(d): the same run at the total ε)", "private": True, "epsilon": member["epsilon"],
            "accuracies": member["accuracies"]}  # fmt: skip


def best_by_test(members: list[dict]) -> dict:
    """The member with the highest mean test accuracy: a choice on private (test) records."""
    return max(members, key=lambda m: mean_std(m["accuracies"])[0])


def markdown(result: dict) -> str:
    """The table, one section per ε."""
    lines = [
        "# Private selection against the default, the composed sweep and the leaky choice "
        f"({result.get('dataset', 'digits')}, NDPDC, CPU)",
        "",
        "Generated by `benchmarks/privacy/selection_table.py` (issue 34, item 5). **Reduced protocol**: "
        + result["protocol"],
        "",
        f"Grid ({len(result['grid_members'])} members): "
        + ", ".join(f"`{k}` ∈ {{{v}}}" for k, v in result["grid"].items())
        + f". Selection law: {result['law']}. Machine: {result['machine']}.",
        "",
    ]
    for block in result["epsilons"]:
        lines += _epsilon_section(block)
    if result.get("notes"):
        lines += ["## What the grid taught", "", result["notes"], ""]
    lines += ["## Commands (OMP_NUM_THREADS=1, nice -n 10; WORK is the `--work` folder)", ""]
    lines += [f"    {c['command']}   # {c['wall_s']:.0f} s" for c in result["commands"]]
    return "\n".join(lines) + "\n"


def _epsilon_section(block: dict) -> list[str]:
    eps = block["total_epsilon"]
    out = [f"## total ε = {eps:g} (δ = 1e-5){' — PARTIAL' if block.get('partial') else ''}", "",
           "| row | what | private? | ε (released) | test accuracy % (mean ± std over eval runs; row c: over members) | wall s |",
           "|---|---|---|---|---|---|"]  # fmt: skip
    order = ["a", "b", "c", "c′", "d"]  # rows as the issue names them, whatever order they ran in
    for row in sorted(block["rows"], key=lambda r: order.index(r["row"])):
        eps_text = "—" if row.get("epsilon") is None else f"{row['epsilon']:.3f}"
        walls = [row[k] for k in ("train_wall_s", "eval_wall_s") if row.get(k) is not None]
        wall = f"{sum(walls):.0f}" if walls else f"— (in {'d' if row['row'] == 'a' else 'c'})"
        private = "yes" if row["private"] else "**NOT private**"
        label = row["label"]
        if row.get("winner") is not None:  # the released member, its noisy score, one trial's ε
            label += (
                f": {' '.join(row['winner'])} (noisy score {row['noisy_score']:.3f}; per-trial "
                f"ε {row['trial_epsilon']:.3f}, σ_s {row['score']['noise_multiplier']:.3g})"
            )
        out.append(
            f"| {row['row']} | {label} | {private} | {eps_text} | "
            f"{format_accuracy(row.get('accuracies'))} | {wall} |"
        )
    for name in ("c", "d"):
        sweep = block.get(f"sweep_{name}")
        if sweep:
            out += ["", f"Members of ({name}) (each at ε ≈ {sweep['member_epsilon_target']:.3f}; "
                    f"composed ε {sweep['composed_epsilon']:.3f}):", ""]  # fmt: skip
            out += [
                f"- {m['values']}: {format_accuracy(m['accuracies'])}" for m in sweep["members"]
            ]
    out.append("")
    return out


def write(result: dict, out: Path, *, work: str) -> None:
    """OUT.json and OUT.md, the commands without the measuring machine's paths."""
    public = json.loads(json.dumps(result))
    for command in public["commands"]:
        command["command"] = public_command(command["command"], work=work)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(public, indent=1, ensure_ascii=False) + "\n")
    out.with_suffix(".md").write_text(markdown(public))


def one_epsilon(epsilon: float, args: argparse.Namespace, result: dict) -> None:
    work = Path(args.work)
    earlier = [b for b in result["epsilons"] if b["total_epsilon"] == epsilon]
    block: dict[str, Any] = (  # continue a partial block (--resume-json with the missing --rows)
        earlier[0] if earlier else {"total_epsilon": epsilon, "rows": [], "partial": True}
    )
    if not earlier:
        result["epsilons"].append(block)
    block["partial"] = True
    log = result["commands"]
    for name in args.rows:
        if name == "a":
            block["rows"].append(row_a(epsilon, work, args, log))
        elif name == "a-from-d":
            row = row_a_from_d(block)
            if row is not None:
                block["rows"].append(row)
        elif name == "b":
            block["rows"].append(row_b(epsilon, work, args, log))
        elif name == "c":
            known = dict(pair.split("=") for pair in args.member_epsilons)
            per_member = (
                float(known[f"{epsilon:g}"])
                if f"{epsilon:g}" in known
                else per_member_epsilon(epsilon, delta=DEFAULT_DELTA)
            )
            sweep = sweep_rows(epsilon, work, args, log, name="c", member_epsilon=per_member)
            block["sweep_c"] = sweep
            means = [mean_std(m["accuracies"])[0] for m in sweep["members"]]
            best = best_by_test(sweep["members"])
            block["rows"].append({"row": "c", "label": "every member released and composed: "
                                  "mean over members (± std over members)", "private": True,
                                  "epsilon": sweep["composed_epsilon"], "accuracies": means,
                                  "train_wall_s": sweep["train_wall_s"],
                                  "eval_wall_s": sweep["eval_wall_s"]})  # fmt: skip
            block["rows"].append({"row": "c′", "label": f"best of (c) by TEST accuracy {best['values']}",
                                  "private": False, "epsilon": sweep["composed_epsilon"],
                                  "accuracies": best["accuracies"]})  # fmt: skip
        elif name == "d":
            sweep = sweep_rows(epsilon, work, args, log, name="d", member_epsilon=epsilon)
            block["sweep_d"] = sweep
            best = best_by_test(sweep["members"])
            block["rows"].append({"row": "d", "label": f"leaky: best by TEST accuracy "
                                  f"{best['values']}, grid at ε each, not composed",
                                  "private": False, "epsilon": best["epsilon"],
                                  "accuracies": best["accuracies"],
                                  "train_wall_s": sweep["train_wall_s"],
                                  "eval_wall_s": sweep["eval_wall_s"]})  # fmt: skip
        write(result, Path(args.out), work=args.work)
    block["partial"] = False
    write(result, Path(args.out), work=args.work)


def configure(args: argparse.Namespace) -> None:
    """--grid, --default and --extra replace the module's defaults (every row reads them)."""
    if args.grid:
        GRID.clear()
        GRID.update(pair.split("=", 1) for pair in args.grid)
    if args.default:
        DEFAULT.clear()
        DEFAULT.update((k, float(v)) for k, v in (pair.split("=", 1) for pair in args.default))
    EXTRA[:] = args.extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, help="folder for the runs (created)")
    parser.add_argument("--out", required=True, help="output path without suffix (.md, .json)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[4.0, 1.0])
    parser.add_argument("--rows", nargs="+", default=["a", "b", "c", "d"])
    parser.add_argument("--trials-mean", type=float, default=4.0)
    parser.add_argument("--distribution", default="geometric", help="select.distribution")
    parser.add_argument(
        "--grid", nargs="*", default=[], help="KEY=V1,V2 lists replacing the default grid"
    )
    parser.add_argument(
        "--default", nargs="*", default=[], help="KEY=VALUE: the default setting's grid values"
    )
    parser.add_argument("--extra", nargs="*", default=[], help="overrides for every train.py")
    parser.add_argument("--select-extra", nargs="*", default=[], help="select.* overrides of (b)")
    parser.add_argument("--dataset-label", default="digits", help="the title's data set name")
    parser.add_argument("--protocol", help="the table's protocol sentence (default: digits')")
    parser.add_argument("--eval-epochs", type=int, default=100)
    parser.add_argument("--eval-runs", type=int, default=2)
    parser.add_argument(
        "--member-epsilons", nargs="*", default=[],
        help="TOTAL=PER_MEMBER pairs already computed by per_member_epsilon (it takes minutes)",
    )  # fmt: skip
    parser.add_argument(
        "--score-noise", nargs="*", default=[],
        help="TOTAL=SIGMA pairs: the selection's score noise at that total ε (default: the config's)",
    )  # fmt: skip
    parser.add_argument("--render", action="store_true", help="rewrite OUT.md from OUT.json only")
    parser.add_argument("--resume-json", help="append to this earlier result (.json)")
    args = parser.parse_args()
    configure(args)
    if args.render:
        out = Path(args.out)
        write(json.loads(out.with_suffix(".json").read_text()), out, work=args.work)
        return
    Path(args.work).mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    protocol = (
        f"NDPDC on the embedded digits, evaluation `eval=quick eval.epochs={args.eval_epochs} "
        f"eval.runs={args.eval_runs}` (ConvNet, real test split), the selection's score at its "
        "config defaults (ConvNet, 50 epochs, 1 run, σ_s from the default share 0.1 of the "
        "target, validation fraction 0.1)"
    )
    protocol = args.protocol or protocol
    if args.resume_json:
        result = json.loads(Path(args.resume_json).read_text())
    else:
        result = {"protocol": protocol, "dataset": args.dataset_label,
                  "law": f"{args.distribution}, mean {args.trials_mean:g}",
                  "grid": dict(GRID), "grid_members": grid_members(GRID),
                  "machine": f"2-core CPU shared with other jobs, load average at start "
                  f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}; OMP_NUM_THREADS=1, nice 10",
                  "epsilons": [], "commands": []}  # fmt: skip
    for epsilon in args.epsilons:
        one_epsilon(epsilon, args, result)


if __name__ == "__main__":
    main()
