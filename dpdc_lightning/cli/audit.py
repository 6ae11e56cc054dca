"""``python audit.py MODE ...``: the modes and which question each answers (``--help``), the
classifier-based ``mia`` audit, and ``metrics``. The ``whitebox``, ``release`` and ``selftest``
modes live in :mod:`.modes`. Nothing here imports torch before a mode runs: ``--help`` is instant.

The ``mia`` audit writes ``audit.json``, ``audit_roc.png`` and ``audit_neighbours.png`` next to the
bundle; an earlier audit is never overwritten (the next is ``audit-2.json``, ``audit_roc-2.png``,
...). Every mode ends with exit code 1 and a loud message when a rigorous empirical lower bound
exceeds an accounted ε.
"""

from __future__ import annotations

import difflib
import json
import math
from pathlib import Path

import numpy as np

from dpdc_lightning.audit.files import finite, refresh_report, run_config
from dpdc_lightning.errors import UserError, finished_before_interrupt, refuse_missing_paths
from dpdc_lightning.privacy.receipts.run_files import (
    AUDIT_MIA,
    AUDIT_NEIGHBOURS,
    AUDIT_ROC,
    numbered,
)

METRICS_USAGE = (
    "usage: python -m dpdc_lightning.audit metrics --scores S.npy --members M.npy "
    "[--delta D] [--confidence C]"
)
USAGE = "usage: python audit.py MODE ... (python audit.py --help lists the modes)"
MODES = ("whitebox", "release", "mia", "selftest", "check", "metrics")
# Printed as written: the page's table is wider than 100 columns (the noqa covers the string).
HELP = """usage: python audit.py MODE [ARGUMENTS] [audit.key=value ...]   (also dpdc-audit, python -m dpdc_lightning.audit)

Which mode answers which question (docs/audit.md explains how to read the numbers):
  whitebox RUN_DIR | CONFIG   Is the implementation as private as its accounted epsilon? Runs the method's own
                              mechanism many times with canaries (known secret, full transcript) and gives
                              epsilon lower bounds: Clopper-Pearson over runs, one run (Steinke et al.), and a
                              Gaussian-DP estimate. CONFIG = overrides as for train.py (method=ndpdc ...).
  release RUN_DIR             What do the published images reveal? Nearest-release attacks in pixel and feature
                              space: strength on the bundle, one-run epsilon bound on target condensations.
  mia RUN_DIR                 What does a classifier trained on the release reveal? Shadows, loss threshold,
                              LiRA, canaries, visual privacy (python audit.py RUN_DIR is the same).
  selftest [METHOD ...]       Does the white-box audit catch planted privacy bugs (noise x0.1, no clipping,
                              reused noise, a doubled record) and pass the correct mechanisms?
  check method=NAME [KEY=VALUE ...]
                              Is a private method (a plug-in too) private as implemented? Neighbouring runs
                              (every output against the ledger), the white-box audit and the self-test.
                              With select=private and a grid: neighbouring private selections instead.
  metrics --scores S.npy --members M.npy [--delta D] [--confidence C]
                              AUC, TPR at low FPR, advantage and epsilon bound of your own attack's scores.

examples:
  python audit.py whitebox method=ndpdc privacy.target_epsilon=4
  python audit.py whitebox runs/<run> audit.trials=96
  python audit.py release runs/<run>
  python audit.py runs/<run> audit.shadows=16 audit.epochs=100
  python audit.py selftest
  python audit.py check method=ndpdc
  python audit.py check method=ndpdc select=private method.lr_img=0.5,2

settings (audit.key=value):
  whitebox/selftest/check: trials, canaries, canary (row|image), others, calibration, confidence, delta, seed, out
  release: targets, extractors, guesses, confidence, delta, seed
  mia: dpdc_lightning/conf/audit/default.yaml
Exit code 1 when a rigorous lower bound exceeds the accounted epsilon (or the self-test fails), 2 on bad input.
"""  # noqa: E501


def audit_main(argv: list[str]) -> int:
    """The audit command (``audit.py``, ``python -m dpdc_lightning.audit``, ``dpdc-audit``).
    ``--help`` and ``metrics`` import neither torch nor Lightning, so they answer at once."""
    if "--help" in argv or "-h" in argv:
        from dpdc_lightning.config.help import as_invoked

        print(as_invoked(HELP, "audit.py", "dpdc-audit"), end="")
        return 0
    if not argv:
        raise UserError(f"give a mode; {USAGE}")
    mode, rest = argv[0], argv[1:]
    if mode == "metrics":
        return metrics_main(rest)
    flags = [a for a in argv if a.startswith("-")]
    if flags:
        raise UserError(f"unknown flag {flags[0]}; {USAGE}")
    if mode in ("whitebox", "release", "selftest", "check"):
        from dpdc_lightning.cli import audit_modes as modes

        return getattr(modes, f"{mode}_main")(rest)
    if mode == "mia":
        argv = rest
    elif "=" not in mode and not Path(mode).exists():
        close = difflib.get_close_matches(mode, MODES, n=1)
        if close:
            raise UserError(
                f"unknown mode {mode!r}; did you mean {close[0]}? (modes: {', '.join(MODES)})"
            )
    positional = [a for a in argv if "=" not in a]
    # Before torch loads; an unquoted space in the folder's name gets a hint.
    refuse_missing_paths(positional[:1], what="run directory", argv=argv)
    if len(positional) != 1:
        raise UserError(f"give exactly one run directory (or a mode: {', '.join(MODES)}); {USAGE}")
    return audit_run(Path(positional[0]), [a for a in argv if "=" in a])


def audit_run(run_dir: Path, tokens: list[str]) -> int:
    from dpdc_lightning.audit.settings import load_settings
    from dpdc_lightning.engine.bundle import load_bundle
    from dpdc_lightning.engine.planning import load_data
    from dpdc_lightning.engine.resolved import resolve_run

    settings = load_settings(tokens)
    bundle = load_bundle(run_dir)
    config = run_config(run_dir)
    from dpdc_lightning.engine.threads import use_threads

    use_threads(config.threads)
    run = resolve_run(config)  # the parts the audit takes; the config goes no further
    data = load_data(run.dataset)
    if tuple(bundle.images.shape[1:]) != tuple(data.train_images.shape[1:]):
        raise UserError(
            f"the bundle's images {tuple(bundle.images.shape[1:])} do not match dataset "
            f"{config.dataset.name} {tuple(data.train_images.shape[1:])}"
        )
    if settings.canaries > len(data.test_labels):
        raise UserError(
            f"audit.canaries={settings.canaries} exceeds the {len(data.test_labels)} test images "
            "the canaries are made from"
        )
    names = _fresh_names(run_dir)
    from dpdc_lightning.audit.blackbox.runner import run_audit

    output = run_audit(bundle, run, config.eval, data, settings)
    output.report["files"] = {key: path.name for key, path in names.items()}
    _write_outputs(names, output)
    _print_summary(output.report, names["json"])
    if output.violations:
        print(
            "\n"
            + "!" * 78
            + "\nAUDIT FAILED: an empirical lower bound exceeds the accounted epsilon. "
            "This means a\nbug in the mechanism or its accounting "
            "(a correct one shows this with probability at most 1 - confidence):",
            flush=True,
        )
        for line in output.violations:
            print(f"  {line}")
        print("!" * 78)
        return 1
    return 0


def _fresh_names(run_dir: Path) -> dict[str, Path]:
    for k in range(1, 1000):
        names = {
            "json": run_dir / numbered(AUDIT_MIA, k),
            "roc": run_dir / numbered(AUDIT_ROC, k, ".png"),
            "neighbours": run_dir / numbered(AUDIT_NEIGHBOURS, k, ".png"),
        }
        if not any(p.exists() for p in names.values()):
            return names
    raise UserError(f"{run_dir} already holds 999 audits; move some away")


def _write_outputs(names: dict[str, Path], output) -> None:
    # a Ctrl-C while they are written ends the command after them, sealed (errors.py)
    with finished_before_interrupt(f"the audit was written to {names['json']}"):
        _write_files(names, output)


def _write_files(names: dict[str, Path], output) -> None:
    from dpdc_lightning.engine.bundle import atomic_write

    written = []
    try:
        for key, payload in (("roc", output.roc_png), ("neighbours", output.neighbours_png)):
            atomic_write(names[key], lambda tmp, data=payload: tmp.write_bytes(data), replace=False)
            written.append(names[key])
        text = (
            json.dumps(finite(output.report), indent=2, allow_nan=False, default=_json_default)
            + "\n"
        )
        atomic_write(
            names["json"], lambda tmp: tmp.write_text(text), replace=False
        )  # last: marks a complete audit
    except FileExistsError as err:
        for path in written:
            path.unlink(missing_ok=True)
        raise UserError(
            f"{err.filename or 'an audit file'} appeared while auditing; nothing written, rerun"
        ) from None
    refresh_report(names["json"].parent, list(names.values()))  # report.html shows the audit


def _json_default(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in audit.json")


def _accounted(value: float | None) -> str:
    """An accounted ε as every output shows it: rounded up (privacy/display.py)."""
    from dpdc_lightning.privacy.display import epsilon_text

    return "null" if value is None else epsilon_text(value)


def _print_summary(report: dict, path: Path) -> None:
    def fmt(x) -> str:
        return (
            "null"
            if x is None
            else (f"{x:.4f}" if isinstance(x, float) and math.isfinite(x) else str(x))
        )

    print(
        f"audit ({report['protocol']['reduced']}; "
        f"confidence {report['confidence_per_bound']:.4f} per bound)"
    )
    for name, entry in [(f"target{t}", e) for t, e in enumerate(report["targets"])]:
        for attack, m in entry["attacks"].items():
            print(
                f"  {name:8s} {attack:15s} auc={fmt(m['auc'])} "
                f"tpr@0.1%={fmt(m['tpr_at_fpr']['0.001'])} advantage={fmt(m['advantage'])} "
                f"eps_lb={fmt(m['epsilon_lower_bound']['epsilon'])} "
                f"(accounted {_accounted(entry['accounted_epsilon'])})"
            )
    for attack, m in report["bundle"]["attacks"].items():
        print(
            f"  bundle   {attack:15s} auc={fmt(m['auc'])} tpr@0.1%={fmt(m['tpr_at_fpr']['0.001'])} "
            f"advantage={fmt(m['advantage'])} "
            "(attack strength: training vs test records, no epsilon bound)"
        )
    if "canary" in report:
        c = report["canary"]
        print(
            f"  canaries {c['correct']}/{c['guesses']} correct, "
            f"eps_lb={fmt(c['epsilon_lower_bound'])} "
            f"(accounted {_accounted(c['accounted_epsilon'])})"
        )
    print(f"results written to {path}\nwarning: {report['warning']}")


def metrics_main(argv: list[str]) -> int:
    from dpdc_lightning.audit.metrics import roc as metrics

    options = {"--scores": None, "--members": None, "--delta": "1e-5", "--confidence": "0.95"}
    args = iter(argv)
    for arg in args:
        key, sep, value = arg.partition("=")
        if key not in options:
            raise UserError(f"unknown argument {arg}; {METRICS_USAGE}")
        options[key] = value if sep else next(args, None)
        if options[key] is None:
            raise UserError(f"{key} needs a value; {METRICS_USAGE}")
    if options["--scores"] is None or options["--members"] is None:
        raise UserError(f"--scores and --members are required; {METRICS_USAGE}")
    delta, confidence = (
        _number("--delta", options["--delta"]),
        _number("--confidence", options["--confidence"]),
    )
    scores, members = (
        _load_npy("--scores", options["--scores"]),
        _load_npy("--members", options["--members"]),
    )
    try:
        summary = metrics.summarise(scores, members, delta=delta, confidence=confidence)
    except ValueError as err:
        raise UserError(str(err)) from None
    print(f"auc={summary.auc:.6f}")
    for fpr, tpr in summary.tpr_at_fpr.items():
        print(f"tpr_at_fpr_{fpr}={tpr:.6f}")
    print(f"advantage={summary.advantage:.6f}")
    print(f"epsilon_lower_bound={summary.bound.epsilon:.6f}")
    return 0


def _number(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UserError(f"{key} must be a number, got {text!r}") from None


def _load_npy(key: str, path: str) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise UserError(
            f"{key} {path} cannot be read as a .npy array: {str(err).splitlines()[0]}"
        ) from None
    if array.dtype.kind not in "biuf":
        raise UserError(f"{key} {path} must hold numbers, got dtype {array.dtype}")
    return array
