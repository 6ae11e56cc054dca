"""The white-box transcript audit: run a private method's mechanism many times with canaries, test
each canary's presence with the likelihood ratio of the Gaussian mechanism, and bound ε from below.

Nasr et al. 2021 ("Adversary instantiation"), Nasr et al. 2023 ("Tight auditing of differentially
private machine learning"), Steinke, Nasr & Jagielski 2023 ("Privacy auditing with one (1) training
run"). The guarantee covers the transcript of noisy releases y_t, so the auditor sees all of them,
knows the public randomness θ_t and every other record, and subtracts the others' clipped rows:
e_t = y_t − Σ_others clip(r). What is left is the canaries' clipped rows (each present with the
Poisson coin q of the step when the canary is in the data) plus N(0, s² I), s = z × sensitivity.

Canaries (m per partition per trial, each in with probability ½, independently):
- ``row`` (default): orthogonal directions of the mechanism's row space, so that the canaries of a
  run do not interfere and their scores are independent: rows λ·e_j (the white-box "gradient
  canary" of Nasr et al. 2021), λ = the largest row norm of the step's records or twice the
  sensitivity if larger, so that clipping must cut every canary down. They enter the method's own
  release (``method.release``) beside the sampled records' rows.
- ``image``: one real image per partition (a public test image, relabelled into the partition), its
  row computed by the method's own ``release_rows`` like every record's.

Per canary i with unit direction v_i and clipped row length a_i, x_t = <e_t, v_i>:
- ``llr`` = Σ_t log(1 − q + q exp((a x_t − a²/2) / s²)), the log-likelihood ratio "in" vs
  "out", the most powerful test of the correct mechanism (Neyman–Pearson);
- ``spread`` = Σ_t (x_t − x_{t−1})² / (2 s²), large when the canary's contribution comes and
  goes with its coins; with the noise of one step reused at the next it is exactly 0 for an
  absent canary.
The bounds are in :mod:`.bounds`, the model bound (noise and effect measured from the same x_t) in
:mod:`.noise_model`. The release draws the method's own keyed noise (:func:`.correct_release`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dpdc_lightning.audit.metrics.bounds import Samples, certify
from dpdc_lightning.audit.metrics.canary import Canaries, per_partition, sample_pool
from dpdc_lightning.audit.settings import WhiteboxConfig
from dpdc_lightning.audit.whitebox.noise_model import Model, NoiseTally, model_bound
from dpdc_lightning.audit.whitebox.transcripts import Release, StepView, Transcript, correct_release
from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.mechanisms.gaussian import clip_rows
from dpdc_lightning.seeding import derive_generator, derive_seed

STATISTICS = ("llr", "spread")


@dataclass
class _Scores:
    """The two statistics of every (release, trial, partition, canary), summed over the steps, and
    the tallies of the model bound (:mod:`.noise_model`)."""

    llr: Tensor
    spread: Tensor
    last: Tensor
    variance: float
    tally: NoiseTally
    last_sampled: Tensor | None = None

    @classmethod
    def zeros(cls, shape: tuple[int, ...], *, noise_std: float, steps: int) -> _Scores:
        tensors = (torch.zeros(shape, dtype=torch.float64) for _ in range(3))
        return cls(*tensors, noise_std**2, NoiseTally(shape[0], steps))

    def add_step(self, step: int, x: Tensor, *, sampled: Tensor, shift: Tensor, q: Tensor):
        """Step ``step``'s coordinates ``x`` [release, trial, partition, canary]; ``sampled``
        [trial, partition, canary]: in the step's Poisson sample; ``shift`` [partition, canary]:
        each canary's clipped row length; ``q`` [partition]: each partition's sample rate."""
        q = q[:, None]
        log_out = torch.log1p(-q)  # -inf at q = 1: the canary is always in the sample
        self.llr += torch.logaddexp(
            log_out, torch.log(q) + (shift * x - shift**2 / 2) / self.variance
        )
        if step:
            self.spread += (x - self.last) ** 2 / (2 * self.variance)
        shifts = shift.expand_as(sampled).flatten()
        for v in range(len(x)):
            previous = None if step == 0 else (self.last[v].flatten(), self.last_sampled)
            self.tally.add(
                v, step, x[v].flatten(), sampled=sampled.flatten(), shift=shifts, previous=previous
            )
        self.last, self.last_sampled = x, sampled.flatten()

    def samples(self, names: list[str], members: np.ndarray) -> dict[str, Samples]:
        trials = members.shape[0]
        return {
            name: Samples(
                {
                    "llr": self.llr[v].reshape(trials, -1).numpy(),
                    "spread": self.spread[v].reshape(trials, -1).numpy(),
                },
                members,
            )
            for v, name in enumerate(names)
        }


@dataclass(frozen=True)
class _Trials:
    """What every step of :func:`run_trials` shares: the canaries, their coins, the secrets."""

    canaries: Canaries
    coins: Tensor  # [trial, partition, canary]: in the trial's data
    secrets: list[int]
    releases: dict[str, Release]


def run_trials(
    transcript: Transcript,
    settings: WhiteboxConfig,
    *,
    releases: dict[str, Release],
    progress: Callable[[str], None] = lambda message: None,
) -> tuple[dict[str, Samples], NoiseTally]:
    """``settings.trials`` runs of every release in ``releases`` on the same canaries and coins."""
    parts, trials = transcript.partitions, settings.trials
    first = transcript.at(0)
    m = per_partition(settings, len(parts), first.pool_rows[parts[0]].shape[1])
    generator = derive_generator(settings.seed, "whitebox", "coins")
    run = _Trials(
        Canaries(transcript, kind=settings.canary, per_partition=m),
        torch.rand(trials, len(parts), m, generator=generator) < 0.5,
        [derive_seed(settings.seed, "whitebox", "secret", k) for k in range(trials)],
        releases,
    )
    scores = _Scores.zeros(
        (len(releases), trials, len(parts), m),
        noise_std=transcript.mechanism.noise_std,
        steps=transcript.steps,
    )
    rates = torch.tensor([transcript.rate(part) for part in parts], dtype=torch.float64)
    for step in range(transcript.steps):
        if step % max(1, transcript.steps // 10) == 0:
            progress(f"white-box: step {step + 1}/{transcript.steps}")
        view = first if step == 0 else transcript.at(step)
        x, sampled, shift = _step(transcript, view, run, step=step)
        scores.add_step(step, x, sampled=sampled, shift=shift, q=rates)
    samples = scores.samples(list(releases), run.coins.reshape(trials, -1).numpy())
    return samples, scores.tally


def _step(
    transcript: Transcript, view: StepView, run: _Trials, *, step: int
) -> tuple[Tensor, Tensor, Tensor]:
    """One step of every trial and release: (coordinates [release, trial, partition, canary],
    sampled [trial, partition, canary], clipped canary lengths [partition, canary])."""
    mech, (trials, parts, m) = transcript.mechanism, run.coins.shape
    x = torch.zeros(len(run.releases), trials, parts, m, dtype=torch.float64)
    sampled = torch.zeros(trials, parts, m, dtype=torch.bool)
    shifts = torch.zeros(parts, m, dtype=torch.float64)
    for p, part in enumerate(transcript.partitions):
        others = view.pool_rows[part]
        known = clip_rows(others.double(), max_norm=mech.sensitivity)  # what the auditor knows
        rows, directions = run.canaries.at(view, part)
        shifts[p] = clip_rows(rows.double(), max_norm=mech.sensitivity).norm(dim=1)
        for k in range(trials):
            inside = torch.nonzero(run.coins[k, p]).squeeze(1)
            picks = sample_pool(
                len(others) + len(inside), sample_rate=transcript.rate(part),
                secret=run.secrets[k], step=step, partition=part,
            )  # fmt: skip
            mine = picks[picks < len(others)]
            theirs = inside[picks[picks >= len(others)] - len(others)]
            sampled[k, p, theirs] = True
            batch = torch.cat([others[mine], rows[theirs]])
            for v, release in enumerate(run.releases.values()):
                y = release(
                    transcript, batch, canaries=len(theirs), step=step, partition=part,
                    secret=run.secrets[k],
                )  # fmt: skip
                x[v, k, p] = (y - known[mine].sum(0)) @ directions.T
    return x, sampled, shifts


def describe(
    transcript: Transcript,
    settings: WhiteboxConfig,
    samples: Samples,
    *,
    seconds: float,
    release: str = "correct",
    tally: dict[str, np.ndarray] | None = None,
    largest_shift: float = 0.0,
) -> dict[str, Any]:
    """Bounds and everything needed to read them. Four findings are compared with the claim (the
    two rigorous bounds, the model bound, the model's checks): each at 1 − (1 − confidence) / 4,
    so that a correct release raises none with probability at least ``confidence``."""
    plan, mech = transcript.plan, transcript.mechanism
    delta = settings.delta if settings.delta is not None else plan.delta
    per_bound = 1 - (1 - settings.confidence) / 4
    bounds = certify(
        samples,
        calibration=settings.calibration,
        delta=delta,
        confidence=per_bound,
        gdp_confidence=settings.confidence,
    )
    if tally is not None:
        stated = Model(plan.sample_rate, mech.noise_std, largest_shift, delta)
        bounds["model"] = model_bound(tally, stated, confidence=per_bound)
    claimed = float(plan.planned_epsilon)
    return {
        "method": transcript.name,
        "release": release,
        "delta": delta,
        "accounted_epsilon": transcript.accounted,
        "claimed_epsilon": claimed,
        "noise_multiplier": plan.noise_multiplier,
        "sample_rate": plan.sample_rate,
        "steps": plan.data_steps,
        "sensitivity": mech.sensitivity,
        "noise_std": mech.noise_std,
        "trials": samples.members.shape[0],
        "canaries_per_trial": samples.members.shape[1],
        "canary": settings.canary,
        "others_per_class": settings.others,
        "pool": {str(p): len(transcript.pools[p][0]) for p in transcript.partitions},
        **bounds,
        "violations": _violations(bounds, claimed),
        "wall_seconds": seconds,
        "confidence_per_bound": per_bound,
        "seed": settings.seed,
    }


def _violations(bounds: dict[str, Any], claimed: float) -> list[str]:
    """Every finding against the claim: a lower bound above it, a rejected model check."""
    violations = [
        f"{name}: empirical lower bound {bounds[name]['epsilon']:.4f} > "
        f"accounted epsilon {epsilon_text(claimed)}"
        for name in ("clopper_pearson", "one_run", "model")
        if name in bounds and bounds[name]["epsilon"] > claimed
    ]
    checks = bounds["model"]["checks"] if "model" in bounds else {"rejected": []}
    return violations + [
        f"model check {name}: z = {checks['z'][name]:.1f} beyond ±{checks['limit']:.2f}; the "
        "release is not the Gaussian mechanism it states (noise reused, not Gaussian, or a "
        "contribution that depends on other records)"
        for name in checks["rejected"]
    ]


def whitebox_audit(
    transcript: Transcript,
    settings: WhiteboxConfig,
    *,
    progress: Callable[[str], None] = lambda message: None,
    releases: dict[str, Release] | None = None,
) -> list[dict[str, Any]]:
    """Run the trials (the correct mechanism unless ``releases`` is given); report each release."""
    started = time.monotonic()
    releases = releases or {"correct": correct_release}
    all_samples, tally = run_trials(transcript, settings, releases=releases, progress=progress)
    seconds = time.monotonic() - started
    return [
        describe(
            transcript,
            settings,
            samples,
            seconds=seconds,
            release=name,
            tally=tally.of(v),
            largest_shift=tally.largest_shift,
        )  # fmt: skip
        for v, (name, samples) in enumerate(all_samples.items())
    ]


def summary_line(report: dict[str, Any]) -> str:
    cp, gdp, one = report["clopper_pearson"], report["gaussian_dp"], report["one_run"]
    eps, model = report["accounted_epsilon"], report.get("model")
    measured = _model_part(model) if model else ""
    values = (report["claimed_epsilon"], eps["rdp"], eps["prv"])
    claimed, rdp, prv = (epsilon_text(x, decimals=3) for x in values)  # rounded up: upper bounds
    gdp_part = f"{_f(gdp['epsilon'])} [{_f(gdp['interval'][0])}, {_f(gdp['interval'][1])}]"
    return (
        f"{report['method']:7s} {report['release']:15s} accounted ε {claimed} "
        f"(rdp {rdp}, prv {prv}){measured} | white-box lower bound "
        f"{cp['epsilon']:.3f} (Clopper-Pearson, {cp['statistic']}) | GDP estimate {gdp_part} "
        f"| one run {one['epsilon']:.3f} ({one['correct']}/{one['guesses']}) | "
        f"{report['trials']} trials x {report['canaries_per_trial']} canaries"
    )


def _model_part(model: dict[str, Any]) -> str:
    rejected = model["checks"]["rejected"]
    return (
        f" | model bound {_f(model['epsilon'])} (noise std {model['noise_std_measured']:.4g} of "
        f"{model['noise_std_stated']:.4g}, effect x{model['effect_measured']:.3f}"
        f"{', model REJECTED: ' + ', '.join(rejected) if rejected else ''})"
    )


def _f(x: float) -> str:
    return "inf" if not np.isfinite(x) else f"{x:.3f}"
