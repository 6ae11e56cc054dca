"""The analyses of "Privacy for free" (Dong, Zhao & Lyu 2022) and its refutation (Zheng & Li,
DPDC §3.1), and the noiseless-privacy estimate of Odoh, "Connect the dots".

- Closed-form DM set for a LINEAR extractor (DPDC Eq. 8, computed as in DPDC App. C): per class c,
  QR-decompose the class's data matrix so that Q_c is an orthonormal basis of R^d whose first
  columns span the class's records, then s*_{c,i} = Q_c s̃_{c,i} + mean_c, with s̃ the
  initialisation. Dong et al.'s privacy argument (their Prop. 4.10 via Eq. 35) assumes DM finds
  this set even with nonlinear extractors (DPDC Assumption 3.3).
- Bai–Saranadasa two-sample test (Bai & Saranadasa 1996, "Effect of high dimension"), as
  DPDC §3.1 uses it: H0 = the class means of the Eq. 8 set and of the set DM actually learned
  (same initialisation, nonlinear ConvNet extractor) agree. Valid when d >> n, where Hotelling's
  T² is not.
- Noiseless privacy (Grining & Klonowski 2017, Thm. 2, as Theorem 1 of "Connect the dots"):
  ε = sqrt(Δ² ln n / (n σ²)), δ = 1.12 Σ E|X_i − μ_i|³ / (nσ²)^{3/2} (1 + e^ε)
  + 4 / (5 √n), for the SUM of n independent records with average variance σ² and
  sensitivity Δ. It treats the data's own variability as the noise and assumes the adversary
  knows nothing about the other records: HEURISTIC, NOT A GUARANTEE. It is never used as, or
  compared like, an accounted ε.
"""

from __future__ import annotations

import math

import torch
from scipy.stats import norm
from torch import Tensor

HEURISTIC_LABEL = (
    "HEURISTIC estimate (Grining & Klonowski noiseless privacy), "
    "NOT a differential-privacy guarantee"
)


def dm_noise_initialisation(
    *, seed: int, num_classes: int, ipc: int, image_shape: tuple[int, int, int]
) -> tuple[Tensor, Tensor]:
    """The N(0, I) images a DM run with ``method.init=noise`` and run seed ``seed`` started from,
    redrawn exactly as the method draws them (``PixelImages`` from the generator (seed, "init"))."""
    from dpdc_lightning.methods.synthetic import PixelImages
    from dpdc_lightning.seeding import derive_generator

    return PixelImages(
        num_classes=num_classes,
        ipc=ipc,
        image_shape=image_shape,
        generator=derive_generator(seed, "init"),
    ).export()


def closed_form_dm(
    train_images: Tensor, train_labels: Tensor, init: Tensor, init_labels: Tensor
) -> Tensor:
    """DPDC Eq. 8 per class: ``init`` [n, C, H, W] (class ``init_labels``) mapped to
    Q_c s̃ + mean_c."""
    out = torch.empty_like(init, dtype=torch.float64)
    d = init[0].numel()
    for c in init_labels.unique().tolist():
        records = train_images[train_labels == c].flatten(1).double()  # [N_c, d]
        # Complete QR of the d x N_c matrix: the first rank(X_c) columns of Q span the records.
        q, _ = torch.linalg.qr(records.T, mode="complete")  # q: [d, d]
        mine = init_labels == c
        s = init[mine].flatten(1).double()
        out[mine] = (s @ q.T + records.mean(0)).view(-1, *init.shape[1:])
        assert q.shape == (d, d)
    return out.float()


def bai_saranadasa(x: Tensor, y: Tensor) -> dict[str, float]:
    """Z_BS for H0: mean(x) = mean(y); x [n1, d], y [n2, d]. Asymptotically N(0, 1) under H0."""
    x, y = x.flatten(1).double(), y.flatten(1).double()
    n1, n2 = len(x), len(y)
    if n1 < 2 or n2 < 2:
        raise ValueError("the Bai–Saranadasa test needs at least two samples per group")
    n = n1 + n2 - 2
    centred = torch.cat([x - x.mean(0), y - y.mean(0)])
    # Pooled covariance S = centred^T centred / n; traces via the n x n Gram matrix
    # (cheap when d >> n).
    gram = centred @ centred.T / n
    tr_s, tr_s2 = float(gram.trace()), float((gram * gram).sum())
    scale = (n1 + n2) / (n1 * n2)
    m_stat = float(((x.mean(0) - y.mean(0)) ** 2).sum()) - scale * tr_s
    b2 = n * n / ((n + 2) * (n - 1)) * (tr_s2 - tr_s**2 / n)
    z = m_stat / (scale * math.sqrt(2 * (n + 1) / n) * math.sqrt(max(b2, 1e-300)))
    return {
        "z": z,
        "p_two_sided": float(2 * norm.sf(abs(z))),
        "p_one_sided": float(norm.sf(z)),
        "n1": n1,
        "n2": n2,
        "d": int(x.shape[1]),
    }


def noiseless_privacy(
    train_images: Tensor, train_labels: Tensor, *, sensitivity: float = 2.0
) -> dict:
    """Theorem 1 of "Connect the dots" per class and pixel for the per-class pixel sums; the worst
    (largest ε, and its δ) over classes and pixels. HEURISTIC, NOT A GUARANTEE."""
    worst: dict = {"epsilon": 0.0, "delta": 0.0}
    constant, medians = 0, []
    for c in train_labels.unique().tolist():
        x = train_images[train_labels == c].flatten(1).double()  # [n, d]: one record per row
        n = len(x)
        mu = x.mean(0)
        var = ((x - mu) ** 2).mean(0)
        third = (x - mu).abs().pow(3).sum(0)
        usable = (
            var > 1e-12
        )  # a constant pixel has no "inherent noise": the formula gives ε = ∞ there
        constant += int((~usable).sum())
        eps = torch.sqrt(sensitivity**2 * math.log(n) / (n * var[usable]))
        delta = 1.12 * third[usable] / (n * var[usable]).pow(1.5) * (
            1 + torch.exp(eps.clamp(max=700))
        ) + 4 / (5 * math.sqrt(n))
        medians.append(float(eps.median()))
        j = int(eps.argmax())
        if float(eps[j]) >= worst["epsilon"]:
            pixel = int(torch.nonzero(usable).squeeze(1)[j])
            worst = {
                "epsilon": float(eps[j]),
                "delta": float(delta[j]),
                "class": int(c),
                "pixel": pixel,
                "records": n,
            }
    return {
        "label": HEURISTIC_LABEL,
        "sensitivity": sensitivity,
        "worst_non_constant_pixel": worst,
        "median_epsilon_over_pixels": float(torch.tensor(medians).median()),
        "constant_pixels": constant,
        "note": "per class and pixel, for the sum of that pixel over the class's records; a pixel "
        "constant within a class (counted above) has no inherent noise and gets ε = ∞ from this "
        "heuristic",
    }
