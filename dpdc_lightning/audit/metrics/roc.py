"""Attack metrics: ROC, AUC, TPR at a fixed FPR, advantage, and the empirical ε lower bound.

The ROC curve and its AUC are scikit-learn's (``roc_curve``, ``roc_auc_score``); what it lacks is
here: the TPR at a fixed FPR (read at the curve's points, no interpolation), the advantage and the
threshold that maximises it, the counts at a threshold and the bounds.

Scores: higher = "more likely a member". A threshold ``t`` predicts "member" iff ``score >= t``.

Empirical ε lower bound (Kairouz, Oh & Viswanath 2015, "The composition theorem for differential
privacy", Thm. 2.1; eq. 6 of Odoh, "Connect the dots"): any test between "x in" and "x out" of an
(ε, δ)-DP mechanism has FPR + e^ε FNR >= 1 − δ and FNR + e^ε FPR >= 1 − δ, so

    ε >= max( ln((1 − δ − FPR) / FNR), ln((1 − δ − FNR) / FPR) ).

Plugging in point estimates would overstate ε; a lower bound must use UPPER confidence bounds on
FPR and FNR (one-sided Clopper–Pearson, each at confidence 1 − (1 − c)/2 so that both hold together
with probability >= c), and the threshold must be chosen on data disjoint from the data that
certifies it (:func:`epsilon_lower_bound`), or every candidate threshold pays a Bonferroni share
(:func:`epsilon_lower_bound_bonferroni`).

Caveat: Clopper–Pearson treats the examples as independent trials. That holds across independently
trained targets; records scored against ONE target model share it, which is the common practice of
Dong et al. and Carlini et al. but not a theorem. The one-run bound of Steinke, Nasr & Jagielski
(:mod:`dpdc_lightning.audit.metrics.canary`) is the rigorous one within a single run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import beta

FPR_POINTS = (0.001, 0.01)


def _as_arrays(scores: Sequence[float], members: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=np.float64).ravel()
    members = np.asarray(members).ravel()
    if scores.shape != members.shape:
        raise ValueError(f"{scores.size} scores but {members.size} membership labels")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite")
    if not np.isin(members, (0, 1)).all():
        raise ValueError("membership labels must be 0 or 1")
    members = members.astype(bool)
    if members.all() or not members.any():
        raise ValueError("need at least one member and one non-member")
    return scores, members


def roc_curve(
    scores: Sequence[float], members: Sequence[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds), thresholds decreasing; the first point is (0, 0) at threshold +inf.
    Ties share one point, so the curve does not depend on the order of tied examples. scikit-learn's
    curve with every point kept (``drop_intermediate`` would drop points on a straight segment, and
    :func:`tpr_at_fpr` reads the curve at the points themselves)."""
    from sklearn.metrics import roc_curve as sklearn_roc_curve

    scores, members = _as_arrays(scores, members)
    fpr, tpr, thresholds = sklearn_roc_curve(members, scores, drop_intermediate=False)
    return fpr, tpr, thresholds


def auc(scores: Sequence[float], members: Sequence[int]) -> float:
    """Area under the ROC curve (scikit-learn's trapezoids: ties count one half, as the
    Mann–Whitney statistic)."""
    from sklearn.metrics import roc_auc_score

    scores, members = _as_arrays(scores, members)
    return float(roc_auc_score(members, scores))


def tpr_at(fpr: np.ndarray, tpr: np.ndarray, fpr_limit: float) -> float:
    """The largest TPR among the curve's points whose FPR is <= ``fpr_limit`` (no interpolation: a
    rate one threshold achieves; Carlini et al. 2022 read their curves the same way). scikit-learn
    has no such function: ours, on its curve. The 1e-12 keeps a point whose FPR is the limit itself
    (k / n computed in floating point)."""
    return float(tpr[fpr <= fpr_limit + 1e-12].max())


def tpr_at_fpr(scores: Sequence[float], members: Sequence[int], fpr_limit: float) -> float:
    """Largest TPR over thresholds whose FPR is <= ``fpr_limit``: :func:`tpr_at` on the curve."""
    fpr, tpr, _ = roc_curve(scores, members)
    return tpr_at(fpr, tpr, fpr_limit)


def advantage(scores: Sequence[float], members: Sequence[int]) -> float:
    """max over thresholds of TPR − FPR (the membership advantage, Yeom et al.), on these examples
    (Youden's J; scikit-learn has none)."""
    fpr, tpr, _ = roc_curve(scores, members)
    return float(np.max(tpr - fpr))


def best_threshold(scores: Sequence[float], members: Sequence[int]) -> float:
    """The threshold that maximises TPR − FPR on these examples."""
    fpr, tpr, thresholds = roc_curve(scores, members)
    return float(thresholds[int(np.argmax(tpr - fpr))])


def rates_at(
    scores: Sequence[float], members: Sequence[int], threshold: float
) -> tuple[int, int, int, int]:
    """(false positives, non-members, false negatives, members) guessing ``score >= threshold``."""
    scores, members = _as_arrays(scores, members)
    predicted = scores >= threshold
    return (
        int((predicted & ~members).sum()),
        int((~members).sum()),
        int((~predicted & members).sum()),
        int(members.sum()),
    )


def clopper_pearson_upper(k: int, n: int, *, confidence: float) -> float:
    """One-sided upper bound on a binomial rate, ``k`` of ``n``: P(rate <= bound) >= confidence."""
    _check_counts(k, n)
    return float(clopper_pearson_upper_many(np.asarray(k), np.asarray(n), confidence=confidence))


def clopper_pearson_lower(k: int, n: int, *, confidence: float) -> float:
    """One-sided lower bound on a binomial rate from ``k`` of ``n``."""
    _check_counts(k, n)
    return float(clopper_pearson_lower_many(np.asarray(k), np.asarray(n), confidence=confidence))


def clopper_pearson_upper_many(k: np.ndarray, n: np.ndarray, *, confidence: float) -> np.ndarray:
    """:func:`clopper_pearson_upper` elementwise over arrays of counts (no checks of the counts)."""
    _check_confidence(confidence)
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    return np.where(k >= n, 1.0, beta.ppf(confidence, k + 1, np.maximum(n - k, 1)))


def clopper_pearson_lower_many(k: np.ndarray, n: np.ndarray, *, confidence: float) -> np.ndarray:
    """:func:`clopper_pearson_lower` elementwise over arrays of counts (no checks of the counts)."""
    _check_confidence(confidence)
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    return np.where(k <= 0, 0.0, beta.ppf(1 - confidence, np.maximum(k, 1), n - k + 1))


def epsilon_from_rates(fpr: float, fnr: float, *, delta: float) -> float:
    """max(ln((1−δ−FPR)/FNR), ln((1−δ−FNR)/FPR)), floored at 0 (rates of 0 give +inf)."""
    return float(epsilon_from_rates_many(np.asarray(fpr), np.asarray(fnr), delta=delta))


def epsilon_from_rates_many(fpr: np.ndarray, fnr: np.ndarray, *, delta: float) -> np.ndarray:
    """:func:`epsilon_from_rates` elementwise over arrays of rates."""
    fpr, fnr = np.asarray(fpr, dtype=np.float64), np.asarray(fnr, dtype=np.float64)
    best = np.zeros(np.broadcast(fpr, fnr).shape)
    with np.errstate(divide="ignore"):
        for num, den in ((1 - delta - fpr, fnr), (1 - delta - fnr, fpr)):
            value = np.where(
                den <= 0, np.inf, np.log(np.maximum(num, 1e-300) / np.where(den <= 0, 1.0, den))
            )
            best = np.maximum(best, np.where(num <= 0, 0.0, value))
    return best


def certified_epsilon(
    fp: int, negatives: int, fn: int, positives: int, *, delta: float, confidence: float
) -> float:
    """ε lower bound at one FIXED threshold: upper Clopper–Pearson bounds on FPR and FNR, each at
    1 − (1 − confidence)/2 (union bound), plugged into :func:`epsilon_from_rates`."""
    return float(
        certified_epsilon_many(
            np.asarray(fp),
            np.asarray(negatives),
            np.asarray(fn),
            np.asarray(positives),
            delta=delta,
            confidence=confidence,
        )
    )


def certified_epsilon_many(
    fp: np.ndarray,
    negatives: np.ndarray,
    fn: np.ndarray,
    positives: np.ndarray,
    *,
    delta: float,
    confidence: float,
) -> np.ndarray:
    """:func:`certified_epsilon` elementwise (e.g. at every candidate threshold at once)."""
    per_rate = 1 - (1 - confidence) / 2
    return epsilon_from_rates_many(
        clopper_pearson_upper_many(fp, negatives, confidence=per_rate),
        clopper_pearson_upper_many(fn, positives, confidence=per_rate),
        delta=delta,
    )


@dataclass(frozen=True)
class EpsilonBound:
    epsilon: float  # the certified lower bound (0 when nothing is certified)
    threshold: float  # chosen on the calibration half
    fp: int
    negatives: int
    fn: int
    positives: int
    delta: float
    confidence: float
    method: str

    def as_dict(self) -> dict:
        return asdict(self)


def _point_epsilon_threshold(scores: np.ndarray, members: np.ndarray, *, delta: float) -> float:
    """The threshold of the largest ε point estimate, with one pseudo-count per rate so that an
    empty cell cannot win by dividing by zero (a choice on calibration data only)."""
    fpr, tpr, thresholds = roc_curve(scores, members)
    n_neg, n_pos = (~members).sum(), members.sum()
    fp, fn = fpr * n_neg, (1 - tpr) * n_pos
    smoothed_fpr, smoothed_fnr = (fp + 1) / (n_neg + 2), (fn + 1) / (n_pos + 2)
    eps = [epsilon_from_rates(a, b, delta=delta) for a, b in zip(smoothed_fpr, smoothed_fnr)]
    return float(thresholds[int(np.argmax(eps))])


def split_halves(members: np.ndarray, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A random calibration/certification split, stratified by membership (seeded: reproducible)."""
    rng = np.random.default_rng(seed)
    calibrate = np.zeros(len(members), dtype=bool)
    for value in (False, True):
        index = np.nonzero(members == value)[0]
        calibrate[rng.permutation(index)[: len(index) // 2]] = True
    return calibrate, ~calibrate


def epsilon_lower_bound(
    scores: Sequence[float],
    members: Sequence[int],
    *,
    delta: float,
    confidence: float = 0.95,
    seed: int = 0,
) -> EpsilonBound:
    """Choose the threshold on one half (largest ε estimate), certify it on the other half."""
    scores, members = _as_arrays(scores, members)
    _check_delta(delta)
    calibrate, certify = split_halves(members, seed=seed)
    if (
        members[calibrate].all()
        or not members[calibrate].any()
        or members[certify].all()
        or not members[certify].any()
    ):
        raise ValueError("need at least two members and two non-members to split into halves")
    threshold = _point_epsilon_threshold(scores[calibrate], members[calibrate], delta=delta)
    fp, neg, fn, pos = rates_at(scores[certify], members[certify], threshold)
    eps = certified_epsilon(fp, neg, fn, pos, delta=delta, confidence=confidence)
    return EpsilonBound(eps, threshold, fp, neg, fn, pos, delta, confidence, "split-half")


def epsilon_lower_bound_bonferroni(
    scores: Sequence[float],
    members: Sequence[int],
    *,
    delta: float,
    confidence: float = 0.95,
    thresholds: Sequence[float] | None = None,
) -> EpsilonBound:
    """Certify every candidate threshold on ALL examples at confidence 1 − (1 − c)/k and keep the
    best: the union bound makes the maximum hold with probability >= c. Pass ``thresholds`` fixed
    in advance for a clean guarantee; the default (score quantiles 1/20 … 19/20) looks at the scores
    but not at the membership labels."""
    scores, members = _as_arrays(scores, members)
    _check_delta(delta)
    candidates = (
        np.quantile(scores, np.arange(1, 20) / 20) if thresholds is None else np.asarray(thresholds)
    )
    per = 1 - (1 - confidence) / len(candidates)
    best: EpsilonBound | None = None
    for t in candidates:
        fp, neg, fn, pos = rates_at(scores, members, float(t))
        eps = certified_epsilon(fp, neg, fn, pos, delta=delta, confidence=per)
        if best is None or eps > best.epsilon:
            best = EpsilonBound(
                eps,
                float(t),
                fp,
                neg,
                fn,
                pos,
                delta,
                confidence,
                f"bonferroni over {len(candidates)}",
            )
    assert best is not None
    return best


def attack_strength(scores: Sequence[float], members: Sequence[int]) -> dict:
    """AUC, TPR at the FPR points and advantage: how strong an attack is, with NO ε bound. The only
    summary for attacks whose members and non-members are DIFFERENT records (training vs test
    records): the two sets can be told apart by themselves, even by a mechanism of true ε 0."""
    return {
        "auc": auc(scores, members),
        "tpr_at_fpr": {str(f): tpr_at_fpr(scores, members, f) for f in FPR_POINTS},
        "advantage": advantage(scores, members),
    }


@dataclass(frozen=True)
class AttackMetrics:
    auc: float
    tpr_at_fpr: dict[str, float]
    advantage: float
    bound: EpsilonBound

    def as_dict(self) -> dict:
        return {
            "auc": self.auc,
            "tpr_at_fpr": self.tpr_at_fpr,
            "advantage": self.advantage,
            "epsilon_lower_bound": self.bound.as_dict(),
        }


def summarise(
    scores: Sequence[float],
    members: Sequence[int],
    *,
    delta: float,
    confidence: float = 0.95,
    seed: int = 0,
) -> AttackMetrics:
    """Every metric of one attack; ``advantage`` is on all examples, the ε bound split-half."""
    return AttackMetrics(
        auc=auc(scores, members),
        tpr_at_fpr={str(f): tpr_at_fpr(scores, members, f) for f in FPR_POINTS},
        advantage=advantage(scores, members),
        bound=epsilon_lower_bound(scores, members, delta=delta, confidence=confidence, seed=seed),
    )


def _check_counts(k: int, n: int) -> None:
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _check_delta(delta: float) -> None:
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
