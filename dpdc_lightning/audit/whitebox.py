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
The bounds are in :mod:`.bounds`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dpdc_lightning.audit.bounds import Samples, certify
from dpdc_lightning.audit.settings import WhiteboxConfig
from dpdc_lightning.audit.transcripts import Release, StepView, Transcript, correct_release
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.analysis import epsilon_from_history
from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.mechanisms import clip_rows
from dpdc_lightning.privacy.sampling import poisson_sample
from dpdc_lightning.seeding import derive_generator, derive_seed

STATISTICS = ("llr", "spread")


class Canaries:
    """The canary rows of every partition at a step, and the unit direction each is tested along."""

    def __init__(self, transcript: Transcript, *, kind: str, per_partition: int) -> None:
        self.transcript, self.kind, self.m = transcript, kind, per_partition
        data = transcript.data
        if kind == "image":
            test = (
                data.test_images
                if len(data.test_images)
                else torch.ones(1, *data.train_images.shape[1:])
            )
            test_labels = (
                data.test_labels if len(data.test_labels) else torch.zeros(1, dtype=torch.long)
            )
            self.images = {}
            for i, p in enumerate(transcript.partitions):
                label = (int(test_labels[i % len(test)]) + 1) % data.num_classes if p < 0 else p
                self.images[p] = (test[i % len(test)][None], torch.tensor([label]))
        else:
            self.images = None

    def at(self, view: StepView, partition: int) -> tuple[Tensor, Tensor]:
        """(rows [m, D], unit directions [m, D]) of the partition's canaries at this step."""
        if self.images is not None:
            rows = view.rows_of(partition, *self.images[partition])
            return rows, rows.double() / rows.double().norm(dim=1, keepdim=True).clamp_min(1e-300)
        pool = view.pool_rows[partition]
        d = pool.shape[1]
        if self.m > d:
            raise UserError(f"audit.canaries: {self.m} per partition exceed a row's {d} dimensions")
        directions = torch.zeros(self.m, d, dtype=torch.float64)
        directions[torch.arange(self.m), torch.arange(self.m) * (d // self.m)] = 1.0
        # Twice the sensitivity at least: clipping must cut a canary down even where no record
        # exceeds the sensitivity (LDPDC's clamped images), or a missing clip would go unseen.
        sensitivity = self.transcript.mechanism.sensitivity
        size = max(float(pool.double().norm(dim=1).max()), 2 * sensitivity)
        return (size * directions).float(), directions


def sample_pool(size: int, *, sample_rate: float, secret: int, step: int, partition: int) -> Tensor:
    """The Poisson sample of a pool of ``size`` records, drawn as the data module draws a run's
    sample (its generator keyed by the run's secret, the step and the partition)."""
    return poisson_sample(
        size, sample_rate=sample_rate, generator=derive_generator(secret, "sample", step, partition)
    )


ROW_BUDGET = 2**25  # float64 values of canary rows one mechanism call may hold (256 MB)


def per_partition(settings: WhiteboxConfig, partitions: int, dim: int) -> int:
    """Canaries per partition: ``audit.canaries`` spread over the partitions, at most one per
    dimension (orthogonal) and at most what fits one call's memory budget (long PSG gradients)."""
    if settings.canary == "image":
        return 1
    wanted, low = settings.canaries, max(partitions, settings.canaries // partitions * partitions)
    # A number asked for is never rounded silently (the default fits what the data has).
    if wanted != low and wanted != WhiteboxConfig.canaries:
        raise UserError(
            f"audit.canaries={wanted} does not split evenly over the {partitions} partitions "
            f"(classes); use a multiple of {partitions}, e.g. {low} or {low + partitions}"
        )
    return max(1, min(wanted // partitions, dim, ROW_BUDGET // dim))


@dataclass
class _Scores:
    """The two statistics of every (release, trial, partition, canary), summed over the steps."""

    llr: Tensor
    spread: Tensor
    last: Tensor
    variance: float

    @classmethod
    def zeros(cls, shape: tuple[int, ...], *, noise_std: float) -> _Scores:
        return cls(*(torch.zeros(shape, dtype=torch.float64) for _ in range(3)), noise_std**2)

    def add(self, at: tuple[int, int, int], x: Tensor, *, shift: Tensor, q: float, step: int):
        """Step ``step``'s coordinates ``x`` of the canaries of (release, trial, partition)."""
        log_out = math.log1p(-q) if q < 1 else -math.inf
        self.llr[at] += torch.logaddexp(
            torch.tensor(log_out, dtype=torch.float64),
            math.log(q) + (shift * x - shift**2 / 2) / self.variance,
        )
        if step:
            self.spread[at] += (x - self.last[at]) ** 2 / (2 * self.variance)
        self.last[at] = x

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


def run_trials(
    transcript: Transcript,
    settings: WhiteboxConfig,
    *,
    releases: dict[str, Release],
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, Samples]:
    """``settings.trials`` runs of every release in ``releases`` on the same canaries and coins."""
    parts, trials, mech = transcript.partitions, settings.trials, transcript.mechanism
    first = transcript.at(0)
    m = per_partition(settings, len(parts), first.pool_rows[parts[0]].shape[1])
    canaries = Canaries(transcript, kind=settings.canary, per_partition=m)
    generator = derive_generator(settings.seed, "whitebox", "coins")
    coins = torch.rand(trials, len(parts), m, generator=generator) < 0.5
    secrets = [derive_seed(settings.seed, "whitebox", "secret", k) for k in range(trials)]
    scores = _Scores.zeros((len(releases), trials, len(parts), m), noise_std=mech.noise_std)
    for step in range(transcript.steps):
        if step % max(1, transcript.steps // 10) == 0:
            progress(f"white-box: step {step + 1}/{transcript.steps}")
        view = first if step == 0 else transcript.at(step)
        for p, part in enumerate(parts):
            others = view.pool_rows[part]
            known = clip_rows(others.double(), max_norm=mech.sensitivity)  # what the auditor knows
            rows, directions = canaries.at(view, part)
            shift = clip_rows(rows.double(), max_norm=mech.sensitivity).norm(dim=1)
            q = transcript.rate(part)
            for k in range(trials):
                inside = torch.nonzero(coins[k, p]).squeeze(1)
                picks = sample_pool(
                    len(others) + len(inside), sample_rate=q, secret=secrets[k], step=step,
                    partition=part,
                )  # fmt: skip
                mine = picks[picks < len(others)]
                theirs = inside[picks[picks >= len(others)] - len(others)]
                sampled = torch.cat([others[mine], rows[theirs]])
                for v, release in enumerate(releases.values()):
                    y = release(
                        transcript, sampled, canaries=len(theirs), step=step, partition=part,
                        secret=secrets[k],
                    )  # fmt: skip
                    x = (y - known[mine].sum(0)) @ directions.T
                    scores.add((v, k, p), x, shift=shift, q=q, step=step)
    return scores.samples(list(releases), coins.reshape(trials, -1).numpy())


def accounted(transcript: Transcript) -> dict[str, float]:
    """The ε of the plan's accountant, and the other accountant's ε for the same events."""
    plan = transcript.plan
    prior = [
        (event.noise_multiplier, event.sample_rate, runs) for _, event, runs in plan.prior_events()
    ]
    history = prior + [(plan.noise_multiplier, plan.sample_rate, plan.data_steps)]
    out = {plan.accountant: float(plan.planned_epsilon)}
    for other in ("rdp", "prv"):
        if other not in out:
            out[other] = epsilon_from_history(history, delta=plan.delta, accountant=other)
    return out


def describe(
    transcript: Transcript,
    settings: WhiteboxConfig,
    samples: Samples,
    *,
    seconds: float,
    release: str = "correct",
) -> dict[str, Any]:
    """Bounds and everything needed to read them."""
    plan, mech = transcript.plan, transcript.mechanism
    delta = settings.delta if settings.delta is not None else plan.delta
    per_bound = 1 - (1 - settings.confidence) / 2  # two rigorous bounds are compared with the claim
    bounds = certify(
        samples,
        calibration=settings.calibration,
        delta=delta,
        confidence=per_bound,
        gdp_confidence=settings.confidence,
    )
    claimed = float(plan.planned_epsilon)
    violations = [
        f"{name}: empirical lower bound {bounds[name]['epsilon']:.4f} > "
        f"accounted epsilon {epsilon_text(claimed)}"
        for name in ("clopper_pearson", "one_run")
        if bounds[name]["epsilon"] > claimed
    ]
    return {
        "method": transcript.name,
        "release": release,
        "delta": delta,
        "accounted_epsilon": accounted(transcript),
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
        "violations": violations,
        "wall_seconds": seconds,
        "confidence_per_bound": per_bound,
        "seed": settings.seed,
    }


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
    all_samples = run_trials(transcript, settings, releases=releases, progress=progress)
    seconds = time.monotonic() - started
    return [
        describe(transcript, settings, samples, seconds=seconds, release=name)
        for name, samples in all_samples.items()
    ]


def summary_line(report: dict[str, Any]) -> str:
    cp, gdp, one = report["clopper_pearson"], report["gaussian_dp"], report["one_run"]
    claimed, eps = report["claimed_epsilon"], report["accounted_epsilon"]
    shown = [epsilon_text(x, decimals=3) for x in (claimed, eps["rdp"], eps["prv"])]
    return (
        f"{report['method']:7s} {report['release']:15s} accounted ε {shown[0]} "
        f"(rdp {shown[1]}, prv {shown[2]}) | white-box lower bound {cp['epsilon']:.3f} "
        f"(Clopper-Pearson, {cp['statistic']}) | GDP estimate {_f(gdp['epsilon'])} "
        f"[{_f(gdp['interval'][0])}, {_f(gdp['interval'][1])}] | one run {one['epsilon']:.3f} "
        f"({one['correct']}/{one['guesses']}) | {report['trials']} trials x "
        f"{report['canaries_per_trial']} canaries"
    )


def _f(x: float) -> str:
    return "inf" if not np.isfinite(x) else f"{x:.3f}"
