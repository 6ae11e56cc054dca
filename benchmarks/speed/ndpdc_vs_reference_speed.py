"""NDPDC per-iteration speed, side by side with the DPDC authors' own loop (Zheng & Li, "Differentially
Private Dataset Condensation"; github.com/SecMLSys/Differentially-Private-Dataset-Condensation).

    git -C <their repo> archive HEAD | tar -x -C /tmp/dpdc_ref
    OMP_NUM_THREADS=1 python benchmarks/speed/ndpdc_vs_reference_speed.py --reference /tmp/dpdc_ref --reference-commit a20cf59

Setting: the paper's FashionMNIST NDPDC run (1x28x28, 10 classes, IPC 50, L 50, ConvNet width 128
depth 3 instance norm, DSA color_crop_cutout_flip_scale_rotate, noise multiplier 1, G 1), on the real
FashionMNIST training set (both sides sample the same 60000 images).

Reference: nothing of it is stored here. The script imports the checkout's ``utils``/``networks`` and
reads its ``main_dpdc.py`` at run time: ``ast`` extracts the nested ``get_images`` and the body of
``if it < args.Iteration:`` (fresh network, per-class Poisson sample, Siamese DiffAugment, real and
synthetic embedding, clipping, noise, loss, one backward, SGD step), which is then executed as it
is, once per timed iteration, in a namespace holding what its ``main`` would have defined
(``args.device`` = the device asked for, i.e. patched to CPU). Shims: an empty ``setGPU`` module
(it picks a GPU on import) and ``view`` -> ``reshape`` in the network's ``embed`` (``_reshaping``).

Ours: the method's own code path per iteration: the data stream (``PrivateDataModule.sample``,
per-class Poisson), ``NDPDC.class_losses`` (θ, DSA, features, clipping, keyed float64 noise) +
backward + SGD step, then what the privacy callback does per step (the accountant's step and an RDP
ε). Variants differ only in the extractor's speed options. All variants and the reference run
round-robin (one iteration each in turn) in one process, so a shared machine's load hits all alike.
"""

from __future__ import annotations

import argparse
import ast
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))

from machine import cpu_flags, cpu_model  # noqa: E402

from dpdc_lightning.config.methods import NDPDCConfig  # noqa: E402
from dpdc_lightning.config.schema import ModelConfig  # noqa: E402
from dpdc_lightning.data import load_dataset  # noqa: E402
from dpdc_lightning.engine.datamodule import PrivateDataModule  # noqa: E402
from dpdc_lightning.methods.extractor import RandomExtractor  # noqa: E402
from dpdc_lightning.methods.ndpdc import NDPDC  # noqa: E402
from dpdc_lightning.methods.spec import DataSpec  # noqa: E402
from dpdc_lightning.privacy.accounting.accountant import PrivacyAccountant  # noqa: E402
from dpdc_lightning.privacy.planning.planner import make_plan  # noqa: E402

# name -> NDPDCConfig speed options; "no_grad real" swaps inference mode back for torch.no_grad.
VARIANTS = {
    "ours: loop fp32 (default)": {"forward": "loop"},
    "ours: loop with real path under no_grad": {"forward": "loop", "_no_grad": True},
    "ours: batched": {"forward": "batched"},
    "ours: loop + channels_last": {"forward": "loop", "memory_format": "channels_last"},
    "ours: loop + bf16 autocast": {"forward": "loop", "autocast": "bf16"},
    "ours: loop + compile": {"forward": "loop", "compile": True},
    "ours: loop + channels_last + compile": {
        "forward": "loop",
        "memory_format": "channels_last",
        "compile": True,
    },
    "ours: batched + compile": {"forward": "batched", "compile": True},
}
DEFAULT = "ours: loop fp32 (default)"
REFERENCE = "reference: main_dpdc.py loop body"


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def reference_loop(directory: Path) -> tuple[types.CodeType, types.CodeType, types.ModuleType]:
    """(code of get_images, code of the loop body, the checkout's utils module)."""
    tree = ast.parse((directory / "main_dpdc.py").read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    get_images = next(
        n for n in ast.walk(main) if isinstance(n, ast.FunctionDef) and n.name == "get_images"
    )
    loop = next(
        n for n in ast.walk(main) if isinstance(n, ast.For) and ast.unparse(n.target) == "it"
    )
    body = next(
        n
        for n in loop.body
        if isinstance(n, ast.If) and ast.unparse(n.test) == "it < args.Iteration"
    )
    sys.modules.setdefault(
        "setGPU", types.ModuleType("setGPU")
    )  # their script imports it to pick a GPU
    sys.path.insert(0, str(directory))
    import utils  # noqa: PLC0415  (the reference checkout's module, found through sys.path)

    return tuple(
        compile(ast.Module(body=nodes, type_ignores=[]), str(directory / "main_dpdc.py"), "exec")
        for nodes in ([get_images], body.body)
    ) + (utils,)


def _reshaping(get_network):
    """The one patch: their ``ConvNet.embed`` flattens with ``view``, which fails on torch 2.15 CPU when a
    crop draw leaves a 1-channel batch with channels-last strides (the convolutions then return
    channels-last activations); ``reshape`` gives the same values (their ``forward`` does
    ``.contiguous().view``) and copies only in that case."""

    def patched(*args, **kwargs):
        net = get_network(*args, **kwargs)
        net.embed = lambda x: net.features(x).reshape(x.size(0), -1)
        return net

    return patched


class Reference:
    def __init__(
        self,
        directory: Path,
        images: torch.Tensor,
        labels: torch.Tensor,
        *,
        device: torch.device,
        ipc: int,
        group_size: int,
        sigma: float = 1.0,
        max_norm: float = 1.0,
    ) -> None:
        get_images, self.body, utils = reference_loop(directory)
        args = argparse.Namespace(
            device=device.type,
            model="ConvNet",
            ipc=ipc,
            group_size=group_size,
            lr_img=1.0,
            dsa_strategy="color_crop_cutout_flip_scale_rotate",
            dsa=True,
            dsa_param=utils.ParamDiffAug(),
            max_norm=max_norm,
            sigma=sigma,
            Iteration=10**9,
        )
        image_syn = torch.randn(10 * ipc, 1, 28, 28, device=device, requires_grad=True)
        self.ns = {
            "torch": torch,
            "np": np,
            "time": time,
            "args": args,
            "channel": 1,
            "im_size": (28, 28),
            "num_classes": 10,
            "images_all": images.to(device),
            "image_syn": image_syn,
            "indices_class": [torch.nonzero(labels == c).flatten().tolist() for c in range(10)],
            "optimizer_img": torch.optim.SGD([image_syn], lr=1.0, momentum=0.5),
            "get_network": _reshaping(utils.get_network),
            "DiffAugment": utils.DiffAugment,
            "poisson_sampling": utils.poisson_sampling,
        }
        exec(
            get_images, self.ns
        )  # defines get_images(c, n, indices_class) reading images_all from ns

    def step(self, step: int) -> dict[str, float]:
        self.ns["it"] = step
        start = time.perf_counter()
        exec(self.body, self.ns)
        return {"total": time.perf_counter() - start}


class Ours:
    def __init__(
        self, options: dict, data, *, device: torch.device, ipc: int, group_size: int
    ) -> None:
        options = dict(options)
        no_grad = options.pop("_no_grad", False)
        spec = DataSpec(
            num_classes=10,
            image_shape=(1, 28, 28),
            class_sizes=tuple(int((data.train_labels == c).sum()) for c in range(10)),
        )
        config = NDPDCConfig(ipc=ipc, group_size=float(group_size), iterations=10000, **options)
        plan = make_plan(
            NDPDC.schedule(config),
            class_sizes=spec.class_sizes,
            method="ndpdc",
            noise_multiplier=1.0,
            target_epsilon=None,
            delta=1e-5,
            calibrate="sigma",
            accountant="rdp",
        )
        model = ModelConfig(name="convnet", width=128, depth=3, norm="instancenorm")
        self.method = NDPDC(config, data=spec, plan=plan, seed=0, noise_seed=0, model=model).to(
            device
        )
        self.method.on_fit_start()
        if no_grad:  # the path before inference mode, kept to measure that lever
            extractor = self.method.extractor

            def private_features(groups):
                with torch.no_grad():
                    return extractor.embed_groups(groups)

            extractor.private_features = private_features
        self.stream = PrivateDataModule(data, plan=plan, sampling_seed=0)
        self.accountant, self.plan = PrivacyAccountant(accountant="rdp"), plan
        self.optimizer = self.method.configure_optimizers()
        self.grad0: torch.Tensor | None = None
        self.device = device

    def step(self, step: int) -> dict[str, float]:
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        t0 = time.perf_counter()
        batch = self.stream.sample(step, list(range(10)))
        batch["images"] = [b.to(self.device) for b in batch["images"]]
        sync()
        t1 = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        self.method.class_losses(batch, step).sum().backward()
        if self.grad0 is None:
            self.grad0 = self.method.synthetic.images.grad.detach().cpu().clone()
        self.optimizer.step()
        sync()
        t2 = time.perf_counter()
        self.method.pop_events()
        self.accountant.step(self.plan.event())
        self.accountant.get_epsilon(delta=1e-5)  # the callback evaluates RDP ε every step
        t3 = time.perf_counter()
        return {"total": t3 - t0, "data": t1 - t0, "model": t2 - t1, "accountant": t3 - t2}


def compile_probe(args: argparse.Namespace) -> list[str]:
    """Cold and warm compile time: two fresh processes share one initially empty Inductor cache; each builds
    the chosen compiled variants and times their first iteration (compilation included)."""
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        for label in ("cold (empty TORCHINDUCTOR_CACHE_DIR)", "warm (same cache, new process)"):
            command = [
                sys.executable,
                __file__,
                "--reference",
                str(args.reference),
                "--probe-only",
                "--device",
                args.device,
                "--variants",
                ",".join(n for n in args.names if VARIANTS[n].get("compile")),
            ]
            done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
            probes = [line for line in done.stdout.splitlines() if line.startswith("probe ")]
            lines += [
                f"- {label}: "
                + ("; ".join(p[6:] for p in probes) or f"failed: {done.stderr[-300:]}")
            ]
    return lines


def bf16_probe(device: torch.device) -> list[str]:
    """bf16 autocast, timed on one class's synthetic forward + backward (50 images) rather than in the
    round-robin: on a CPU without bf16 units one full iteration took over 5 minutes (emulated)."""
    model = ModelConfig(name="convnet", width=128, depth=3, norm="instancenorm")
    x = torch.randn(50, 1, 28, 28, generator=torch.Generator().manual_seed(0)).to(device)
    seconds: dict[str, list[float]] = {"none": [], "bf16": []}
    grads = {}
    for _ in range(2):
        for autocast in seconds:
            extractor = RandomExtractor(
                model,
                channels=1,
                num_classes=10,
                image_size=(28, 28),
                seed=0,
                device=device,
                forward="loop",
                autocast=autocast,
            )
            extractor.resample(0)
            images = x.clone().requires_grad_(True)
            start = time.perf_counter()
            extractor.embed(images).square().sum().backward()
            seconds[autocast].append(time.perf_counter() - start)
            grads[autocast] = images.grad
    diff = float((grads["bf16"] - grads["none"]).norm() / grads["none"].norm())
    return [
        f"- bf16 autocast, one class (50 synthetic images, forward + backward): {min(seconds['bf16']):.2f} s "
        f"vs {min(seconds['none']):.2f} s in float32 (min of 2, alternating), i.e. "
        f"{min(seconds['none']) / min(seconds['bf16']):.2f}x; image gradient rel. diff {diff:.1e}; "
        f"mkldnn bf16 support: {torch.ops.mkldnn._is_mkldnn_bf16_supported()}."
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--reference", type=Path, required=True, help="a checkout of the DPDC authors' repository"
    )
    parser.add_argument(
        "--reference-commit", default=None, help="its commit, when the checkout has no .git"
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    for flag, default in (
        ("--steps", 6),
        ("--warmup", 2),
        ("--threads", None),
        ("--ipc", 50),
        ("--group-size", 50),
    ):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument(
        "--variants",
        default=",".join(n for n in VARIANTS if "bf16" not in n),
        help=f"subset of: {', '.join(VARIANTS)} (default: all but bf16, see --bf16-probe)",
    )
    parser.add_argument(
        "--bf16-probe", action="store_true", help="time bf16 autocast on one class batch"
    )
    parser.add_argument(
        "--compile-probe", action="store_true", help="also time cold and warm compilation"
    )
    parser.add_argument("--probe-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if missing := [
        f for f in ("main_dpdc.py", "utils.py", "networks.py") if not (args.reference / f).is_file()
    ]:
        fail(f"--reference {args.reference} is not a DPDC checkout (missing {', '.join(missing)})")
    names = args.names = [v.strip() for v in args.variants.split(",") if v.strip()]
    if any(n not in VARIANTS for n in names) or args.steps < 1 or args.warmup < 0:
        fail(
            f"unknown variants {[n for n in names if n not in VARIANTS]}, or --steps < 1 / --warmup < 0"
        )
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: CUDA is not available on this machine")
    torch.set_num_threads(args.threads or torch.get_num_threads())
    device = torch.device(args.device)
    data = load_dataset("fashion_mnist")
    if args.probe_only:
        for name in (n for n in names if VARIANTS[n].get("compile")):
            start = time.perf_counter()
            Ours(
                VARIANTS[name], data, device=device, ipc=args.ipc, group_size=args.group_size
            ).step(0)
            print(f"probe {name} first iteration {time.perf_counter() - start:.1f} s", flush=True)
        return 0
    git = subprocess.run(
        ["git", "-C", str(args.reference), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    commit = args.reference_commit or git.stdout.strip() or "unknown"
    load_start = os.getloadavg()[0]
    runs = {
        REFERENCE: Reference(
            args.reference,
            data.train_images,
            data.train_labels,
            device=device,
            ipc=args.ipc,
            group_size=args.group_size,
        )
    }
    runs.update(
        {
            n: Ours(VARIANTS[n], data, device=device, ipc=args.ipc, group_size=args.group_size)
            for n in names
        }
    )
    times: dict[str, list[dict]] = {name: [] for name in runs}  # timed iterations
    warm: dict[str, list[float]] = {name: [] for name in runs}  # warm-up iterations (compilation)
    for step in range(args.warmup + args.steps):
        for name, run in runs.items():
            timing = run.step(step)
            (
                times[name].append(timing)
                if step >= args.warmup
                else warm[name].append(timing["total"])
            )
            print(f"step {step} {name}: {timing['total']:.3f} s", flush=True)
    text = report(args, runs, times, warm, commit=commit, load_start=load_start, device=device)
    if args.bf16_probe:
        text += "\n## bf16 autocast\n\n" + "\n".join(bf16_probe(device)) + "\n"
    if args.compile_probe:
        text += "\n## Compile warm-up\n\n" + "\n".join(compile_probe(args)) + "\n"
    out = (
        args.out
        or ROOT / "benchmarks" / "results" / "speed" / f"ndpdc_vs_reference_speed_{device.type}.md"
    )
    out.write_text(text)
    print(text)
    return 0


def report(args, runs, times, warm, *, commit: str, load_start: float, device: torch.device) -> str:
    med = {n: statistics.median(t["total"] for t in ts) for n, ts in times.items()}
    low = {n: min(t["total"] for t in ts) for n, ts in times.items()}
    base = runs.get(DEFAULT)
    where = (
        f"{cpu_model()} ({os.cpu_count()} cores, flags: {cpu_flags() or 'avx2 only'}, cpu capability "
        f"{torch.backends.cpu.get_cpu_capability()}), shared"
        if device.type == "cpu"
        else torch.cuda.get_device_name(device)
    )
    lines = [
        f"# NDPDC per iteration vs the DPDC authors' loop ({device.type})",
        "",
        f"Written by `benchmarks/speed/ndpdc_vs_reference_speed.py` on {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC.",
        f"Reference: SecMLSys/Differentially-Private-Dataset-Condensation at commit {commit}, loop body of "
        "`main_dpdc.py` read from an unmodified checkout outside this repository and executed as is "
        f"(device `{device.type}`).",
        f"Setting: FashionMNIST (real training set, 60000 images), 1x28x28, 10 classes, IPC {args.ipc}, "
        f"L {args.group_size} (Poisson), ConvNet width 128 depth 3 instance norm, DSA "
        "color_crop_cutout_flip_scale_rotate (one family per class draw), noise multiplier 1, G 1, SGD lr 1 momentum 0.5.",
        f"Timing: {args.warmup} warm-up iteration(s) excluded, median and min over {args.steps} timed iterations, "
        "all rows round-robin (one iteration each in turn) in one process.",
        f"Device: {where}; torch {torch.__version__}, {torch.get_num_threads()} intra-op thread(s).",
        f"Load average (1 min) at the start / end: {load_start:.2f} / {os.getloadavg()[0]:.2f}.",
        "",
        "| variant | s/iter median | s/iter min | speed-up vs reference (median) | (min) | data stream s | "
        "model step s | accountant s | step-0 image grad, rel. diff vs default | warm-up s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in runs:
        parts = {
            k: statistics.median(t.get(k, float("nan")) for t in times[name])
            for k in ("data", "model", "accountant")
        }
        grad = getattr(runs[name], "grad0", None)
        diff = (
            "n/a"
            if grad is None or base is None
            else f"{float((grad - base.grad0).norm() / base.grad0.norm()):.1e}"
        )
        cells = " | ".join("-" if v != v else f"{v:.4f}" for v in parts.values())
        lines.append(
            f"| {name} | {med[name]:.3f} | {low[name]:.3f} | {med[REFERENCE] / med[name]:.2f}x | "
            f"{low[REFERENCE] / low[name]:.2f}x | {cells} | {diff} | "
            f"{' + '.join(f'{w:.1f}' for w in warm[name])} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
