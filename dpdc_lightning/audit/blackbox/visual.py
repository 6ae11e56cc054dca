"""Visual privacy (Dong, Zhao & Lyu 2022, §5.4): how close is each synthetic image to a private
one?

For each synthetic image: its nearest private training image by L2 and by SSIM (torchmetrics;
pixels in [−1, 1], so data_range 2). SSIM is searched among the ``ssim_candidates`` nearest by
L2 (exhaustive SSIM over a large private set costs minutes on a CPU and rarely disagrees that far).
Reference distribution: the nearest-private distance of each held-out TEST image, i.e. how close a
fresh real image from the same distribution naturally is. A synthetic set that copies records shows
synthetic-to-private distances far below that reference (near zero).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torchmetrics.functional.image import structural_similarity_index_measure
from torchvision.io import encode_png
from torchvision.utils import make_grid

QUANTILES = (0.0, 0.05, 0.25, 0.5)


@dataclass(frozen=True)
class Neighbours:
    l2_distance: Tensor  # [n_synthetic]
    l2_index: Tensor  # index into the private images
    ssim: Tensor  # [n_synthetic], the best SSIM found
    ssim_index: Tensor


def nearest_l2(queries: Tensor, pool: Tensor, *, chunk: int = 512) -> tuple[Tensor, Tensor]:
    """(distance, index) of each query's nearest image in ``pool`` by L2 over all pixels."""
    pool_flat = pool.flatten(1).double()
    dists, index = [], []
    for q in queries.flatten(1).double().split(chunk):
        d = torch.cdist(q, pool_flat)
        best = d.min(dim=1)
        dists.append(best.values.float())
        index.append(best.indices)
    return torch.cat(dists), torch.cat(index)


def nearest_neighbours(
    synthetic: Tensor, private: Tensor, *, ssim_candidates: int = 64
) -> Neighbours:
    l2, l2_index = nearest_l2(synthetic, private)
    k = min(ssim_candidates, len(private))
    candidates = (
        torch.cdist(synthetic.flatten(1).double(), private.flatten(1).double())
        .topk(k, largest=False)
        .indices
    )
    best, best_index = [], []
    for i, cand in enumerate(candidates):
        query = synthetic[i : i + 1].float().expand(k, *synthetic.shape[1:])
        values = structural_similarity_index_measure(
            query, private[cand].float(), data_range=2.0, reduction="none"
        )
        j = int(values.argmax())
        best.append(float(values[j]))
        best_index.append(int(cand[j]))
    return Neighbours(l2, l2_index, torch.tensor(best), torch.tensor(best_index))


def summary(values: Tensor) -> dict[str, float]:
    return {f"q{int(q * 100):02d}": float(values.quantile(q)) for q in QUANTILES} | {
        "mean": float(values.mean())
    }


def visual_report(
    synthetic: Tensor, private: Tensor, test: Tensor, *, ssim_candidates: int = 64
) -> tuple[dict, Neighbours]:
    """Distances of synthetic→private, synthetic→test and (reference) test→private."""
    found = nearest_neighbours(synthetic, private, ssim_candidates=ssim_candidates)
    syn_test, _ = nearest_l2(synthetic, test)
    test_private, _ = nearest_l2(test, private)
    report = {
        "synthetic_to_private_l2": summary(found.l2_distance),
        "synthetic_to_test_l2": summary(syn_test),
        "test_to_private_l2_reference": summary(test_private),
        "synthetic_best_ssim_with_private": summary(found.ssim),
        "synthetic_closer_than_reference_q05": float(
            (found.l2_distance < test_private.quantile(0.05)).float().mean()
        ),
        "ssim_search": (
            f"among the {min(ssim_candidates, len(private))} nearest private images by L2"
        ),
    }
    return report, found


def neighbour_pairs_png(
    synthetic: Tensor, private: Tensor, found: Neighbours, *, rows: int = 16
) -> bytes:
    """Columns: synthetic image | nearest private by L2 | nearest private by SSIM; the closest
    (smallest L2) synthetic images first, ``rows`` of them."""
    order = found.l2_distance.argsort()[:rows]
    tiles = []
    for i in order.tolist():
        tiles += [synthetic[i], private[found.l2_index[i]], private[found.ssim_index[i]]]
    grid = make_grid(torch.stack(tiles).float(), nrow=3, padding=1, pad_value=1.0)
    grid = (grid * 0.5 + 0.5).clamp(0, 1)
    zoom = max(1, -(-32 // synthetic.shape[-1]))
    grid = grid.repeat_interleave(zoom, dim=1).repeat_interleave(zoom, dim=2)
    return bytes(encode_png((grid * 255).round().to(torch.uint8)).numpy())
