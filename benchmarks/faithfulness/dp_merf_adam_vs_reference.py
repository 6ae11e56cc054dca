"""The DP-MERF plug-in's free steps (Adam on the pixels against the one release), number for number
against the authors' loop (Harder, Adamczewski & Park; github.com/ParkLabML/DP-MERF,
``code_balanced/``), on the CPU.

    git --git-dir <mirror> archive <commit> code_balanced | tar -x -C /tmp/dp_merf_ref
    OMP_NUM_THREADS=1 python benchmarks/faithfulness/dp_merf_adam_vs_reference.py \\
        /tmp/dp_merf_ref/code_balanced --commit <commit>

Their code runs from a temporary copy (nothing of it is stored here): ``get_single_sigma_losses``
builds their single release (their labelled embedding of our toy training set, their noise at
``--noise-factor``) with our frequencies Ω handed to it in the place of their ``weights_sphere``
draw, and ``train_single_release`` runs their Adam loop (``pt.optim.Adam(..., lr)`` as their
``main``) on a stand-in generator whose only parameters are the pixels of our initial set and whose
"samples" are those pixels with their one-hot labels. Our ``DPMERF`` gets the same release as its
stored signals (their column c times n / n_c: their columns are the class means weighted by the
class shares) and the same initial pixels; its ``free_step`` runs ``--iterations`` times. Every
iteration's loss, gradient, Adam update and pixels are compared.

Their loss weights class c by (n_c / n)² against ours (the columns' shares): with the balanced toy
set their loss is ours / C². The first table hands their loop their loss times C² (a change of
units, so both optimisers see the same gradient); the second shows what the weighting alone does
to Adam, whose step is invariant to a loss scale up to its ε (1e-8). Their per-epoch learning rate
decay (``StepLR(gamma=0.9)`` in their ``main``, outside ``train_single_release``) is not in the
plug-in: the iterations here are within one of their epochs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))
sys.path.insert(0, str(ROOT / "examples" / "dp_merf"))  # this checkout's plug-in

from dosser_free_stage_compare import markdown, row  # noqa: E402
from reference_code import (  # noqa: E402
    commit_of,
    import_from,
    machine_line,
    patched_copy,
    recording,
    replaced,
    stub_modules,
)

from dpdc_lightning.data import load_dataset  # noqa: E402
from dpdc_lightning.methods import DataSpec  # noqa: E402
from dpdc_lightning.privacy.planning.planner import make_plan  # noqa: E402

# Their aux.py imports matplotlib with a non-interactive backend: nothing to patch for the CPU;
# every function compared takes its device as an argument ('cpu' here).
PATCHES: dict[str, list[tuple[str, str]]] = {}


class PixelGenerator(nn.Module):
    """Their loop's generator, reduced to a set of pixels: ``get_code`` gives the one-hot labels
    of the set (ordered by class), ``forward`` the flattened pixels."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, classes: int) -> None:
        super().__init__()
        self.images = nn.Parameter(images.flatten(1).clone())
        self.one_hot = nn.functional.one_hot(labels, classes).float()

    def get_code(self, batch_size: int, device: str):
        assert batch_size == len(self.images), "one batch is the whole set"
        return None, self.one_hot

    def forward(self, code) -> torch.Tensor:
        return self.images


def our_method(data, args):
    from dp_merf.config import DPMERFConfig
    from dp_merf.method import DPMERF

    spec = DataSpec.of(data)
    config = DPMERFConfig(
        ipc=args.ipc, features=args.features, iterations=args.iterations, lr_img=args.lr
    )
    plan = make_plan(
        DPMERF.schedule(config),
        class_sizes=spec.class_sizes,
        method="dp_merf",
        noise_multiplier=1.0,
        target_epsilon=None,
        delta=1e-5,
        calibrate="sigma",
        accountant="rdp",
    )
    return DPMERF(config, data=spec, plan=plan, seed=args.seed, noise_seed=0)


def their_release(rff, data, omega: torch.Tensor, args):
    """Their single-release loss and noisy embedding [D, C] (our Ω, their noise)."""
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(data.train_images, data.train_labels), batch_size=100
    )
    torch.manual_seed(args.seed)
    params = rff.rff_param_tuple(w=omega, b=None)
    with replaced(rff, "weights_sphere", lambda *a, **k: params):
        loss, _, noisy = rff.get_single_sigma_losses(
            loader,
            omega.shape[1],
            args.features,
            1.0,
            "cpu",
            data.num_classes,
            args.noise_factor,
            "sphere",
        )
    return loss, noisy


def their_iteration(gen_module, loss, generator: PixelGenerator, optimizer, scale: float) -> dict:
    """One batch of their ``train_single_release`` (n_data = the batch), recorded."""
    record: dict = {"before": generator.images.detach().clone()}
    losses: list = []
    step = optimizer.step

    def stepping(*a, **k):
        record["grad"] = generator.images.grad.detach().clone()
        step(*a, **k)

    scaled = recording(lambda g, y: scale * loss(g, y), losses)
    n = len(generator.images)
    with replaced(optimizer, "step", stepping):
        gen_module.train_single_release(generator, "cpu", optimizer, 1, scaled, 10**9, n, n)
    record["after"], record["loss"] = generator.images.detach().clone(), losses[0]
    return record


def our_iteration(method, step: int) -> dict:
    images = method.synthetic.images
    before = images.detach().clone()
    loss = method.free_step(step)
    return {
        "before": before.flatten(1),
        "grad": images.grad.detach().clone().flatten(1),
        "after": images.detach().clone().flatten(1),
        "loss": loss.detach(),
    }


def synchronise(method, generator: PixelGenerator, optimizer, units: float) -> None:
    """Their pixels and Adam state (step, moments) copied into ours, the moments converted to our
    loss's units (``units``: our loss over the loss their loop minimises)."""
    ours, theirs = method.synthetic.images, generator.images
    with torch.no_grad():
        ours.copy_(theirs.view_as(ours))
        state, their_state = method.optimizer.state[ours], optimizer.state[theirs]
        state["exp_avg"].copy_(their_state["exp_avg"].view_as(ours) * units)
        state["exp_avg_sq"].copy_(their_state["exp_avg_sq"].view_as(ours) * units**2)
        state["step"].copy_(their_state["step"])


def run(rff, gen_module, data, args, *, scale: float) -> tuple[list[dict], list[dict]]:
    """Both loops, each iteration from their state; returns (ours, theirs) records."""
    method = our_method(data, args)
    loss, noisy = their_release(rff, data, method.frequencies, args)
    shares = torch.tensor(DataSpec.of(data).class_sizes) / len(data.train_labels)
    for c in range(data.num_classes):  # their column c = (n_c / n) x the class mean
        method.bank.store(0, c, noisy[:, c] / shares[c], theta_seed=0, dsa_seed=0)
    labels = method.synthetic.labels
    generator = PixelGenerator(method.synthetic.images.detach(), labels, data.num_classes)
    optimizer = torch.optim.Adam(list(generator.parameters()), lr=args.lr)  # as their main
    ours, theirs = [], []
    for t in range(args.iterations):
        if t:
            synchronise(method, generator, optimizer, data.num_classes**2 / scale)
        theirs.append(their_iteration(gen_module, loss, generator, optimizer, scale))
        ours.append(our_iteration(method, t + 1))
    return ours, theirs


def compare(ours: list[dict], theirs: list[dict], *, n: int, raw: bool) -> list[dict]:
    """Per iteration: pixels before, loss, gradient, Adam update, pixels after. ``raw``: their
    loss unscaled, so the loss and gradient are ours / C² and the update differs through Adam's
    ε wherever |g| / C² is not far above it (the note gives their smallest |g|)."""
    rows = []
    for t, (o, h) in enumerate(zip(ours, theirs)):
        scale = "by design: their loss is ours / C²" if raw else "theirs x C²"
        smallest = float(h["grad"].abs().min())
        step = f"by design: Adam's ε 1e-8 vs their smallest |g| {smallest:.1e}" if raw else ""
        rows += [
            row(f"{t}: pixels before", o["before"], h["before"], 1),
            row(f"{t}: loss", o["loss"], h["loss"], n, scale),
            row(f"{t}: gradient", o["grad"], h["grad"], 2 * n, scale),
            row(
                f"{t}: Adam update",
                o["after"] - o["before"],
                h["after"] - h["before"],
                2 * n + 8,
                step,
            ),
            row(f"{t}: pixels after", o["after"], h["after"], 2 * n + 8, step),
        ]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="DP-MERF's code_balanced/ folder")
    parser.add_argument("--commit", help="the checkout's commit when it is not a git work tree")
    for flag, default in (("--ipc", 2), ("--features", 64), ("--iterations", 3), ("--seed", 0)):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--lr", type=float, default=0.01)  # their --lr default
    parser.add_argument("--noise-factor", type=float, default=1.0)
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks/results/faithfulness/dp_merf_adam_vs_reference_cpu.md",
    )
    args = parser.parse_args(argv)
    commit = commit_of(args.checkout, args.commit)
    copy = patched_copy(
        args.checkout, required=("rff_mmd_approx.py", "gen_balanced.py", "aux.py"), patches=PATCHES
    )
    torch.set_num_threads(1)
    stub_modules("xgboost")  # imported by their synth_data_benchmark.py, unused here
    rff, gen_module = import_from(copy, "rff_mmd_approx", "gen_balanced")
    data = load_dataset("toy")
    classes = data.num_classes
    n = data.train_images[0].numel() + args.features + args.ipc
    lines = header(args, commit)
    ours, theirs = run(rff, gen_module, data, args, scale=classes**2)
    lines += markdown(
        "Their loss in our units (x C²), each iteration from their state",
        compare(ours, theirs, n=n, raw=False),
    )
    ours, theirs = run(rff, gen_module, data, args, scale=1.0)
    raw = compare(ours, theirs, n=n, raw=True)
    lines += markdown("Their loss as it is (classes weighted by their share)", raw)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    unexpected = [line for line in lines if "**no**" in line and "by design" not in line]
    for line in unexpected:
        print(f"error: outside its tolerance: {line}", file=sys.stderr)
    return 1 if unexpected else 0


def header(args, commit: str) -> list[str]:
    machine = machine_line()
    return [
        "# DP-MERF's Adam steps against the authors' loop, number for number",
        "",
        f"Reference: ParkLabML/DP-MERF at commit {commit}, `code_balanced/` (a temporary copy; none "
        f"of its code is stored here). Machine: {machine}.",
        "",
        "Command: `OMP_NUM_THREADS=1 python benchmarks/faithfulness/dp_merf_adam_vs_reference.py "
        f"CHECKOUT/code_balanced --commit {commit[:7]}` (defaults: toy data, IPC {args.ipc}, "
        f"D {args.features}, lr {args.lr} (theirs), {args.iterations} iterations, their noise "
        f"factor {args.noise_factor}, seed {args.seed}).",
        "",
        *(__doc__ or "").split("\n\n", 3)[3].splitlines(),
        "",
        "Rows: ‖ours − theirs‖ / ‖theirs‖ against n·eps32, n the longest chain of additions "
        "(the projection x·Ω over the pixels, the D features, the M images; tests/support/rounding.py's "
        "rule). Each iteration starts from their pixels and Adam state copied into ours.",
        "",
    ]


if __name__ == "__main__":
    sys.exit(main())
