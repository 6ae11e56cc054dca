"""What the harness checks on the mechanism's calls and the noise draws of a run (:mod:`.coupling`,
:mod:`.draws`), each a list of problems, empty when the run passes. None of them knows a method:

- :func:`noise_problems` (one run): no noise key is drawn twice in the run (a stream keyed by a
  constant, noise reused across steps or classes); no noise drawn outside the mechanism; each call
  adds exactly its declared std (sensitivity x noise multiplier) times ONE draw of the keyed
  stream, value for value (a noise scaled down at some steps, a stream of the wrong size or not
  keyed at all);
- :func:`draw_problems` (D against D' with the same secret): the same draws in the same order, same
  keys and sizes; otherwise which noise is drawn depends on the data (control flow on a private
  sample, such as skipping a class whose sample came back empty);
- :func:`call_problems` (D against the coupled D'): each call keeps its noise key, event and shape,
  and its pre-noise sum moves by at most ``records`` x the sensitivity it declared.
"""

from __future__ import annotations

from collections import Counter

import torch

from dpdc_lightning.audit.neighbours.coupling import Call
from dpdc_lightning.audit.neighbours.draws import Draw

# Float tolerance of the pre-noise sums: features and per-example gradients are float32, computed
# on batches whose composition differs by the one record, so each clipped row may move by a few
# float32 ulps of its norm (<= sensitivity); 64 rows x 2^-20 relative bounds that with a margin.
ROUNDING = 64 * 2.0**-20
# The release is the float64 sum + noise rounded once to float32: within 2^-24 of its value
# (relative); twice that for a margin, and float32's smallest normal for values near zero.
RELEASE_ROUNDING = 2.0**-23
TINY = float(torch.finfo(torch.float32).tiny)
SHOWN = 3  # problems of one kind shown per run (the rest counted)


def noise_problems(calls: list[Call], draws: list[Draw]) -> list[str]:
    """One run's noise: keys unique, drawn inside the mechanism, the declared std exactly."""
    problems = []
    counts = Counter(draw.identity for draw in draws)
    reused = [draw for draw in draws if counts[draw.identity] > 1]
    seen: set[tuple] = set()
    for draw in reused:
        if draw.identity not in seen and len(seen) < SHOWN:
            seen.add(draw.identity)
            problems.append(
                f"{draw.describe()} drawn {counts[draw.identity]} times in one run: the same "
                "noise released more than once (each release needs its own key)"
            )
    if reused:
        repeats = len(draws) - len(counts)
        problems.append(f"{repeats} of the run's {len(draws)} noise draws repeat an earlier key")
    outside = [draw for draw in draws if draw.call is None]
    if outside:
        problems.append(
            f"{len(outside)} noise draws outside privacy.mechanisms.gaussian_sum, the first "
            f"{outside[0].describe()}: noise no mechanism call accounts for"
        )
    wrong = [line for index, call in enumerate(calls) if (line := _wrong_noise(index, call))]
    problems += wrong[:SHOWN]
    if len(wrong) > SHOWN:
        problems.append(
            f"{len(wrong)} of {len(calls)} mechanism calls add noise other than declared"
        )
    return problems


def _wrong_noise(index: int, call: Call) -> str | None:
    """Why ``call`` did not add its declared std times one normal draw of its stream (or None)."""
    std = call.sensitivity * call.noise_multiplier
    normals = [draw for draw in call.draws if draw.kind == "normal"]
    size = call.pre.numel()
    if len(normals) != 1 or normals[0].values.numel() != size:
        drawn = "+".join(str(draw.values.numel()) for draw in normals) or "none"
        return (
            f"call {index} {call.where}: its noise is not one draw of a keyed stream of its "
            f"size ({size} values; drawn: {drawn})"
        )
    z = normals[0].values.reshape(call.pre.shape).double()
    expected = call.pre + std * z
    released = call.released.double().reshape(call.pre.shape)
    off = (released - expected).abs() > RELEASE_ROUNDING * expected.abs() + TINY
    if not bool(off.any()):
        return None
    added = float(torch.linalg.vector_norm(released - call.pre))
    declared = float(torch.linalg.vector_norm(std * z))
    return (
        f"call {index} {call.where}: the noise added is {added / max(declared, TINY):.4g} x the "
        f"declared std {std:g} times the stream's draw ({int(off.sum())} of {size} values differ)"
    )


def draw_problems(reference: list[Draw], other: list[Draw]) -> list[str]:
    """D and D' (same secret) must draw the same noise keys, in the same order, of the same size."""
    mine = [(draw.identity, draw.kind, draw.values.numel()) for draw in reference]
    theirs = [(draw.identity, draw.kind, draw.values.numel()) for draw in other]
    if mine == theirs:
        return []
    at = next(
        (i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs))
    )

    def shown(draws: list[Draw]) -> str:
        if at >= len(draws):
            return "nothing more"
        return f"{draws[at].describe()} of {draws[at].values.numel()} values"

    return [
        f"control flow depends on the data: D made {len(mine)} noise draws, D' {len(theirs)}; "
        f"first difference at draw {at}: D {shown(reference)} | D' {shown(other)}"
    ]


def call_problems(
    reference: list[Call], coupled: list[Call], records: int | None, *, owner: int | None = None
) -> list[str]:
    """Each call of D' against D's: same noise key, event and sensitivity; pre-noise sums at most
    ``records`` sensitivities apart (exactly equal for 0; None: no bound, D' is not a neighbour).
    With ``owner`` (the class of the changed record, per-class sampling), a call on any other class
    must have the same pre-noise sum, bit for bit: the accountant composes the classes in parallel
    (one record enters one class's release), which a row built from other classes' records breaks
    however little it moves them."""
    problems = []
    if len(reference) != len(coupled):
        problems.append(f"D made {len(reference)} mechanism calls, D' {len(coupled)}")
    isolation: list[str] = []
    for index, (mine, theirs) in enumerate(zip(reference, coupled)):
        where = f"call {index} {mine.where}"
        described = (mine.key, mine.sensitivity, mine.noise_multiplier, mine.sample_rate)
        if described + (mine.pre.shape,) != (
            theirs.key,
            theirs.sensitivity,
            theirs.noise_multiplier,
            theirs.sample_rate,
            theirs.pre.shape,
        ):
            problems.append(
                f"{where}: D' called the mechanism differently (noise key, event, sensitivity or "
                "shape)"
            )
            continue
        partition = mine.draws[0].purpose[2] if mine.draws else None
        if (
            owner is not None
            and partition not in (None, -1, owner)
            and not torch.equal(theirs.pre, mine.pre)
        ):
            isolation.append(f"{where}: moved by a record of class {owner}")
        if records is None:
            continue
        moved = float(torch.linalg.vector_norm(theirs.pre - mine.pre))
        limit = records * mine.sensitivity * (1 + ROUNDING)
        if (records == 0 and moved != 0.0) or moved > limit:
            problems.append(
                f"{where}: the pre-noise sum moved by {moved:.6g}, more than {records} x "
                f"sensitivity {mine.sensitivity:g}"
            )
    if isolation:
        problems.append(
            f"partition isolation: {len(isolation)} pre-noise sums of other classes changed, the "
            f"first {isolation[0]} (each record must enter its own class's release only)"
        )
    return problems
