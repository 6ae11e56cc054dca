"""Cross-check our evaluator against the reference one, side by side, on one synthetic set.

The reference is Zhao & Bilen's ``evaluate_synset`` (VICO-UoE/DatasetCondensation ``utils.py``;
the DPDC authors' code keeps it). This script contains none of its code: it imports the
reference's own ``utils.py`` from the checkout given with ``--reference`` and runs it on the CPU
(the reference picks its device from ``args.device``, which we set to "cpu"). Both evaluators see
the SAME tensors: the synthetic set from ``--synthetic`` and the real test split loaded by our
package (normalised with our fixed 0.5 / 0.5, which is what the DPDC code uses; the DSA reference
normalises FashionMNIST with 0.2861 / 0.3530 instead, so feeding both the same tensors is the
fair comparison).

    PYTHONPATH=. python benchmarks/faithfulness/evaluator_crosscheck.py --synthetic SET.pt \\
        --reference /tmp/DatasetCondensation --reference-commit 53f63a6 --epochs 300 --runs 3

``SET.pt`` holds ``images`` [N, C, H, W] float (normalised space) and ``labels`` [N] int, as
``python evaluate.py --images`` reads. The measurements go into ``--out`` between two marker
lines; the rest of that file (the notes written by hand) is left as it is.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace

import torch
from torch.utils.data import DataLoader, TensorDataset

REPO_ROOT = Path(__file__).resolve().parents[2]
if (
    str(REPO_ROOT) not in sys.path
):  # run as a script from anywhere: our package, not an installed one
    sys.path.insert(0, str(REPO_ROOT))

from dpdc_lightning.data import load_dataset  # noqa: E402
from dpdc_lightning.evaluation import EvalProtocol, train_and_test  # noqa: E402
from dpdc_lightning.evaluation.image_file import load_image_file  # noqa: E402

BEGIN = "<!-- evaluator_crosscheck.py: begin (generated; edits inside are overwritten) -->"
END = "<!-- evaluator_crosscheck.py: end -->"
EVALUATORS = ("reference", "ours-single", "ours-all", "reference-all")
STRATEGY = "color_crop_cutout_flip_scale_rotate"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    data = load_dataset(args.dataset)
    images, labels = load_image_file(Path(args.synthetic), data)
    evaluators = args.evaluators.split(",")
    unknown = [e for e in evaluators if e not in EVALUATORS]
    if unknown:
        raise SystemExit(
            f"error: unknown evaluator(s) {unknown}; choose from {', '.join(EVALUATORS)}"
        )
    reference = (
        _import_reference(Path(args.reference))
        if any(e.startswith("reference") for e in evaluators)
        else None
    )

    rows = []
    for name in evaluators:
        print(f"== {name}: {args.runs} runs of {args.epochs} epochs", flush=True)
        if name.startswith("reference"):
            accuracies, seconds = _run_reference(
                reference,
                images,
                labels,
                data,
                epochs=args.epochs,
                runs=args.runs,
                mode="M" if name == "reference-all" else "S",
                seed=args.seed,
            )
        else:
            accuracies, seconds = _run_ours(
                images,
                labels,
                data,
                epochs=args.epochs,
                runs=args.runs,
                mode=name.split("-", 1)[1],
                seed=args.seed,
            )
        rows.append((name, accuracies, seconds))
        print(f"   {name}: {_cell(accuracies)} %, {seconds:.0f} s per run", flush=True)
        # Written after every evaluator so a long cross-check interrupted later keeps its rows.
        block = _markdown(rows, args, images, labels, argv if argv is not None else sys.argv[1:])
        _write_between_markers(Path(args.out), block)
    print(block)
    print(f"written to {args.out}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic", required=True, help="tensor file with images and labels")
    parser.add_argument(
        "--reference",
        required=True,
        help="a checkout of VICO-UoE/DatasetCondensation (its utils.py is imported)",
    )
    parser.add_argument("--reference-commit", default="unknown", help="commit of that checkout")
    parser.add_argument("--dataset", default="fashion_mnist")
    parser.add_argument("--epochs", type=int, default=300, help="the reference's epoch_eval_train")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1 is fastest on a 2-core machine shared with other work)",
    )
    parser.add_argument(
        "--evaluators",
        default="reference,ours-single,ours-all",
        help=f"comma-separated subset of {', '.join(EVALUATORS)}",
    )
    parser.add_argument(
        "--synthetic-origin",
        default="",
        help="how the synthetic set was made (a command), for the results file",
    )
    parser.add_argument(
        "--out", default=str(REPO_ROOT / "benchmarks/results/faithfulness/evaluator_crosscheck.md")
    )
    return parser


def _import_reference(path: Path) -> ModuleType:
    if not (path / "utils.py").is_file() or not (path / "networks.py").is_file():
        raise SystemExit(f"error: {path} holds no reference utils.py / networks.py")
    sys.path.insert(0, str(path))  # its utils.py imports its networks.py by plain name
    return importlib.import_module("utils")


def _run_reference(
    ref: ModuleType,
    images: torch.Tensor,
    labels: torch.Tensor,
    data,
    *,
    epochs: int,
    runs: int,
    mode: str,
    seed: int,
) -> tuple[list[float], float]:
    param = ref.ParamDiffAug()
    param.aug_mode = mode
    # The attributes the reference's evaluate_synset / epoch read, set as its main scripts do.
    args = SimpleNamespace(
        device="cpu",
        lr_net=0.01,
        epoch_eval_train=epochs,
        batch_train=256,
        dsa=True,
        dsa_strategy=STRATEGY,
        dsa_param=param,
        dc_aug_param=None,
    )
    test = TensorDataset(data.test_images, data.test_labels)
    testloader = DataLoader(test, batch_size=256, shuffle=False, num_workers=0)
    channels, size = images.shape[1], tuple(images.shape[2:])
    accuracies, start = [], time.perf_counter()
    for run in range(runs):
        # The reference seeds torch's global RNG from the clock inside get_network (the network
        # initialisation); seeding afterwards only fixes its shuffling and DSA draws.
        net = ref.get_network("ConvNet", channels, data.num_classes, size)
        net.register_forward_pre_hook(_standard_strides)
        torch.manual_seed(seed * 1000 + run)
        _, _, accuracy = ref.evaluate_synset(
            run, net, images.clone(), labels.clone(), testloader, args
        )
        accuracies.append(float(accuracy))
    return accuracies, (time.perf_counter() - start) / runs


def _standard_strides(module: torch.nn.Module, inputs: tuple) -> tuple:
    # Compatibility with the torch installed here, not a change of the computation: the
    # reference's crop returns a 1-channel batch whose strides look channels-last, current torch
    # then keeps the conv outputs channels-last, and the reference's ``out.view(N, -1)`` refuses
    # them. A copy with standard strides holds the same values.
    return tuple(x.clone(memory_format=torch.contiguous_format) for x in inputs)


def _run_ours(
    images: torch.Tensor,
    labels: torch.Tensor,
    data,
    *,
    epochs: int,
    runs: int,
    mode: str,
    seed: int,
) -> tuple[list[float], float]:
    protocol = EvalProtocol(epochs=epochs, runs=runs, dsa_strategy=STRATEGY, dsa_mode=mode)
    start = time.perf_counter()
    accuracies = train_and_test(
        images,
        labels,
        test_images=data.test_images,
        test_labels=data.test_labels,
        model="convnet",
        num_classes=data.num_classes,
        protocol=protocol,
        seed=seed,
        accelerator="cpu",
    )
    return accuracies, (time.perf_counter() - start) / runs


def _cell(accuracies: list[float]) -> str:
    values = [100 * a for a in accuracies]
    return f"{statistics.mean(values):.2f} ± {statistics.pstdev(values):.2f}"


def _markdown(rows, args, images: torch.Tensor, labels: torch.Tensor, argv: list[str]) -> str:
    digest = hashlib.sha256(Path(args.synthetic).read_bytes()).hexdigest()[:16]
    protocol = EvalProtocol(epochs=args.epochs, runs=args.runs)
    lines = [
        BEGIN,
        "",
        f"- synthetic set: `{args.synthetic}` (sha256 {digest}…), {len(labels)} images "
        f"{tuple(images.shape[1:])}, {len(labels) // max(1, int(labels.max()) + 1)} per class"
        + (f"; made with `{args.synthetic_origin}`" if args.synthetic_origin else ""),
        f"- test data: {args.dataset} real test split, normalised (x - 0.5) / 0.5, the same tensors "
        "for every evaluator",
        f"- reference: VICO-UoE/DatasetCondensation commit {args.reference_commit}, its "
        "`evaluate_synset` + `get_network('ConvNet')` + `ParamDiffAug` (aug_mode 'S' unless noted), "
        "strategy " + STRATEGY + ", run on the CPU",
        f"- protocol: Epoch = {args.epochs} ({protocol.train_epochs} passes), lr 0.01 -> x0.1 "
        f"after {protocol.decay_epoch} passes, batch 256, SGD momentum 0.9, wd 5e-4; "
        f"{args.runs} runs per evaluator",
        f"- device: {torch.get_num_threads()}-thread CPU ({platform.machine()}, "
        f"2-core machine shared with other work), torch {torch.__version__}",
        f"- command: `PYTHONPATH=. python benchmarks/faithfulness/evaluator_crosscheck.py {' '.join(argv)}`",
        "",
        "| evaluator | DSA mode | accuracy (%) | runs | per-run accuracies (%) | s / run |",
        "|---|---|---|---|---|---|",
    ]
    modes = {
        "reference": "single ('S')",
        "reference-all": "all ('M')",
        "ours-single": "single",
        "ours-all": "all",
    }
    for name, accuracies, seconds in rows:
        each = ", ".join(f"{100 * a:.2f}" for a in accuracies)
        lines.append(
            f"| {name} | {modes[name]} | {_cell(accuracies)} | {len(accuracies)} | {each} "
            f"| {seconds:.0f} |"
        )
    means = {name: 100 * statistics.mean(acc) for name, acc, _ in rows}
    if "reference" in means and "ours-single" in means:
        gap = means["ours-single"] - means["reference"]
        verdict = "within" if math.fabs(gap) <= 2.0 else "NOT within"
        lines += [
            "",
            f"ours-single - reference = {gap:+.2f} points ({verdict} the 2-point criterion).",
        ]
    lines += ["", END]
    return "\n".join(lines) + "\n"


def _write_between_markers(path: Path, block: str) -> None:
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + block + ("\n" + tail if tail else "")
    else:
        text = (text.rstrip("\n") + "\n\n" if text else "") + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
