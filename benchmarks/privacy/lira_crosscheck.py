"""Our LiRA against the reference scoring of Carlini et al. on the same φ matrices.

    git -C <tensorflow/privacy checkout> show HEAD:research/mi_lira_2021/plot.py > /tmp/lira_ref/plot.py
    python benchmarks/privacy/lira_crosscheck.py --reference /tmp/lira_ref/plot.py

The reference's ``plot.py`` runs its experiment at import (and needs matplotlib), so only its
functions ``sweep``, ``generate_ours``, ``generate_ours_offline`` and ``generate_global`` are taken
(their definitions are compiled from the file, nothing of it is copied here). Both sides score the
same simulated φ: S reference shadows with the keep matrix, one held-out target, per-record
difficulty and a membership shift of varying size. Differences to expect: the reference uses
medians and (with fixed variance) the IN spread for both Gaussians; its offline attack is two-sided.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dpdc_lightning.audit.blackbox import attacks
from dpdc_lightning.audit.blackbox.shadows import keep_matrix  # noqa: E402
from dpdc_lightning.audit.metrics import roc as metrics  # noqa: E402

WANTED = ("sweep", "generate_ours", "generate_ours_offline", "generate_global")


def reference_functions(path: Path) -> dict:
    tree = ast.parse(path.read_text())
    keep = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in WANTED]
    import scipy.stats
    from sklearn.metrics import auc, roc_curve

    namespace = {"np": np, "scipy": scipy, "roc_curve": roc_curve, "auc": auc}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), namespace)
    return {name: namespace[name] for name in WANTED}


def simulate(shift: float, *, shadows: int, records: int, seed: int):
    rng = np.random.default_rng(seed)
    keep = keep_matrix(shadows, records, generator=torch.Generator().manual_seed(seed)).numpy()
    difficulty = rng.normal(scale=2.0, size=records)
    phi = difficulty + shift * keep + rng.normal(scale=0.5, size=(shadows, records))
    members = rng.random(records) < 0.5
    target = difficulty + shift * members + rng.normal(scale=0.5, size=records)
    return keep, phi, members, target


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--shadows", type=int, default=16)
    parser.add_argument("--records", type=int, default=5000)
    args = parser.parse_args()
    ref = reference_functions(args.reference)
    print("| shift | attack | AUC ours | AUC reference | TPR@0.1% ours | TPR@0.1% reference |")
    print("|---|---|---|---|---|---|")
    for shift in (0.0, 0.5, 2.0):
        keep, phi, members, target = simulate(
            shift, shadows=args.shadows, records=args.records, seed=1
        )
        stats = attacks.fit_gaussians(torch.as_tensor(phi), torch.as_tensor(keep))
        target_t = torch.as_tensor(target)
        ours = {
            "online": attacks.lira_online(target_t, stats).double().numpy(),
            "offline": attacks.lira_offline(target_t, stats).double().numpy(),
            "global": target,
        }
        calls = {
            "online": lambda: ref["generate_ours"](
                keep, phi[..., None], members[None], target[None, :, None], fix_variance=True
            ),
            "offline": lambda: ref["generate_ours_offline"](
                keep, phi[..., None], members[None], target[None, :, None], fix_variance=True
            ),
            "global": lambda: ref["generate_global"](
                keep, phi[..., None], members[None], target[None, :, None]
            ),
        }
        for name in ("online", "offline", "global"):
            prediction, answers = calls[name]()
            fpr, tpr, ref_auc, _ = ref["sweep"](np.array(prediction), np.array(answers, dtype=bool))
            ref_low = tpr[np.where(fpr < 0.001)[0][-1]]
            m = members.astype(int)
            print(
                f"| {shift} | {name} | {metrics.auc(ours[name], m):.4f} | {ref_auc:.4f} | "
                f"{metrics.tpr_at_fpr(ours[name], m, 0.001):.4f} | {ref_low:.4f} |"
            )


if __name__ == "__main__":
    main()
