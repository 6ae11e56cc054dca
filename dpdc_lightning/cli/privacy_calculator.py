"""Privacy calculator and receipt: ``python -m dpdc_lightning.privacy VERB ...`` (``dpdc-privacy``).

Each calculator verb prints a short explanation, then its answer alone on the LAST line:

    epsilon    --sample-rate Q --noise-multiplier S --steps T --delta D [--accountant rdp|prv]
               [--select-law L --select-mean M [--select-eta H] [--select-score-noise S]]:
               with --select-*, the run is one trial of a private selection (docs/privacy.md)
    calibrate  --target-epsilon E --sample-rate Q --steps T --delta D [--accountant ...]
    max-steps  --target-epsilon E --sample-rate Q --noise-multiplier S --delta D [--accountant ...]
    verify, sign      a finished run folder: ``dpdc-privacy verify|sign`` (cli/privacy.py; they
               read config.yaml with the method's code, above this layer)

The sample rate may be a fraction such as ``50/6000`` (expected batch / class size). ε is
printed rounded UP to 4 decimals, so the printed bound is never below the computed one; the
noise multiplier is printed in full so that feeding it back gives the same ε. ε is never printed
below 0 (at a large δ the conversion can go negative; a note says so). Bad arguments
print one line ``error: ...`` on stderr and exit with code 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from fractions import Fraction
from typing import NoReturn

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.display import epsilon_text

_ACCOUNTANT_NAMES = {
    "rdp": "RDP (Opacus' default orders, Balle et al. 2020 conversion)",
    "prv": "PRV (Opacus, Gopi et al. 2021 numerical composition)",
}


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error on two lines; the project's contract is one line."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def _number(text: str) -> float:
    """A float, or a fraction ``a/b`` (exactly divided before conversion)."""
    try:
        return float(Fraction(text.strip()))
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(
            f"expected a number or a fraction like 50/6000, got {text!r}"
        ) from None


def _shown(epsilon: float) -> str:
    """ε rounded up at 4 decimals (privacy/display.py); ``inf`` as Python writes it, for scripts."""
    return epsilon_text(epsilon) if math.isfinite(epsilon) else str(epsilon)


def _build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="python -m dpdc_lightning.privacy",
        description="Privacy calculator for the Poisson-subsampled Gaussian mechanism, and the "
        "verification of a finished run's privacy claim.",
    )
    verbs = parser.add_subparsers(
        dest="verb", metavar="{epsilon,calibrate,max-steps,verify,sign}", required=True
    )

    def add(
        name: str, help_text: str, *, target: bool, noise: bool, steps: bool
    ) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, help=help_text, description=help_text)
        if target:
            sub.add_argument(
                "--target-epsilon", type=_number, required=True, help="target epsilon (> 0)"
            )
        sub.add_argument(
            "--sample-rate",
            type=_number,
            required=True,
            help="Poisson sample rate q in (0, 1], e.g. 50/6000",
        )
        if noise:
            sub.add_argument(
                "--noise-multiplier",
                type=_number,
                required=True,
                help="noise std / L2 sensitivity (> 0)",
            )
        if steps:
            sub.add_argument(
                "--steps", type=int, required=True, help="number of mechanism runs (>= 1)"
            )
        sub.add_argument("--delta", type=_number, required=True, help="delta in (0, 1)")
        sub.add_argument(
            "--accountant", choices=sorted(_ACCOUNTANT_NAMES), default="rdp", help="default: rdp"
        )
        return sub

    _add_selection(
        add("epsilon", "epsilon spent by a number of steps", target=False, noise=True, steps=True)
    )
    add(
        "calibrate",
        "noise multiplier that reaches a target epsilon",
        target=True,
        noise=False,
        steps=True,
    )
    add(
        "max-steps",
        "largest number of steps within a target epsilon",
        target=True,
        noise=True,
        steps=False,
    )
    _add_verify(verbs)
    return parser


def _add_verify(verbs: argparse._SubParsersAction) -> None:
    for verb in ("verify", "sign"):
        what = f"{verb} a finished run folder: dpdc-privacy {verb} (dpdc_lightning/cli/privacy.py)"
        verbs.add_parser(verb, help=what, description=what, add_help=False).add_argument(
            "rest", nargs=argparse.REMAINDER
        )


def _moved(verb: str) -> UserError:
    """verify and sign re-derive the plan with the method's code (above this layer): cli/."""
    return UserError(
        f"{verb} reads the run's config.yaml with the method's own code: run dpdc-privacy {verb} "
        f"RUN (or python -m dpdc_lightning.cli.privacy {verb} RUN)"
    )


def _run(args: argparse.Namespace) -> None:
    accountant = f"accountant: {_ACCOUNTANT_NAMES[args.accountant]}; delta {args.delta:g}"
    verbs = {"epsilon": _epsilon, "calibrate": _calibrate}
    verbs.get(args.verb, _max_steps)(args, accountant)


def _add_selection(sub: argparse.ArgumentParser) -> None:
    from dpdc_lightning.privacy.selection.trial_law import TRIAL_LAWS

    group = sub.add_argument_group(
        "private selection (Papernot & Steinke 2022): K ~ law trials of this run, the best released"
    )
    group.add_argument("--select-law", choices=TRIAL_LAWS, help="the law of K")
    group.add_argument("--select-mean", type=_number, help="E[K] >= 1")
    group.add_argument("--select-eta", type=_number, help="the truncated negative binomial's η")
    group.add_argument(
        "--select-score-noise",
        type=_number,
        help="noise multiplier of each trial's score (a count of sensitivity 1); "
        "omit for a public validation set",
    )


def _selection(args: argparse.Namespace, accountant: str) -> None:
    from dpdc_lightning.privacy.selection.budget import TrialLaw, selection_costs

    if args.select_mean is None or args.accountant != "rdp":
        raise UserError("--select-law needs --select-mean and the rdp accountant")
    law = TrialLaw(args.select_law, args.select_mean, eta=args.select_eta)
    trial = [(args.noise_multiplier, args.sample_rate, args.steps)]
    count = max(1, round(law.mean))
    costs = selection_costs(
        law=law,
        member_events=[trial] * count,
        score_noise_multiplier=args.select_score_noise,
        delta=args.delta,
    )
    eta = "" if law.eta is None else f", eta {law.eta:g}"
    print(f"private selection: K ~ {law.distribution} (mean {law.mean:g}{eta}) trials, each:")
    print(
        f"  Poisson-subsampled Gaussian: noise multiplier {args.noise_multiplier:g}, sample rate "
        f"{args.sample_rate:.6g}, {args.steps} steps, score noise {args.select_score_noise}"
    )
    print(accountant)
    print(f"one trial alone: epsilon {_shown(costs['trial_epsilon'])}")
    print(f"{count} trials released and composed: epsilon {_shown(costs['composed_epsilon'])}")
    print("epsilon of the selection (upper bound, rounded up to 4 decimals):")
    print(_shown(costs["epsilon"]))


# Opacus (and torch) load only once the arguments parsed: argument errors answer at once.
def _epsilon(args: argparse.Namespace, accountant: str) -> None:
    from dpdc_lightning.privacy.accounting.analysis import epsilon_from_history
    from dpdc_lightning.privacy.receipts.report import CLAMP_NOTE, nonnegative_epsilon

    selection = (args.select_mean, args.select_eta, args.select_score_noise)
    if args.select_law is not None:
        return _selection(args, accountant)
    if any(value is not None for value in selection):
        raise UserError("--select-mean, --select-eta and --select-score-noise need --select-law")

    epsilon = epsilon_from_history(
        [(args.noise_multiplier, args.sample_rate, args.steps)],
        delta=args.delta,
        accountant=args.accountant,
    )
    print(
        f"Poisson-subsampled Gaussian mechanism: noise multiplier {args.noise_multiplier:g}, "
        f"sample rate {args.sample_rate:.6g}, {args.steps} steps"
    )
    print(accountant)
    epsilon, clamped = nonnegative_epsilon(epsilon)
    if clamped:
        print(f"note: {CLAMP_NOTE}")
    print("epsilon (upper bound, rounded up to 4 decimals):")
    print(_shown(epsilon))


def _calibrate(args: argparse.Namespace, accountant: str) -> None:
    from dpdc_lightning.privacy.accounting.analysis import epsilon_from_history
    from dpdc_lightning.privacy.accounting.calibration import calibrate_noise_multiplier
    from dpdc_lightning.privacy.receipts.report import CLAMP_NOTE, nonnegative_epsilon

    sigma = calibrate_noise_multiplier(
        target_epsilon=args.target_epsilon,
        delta=args.delta,
        sample_rate=args.sample_rate,
        steps=args.steps,
        accountant=args.accountant,
    )
    achieved, clamped = nonnegative_epsilon(
        epsilon_from_history(
            [(sigma, args.sample_rate, args.steps)], delta=args.delta, accountant=args.accountant
        )
    )
    print(
        f"target epsilon {args.target_epsilon:g}: sample rate {args.sample_rate:.6g}, "
        f"{args.steps} steps"
    )
    print(accountant)
    if clamped:
        print(f"note: {CLAMP_NOTE}")
    print(f"this noise multiplier gives epsilon {_shown(achieved)}")
    print("noise multiplier (noise std / L2 sensitivity):")
    print(repr(sigma))


def _max_steps(args: argparse.Namespace, accountant: str) -> None:
    from dpdc_lightning.privacy.accounting.calibration import max_steps

    steps = max_steps(
        target_epsilon=args.target_epsilon,
        delta=args.delta,
        sample_rate=args.sample_rate,
        noise_multiplier=args.noise_multiplier,
        accountant=args.accountant,
    )
    print(
        f"target epsilon {args.target_epsilon:g}: noise multiplier {args.noise_multiplier:g}, "
        f"sample rate {args.sample_rate:.6g}"
    )
    print(accountant)
    print("largest number of steps within the target:")
    print(steps)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the calculator; returns the exit code (argument syntax errors exit 2 from argparse)."""
    args = _build_parser().parse_args(argv)
    try:
        if args.verb in ("verify", "sign"):
            raise _moved(args.verb)
        _run(args)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
