"""Probe of the public Dosser code's optimisation-stage noise (humansensinglab/Dosser, commit dff0c57).

Its optimisation step re-noises a stored CLEAN clipped sum at every reuse: DiffAugment(x, seed=s) with
the entry's stored DSA seed s, then `noise_sigma * torch.randn_like(sum) * max_norm`. DiffAugment
reseeds torch's global generator from s (set_seed_DiffAug) just before, so this probe asks: is the
noise of one entry fresh at each reuse (the averaging-down the paper's accounting ignores) or the same?
It imports the reference's own utils.py (unmodified, from a checkout given on the command line; its
unused timm/kymatio imports are stubbed) and calls exactly that sequence.

    python benchmarks/faithfulness/dosser_reference_probe.py /path/to/Dosser/checkout
"""

from __future__ import annotations

import sys
import types

import torch


def main(reference: str) -> None:
    for name in ("timm", "kymatio", "kymatio.torch"):  # imported by utils.py, unused here
        module = types.ModuleType(name)
        module.Scattering2D = object
        sys.modules[name] = module
    sys.path.insert(0, reference)
    import utils  # the reference's utils.py

    param = utils.ParamDiffAug()
    images = torch.zeros(10, 1, 28, 28)
    clean_sum = torch.zeros(2048)
    for seed in (1234, 98765):  # seeds are int(time.time() * 1000) % 100000 in the reference
        draws = []
        for _ in range(5):  # five reuses of one bank entry
            utils.DiffAugment(images, "color_crop_cutout_flip_scale_rotate", seed=seed, param=param)
            draws.append(4.2969 * torch.randn_like(clean_sum) * 1.0)
        same = all(torch.equal(draws[0], d) for d in draws[1:])
        print(
            f"entry with DSA seed {seed}: noise identical across 5 reuses: {same}; std {torch.stack(draws).std():.3f}"
        )


if __name__ == "__main__":
    main(sys.argv[1])
