"""PSG with the generator prior, step by step against the authors' loop (Chen, Kerkouche & Fritz;
github.com/DingfanChen/Private-Set, ``main_prior.py``), on the CPU.

    git --git-dir <mirror> archive <commit> | tar -x -C /tmp/psg_ref
    OMP_NUM_THREADS=1 python benchmarks/faithfulness/psg_prior_vs_reference.py /tmp/psg_ref --commit <commit>

Their loop is the body of ``main()`` (not importable): the batch loop (``for _ in
range(args.batch_loop)``) and the inner update that follows it in the outer loop are read with
``ast`` from a temporary copy of the checkout (CUDA tensor types in ``utils/gan_models.py``
patched to CPU ones) and executed as written, in a namespace holding their generator
(``GeneratorDCGAN``, identity output as ``main_prior.py``), their fixed codes, their network,
``match_loss``, ``epoch``, Adam 0.01 on the generator and SGD ``lr_net`` on the network. Our
``PSG`` (``method.prior=generator``) runs the same steps with THEIR generator (a copy) as its
synthetic set and their network's weights as θ. Nothing of their code is stored here.

Not compared, and why: their private gradient (Opacus 0.x ``PrivacyEngine`` attached to a shadow
network; today's Opacus has another API, and their noisy sum is divided by the realised batch
size, which ours deliberately is not): OUR release of each step is handed to their loop as what
``optimizer_net_grad.step()`` leaves in the shadow network's gradients; our generator
architecture (ours fits any image size, theirs is hard-wired to 28x28: theirs runs on both sides).
Per step compared: the generated images, the synthetic gradient ∇_θ CE(G(z), y), the matching
loss, the generator's gradient, the generator after Adam; after each inner update, the network.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))

from dosser_free_stage_compare import markdown, row  # noqa: E402
from psg_prior_sides import (  # noqa: E402
    flat,
    our_method,
    our_step,
    their_loop_code,
    their_namespace,
    their_step,
)
from reference_code import commit_of, import_from, machine_line, patched_copy  # noqa: E402

from dpdc_lightning.data import load_dataset  # noqa: E402
from dpdc_lightning.methods.psg import PSG  # noqa: E402

PATCHES = {
    "utils/gan_models.py": [
        ("dtype=torch.cuda.FloatTensor", "dtype=torch.FloatTensor"),
        ("y.type(torch.cuda.LongTensor)", "y.type(torch.LongTensor)"),
    ],
}


NETWORK_N = 3 * (3 * 3 * 128 + 32 * 32) + 2048  # convolutions, instance norms, classifier
GRADIENT_N = 2 * NETWORK_N
LOSS_N = GRADIENT_N + 2048  # + the longest row of the cosine distance
GENERATOR_N = 2 * LOSS_N + 4 * 64 * 25  # + the backward through the network and the generator


def compare_step(label: str, ours: dict, theirs: dict) -> list[dict]:
    return [
        row(f"{label}: images G(z, y)", ours["images"], theirs["images"], 256 * 25),
        row(
            f"{label}: real gradient handed over", flat(ours["release"]), flat(theirs["g_real"]), 1
        ),
        row(
            f"{label}: synthetic gradient ∇_θ CE",
            flat(ours["g_syn"]),
            flat(theirs["g_syn"]),
            GRADIENT_N,
        ),
        row(f"{label}: matching loss", ours["loss"], theirs["loss"], LOSS_N),
        row(
            f"{label}: generator gradient",
            flat(ours["grad_g"]),
            flat(theirs["grad_g"]),
            GENERATOR_N,
        ),
        row(
            f"{label}: Adam update of the generator",
            flat(ours["after_g"]) - flat(ours["before_g"]),
            flat(theirs["after_g"]) - flat(theirs["before_g"]),
            GENERATOR_N,
        ),
        row(
            f"{label}: generator after Adam",
            flat(ours["after_g"]),
            flat(theirs["after_g"]),
            GENERATOR_N,
        ),
    ]


def synchronise(method: PSG, ns: dict) -> None:
    """Their generator, its Adam state and their network copied into ours."""
    method.synthetic.generator.generator.load_state_dict(ns["netG"].state_dict())
    # a deep copy: load_state_dict keeps tensors that need no cast, which would share the moments
    method.optimizer.load_state_dict(copy.deepcopy(ns["optimizer_img"].state_dict()))
    method.inner.net.load_state_dict(ns["net"].state_dict())


def run(code, inner_code, ns: dict, method: PSG, data, args) -> list[dict]:
    rows = []
    generator = torch.Generator().manual_seed(args.seed)
    q = args.batch_size / len(data.train_labels)
    for outer in range(args.outer):
        for k in range(args.batches):
            step = outer * args.batches + k
            pick = torch.rand(len(data.train_labels), generator=generator) < q  # a Poisson sample
            batch = {
                "step": step,
                "images": data.train_images[pick],
                "labels": data.train_labels[pick],
            }
            if step:  # each step from their state: one step's arithmetic per row
                synchronise(method, ns)
            ours = our_step(method, batch, step)
            theirs = their_step(code, ns, batch, ours["release"])
            rows += compare_step(f"outer {outer}, batch {k}", ours, theirs)
        if outer < args.outer - 1:
            exec(inner_code, ns)  # their J epochs on the generated set, as written
            theirs_net = [p.detach().clone() for p in ns["net"].parameters()]
            rows.append(
                row(
                    f"outer {outer}: network after {args.inner} inner epochs",
                    flat(ours["net"]),
                    flat(theirs_net),
                    args.inner * GRADIENT_N,
                )
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a checkout of DingfanChen/Private-Set")
    parser.add_argument("--commit", help="the checkout's commit when it is not a git work tree")
    for flag, default in (
        ("--ipc", 2),
        ("--outer", 2),
        ("--inner", 2),
        ("--batches", 2),
        ("--batch-size", 16),
        ("--seed", 0),
    ):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--lr-net", type=float, default=0.01)
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks/results/faithfulness/psg_prior_vs_reference_cpu.md",
    )
    args = parser.parse_args(argv)
    commit = commit_of(args.checkout, args.commit)
    copy_dir = patched_copy(
        args.checkout,
        required=("main_prior.py", "utils/ops.py", "utils/gan_models.py"),
        patches=PATCHES,
    )
    torch.set_num_threads(1)
    ops, misc, gan = import_from(copy_dir, "utils.ops", "utils.misc", "utils.gan_models")
    code, inner_code = their_loop_code(copy_dir)
    data = load_dataset("toy")
    ns = their_namespace(ops, misc, gan, data, args)
    method = our_method(data, ns, args)
    rows = run(code, inner_code, ns, method, data, args)
    lines = header(args, commit) + markdown("Step by step (their generator on both sides)", rows)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    unexpected = [line for line in lines if "**no**" in line and "by design" not in line]
    for line in unexpected:
        print(f"error: outside its tolerance: {line}", file=sys.stderr)
    return 1 if unexpected else 0


def header(args, commit: str) -> list[str]:
    machine = machine_line()
    return [
        "# PSG's generator-prior loop against the authors' code, step by step",
        "",
        f"Reference: DingfanChen/Private-Set at commit {commit} (`main_prior.py`'s loop body read "
        "with ast from a temporary copy; none of its code is stored here). Machine: "
        f"{machine}.",
        "",
        "Command: `OMP_NUM_THREADS=1 python benchmarks/faithfulness/psg_prior_vs_reference.py CHECKOUT "
        f"--commit {commit[:7]}` (defaults: toy data, IPC {args.ipc}, T {args.outer}, "
        f"J {args.inner}, K {args.batches}, B {args.batch_size}, lr_net {args.lr_net}, Adam 0.01 "
        f"on the generator, no augmentation, seed {args.seed}).",
        "",
        *(__doc__ or "").split("\n\n", 2)[2].splitlines(),
        "",
        "Rows: ‖ours − theirs‖ / ‖theirs‖ against n·eps32 with n the longest chain of additions "
        "(tests/support/rounding.py's rule): the network's forward and backward, the cosine rows, the "
        "second-order backward into the generator.",
        "",
    ]


if __name__ == "__main__":
    sys.exit(main())
