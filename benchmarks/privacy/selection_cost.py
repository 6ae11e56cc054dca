"""The cost of a private selection against composing every member (docs/privacy.md's two tables).

    python benchmarks/privacy/selection_cost.py

Table 1: ε (δ = 1e-5) of one trial (a Poisson-subsampled Gaussian run, q = 0.01, 1000 steps, σ = 1,
plus a score of noise multiplier 20), of releasing and composing as many trials as the mean, and of
a selection under each law of the number of trials. Table 2: the noise multiplier a run needs for a
total ε of 2 or 4: one run alone, each of 8 runs released and composed, and each trial of a
selection of mean 8 (its per-trial ε / noise multiplier), every trial calibrated with
privacy/accounting/calibration.py and the selection with calibrate_selection. Table 3: the score's share
(privacy/selection/score_share.py): for an NDPDC digits member (q 0.0394 = 5/127, 300 steps) the per-trial ε
a selection of mean 4 leaves at total ε 4 and 1 with the score at each share, against a free score
(the numbers behind the default share, docs/privacy.md). ~3 min on one core.
"""

from __future__ import annotations

from dpdc_lightning.privacy.accounting.calibration import calibrate_noise_multiplier
from dpdc_lightning.privacy.selection.budget import TrialLaw, calibrate_selection, selection_costs
from dpdc_lightning.privacy.selection.score_share import score_noise_for_share

Q, STEPS, DELTA, SCORE = 0.01, 1000, 1e-5, 20.0
LAWS = {
    "geometric": lambda mean: TrialLaw("geometric", mean),
    "TNB η = 0.5": lambda mean: TrialLaw("truncated_negative_binomial", mean, eta=0.5),
    "logarithmic": lambda mean: TrialLaw("logarithmic", mean),
    "Poisson": lambda mean: TrialLaw("poisson", mean),
}


def cost_table() -> str:
    head = "| mean | one trial | mean-many trials composed | " + " | ".join(LAWS) + " |"
    rows = [head, "|" + "---|" * (3 + len(LAWS))]
    for mean in (1, 4, 8, 16):
        cells = []
        for make in LAWS.values():
            costs = selection_costs(
                law=make(mean),
                member_events=[[(1.0, Q, STEPS)]] * mean,
                score_noise_multiplier=SCORE,
                delta=DELTA,
            )
            cells.append(f"{costs['epsilon']:.4f}")
        first = f"| {mean} | {costs['trial_epsilon']:.4f} | {costs['composed_epsilon']:.4f} | "
        rows.append(first + " | ".join(cells) + " |")
    return "\n".join(rows)


def _sigma(target: float, steps: int) -> float:
    return calibrate_noise_multiplier(
        target_epsilon=target, delta=DELTA, sample_rate=Q, steps=steps
    )


def calibration_table() -> str:
    head = "| total ε | one run: σ | each of 8 composed: σ | " + " | ".join(LAWS) + " |"
    rows = [head, "|" + "---|" * (3 + len(LAWS))]
    for total in (2.0, 4.0):
        cells = [f"{_sigma(total, STEPS):.3f}", f"{_sigma(total, 8 * STEPS):.3f}"]
        for make in LAWS.values():
            per_trial = calibrate_selection(
                members_at=lambda t: [[(_sigma(t, STEPS), Q, STEPS)]],
                law=make(8),
                target_epsilon=total,
                delta=DELTA,
                score_noise_multiplier=SCORE,
            )
            cells.append(f"{per_trial:.3f} / {_sigma(per_trial, STEPS):.3f}")
        rows.append(f"| {total:g} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


DIGITS_Q, DIGITS_STEPS, SHARES = 5 / 127, 300, (0.05, 0.1, 0.2)


def _digits_member(t: float) -> list:
    sigma = calibrate_noise_multiplier(
        target_epsilon=t, delta=DELTA, sample_rate=DIGITS_Q, steps=DIGITS_STEPS
    )
    return [[(sigma, DIGITS_Q, DIGITS_STEPS)]]


def share_table() -> str:
    head = "| total ε, law | " + " | ".join(f"share {s:g}: per-trial ε (σ_s)" for s in SHARES)
    rows = [head + " | free score |", "|" + "---|" * (2 + len(SHARES))]
    for total in (4.0, 1.0):
        for name in ("geometric", "logarithmic"):
            law = TrialLaw(name, 4.0)
            cells = []
            for share in (*SHARES, None):
                sigma = (
                    None
                    if share is None
                    else score_noise_for_share(share=share, target_epsilon=total, delta=DELTA)
                )
                per_trial = calibrate_selection(
                    members_at=_digits_member, law=law, target_epsilon=total, delta=DELTA,
                    score_noise_multiplier=sigma, tolerance=1e-2,
                )  # fmt: skip
                cells.append(f"{per_trial:.3f}" + ("" if sigma is None else f" ({sigma:.3g})"))
            rows.append(f"| {total:g}, {name} mean 4 | " + " | ".join(cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(cost_table())
    print()
    print(calibration_table())
    print()
    print(share_table())
