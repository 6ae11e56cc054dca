"""Privacy analysis of composed Poisson-subsampled Gaussian mechanisms: pure functions over
histories.

A *history* is a sequence of ``(noise_multiplier, sample_rate, steps)`` entries, Opacus' format:
``steps`` consecutive runs of the mechanism with that noise multiplier and sample rate. The
mathematics is Opacus' (``opacus.accountants``); this module only wraps it, it does not
re-implement it:

- ``"rdp"``: Rényi DP (Mironov 2017) of the sampled Gaussian mechanism (Mironov, Talwar & Zhang
  2019), composed additively over the history at Opacus' default orders, converted to
  (ε, δ)-DP with Balle et al. 2020 (Thm 21 of arXiv:1905.09982). This reproduces Opacus'
  ``RDPAccountant`` bit for bit and every ε of Zheng & Li's DPDC paper (Thm 3.1/3.2, App. B).
- ``"prv"``: numerical composition of privacy loss random variables (Gopi et al. 2021), Opacus'
  ``PRVAccountant``: a tighter upper bound for the same noise.

For repeated queries (a callback asking "ε after k more steps of this event?" every step),
:func:`rdp_vector` and :func:`epsilon_from_rdp` split the RDP computation; per-event RDP
vectors are cached, so a query costs a few vector operations.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.analysis import rdp as opacus_rdp

from dpdc_lightning.errors import UserError

ACCOUNTANTS = ("rdp", "prv")
RDP_ORDERS: tuple[float, ...] = tuple(RDPAccountant.DEFAULT_ALPHAS)

HistoryEntry = tuple[float, float, int]
History = Sequence[HistoryEntry]


# Opacus' import calls logging.basicConfig, which gives the root logger a stderr handler: a user's
# own basicConfig afterwards does nothing. Its format string identifies the handler it added.
_OPACUS_ROOT_FORMAT = "%(asctime)s:%(levelname)s:%(message)s"


def drop_opacus_root_handler() -> None:
    """Remove the root handler Opacus' import added (basicConfig adds one only to a root without
    handlers, so removing it restores what the user had); any other handler stays."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        formatter = handler.formatter
        if (
            type(handler) is logging.StreamHandler
            and formatter is not None
            and formatter._fmt == _OPACUS_ROOT_FORMAT
        ):
            root.removeHandler(handler)


drop_opacus_root_handler()


@contextlib.contextmanager
def quiet_opacus() -> Iterator[None]:
    """Silence Opacus' harmless numerical chatter inside one computation, and nothing else.

    Opacus warns "Optimal order is the largest/smallest alpha" when the best RDP order lies at
    an end of its range (the bound is still valid, only possibly loose), and its PRV code takes
    log(0) for sample rate 1 on a branch that is then discarded.
    """
    with warnings.catch_warnings(), np.errstate(divide="ignore"):
        warnings.filterwarnings("ignore", message="Optimal order is the", category=UserWarning)
        yield


def check_accountant(accountant: str) -> str:
    """``accountant`` if it is one this package supports, else a :class:`UserError`."""
    if accountant not in ACCOUNTANTS:
        raise UserError(f"unknown accountant {accountant!r}; allowed: {', '.join(ACCOUNTANTS)}")
    return accountant


def check_delta(delta: float) -> float:
    """``delta`` as a float if 0 < delta < 1, else a :class:`UserError`."""
    delta = float(delta)
    if not (0.0 < delta < 1.0):
        raise UserError(f"delta must be in (0, 1), got {delta!r}")
    return delta


def check_history(history: Iterable[Sequence[float]]) -> list[HistoryEntry]:
    """A validated copy of ``history`` with plain-Python types; zero-step entries are dropped."""
    checked: list[HistoryEntry] = []
    for entry in history:
        if len(entry) != 3:
            raise UserError(
                f"a history entry is (noise_multiplier, sample_rate, steps), got {entry!r}"
            )
        noise_multiplier, sample_rate, steps = float(entry[0]), float(entry[1]), entry[2]
        if not (math.isfinite(noise_multiplier) and noise_multiplier > 0):
            raise UserError(
                f"noise_multiplier must be a finite number > 0, got {noise_multiplier!r}"
            )
        if not (0.0 < sample_rate <= 1.0):
            raise UserError(f"sample_rate must be in (0, 1], got {sample_rate!r}")
        if isinstance(steps, bool) or int(steps) != steps or steps < 0:
            raise UserError(f"steps must be an integer >= 0, got {steps!r}")
        if int(steps) > 0:
            checked.append((noise_multiplier, sample_rate, int(steps)))
    return checked


def merge_step(
    history: History, *, noise_multiplier: float, sample_rate: float, steps: int = 1
) -> list[HistoryEntry]:
    """A new history with ``steps`` runs of one event appended, merged into the last entry when
    that entry has the same event (as Opacus' accountants merge consecutive identical steps)."""
    merged = list(history)
    if merged and merged[-1][0] == noise_multiplier and merged[-1][1] == sample_rate:
        merged[-1] = (merged[-1][0], merged[-1][1], merged[-1][2] + steps)
    else:
        merged.append((noise_multiplier, sample_rate, steps))
    return merged


@functools.lru_cache(maxsize=1024)
def _unit_rdp(noise_multiplier: float, sample_rate: float) -> np.ndarray:
    # Opacus computes ``per_order_array * steps``; caching the steps=1 array and multiplying by
    # steps later therefore gives identical floats.
    vector = np.asarray(
        opacus_rdp.compute_rdp(
            q=sample_rate, noise_multiplier=noise_multiplier, steps=1, orders=list(RDP_ORDERS)
        ),
        dtype=np.float64,
    )
    vector.setflags(write=False)
    return vector


def rdp_vector(history: History) -> np.ndarray:
    """The RDP of the composed history at each order of :data:`RDP_ORDERS` (composition adds).

    Summed entry by entry in history order, starting from zero, exactly as Opacus'
    ``RDPAccountant`` sums, so that ``epsilon_from_rdp(rdp_vector(h))`` equals its ε.
    """
    total = np.zeros(len(RDP_ORDERS), dtype=np.float64)
    for noise_multiplier, sample_rate, steps in check_history(history):
        total = total + _unit_rdp(noise_multiplier, sample_rate) * steps
    return total


def epsilon_from_rdp(rdp: np.ndarray, *, delta: float) -> float:
    """ε at ``delta`` of an RDP vector over :data:`RDP_ORDERS` (Balle et al. 2020 conversion).

    An all-zero vector (nothing composed) costs ε = 0, as in Opacus for an empty history.
    """
    delta = check_delta(delta)
    rdp = np.asarray(rdp, dtype=np.float64)
    if rdp.shape != (len(RDP_ORDERS),):
        raise ValueError(
            f"rdp must have one value per order ({len(RDP_ORDERS)}), got shape {rdp.shape}"
        )
    if not np.any(rdp):
        return 0.0
    with quiet_opacus():
        epsilon, _ = opacus_rdp.get_privacy_spent(orders=list(RDP_ORDERS), rdp=rdp, delta=delta)
    return float(epsilon)


def rdp_epsilon_floor(*, delta: float) -> float:
    """The least ε the RDP conversion gives at ``delta`` for any non-empty history, however noisy:
    the conversion of an RDP curve that tends to zero. A target at or below it is unreachable."""
    delta = check_delta(delta)
    with quiet_opacus():
        epsilon, _ = opacus_rdp.get_privacy_spent(
            orders=list(RDP_ORDERS), rdp=np.zeros(len(RDP_ORDERS)), delta=delta
        )
    return float(epsilon)


def _prv_epsilon(history: list[HistoryEntry], *, delta: float) -> float:
    accountant = PRVAccountant()
    accountant.history = list(history)
    try:
        with quiet_opacus():
            return float(accountant.get_epsilon(delta=delta))
    except MemoryError as error:
        raise UserError(
            "the prv accountant cannot discretise this history (too little noise for its domain); "
            "use accountant=rdp"
        ) from error


def epsilon_from_history(history: History, *, delta: float, accountant: str = "rdp") -> float:
    """ε at ``delta`` of the composition of every entry of ``history`` (0.0 for an empty
    history)."""
    check_accountant(accountant)
    delta = check_delta(delta)
    entries = check_history(history)
    if not entries:
        return 0.0
    if accountant == "rdp":
        return epsilon_from_rdp(rdp_vector(entries), delta=delta)
    return _prv_epsilon(entries, delta=delta)
