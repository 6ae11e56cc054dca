"""DM per-iteration speed, side by side with the authors' own DM loop (Zhao & Bilen, "Dataset
Condensation with Distribution Matching", as run in the DPDC authors' repository,
github.com/SecMLSys/Differentially-Private-Dataset-Condensation, ``main_DM.py``).

    git -C <their repo> archive a20cf59 | tar -x -C /tmp/dpdc_ref
    OMP_NUM_THREADS=1 python benchmarks/speed/dm_vs_reference_speed.py --reference /tmp/dpdc_ref \
        --reference-commit a20cf59

Setting: the DPDC paper's FashionMNIST DM row (1x28x28, 10 classes, IPC 50, 256 real images per
class, ConvNet 128x3 instance norm, DSA color_crop_cutout_flip_scale_rotate, SGD lr 1 momentum 0.5,
N(0, 1) initial images); both sides sample the same 60000 FashionMNIST training images.

Reference: nothing of it is stored here. ``ast`` extracts the nested ``get_images`` and the body of
``if it < args.Iteration:`` from the checkout's ``main_DM.py`` (fresh network; per class a real
batch, one DSA seed for real and synthetic, embeddings, squared distance of the mean embeddings;
one backward, SGD step), executed as it is per timed iteration in a namespace holding what its
``main`` defines, ``args.device = 'cpu'``. Patches, imported from ``ndpdc_vs_reference_speed.py``:
an empty ``setGPU`` module, ``view`` -> ``reshape`` in the network's ``embed`` (``_reshaping``).

Ours: the method's own path per iteration: ``PrivateDataModule.sample`` (256 per class without
replacement) and ``DM.run_step`` (θ re-drawn, DSA, features, loss, backward, SGD step, finiteness
checks); DM is not private, so no accountant. Variants differ only in the extractor's speed
options. All rows run round-robin (one iteration each in turn) in one process, so a shared
machine's load hits all alike; wall and process CPU time are both kept (under load the latter is
the steadier, and the FLOP bound is compared with it).
"""

from __future__ import annotations

import argparse
import ast
import os
import shlex
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
for folder in ("benchmarks/gpu", "benchmarks/speed", "benchmarks/common", "."):
    sys.path.insert(0, str(ROOT / folder))

from eval_cpu_bound import clock_ghz, flops_per_cycle  # noqa: E402
from gpu_speed import paper_flops  # noqa: E402
from machine import cpu_flags, cpu_model  # noqa: E402
from ndpdc_vs_reference_speed import _reshaping, fail  # noqa: E402

from dpdc_lightning.config.methods import DMConfig  # noqa: E402
from dpdc_lightning.config.schema import ModelConfig  # noqa: E402
from dpdc_lightning.data import load_dataset  # noqa: E402
from dpdc_lightning.engine.datamodule import PrivateDataModule  # noqa: E402
from dpdc_lightning.methods.dm import DM  # noqa: E402
from dpdc_lightning.methods.spec import DataSpec  # noqa: E402
from dpdc_lightning.privacy.planning.planner import make_plan  # noqa: E402

# name -> DMConfig speed options. On CPU ``auto`` means a per-class forward in float32, contiguous
# when eager and channels-last when compiled (config/auto.py).
VARIANTS = {
    "ours: default (auto)": {},
    "ours: channels_last": {"memory_format": "channels_last"},
    "ours: compile (auto layout: channels_last)": {"compile": True},
}
DEFAULT = "ours: default (auto)"
REFERENCE = "reference: main_DM.py loop body"
ITERATIONS = 10_000  # the plan's data steps; only the first --warmup + --steps are run
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "speed" / "dm_vs_reference_speed_cpu.md"


def reference_loop(directory: Path) -> tuple[types.CodeType, types.CodeType, types.ModuleType]:
    """(code of get_images, code of the DM loop body, the checkout's utils module)."""
    path = directory / "main_DM.py"
    tree = ast.parse(path.read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    nodes = list(ast.walk(main))
    get_images = next(n for n in nodes if isinstance(n, ast.FunctionDef) and n.name == "get_images")
    loop = next(n for n in nodes if isinstance(n, ast.For) and ast.unparse(n.target) == "it")
    test = "it < args.Iteration"  # the training half of the iteration (not the evaluation)
    body = next(n for n in loop.body if isinstance(n, ast.If) and ast.unparse(n.test) == test)
    sys.modules.setdefault("setGPU", types.ModuleType("setGPU"))  # it picks a GPU on import
    sys.path.insert(0, str(directory))
    import utils  # noqa: PLC0415  (the reference checkout's module, found through sys.path)

    codes = [
        compile(ast.Module(body=part, type_ignores=[]), str(path), "exec")
        for part in ([get_images], body.body)
    ]
    return codes[0], codes[1], utils


class Reference:
    def __init__(self, directory: Path, data, *, ipc: int, batch_real: int) -> None:
        get_images, self.body, utils = reference_loop(directory)
        args = argparse.Namespace(
            device="cpu",
            model="ConvNet",  # their default: width 128, depth 3, instance norm
            ipc=ipc,
            batch_real=batch_real,
            dsa_strategy="color_crop_cutout_flip_scale_rotate",
            dsa=True,
            dsa_param=utils.ParamDiffAug(),
            Iteration=10**9,  # keeps `it < args.Iteration` true
        )
        np.random.seed(0)  # their get_images draws from numpy's global generator
        image_syn = torch.randn(10 * ipc, 1, 28, 28, generator=torch.Generator().manual_seed(0))
        image_syn.requires_grad_(True)
        members = [torch.nonzero(data.train_labels == c).flatten().tolist() for c in range(10)]
        self.ns = dict(torch=torch, np=np, time=time, args=args, channel=1, num_classes=10)
        self.ns.update(im_size=(28, 28), images_all=data.train_images, indices_class=members)
        self.ns["image_syn"] = image_syn
        self.ns["optimizer_img"] = torch.optim.SGD([image_syn], lr=1.0, momentum=0.5)
        self.ns["get_network"] = _reshaping(utils.get_network)
        self.ns["DiffAugment"] = utils.DiffAugment
        exec(get_images, self.ns)  # defines get_images(c, n), reading images_all from ns

    def step(self, step: int) -> dict[str, float]:
        self.ns["it"] = step
        start, cpu = time.perf_counter(), time.process_time()
        exec(self.body, self.ns)
        return {"total": time.perf_counter() - start, "cpu": time.process_time() - cpu}


class Ours:
    def __init__(self, options: dict, data, *, ipc: int, batch_real: int) -> None:
        spec = DataSpec(num_classes=10, image_shape=(1, 28, 28), class_sizes=data.class_sizes)
        # init=noise: the paper's N(0, 1) start (DM's own default copies real images).
        config = DMConfig(
            ipc=ipc, batch_real=batch_real, init="noise", iterations=ITERATIONS, **options
        )
        plan = make_plan(
            DM.schedule(config),
            class_sizes=spec.class_sizes,
            method="dm",
            noise_multiplier=None,
            target_epsilon=None,
            delta=1e-5,
            calibrate="sigma",
            accountant="rdp",
        )
        model = ModelConfig(name="convnet", width=128, depth=3, norm="instancenorm")
        self.method = DM(config, data=spec, plan=plan, seed=0, model=model)
        self.method.on_fit_start()
        self.stream = PrivateDataModule(data, plan=plan, sampling_seed=0)
        self.grad0: torch.Tensor | None = None

    def step(self, step: int) -> dict[str, float]:
        t0, cpu = time.perf_counter(), time.process_time()
        batch = self.stream.sample(step, list(range(10)))
        t1 = time.perf_counter()
        self.method.run_step(batch)  # zero_grad, loss, backward and SGD step inside (optimise)
        if self.grad0 is None:  # compiled kernels move gradients: the report states by how much
            self.grad0 = self.method.synthetic.images.grad.detach().clone()
        t2 = time.perf_counter()
        cpu = time.process_time() - cpu
        return {"total": t2 - t0, "cpu": cpu, "data": t1 - t0, "model": t2 - t1}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, required=True, help="a DPDC checkout")
    parser.add_argument("--reference-commit", default=None, help="when the checkout has no .git")
    for flag, default in (("--steps", 6), ("--warmup", 2), ("--threads", None), ("--ipc", 50)):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--batch-real", type=int, default=256)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"subset of: {VARIANTS}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    wanted = ("main_DM.py", "utils.py", "networks.py")
    if missing := [f for f in wanted if not (args.reference / f).is_file()]:
        fail(f"--reference {args.reference} is not a DPDC checkout (missing {', '.join(missing)})")
    args.names = [v.strip() for v in args.variants.split(",") if v.strip()]
    if unknown := [n for n in args.names if n not in VARIANTS]:
        fail(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    if args.steps < 1 or args.warmup < 0 or args.steps + args.warmup > ITERATIONS:
        fail(f"--steps must be >= 1, --warmup >= 0, and together <= {ITERATIONS}")
    return args


def command_line(argv: list[str] | None) -> str:
    """The command as one could type it again, with the thread variable that sets the timing."""
    script = "benchmarks/speed/dm_vs_reference_speed.py"
    words = ["python", script, *(sys.argv[1:] if argv is None else argv)]
    omp = os.environ.get("OMP_NUM_THREADS")
    return (f"OMP_NUM_THREADS={omp} " if omp else "") + shlex.join(words)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    data = load_dataset("fashion_mnist")
    git = subprocess.run(
        ["git", "-C", str(args.reference), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    args.commit = args.reference_commit or git.stdout.strip() or "unknown"
    load_start = os.getloadavg()[0]
    sizes = {"ipc": args.ipc, "batch_real": args.batch_real}
    runs = {REFERENCE: Reference(args.reference, data, **sizes)}
    runs.update({n: Ours(VARIANTS[n], data, **sizes) for n in args.names})
    times: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
    warm: dict[str, list[dict[str, float]]] = {name: [] for name in runs}  # includes compilation
    for step in range(args.warmup + args.steps):
        for name, run in runs.items():
            timing = run.step(step)
            (times if step >= args.warmup else warm)[name].append(timing)
            print(f"step {step} {name}: {timing['total']:.3f} s", flush=True)
    base = getattr(runs.get(DEFAULT), "grad0", None)
    diffs = {  # of the first iteration's image gradient, against the default's
        name: f"{float((run.grad0 - base).norm() / base.norm()):.1e}"
        for name, run in runs.items()
        if base is not None and getattr(run, "grad0", None) is not None
    }
    args.load = (load_start, os.getloadavg()[0])
    text = report(args, times, warm, diffs)
    text += f"\nCommand: `{command_line(argv)}`\n"
    args.out.write_text(text)
    print(text)
    return 0


def bound_seconds(threads: int) -> tuple[float, str]:
    """(FLOP bound of one iteration in seconds, how it was computed): the step's counted FLOPs
    over the nominal fp32 peak of ``threads`` cores, i.e. what no kernel can beat."""
    flops, (per_cycle, units), ghz = paper_flops()["dm"], flops_per_cycle(), clock_ghz()
    peak = ghz * per_cycle * threads
    how = (
        f"{flops / 1e9:.0f} GFLOP per iteration (benchmarks/gpu/gpu_speed.py `paper_flops`, the "
        "count gpu_check uses: convolutions and matrix products of 10 x 256 real forwards and "
        f"500 synthetic forwards + backwards) / ({threads} core(s) x {ghz:.2f} GHz x {per_cycle} "
        f"FLOP/cycle, {units}, = {peak:.0f} GFLOP/s nominal fp32 peak) = "
        f"**{flops / 1e9 / peak:.2f} s**"
    )
    return flops / 1e9 / peak, how


def report(args: argparse.Namespace, times: dict, warm: dict, diffs: dict[str, str]) -> str:
    """The markdown result: setting, machine, and one row per variant (reference first). ``times``
    and ``warm``: name -> one dict of seconds per iteration ("total" and "cpu", the process's CPU
    time, which a shared machine moves less than wall time; ours also "data", "model");
    ``args``: the parsed flags, with ``commit`` and ``load`` (1-min load at the start, the end)."""
    med = {n: statistics.median(t["total"] for t in ts) for n, ts in times.items()}
    low = {n: min(t["total"] for t in ts) for n, ts in times.items()}
    cpu = {n: statistics.median(t.get("cpu", float("nan")) for t in ts) for n, ts in times.items()}
    threads = torch.get_num_threads()
    bound, how = bound_seconds(threads)
    stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    lines = [
        "# DM per iteration vs the authors' DM loop (cpu)",
        "",
        f"Written by `benchmarks/speed/dm_vs_reference_speed.py` on {stamp} UTC.",
        f"Reference: SecMLSys/Differentially-Private-Dataset-Condensation at commit {args.commit}, "
        "loop body of `main_DM.py` read from an unmodified checkout outside this repository and "
        "executed as is (device `cpu`).",
        f"Setting: FashionMNIST (real training set, 60000 images), 1x28x28, 10 classes, IPC "
        f"{args.ipc}, {args.batch_real} real images per class, ConvNet width 128 depth 3 instance "
        "norm, DSA color_crop_cutout_flip_scale_rotate (one family per class draw), SGD lr 1 "
        "momentum 0.5, N(0, 1) initial images.",
        f"Timing: {args.warmup} warm-up iteration(s) excluded, median and min over {args.steps} "
        "timed iterations, all rows round-robin (one iteration each in turn) in one process.",
        f"Machine: {cpu_model()} ({os.cpu_count()} cores, flags: {cpu_flags()}, cpu capability "
        f"{torch.backends.cpu.get_cpu_capability()}), shared; torch {torch.__version__}, "
        f"{threads} intra-op thread(s).",
        f"Load average (1 min) at the start / end: {args.load[0]:.2f} / {args.load[1]:.2f}.",
        f"FLOP bound: {how}; `bound / CPU s` is the share of that peak an iteration reaches.",
        "",
        "| variant | s/iter median | s/iter min | speed-up vs reference (median) | (min) | "
        "CPU s/iter median | speed-up (CPU) | data stream s | model step s | "
        "step-0 image grad, rel. diff vs default | bound / CPU s | warm-up s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in times.items():
        warmup = " + ".join(f"{w['total']:.1f}" for w in warm[name]) or "-"
        parts = [statistics.median(t.get(k, float("nan")) for t in rows) for k in ("data", "model")]
        cells = " | ".join("-" if v != v else f"{v:.4f}" for v in parts)
        lines.append(
            f"| {name} | {med[name]:.3f} | {low[name]:.3f} | {med[REFERENCE] / med[name]:.2f}x | "
            f"{low[REFERENCE] / low[name]:.2f}x | {cpu[name]:.3f} | "
            f"{cpu[REFERENCE] / cpu[name]:.2f}x | {cells} | {diffs.get(name, 'n/a')} | "
            f"{bound / cpu[name]:.0%} | {warmup} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
