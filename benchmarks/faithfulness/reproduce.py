"""Reproduce every method of the package next to the published numbers, in one command.

    python benchmarks/faithfulness/reproduce.py --scale digits                  # embedded digits, every method (2-core CPU)
    python benchmarks/faithfulness/reproduce.py --scale cpu --rows dm,ldpdc,ndpdc  # CPU-reduced FashionMNIST
    python benchmarks/faithfulness/reproduce.py --scale paper --accelerator gpu  # the papers' protocols (GPU)
    python benchmarks/faithfulness/reproduce.py --scale cpu --dry-run           # the plan: rows, steps, ε, estimated work
    python benchmarks/faithfulness/reproduce.py --scale cpu --dataset fashion_mnist --redraw  # figure from the table

Methods: DM, LDPDC, NDPDC, DC/DSA, PSG, PSG with the generator prior, Dosser, and the DP-MERF plug-in
(examples/dp_merf; ``make`` installs it). Each row condenses
through the package API (``config.compose`` + ``training.train``) into ``<work-dir>/runs``, then
trains fresh ConvNets on the bundle with ``evaluation.train_and_test``. Finished rows are cached in
``<work-dir>/results.json`` and skipped by the next invocation, so a run can be stopped and resumed
(an unfinished condensation continues from its checkpoint). On another machine (a fresh work dir)
the written table's ``.json`` brings back its finished rows and an unfinished row's finished runs,
by fingerprint; ``--bundle-store DIR`` keeps each finished condensation's released files in DIR
(a folder that outlives the machine) and takes them back there, so a long evaluation goes on over
several machines on the very bundle its first runs measured. Where only git outlives a machine, a
paper row whose evaluation is unfinished commits its bundle (the release itself, ε-accounted) to
``benchmarks/results/faithfulness/bundles`` and the next machine passes that folder as DIR
(benchmarks/results/speed/paper_protocol_cpu.md, "Rows across machines").
Writes
``benchmarks/results/faithfulness/reproduce_<dataset>_<scale>.md`` and the accuracy-vs-ε figure (``.png``) next
to it; every scale but ``paper`` carries a REDUCED PROTOCOL banner.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
# dpdc_repro, imported by its folder (a PyPI package named "benchmarks" exists)
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))

from dpdc_repro.plan import SCALES, Row  # noqa: E402  (plain data: no torch import yet)

# The names --rows takes for all rows of a method: derived from the smallest scale's row keys.
METHODS = tuple(dict.fromkeys(r.key.split("_eps")[0] for r in SCALES["tiny"].rows))
DATASETS = ("digits", "fashion_mnist", "mnist", "cifar10")


def fail(message: str) -> NoReturn:
    """Bad input: one ``error:`` line and exit code 2 (argparse would add its usage lines)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def select(spec: str, rows: tuple[Row, ...]) -> list[Row]:
    """Rows named by a comma list of row keys, method names (all rows of the method) or ``all``."""
    chosen: list[Row] = []
    for token in (t.strip() for t in spec.split(",")):
        matched = [r for r in rows if token == "all" or token in (r.key, r.key.split("_eps")[0])]
        if not matched:
            raise ValueError(
                f"--rows: unknown row {token!r}; choose from all, {', '.join(METHODS)}, "
                f"{', '.join(r.key for r in rows)}"
            )
        chosen += [r for r in matched if r not in chosen]
    return chosen


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.error = fail  # type: ignore[method-assign]
    parser.add_argument("--scale", choices=tuple(SCALES), default="digits")
    parser.add_argument(
        "--dataset", choices=DATASETS, default=None, help="default: the scale's dataset"
    )
    parser.add_argument(
        "--rows",
        default="all",
        help=f"comma list of methods ({', '.join(METHODS)}), row keys or all",
    )
    parser.add_argument(
        "--keys",
        default=None,
        help="comma list of exact row keys, run in this order (instead of --rows)",
    )
    parser.add_argument(
        "--work-dir", default="/tmp/dpdc_reproduce", help="runs and the results cache"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="markdown output (default results/faithfulness/reproduce_<dataset>_<scale>.md)",
    )
    parser.add_argument("--accelerator", default="auto", choices=("auto", "cpu", "gpu"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--eval-epochs", type=positive, default=None, help="override the scale's evaluation epochs"
    )
    parser.add_argument(
        "--eval-runs", type=positive, default=None, help="override the scale's evaluation runs"
    )
    parser.add_argument(
        "--eval-workers",
        type=positive,
        default=1,
        help="CPU processes training a row's evaluation runs side by side (eval.workers)",
    )
    parser.add_argument(
        "--test-size",
        type=positive,
        default=None,
        help="test on the first N records of the real test split (default: the scale's choice)",
    )
    parser.add_argument(
        "--bundle-store",
        type=Path,
        default=None,
        help="keep each finished condensation's released files here and take them back on a "
        "machine whose work dir lacks them (its evaluation goes on there)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan and estimated work; run nothing"
    )
    parser.add_argument(
        "--table-only",
        action="store_true",
        help="write the table (--out) from the results cache, unfinished rows' runs included; run "
        "nothing",
    )
    parser.add_argument(
        "--redraw",
        action="store_true",
        help="draw the figure again from the numbers of the written table (--out); run nothing",
    )
    args = parser.parse_args(argv)
    try:
        args.selected = select(args.rows, SCALES[args.scale].rows)
    except ValueError as err:
        parser.error(str(err))
    if args.keys is not None:
        by_key = {r.key: r for r in SCALES[args.scale].rows}
        keys = [k.strip() for k in args.keys.split(",") if k.strip()]
        if unknown := [k for k in keys if k not in by_key]:
            parser.error(
                f"--keys: unknown row(s) {', '.join(unknown)}; choose from {', '.join(by_key)}"
            )
        args.selected = [by_key[k] for k in keys]
    if args.out is not None and Path(args.out).suffix != ".md":
        parser.error(f"--out must name a .md file, got {args.out!r}")
    return args


def default_out(dataset: str, scale: str) -> Path:
    return ROOT / "benchmarks" / "results" / "faithfulness" / f"reproduce_{dataset}_{scale}.md"


def redraw(args: argparse.Namespace) -> int:
    """The figure of a written table drawn again from the table's own numbers (the mean ± std
    cells and run counts), e.g. after the plotting code changed; nothing is run."""
    from dpdc_repro.report import draw, points_from_markdown

    scale = SCALES[args.scale]
    out = Path(args.out or default_out(args.dataset or scale.dataset, scale.name))
    if not out.is_file():
        fail(f"{out} does not exist: run its rows first (without --redraw)")
    try:
        png = draw(points_from_markdown(out.read_text(), list(scale.rows)))
    except ValueError as err:
        fail(f"{out}: {err}")
    if png is None:
        fail(f"{out} has no finished row to draw")
    out.with_suffix(".png").write_bytes(png)
    print(f"drew {out.with_suffix('.png')} from {out.name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.redraw:
        return redraw(args)
    from dpdc_repro.common import ResultCache, partial_key
    from dpdc_repro.report import write_outputs
    from dpdc_repro.run import dry_run_text, fingerprint, run_row

    from dpdc_lightning.data import load_dataset
    from dpdc_lightning.engine.trainer import quiet_libraries
    from dpdc_lightning.errors import UserError
    from dpdc_lightning.evaluation import EvalProtocol

    quiet_libraries()
    scale = SCALES[args.scale]
    dataset = args.dataset or scale.dataset
    protocol = EvalProtocol(
        epochs=args.eval_epochs or scale.eval_epochs, runs=args.eval_runs or scale.eval_runs
    )
    test_size = args.test_size or scale.test_size
    work_dir = Path(args.work_dir)
    try:
        data = load_dataset(dataset)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    cache = ResultCache(work_dir)
    prints = {
        r.key: fingerprint(
            r, dataset=dataset, seed=args.seed, protocol=protocol, test_size=test_size
        )
        for r in scale.rows
    }
    key = f"{dataset}/{scale.name}/seed{args.seed}/{{}}".format
    out = Path(args.out or default_out(dataset, scale.name))
    # the written table's rows and runs: a work dir on a fresh machine starts without them
    for taken in cache.adopt(
        out.with_suffix(".json"), {r.key: (key(r.key), prints[r.key]) for r in scale.rows}
    ):
        print(f"[{taken}] taken from {out.with_suffix('.json').name} (same fingerprint)")
    # every finished row of the scale goes in the table, so a --rows subset adds to it
    results = {
        r.key: found
        for r in scale.rows
        if (found := cache.get(key(r.key), prints[r.key])) is not None
    }
    if args.dry_run:
        print(
            dry_run_text(
                args.selected,
                scale=scale,
                dataset=dataset,
                data=data,
                protocol=protocol,
                seed=args.seed,
                cached=set(results),
            )
        )
        return 0

    def unfinished() -> dict[str, dict]:
        """Unfinished rows' cache entries (finished runs), under this invocation's fingerprints."""
        found = {r.key: cache.rows.get(partial_key(key(r.key))) for r in scale.rows}
        return {
            k: f for k, f in found.items() if f is not None and f.get("fingerprint") == prints[k]
        }

    def progress() -> dict[str, dict]:
        """What the table shows and records of the unfinished rows: ``progress`` (run -> accuracy)
        and ``resume`` (what a fresh machine needs to go on with them)."""
        entries = unfinished()
        return dict(
            progress={k: {int(i): a for i, a in f["runs"].items()} for k, f in entries.items()},
            resume={
                k: {"fingerprint": f["fingerprint"], "bundle": f["bundle"], "eval_s": f["eval_s"]}
                for k, f in entries.items()
            },
        )

    # the command that makes the whole table (a --rows subset adds its rows to the same table)
    options = [
        ("--seed", args.seed if args.seed else None),
        ("--eval-epochs", args.eval_epochs),
        ("--eval-runs", args.eval_runs),
        ("--test-size", args.test_size),
    ]
    command = " ".join(
        [
            f"python benchmarks/faithfulness/reproduce.py --scale {scale.name} --dataset {dataset}",
            *(f"{flag} {value}" for flag, value in options if value is not None),
        ]
    )
    context = dict(
        scale=scale,
        dataset=dataset,
        protocol=protocol,
        seed=args.seed,
        accelerator=args.accelerator,
        command=command,
        test_size=test_size,
    )
    if args.table_only:
        print(write_outputs(out, list(scale.rows), results, **progress(), **context))
        return 0

    def save_run(row_key: str, *measured) -> None:
        cache.put_run(key(row_key), prints[row_key], *measured)
        write_outputs(out, list(scale.rows), results, **progress(), **context)

    for row in args.selected:
        if row.key in results:
            print(f"[{row.key}] cached, skipped", flush=True)
            continue
        print(f"[{row.key}] running ({scale.name} scale on {dataset}) ...", flush=True)
        try:
            result = run_row(
                row,
                scale=scale,
                dataset=dataset,
                data=data,
                protocol=protocol,
                work_dir=work_dir,
                seed=args.seed,
                accelerator=args.accelerator,
                test_size=test_size,
                partial=functools.partial(cache.resume_point, key(row.key), prints[row.key]),
                workers=args.eval_workers,
                store=args.bundle_store,
                save_run=functools.partial(save_run, row.key),
            )
        except (
            UserError
        ) as err:  # a row the package refuses (e.g. a budget too small): say so, go on
            print(f"[{row.key}] error: {err}", file=sys.stderr, flush=True)
            continue
        cache.put(key(row.key), result, prints[row.key])
        results[row.key] = result
        print(
            f"[{row.key}] {100 * sum(result['accuracies']) / len(result['accuracies']):.2f} %, "
            f"condense {result['condense_s']:.0f} s, evaluate {result['eval_s']:.0f} s",
            flush=True,
        )
        write_outputs(out, list(scale.rows), results, **progress(), **context)
    print(write_outputs(out, list(scale.rows), results, **progress(), **context))
    print(f"written to {out} (+ {out.with_suffix('.png').name}); cache {cache.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
