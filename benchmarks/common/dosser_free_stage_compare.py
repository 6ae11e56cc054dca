"""The comparisons of ``dosser_free_stage_vs_reference.py``: our recorded free step against theirs,
quantity by quantity, and the markdown table.

Tolerances follow the repository's float32 rule (``tests/support/rounding.py``): two evaluations of one
float32 computation that add terms in different orders differ norm-wise by at most about n·eps32
relative, n the longest chain of additions the quantity depends on (Higham, "Accuracy and
Stability of Numerical Algorithms", §4.2). Each row names its n: the extractor's chain is three
3x3x128 convolutions (1152 terms each) and their 32x32 instance norms (1024), the projection adds
D = 2048 terms, the loss the M' synthetic rows and the d coordinates, the backward mirrors the
forward, the update and the average add a few roundings.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dpdc_lightning.methods.subspace import principal_subspace

EPS32 = torch.finfo(torch.float32).eps
FEATURES_N = 3 * (3 * 3 * 128 + 32 * 32)
TILE_ORDER = [0, 2, 1, 3]  # theirs: TL, BL, TR, BR of every image in turn; ours: TL, TR, BL, BR


def their_order(rows: Tensor, images: int) -> Tensor:
    """Our PEA rows (image by image, 4 tiles each) in their order (tile by tile, all images)."""
    return rows.reshape(images, 4, *rows.shape[1:])[:, TILE_ORDER].transpose(0, 1).flatten(0, 1)


def row(name: str, ours: Tensor, theirs: Tensor, n: int, note: str = "") -> dict:
    """One table row: ‖ours − theirs‖ / ‖theirs‖ against n·eps32."""
    ours, theirs = ours.detach().double(), theirs.detach().double()
    if ours.shape != theirs.shape:
        return {"name": name, "relative": float("inf"), "tolerance": 0.0, "ok": False, "note": note}
    scale = float(theirs.norm()) or 1.0
    relative = float((ours - theirs).norm()) / scale
    tolerance = n * EPS32
    return {
        "name": name,
        "relative": relative,
        "identical": bool(torch.equal(ours, theirs)),
        "n": n,
        "tolerance": tolerance,
        "ok": relative <= tolerance,
        "note": note,
    }


def compare_iteration(ours: dict, theirs: dict, *, ipc: int, dim: int, classes: int) -> list[dict]:
    """Rows for one iteration of the one-class run (their loop and ours step once)."""
    expanded = 4 * ipc
    rows = [
        row("images before the step", ours["before"][:ipc], theirs["before"], 1),
        row(
            "replayed target L·μ̂ (ours) vs their noisy sum",
            ours["target"][0],
            theirs["target"][0],
            2,
            "ours: their noisy sum / L stored once, x L in the loss: two roundings",
        ),
        row(
            "PEA expansion (as a set, their tile order)",
            their_order(ours["pea"][0], ipc),
            theirs["pea"][0],
            4,
            "bilinear x2 of 4 quadrants",
        ),
        row(
            "extractor features of the expansion",
            their_order(ours["features"][0], ipc),
            theirs["features"][0],
            FEATURES_N,
            "their DiffAugment on both sides",
        ),
        row(
            "SER projection (f − m_i) P_i",
            their_order(ours["projected"][0], ipc),
            theirs["projected"][0],
            FEATURES_N + 2048,
        ),
        row("loss", ours["loss"][0], theirs["loss"][0], FEATURES_N + 2048 + expanded + dim),
        row(
            "gradient of the images",
            ours["grad"][:ipc],
            theirs["grad"][0],
            2 * (FEATURES_N + 2048 + expanded + dim),
        ),
        row(
            "image update (SGD lr 1, momentum 0.5)",
            ours["after"][:ipc] - ours["before"][:ipc],
            theirs["after"][0] - theirs["before"],
            2 * (FEATURES_N + 2048 + expanded + dim) + 2,
        ),
        row("images after the step", ours["after"][:ipc], theirs["after"][0], 2),
        row(
            "moving average of the images (0.99)",
            ours["ema"][:ipc],
            theirs["ema"],
            4,
            "ours lerp_(x, 0.01), theirs 0.99 s + 0.01 x",
        ),
    ]
    untouched = ours["after"][ipc:] - ours["before"][ipc:]
    rows.append(
        {
            "name": f"our other {classes - 1} classes (not matched in this run)",
            "relative": float(untouched.abs().max()) if untouched.numel() else 0.0,
            "identical": not bool(untouched.any()),
            "n": 0,
            "tolerance": 0.0,
            "ok": not bool(untouched.any()),
            "note": "unchanged: no gradient, no momentum",
        }
    )
    return rows


def compare_two_classes(ours: dict, theirs: dict, *, ipc: int, dim: int) -> list[dict]:
    """Iteration 0 with two classes: theirs steps once per class, ours once for both, so the
    losses and each class's gradient agree and the update differs by their momentum carry-over:
    class 0 moves by −lr(g0 + 0.5 g0) (its own step, then the momentum of class 1's step)."""
    n = FEATURES_N + 2048 + 4 * ipc + dim
    grad_ours = ours["grad"][: 2 * ipc]
    theirs_grad = torch.cat([theirs["grad"][0][:ipc], theirs["grad"][1][ipc:]])
    predicted = torch.cat([1.5 * grad_ours[:ipc], grad_ours[ipc:]])  # lr 1
    their_update = theirs["after"][-1] - theirs["before"]
    return [
        row(
            "targets of classes 0 and 1",
            torch.stack(ours["target"]),
            torch.stack(theirs["target"]),
            2,
        ),
        row(
            "loss (ours: the sum; theirs: one per class, summed)",
            ours["loss"][0],
            torch.stack(theirs["loss"]).sum(),
            n,
        ),
        row("gradient of each class's images", grad_ours, theirs_grad, 2 * n),
        row(
            "their update vs −lr·(1.5 g0, g1) from our gradients",
            -predicted,
            their_update,
            2 * n + 2,
            "the momentum carry-over of their per-class steps, predicted",
        ),
        row(
            "their update vs ours (differs by design)",
            ours["after"][: 2 * ipc] - ours["before"][: 2 * ipc],
            their_update,
            2 * n + 2,
            "differs by design: class 0 moves 1.5x in theirs",
        ),
    ]


def compare_subspaces(
    ours: tuple[Tensor, Tensor],
    theirs: tuple[Tensor, Tensor],
    singular: Tensor,
    centred_features: Tensor,
    *,
    n: int,
) -> dict:
    """Our P (float64 SVD, signs fixed) against theirs (torch.pca_lowrank): per direction the sine
    of the angle between them, against the perturbation bound n·eps32·σ_1 / gap_j (Wedin); the
    means norm-wise; and the variance of the auxiliary features their P captures over the variance ours
    captures (ours is the exact top-d subspace: the ratio is <= 1)."""
    (mean, basis), (their_mean, their_basis) = ours, theirs
    cosine = (basis.double() * their_basis.double()).sum(0).abs().clamp(max=1)
    sine = (1 - cosine**2).clamp(min=0).sqrt()
    s = singular.double()
    gaps = torch.minimum(
        torch.cat([s[:1] * 0 + float("inf"), s[:-1] - s[1:]])[: len(sine)],
        torch.cat([s[:-1] - s[1:], s[-1:]])[: len(sine)],
    )
    bound = (n * EPS32 * s[0] / gaps).clamp(max=1)
    centred = centred_features.double()
    captured = float((centred @ their_basis.double()).square().sum()) / float(
        (centred @ basis.double()).square().sum()
    )
    return {
        "dim": basis.shape[1],
        "worst_sine": float(sine.max()),
        "worst_ratio": float((sine / bound).max()),
        "within": int((sine <= bound).sum()),
        "captured": captured,
        "mean": row("mean m_i", mean, their_mean, n),
    }


def markdown(name: str, rows: list[dict]) -> list[str]:
    lines = [
        f"### {name}",
        "",
        "| quantity | ‖ours − theirs‖ / ‖theirs‖ | bit-identical | n | "
        "tolerance n·eps32 | within | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['relative']:.2e} | {'yes' if r.get('identical') else 'no'} | "
            f"{r.get('n', '')} | {r['tolerance']:.1e} | {'yes' if r['ok'] else '**no**'} | "
            f"{r['note']} |"
        )
    return lines + [""]


def drift_lines(records, ipc: int) -> list[str]:
    lines = ["| iteration | images after: ‖Δ‖/‖x‖ | moving average: ‖Δ‖/‖s‖ |", "|---|---|---|"]
    for t, (_, ours, theirs) in enumerate(records):
        after = row("", ours["after"][:ipc], theirs["after"][0], 0)["relative"]
        ema = row("", ours["ema"][:ipc], theirs["ema"], 0)["relative"]
        lines.append(f"| {t} | {after:.1e} | {ema:.1e} |")
    return lines + [""]


def subspace_rows(pca, bank, method, aux: torch.Tensor, dims: list[int]) -> list[str]:
    lines = [
        "| entry | d | worst sin∠(P_ours, P_theirs) | directions within n·eps32·σ1/gap | "
        "variance captured, theirs / ours | mean: ‖Δ‖/‖m‖ (tolerance) |",
        "|---|---|---|---|---|---|",
    ]
    for i, network in enumerate(bank.networks):
        with torch.no_grad():
            features = network.embed(aux).float()
        centred = features.double() - features.double().mean(0)
        singular = torch.linalg.svdvals(centred)
        for d in dims:
            ours = principal_subspace(features, dim=d)
            basis, mean = pca.perform_pca_lowrank(features, d)
            r = compare_subspaces(
                ours, (mean, basis), singular, centred, n=len(aux) + features.shape[1]
            )
            lines.append(
                f"| {i} | {d} | {r['worst_sine']:.1e} | {r['within']}/{d} | {r['captured']:.6f} | "
                f"{r['mean']['relative']:.1e} ({r['mean']['tolerance']:.0e}) |"
            )
    return lines + [""]


def reuse_lines(records) -> list[str]:
    """Their target of a reused entry against its first use (ours replays the first draw)."""
    first: dict[int, torch.Tensor] = {}
    lines = []
    for t, (entry, _, theirs) in enumerate(records):
        if entry in first:
            same = torch.equal(first[entry], theirs["target"][0])
            lines.append(
                f"- iteration {t} reuses entry {entry}: their noisy target is "
                f"{'bit-identical to' if same else 'DIFFERENT from'} its first use."
            )
        first.setdefault(entry, theirs["target"][0])
    return lines + [""] if lines else ["- no entry reused in these iterations", ""]
