"""Stage (b) of benchmarks/gpu/gpu_check.sh: per-iteration time of our NDPDC and of the DPDC authors'
loop at the paper setting, same device, same process, round-robin; our evaluation step against the
reference evaluator's; FLOPs per step and the fraction of the device's peak a step reaches.

    python benchmarks/gpu/gpu_speed.py --device cuda --reference .gpu/reference \
        --out speed.md --json speed.json
    python benchmarks/gpu/gpu_speed.py --device cpu --data generated --ipc 2 --group-size 20 \
        --steps 2 --out speed.md --json speed.json   # tiny, as the dry run

Setting (default): FashionMNIST, 1x28x28, 10 classes, IPC 50, L 50 (Poisson), σ 1, G 1, ConvNet
width 128 depth 3 instance norm, DSA; the iteration of both sides is what
``benchmarks/speed/ndpdc_vs_reference_speed.py`` times (its ``Ours`` and ``Reference``: our data stream +
``NDPDC.class_losses`` + backward + SGD + the accountant's step; their ``main_dpdc.py`` loop body,
read from the checkout and executed as is). On CUDA every timed iteration ends with
``torch.cuda.synchronize()``. Evaluation: one optimiser step of the protocol (batch 256, DSA, SGD)
per run, ours (the default engine: 5 runs stacked on a GPU) against the reference
``evaluate_synset`` (the authors' ``utils.py``), each timed over a short training of the same
synthetic set, the fixed costs removed by differencing two lengths.

FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode`` (convolutions and matrix
products, forward and backward; elementwise work is not counted), operations (about one kernel
launch each on a GPU) by a dispatch mode. The JSON's ``paper_estimate`` turns both into a GPU time
per step at the PAPER setting (FLOPs of one image through the network counted on the meta device,
times the images a paper step processes; operations counted at the measured size, which the
batched step does not change): time = FLOPs / (peak x efficiency) + operations x launch cost,
with the assumptions in ``GPU_MODEL``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))
sys.path.insert(0, str(ROOT / "benchmarks" / "speed"))  # the CPU speed pair, run here on the GPU

from ndpdc_vs_reference_speed import Ours, Reference  # noqa: E402

from dpdc_lightning.data import ImageData, load_dataset  # noqa: E402
from dpdc_lightning.evaluation import EvalProtocol, train_and_test  # noqa: E402
from dpdc_lightning.models import build_network  # noqa: E402
from dpdc_lightning.seeding import derive_generator  # noqa: E402

# Published dense peaks (NVIDIA H100 SXM5 datasheet; the H200 has the same compute): FP32 on CUDA
# cores, TF32 on tensor cores. KINDS.md measured 798 TFLOP/s bf16 on an 8192^3 product, 81 % of the
# published 989: large products reach the datasheet's order, small convolutions do not.
PEAKS = {"H100": {"fp32": 66.9e12, "tf32": 494.7e12}, "H200": {"fp32": 66.9e12, "tf32": 494.7e12}}
GPU_MODEL = {
    "card": "H100 SXM (the device tool's first kind)",
    "peak_tf32_flops": 494.7e12,  # the default on CUDA: method.autocast=auto and cuDNN's default
    "efficiency": 0.25,  # of that peak, for 28x28 ConvNet convolutions of a few thousand images
    "launch_s": 10e-6,  # per eager operation: Python, dispatcher and kernel launch
}


class OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched (a GPU runs about one kernel per operation)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def counted(step) -> tuple[int, int]:
    """(FLOPs, operations) of one call of ``step``."""
    flops, ops = FlopCounterMode(display=False), OpCounter()
    with flops, ops:
        step()
    return int(flops.get_total_flops()), ops.count


def fake_fashion(per_class: int = 120) -> ImageData:
    """Stand-in data of FashionMNIST's shape (10 classes, 1x28x28, pixels in [-1, 1]) for a dry
    run."""
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(10 * per_class, 1, 28, 28, generator=generator) * 2 - 1
    labels = torch.arange(10).repeat_interleave(per_class)
    test = torch.rand(256, 1, 28, 28, generator=generator) * 2 - 1
    return ImageData.from_tensors(
        images, labels, test_images=test, test_labels=torch.arange(10).repeat(26)[:256]
    )


def paper_flops(model_width: int = 128) -> dict[str, float]:
    """FLOPs of one NDPDC, DM and evaluation step at the papers' setting, from one image's forward
    counted on the meta device (nothing computed): forward = 1 image, backward = 2 forwards."""
    with torch.device("meta"):
        net = build_network(
            "convnet",
            channels=1,
            num_classes=10,
            image_size=(28, 28),
            generator=torch.Generator(),
            device="meta",
            width=model_width,
        )
    x = torch.empty(1, 1, 28, 28, device="meta")
    embed, full = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with embed:
        net.embed(x)
    with full:
        net(x)
    per_embed, per_full = embed.get_total_flops(), full.get_total_flops()
    synthetic = 10 * 50  # IPC 50: forward + backward through the images
    return {
        "ndpdc": per_embed * (10 * 50 + 3 * synthetic),  # L = 50 real per class, no backward
        "dm": per_embed * (10 * 256 + 3 * synthetic),  # real batch 256 per class
        "eval_run": per_full * 3 * 256,  # one protocol step of one run: batch 256, fwd + bwd
    }


def estimate_s(flops: float, ops: int) -> float:
    model = GPU_MODEL
    return flops / (model["peak_tf32_flops"] * model["efficiency"]) + ops * model["launch_s"]


def time_loops(runs: dict, args, device) -> dict:
    """Round-robin iterations of ``runs`` (name -> object with ``step(i)``); FLOPs and ops of one
    more."""
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for step in range(args.warmup + args.steps):
        for name, run in runs.items():
            sync(device)
            start = time.perf_counter()
            run.step(step)
            sync(device)
            if step >= args.warmup:
                seconds[name].append(time.perf_counter() - start)
    result = {}
    for name, run in runs.items():
        try:
            flops, ops = counted(lambda run=run: run.step(args.warmup + args.steps))
        except Exception as err:  # a compiled step under the counting modes: time it all the same
            print(f"{name}: FLOPs not counted ({type(err).__name__}: {err})", flush=True)
            flops, ops = 0, 0
        result[name] = {"seconds": seconds[name], "flops": flops, "ops": ops}
    return result


def reference_shims(reference_dir: Path) -> None:
    """What the authors' modules need to import on the GPU image, values unchanged: their ``utils``
    imports ``scipy.ndimage.interpolation``, a deprecated alias that newer SciPy may drop (the same
    functions live in ``scipy.ndimage``); ``setGPU`` is stubbed by ``reference_loop``."""
    import scipy.ndimage

    try:
        import scipy.ndimage.interpolation  # noqa: F401
    except ImportError:
        sys.modules["scipy.ndimage.interpolation"] = scipy.ndimage
    if str(reference_dir) not in sys.path:
        sys.path.insert(0, str(reference_dir))


def ndpdc_runs(args, data, device, reference_dir: Path | None) -> tuple[dict, str | None]:
    runs = {
        "ours (defaults)": Ours({}, data, device=device, ipc=args.ipc, group_size=args.group_size)
    }
    if reference_dir is None:
        return runs, None
    try:
        reference_shims(reference_dir)
        runs["authors' loop"] = Reference(
            reference_dir,
            data.train_images,
            data.train_labels,
            device=device,
            ipc=args.ipc,
            group_size=args.group_size,
        )
    except Exception as err:  # their code failed to load here: time ours, and say why
        print(f"authors' loop not run: {type(err).__name__}: {err}", flush=True)
        return runs, f"{type(err).__name__}: {err}"
    return runs, None


def time_eval(args, data, device, reference_dir: Path | None) -> dict:
    """Seconds per protocol step per run: ours (default engine) and the reference evaluator."""
    generator = derive_generator(0, "gpu-speed", "synthetic")
    images = torch.randn(10 * args.ipc, 1, 28, 28, generator=generator)
    labels = torch.arange(10).repeat_interleave(args.ipc)
    steps_per_pass = -(-len(images) // 256)
    result: dict = {"ours_totals": [], "ours_ops": []}
    runs = 5 if device.type == "cuda" else 1
    accelerator = "gpu" if device.type == "cuda" else "cpu"
    test = (data.test_images[:256], data.test_labels[:256])
    for epochs in (args.eval_epochs, 2 * args.eval_epochs):  # the difference removes fixed costs
        protocol = EvalProtocol(epochs=epochs, runs=runs)
        for count in (False, True):  # timed, then counted (the counter slows every operation)
            sync(device)
            start, ops = time.perf_counter(), OpCounter()
            try:
                with ops if count else contextlib.nullcontext():
                    train_and_test(
                        images,
                        labels,
                        test_images=test[0],
                        test_labels=test[1],
                        model="convnet",
                        num_classes=10,
                        protocol=protocol,
                        seed=0,
                        accelerator=accelerator,
                        compile=False,
                    )
            except Exception as err:  # the counter under vmap: leave the count out
                if not count:
                    raise
                print(f"evaluation ops not counted ({type(err).__name__}: {err})", flush=True)
                ops.count = 0
            sync(device)
            if count:
                result["ours_ops"].append(ops.count)
            else:
                result["ours_totals"].append(time.perf_counter() - start)
    extra_steps = args.eval_epochs * steps_per_pass  # stacked: one step trains every run
    totals, ops = result.pop("ours_totals"), result.pop("ours_ops")
    result["runs_per_step"] = runs if device.type == "cuda" else 1
    result["ours (per run-step)"] = (totals[1] - totals[0]) / extra_steps / result["runs_per_step"]
    result["ops_per_step"] = (ops[1] - ops[0]) / extra_steps
    if reference_dir is not None:
        try:
            result["authors' evaluator (per step)"] = reference_eval(
                reference_dir, images, labels, test, device, args.eval_epochs, steps_per_pass
            )
        except Exception as err:  # as for their loop: ours stays measured
            print(f"authors' evaluator not run: {type(err).__name__}: {err}", flush=True)
            result["authors' evaluator failed"] = f"{type(err).__name__}: {err}"
    return result


def reference_eval(reference_dir, images, labels, test, device, epochs, steps_per_pass) -> float:
    from types import SimpleNamespace

    from torch.utils.data import DataLoader, TensorDataset

    reference_shims(reference_dir)
    import utils  # noqa: PLC0415 (the authors' module, from the bundle)

    loader = DataLoader(TensorDataset(*test), batch_size=256)
    totals = []
    for count in (epochs, 2 * epochs):
        args = SimpleNamespace(
            device=device.type,
            lr_net=0.01,
            epoch_eval_train=count,
            batch_train=256,
            dsa=True,
            dc_aug_param=None,
            dsa_strategy="color_crop_cutout_flip_scale_rotate",
            dsa_param=utils.ParamDiffAug(),
        )
        net = utils.get_network("ConvNet", 1, 10, (28, 28))
        net.register_forward_pre_hook(
            lambda module, inputs: tuple(x.contiguous() for x in inputs)  # see evaluator_crosscheck
        )
        sync(device)
        start = time.perf_counter()
        utils.evaluate_synset(0, net, images.clone(), labels.clone(), loader, args)
        sync(device)
        totals.append(time.perf_counter() - start)
    return (totals[1] - totals[0]) / (epochs * steps_per_pass)


def peak_of(device: torch.device) -> tuple[str, dict | None]:
    if device.type != "cuda":
        return "CPU", None
    name = torch.cuda.get_device_name(device)
    return name, next((peak for key, peak in PEAKS.items() if key in name), None)


def report(args, device, ndpdc: dict, evaluation: dict, commit: str | None) -> tuple[str, dict]:
    name, peak = peak_of(device)
    reduced = args.ipc != 50 or args.group_size != 50
    lines = [
        f"# GPU check, stage (b): NDPDC and evaluation step time ({name})",
        "",
        f"Written by `benchmarks/gpu/gpu_speed.py` on {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC; "
        f"torch {torch.__version__}; device {name}.",
        f"Setting: {'stand-in data' if args.data == 'generated' else 'FashionMNIST'}, IPC {args.ipc}, "
        f"L {args.group_size}, σ 1, G 1, ConvNet 128x3 instance norm, DSA"
        + (" (**REDUCED**: not the paper's IPC 50, L 50)" if reduced else " (the paper's)")
        + f"; {args.warmup} warm-up + {args.steps} timed iterations, round-robin.",
        "Authors' code: "
        + (
            f"SecMLSys/Differentially-Private-Dataset-Condensation @ {commit}"
            if commit
            else "reference absent (no local snapshot in the bundle)"
        ),
        "",
        "| loop | s/iter median | s/iter min | speed-up vs authors' loop (median) | GFLOP/iter | ops/iter | "
        "fraction of peak (TF32 / FP32) |",
        "|---|---|---|---|---|---|---|",
    ]
    ref = ndpdc.get("authors' loop")
    record = {"device": name, "torch": torch.__version__, "reduced": reduced, "ndpdc": {}}
    for loop, found in ndpdc.items():
        med, low = statistics.median(found["seconds"]), min(found["seconds"])
        ratio = f"{statistics.median(ref['seconds']) / med:.2f}x" if ref else "reference absent"
        fraction = (
            f"{found['flops'] / med / peak['tf32']:.1%} / {found['flops'] / med / peak['fp32']:.1%}"
            if peak
            else "n/a (not a GPU of the table)"
        )
        lines.append(
            f"| {loop} | {med:.4f} | {low:.4f} | {ratio} | {found['flops'] / 1e9:.1f} "
            f"| {found['ops']} | {fraction} |"
        )
        record["ndpdc"][loop] = {"median_s": med, "min_s": low, **found}
    ours = evaluation["ours (per run-step)"]
    theirs = evaluation.get("authors' evaluator (per step)")
    lines += [
        "",
        f"Evaluation, seconds per optimiser step of one run (batch 256, DSA; training of "
        f"{args.eval_epochs} vs {2 * args.eval_epochs} epochs differenced, tests excluded): ours "
        f"{ours * 1e3:.2f} ms"
        + (
            f", authors' evaluator {theirs * 1e3:.2f} ms ({theirs / ours:.2f}x)"
            if theirs
            else ", authors' evaluator: reference absent"
        ),
        "",
        f"Peaks used: {PEAKS} (dense, published); a step's FLOPs count convolutions and matrix "
        "products only.",
    ]
    record["eval"] = evaluation
    return "\n".join(lines) + "\n", record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument(
        "--reference", type=Path, default=None, help="the bundle's reference folder"
    )
    parser.add_argument("--data", choices=("fashion_mnist", "generated"), default="fashion_mnist")
    for flag, default in (
        ("--ipc", 50),
        ("--group-size", 50),
        ("--steps", 10),
        ("--warmup", 3),
        ("--eval-epochs", 20),
    ):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument(
        "--no-compile", action="store_true", help="skip the compiled variant (CUDA)"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    reference = (
        args.reference if args.reference and (args.reference / "utils.py").is_file() else None
    )
    commit = (
        (reference / "COMMIT").read_text().strip()[:7]
        if reference and (reference / "COMMIT").is_file()
        else None
    )
    data = fake_fashion() if args.data == "generated" else load_dataset("fashion_mnist")
    runs, reference_error = ndpdc_runs(args, data, device, reference)
    if reference_error:
        commit = f"{commit}, which FAILED to load here ({reference_error})"
    ndpdc = time_loops(runs, args, device)
    evaluation = time_eval(args, data, device, reference)
    ops = ndpdc["ours (defaults)"]["ops"]
    flops = paper_flops()
    estimate = {
        "model": GPU_MODEL,
        "flops": flops,
        "ops_per_ndpdc_step": ops,
        "ops_per_eval_step": evaluation["ops_per_step"],
        "ndpdc_step_s": estimate_s(flops["ndpdc"], ops),
        "dm_step_s": estimate_s(flops["dm"], ops),
        # five runs stacked in one vmapped step (the GPU default): FLOPs five times, launches once
        "eval_step_5_runs_s": estimate_s(5 * flops["eval_run"], evaluation["ops_per_step"]),
    }
    write(args, device, ndpdc, evaluation, commit, estimate)
    if device.type == "cuda" and not args.no_compile:  # phase 2, alone: its compilation may be long
        compiled = {
            "ours + method.compile": Ours(
                {"compile": True}, data, device=device, ipc=args.ipc, group_size=args.group_size
            )
        }
        ndpdc.update(time_loops(compiled, args, device))
        write(args, device, ndpdc, evaluation, commit, estimate)
    return 0


def write(args, device, ndpdc, evaluation, commit, estimate) -> None:
    """Both outputs, rewritten after each phase: a stage stopped later keeps what was measured."""
    text, record = report(args, device, ndpdc, evaluation, commit)
    record["paper_estimate"] = estimate
    args.out.write_text(text)
    args.json.write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(text, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
