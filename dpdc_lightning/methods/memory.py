"""The memory a condensation needs, estimated before anything is allocated.

``condense.Condensation`` asks the method for its needs (``CondensationMethod.memory_needs``) and
calls :func:`check_fits` before building anything: a run that cannot fit ends in one line with the
estimate and the memory available, instead of being killed by the kernel minutes later with its run
folder and secret left behind.

What is counted (float32, 4 B a value):
- the synthetic set with its gradient, the optimiser's state and the exported copy;
- what autograd keeps for the backward pass, per image: measured by running the network on the
  meta device (shapes only, nothing allocated) under saved-tensor hooks, times the images whose
  graph is alive at once (e.g. the whole synthetic set for the feature-matching methods, whose loss
  sums over all classes before one backward), plus the gradient of the widest layer while the
  backward passes it and the augmented copies DSA keeps;
- the forward of a batch without a graph (a private sample): twice the largest layer input + output
  per image, at a high quantile of a Poisson sample, E + 4·√E + 4 records;
- method state: Dosser's signal bank, subspace cache, auxiliary features and EMA, PSG's per-example
  gradients of one chunk;
- the private training set as it is stored (data/image_data.py): one byte a value for 8-bit
  images, four for float32, from the public class sizes (the declared or released ones). It is
  already loaded when the check runs, so it is outside the host memory reported available and is
  not compared with it (``resident``); on a GPU it is copied to the device and counted there. A set
  read through a memory map (an image folder's decoded cache, data/decoded_cache.py) counts 0: its
  pages are file-backed, read as sampled and dropped by the kernel under pressure, never copied
  to a GPU (the sampled batch is, and counted as such).
Step-time working sets (activations, batches) are freed before the next is built, so only the
largest one counts; persistent state adds up. Everything is computed from the config, the image
shape, the number of classes and the privacy plan, never from the class sizes or a record: whether
a run is refused does not depend on private data.

Not counted: the Python and torch runtime (about 0.5-1 GiB resident), the test split, allocator
slack, cuDNN
workspaces and compile caches. Measured against the growth of a run's peak resident memory on the
CPU (benchmarks/scale/memory_estimate.py, benchmarks/results/scale/memory_estimate_cpu.md), that
growth was
0.87-1.11 times the estimate for every method (LDPDC aside: its 1 MiB is below the allocator's
granularity). A run is refused only when the estimate exceeds the memory available; one that
passes close to the limit may still fail.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from dpdc_lightning.config.auto import choose_device
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods.spec import DataSpec
from dpdc_lightning.models.registry import NETWORKS

FLOAT = 4  # bytes of a float32


@dataclass(frozen=True)
class Need:
    """One consumer of memory: what it is, its size, and the config keys that set that size."""

    what: str
    bytes: int
    keys: str
    step: bool = False  # a step-time working set: only the largest is alive at once
    host: bool = False  # kept in host memory even when the run computes on a GPU
    # already in host memory when the check runs (the loaded data set): part of the estimate, but
    # not compared with the host memory still available, which no longer includes it
    resident: bool = False


@dataclass(frozen=True)
class NetworkCost:
    """Per-image costs of one network on one image shape (from a meta-device run)."""

    saved: int  # bytes autograd keeps for the backward pass
    forward: int  # bytes of a forward without a graph (largest layer input + output)
    features: int  # length of the embedding
    parameters: int  # number of parameters


def poisson_high(expected: float) -> int:
    """A sample size a Poisson (or binomial) sample of mean ``expected`` stays below in practice
    (four standard deviations and a margin): activations are sized for it, not for the mean."""
    return int(math.ceil(expected + 4 * math.sqrt(expected) + 4))


def network_cost(
    model: ModelConfig, image_shape: tuple[int, int, int], num_classes: int, *, whole: bool
) -> NetworkCost:
    """Per-image memory of ``model``: ``whole`` runs the classifier with parameter gradients (the
    gradient-matching methods), otherwise the embedding with frozen weights (feature matching)."""
    return _network_cost(
        model.name, tuple(sorted(model.options().items())), tuple(image_shape), num_classes, whole
    )


@lru_cache(maxsize=64)
def _network_cost(
    name: str, options: tuple, image_shape: tuple[int, int, int], num_classes: int, whole: bool
) -> NetworkCost:
    channels, height, width = image_shape
    with torch.device("meta"):
        net = NETWORKS[name].factory(channels, num_classes, (height, width), **dict(options))
    for parameter in net.parameters():
        parameter.requires_grad_(whole)
    widest = [0]

    def measure(module: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        sizes = [t.numel() for t in (*inputs, output) if isinstance(t, torch.Tensor)]
        widest[0] = max(widest[0], sum(sizes) // len(output))

    def saved_bytes(batch: int) -> int:
        saved: dict[int, int] = {}  # by tensor: one tensor saved by two operations is held once

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            saved[id(tensor)] = tensor.numel() * tensor.element_size()
            return tensor

        x = torch.empty(batch, *image_shape, device="meta", requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            net(x) if whole else net.embed(x)
        return sum(saved.values())

    hooks = [m.register_forward_hook(measure) for m in net.modules() if not list(m.children())]
    two = saved_bytes(2)  # 2 and 4: a norm layer in training mode refuses one value per channel
    for hook in hooks:
        hook.remove()
    # Per image: the difference between two batch sizes, so that saved weights (a convolution keeps
    # its weight for the input's gradient) are not counted once per image.
    four = saved_bytes(4)
    features = int(net.embed(torch.empty(2, *image_shape, device="meta")).shape[1])
    return NetworkCost(
        saved=(four - two) // 2,
        forward=widest[0] * FLOAT,
        features=features,
        parameters=sum(p.numel() for p in net.parameters()),
    )


def run_device(trainer: dict) -> torch.device:
    """The device Lightning will compute on for these ``trainer.*`` options (config/auto.py's
    choose_device with this machine's CUDA and MPS). An accelerator that is not there is estimated
    on the host: Lightning refuses it when the trainer is built."""
    cuda, mps = torch.cuda.is_available(), torch.backends.mps.is_available()
    kind = choose_device(
        str(trainer.get("accelerator", "auto")), cuda_available=cuda, mps_available=mps
    )
    present = {"cuda": cuda, "mps": mps}.get(kind, True)
    return torch.device(kind if present else "cpu")


def private_set_need(data: DataSpec) -> Need:
    """The private training set as stored, sized from public class sizes only."""
    records = math.ceil(sum(data.public_class_sizes or data.class_sizes))
    size = records * math.prod(data.image_shape) * data.pixel_bytes
    form = "8-bit" if data.pixel_bytes == 1 else "float32"
    if data.memory_mapped:  # paged in from the decoded cache as sampled; the batch is counted
        return Need(f"private set ({form}, memory-mapped: not resident)", 0, "dataset", host=True)
    return Need(f"private set ({form}, as stored)", size, "dataset", resident=True)


def total_bytes(needs: Iterable[Need]) -> int:
    needs = list(needs)
    return sum(n.bytes for n in needs if not n.step) + max(
        (n.bytes for n in needs if n.step), default=0
    )


def host_available() -> int | None:
    """Bytes this process may still allocate: the kernel's MemAvailable, lowered by a cgroup limit
    (a container's memory.max) when there is one. None where neither can be read."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit, usage in (
        ("memory.max", "memory.current"),  # cgroup v2, then v1
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"),
    ):
        try:
            cap = Path("/sys/fs/cgroup", limit).read_text().strip()
            if cap != "max" and int(cap) < 1 << 60:
                found.append(int(cap) - int(Path("/sys/fs/cgroup", usage).read_text()))
            break
        except (OSError, ValueError):
            continue
    return min(found) if found else None


def format_bytes(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**27 else f"{n / 2**20:.0f} MiB"


def check_fits(needs: list[Need], *, method: str, device: torch.device) -> None:
    """Refuse, in one line, a run whose estimate exceeds the memory available to it."""
    pools = [("", [n for n in needs if not n.resident], host_available())]
    if device.type == "cuda":
        free = int(torch.cuda.mem_get_info(device)[0])
        pools = [
            (" on the GPU", [n for n in needs if not n.host], free),
            (" in host memory", [n for n in needs if n.host and not n.resident], host_available()),
        ]
    for where, members, available in pools:
        need = total_bytes(members)
        if available is None or need <= available:
            continue
        largest = sorted(members, key=lambda n: n.bytes, reverse=True)
        parts = ", ".join(f"{n.what} {format_bytes(n.bytes)}" for n in largest[:3] if n.bytes)
        raise UserError(
            f"method={method} would need about {format_bytes(need)} of memory{where} but "
            f"{format_bytes(available)} are available ({parts}); lower {largest[0].keys}"
        )
