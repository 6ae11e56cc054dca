"""The random feature extractor Φ_θ of distribution-matching methods (DM, NDPDC, Dosser).

θ is drawn afresh every step from a generator derived from (seed, step) and never trained, so every
process of a sharded run, and a resumed run, uses the same θ at the same step.

Speed options and their "auto" values were chosen by measuring, side by side with the DPDC authors'
loop (benchmarks/speed/ndpdc_vs_reference_speed.py,
benchmarks/results/speed/ndpdc_vs_reference_speed_cpu.md,
and benchmarks/speed/ndpdc_speed.py for the variants alone).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor

from dpdc_lightning.config.auto import choose_autocast, choose_forward, choose_memory_format
from dpdc_lightning.config.methods import AUTOCAST_MODES, MEMORY_FORMATS
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.models import build_network, init_weights_
from dpdc_lightning.seeding import derive_generator

# A compiled extractor sees at most this many batch shapes per graph (buckets, see bucket_size).
_RECOMPILE_LIMIT = 64


def bucket_size(n: int) -> int:
    """``n`` rounded up to a multiple of ``max(8, 2^(bit_length(n) - 4))``: at most n/8 (or 7 rows)
    of padding, and a handful of distinct sizes for a Poisson sample around its mean, so that a
    compiled extractor compiles once per bucket instead of once per realised sample size."""
    if n < 1:
        raise ValueError(f"bucket_size needs n >= 1, got {n}")
    quantum = max(8, 1 << max(n.bit_length() - 4, 0))
    return -(-n // quantum) * quantum


def resolve_autocast(autocast: str, device: torch.device) -> str:
    """The precision an ``autocast`` value means on ``device`` ("auto": config/auto.py's
    choose_autocast with this machine's GPU, TF32 on CUDA GPUs of compute capability 8.0 or more,
    float32 elsewhere). TF32 runs the extractor's convolutions on tensor cores, while clipping and
    noise stay float32/float64 (privacy/mechanisms/gaussian.py)."""
    if autocast not in AUTOCAST_MODES:
        raise ValueError(f"autocast must be one of {AUTOCAST_MODES}, got {autocast!r}")
    cuda = device.type == "cuda" and torch.cuda.is_available()
    major = torch.cuda.get_device_capability(device)[0] if cuda else None
    return choose_autocast(autocast, device_type=device.type, cuda_major=major)


@contextlib.contextmanager
def cudnn_tf32(allowed: bool) -> Iterator[None]:
    """cuDNN's TF32 switch at ``allowed`` inside the block (only that switch; restored after)."""
    cudnn = torch.backends.cudnn
    previous = cudnn.allow_tf32
    cudnn.allow_tf32 = allowed
    try:
        yield
    finally:
        cudnn.allow_tf32 = previous


def _frozen_network(
    model: ModelConfig,
    *,
    channels: int,
    num_classes: int,
    image_size: tuple[int, int],
    seed: int,
    device: torch.device,
) -> torch.nn.Module:
    """The extractor's network, built from the public seed, in training mode (DM/DPDC extract
    features so), its weights frozen: gradients are wanted for the images only."""
    net = build_network(
        model.name,
        channels=channels,
        num_classes=num_classes,
        image_size=image_size,
        generator=derive_generator(seed, "theta", "build"),
        device=device,
        **model.options(),
    )
    net.train()
    for parameter in net.parameters():
        parameter.requires_grad_(False)
    return net


def per_sample_norm(model: ModelConfig) -> bool:
    """Whether every layer treats each image on its own (no batch norm; VGG/ResNet take a norm
    too): only then is one forward of all classes (or a zero-padded batch) exact."""
    return "norm" not in model.options() or model.norm != "batchnorm"


def _forward_mode(
    forward: str, model: ModelConfig, *, device: torch.device, per_sample: bool
) -> str:
    """``loop`` (one forward per class) or ``batched`` (one for all; config/auto.py's
    choose_forward decides ``auto``)."""
    forward = choose_forward(forward, device_type=device.type, per_sample=per_sample)
    if forward == "batched" and not per_sample:
        raise ValueError(
            f"batched forward needs per-sample normalisation, model.norm is {model.norm}"
        )
    return forward


class RandomExtractor:
    """Holds one network whose weights are re-drawn in place by ``resample(step)``."""

    def __init__(
        self,
        model: ModelConfig,
        *,
        channels: int,
        num_classes: int,
        image_size: tuple[int, int],
        seed: int,
        device: torch.device,
        forward: str = "auto",
        memory_format: str = "auto",
        autocast: str = "none",
        compile: bool = False,
    ) -> None:
        """``memory_format`` is the layout of the inputs ("auto": the faster one measured on this
        device type); ``autocast`` the precision of the forward ("none": float32, on CUDA with
        cuDNN's TF32 switched off; "bf16": bfloat16 autocast; "tf32": TF32 on CUDA; "auto": see
        :func:`resolve_autocast`); features always come back float32 and the mechanism clips and
        noises in float64. ``compile`` wraps the embedding in ``torch.compile`` with static shapes.
        All are speed options: features agree with the float32 defaults up to rounding, except bf16
        (and TF32), which round the convolutions; the compiled backward moves image gradients by
        1e-4..1e-3 relative (measured, benchmarks/results/speed/ndpdc_vs_reference_speed_cpu.md)."""
        if memory_format not in MEMORY_FORMATS:
            raise ValueError(
                f"memory_format must be one of {MEMORY_FORMATS}, got {memory_format!r}"
            )
        self.autocast = resolve_autocast(autocast, device)
        self.seed = seed
        self.net = _frozen_network(
            model,
            channels=channels,
            num_classes=num_classes,
            image_size=image_size,
            seed=seed,
            device=device,
        )
        self.per_sample = per_sample_norm(model)
        self.forward_mode = _forward_mode(forward, model, device=device, per_sample=self.per_sample)
        memory_format = choose_memory_format(
            memory_format, device_type=device.type, compiled=bool(compile)
        )
        # Only the inputs change layout: the convolutions follow them, while the weights stay
        # contiguous, so init_weights_ fills them in the same order as without this option.
        self.memory_format = memory_format
        self.device_type = device.type
        # Static shapes: dynamic=True compiled for minutes on CPU (273 s measured before); with
        # static shapes a compile takes seconds per shape once the Inductor cache is warm, and the
        # varying Poisson batches are padded to a few bucket sizes (embed). The weights are
        # re-drawn in place, and Dynamo treats module parameters as inputs, so a new θ never
        # recompiles.
        self.compiled = bool(compile)
        self._embed = torch.compile(self.net.embed, dynamic=False) if compile else self.net.embed

    def resample(self, step: int) -> None:
        init_weights_(self.net, generator=derive_generator(self.seed, "theta", step))

    def _precision(self) -> contextlib.AbstractContextManager:
        if self.autocast == "bf16":
            return torch.autocast(self.device_type, dtype=torch.bfloat16)
        if self.device_type == "cuda":
            # cuDNN allows TF32 convolutions by default; "none" turns that off for an exact float32
            # forward, "tf32" turns it on. (The backward runs later, under torch's global setting.)
            return cudnn_tf32(self.autocast == "tf32")
        return contextlib.nullcontext()

    def embed(self, x: Tensor) -> Tensor:
        """Float32 features of one batch. A compiled extractor pads a batch that needs no gradient
        (a real Poisson sample, whose size changes every step) with zero images up to
        :func:`bucket_size` and drops their rows: exact, because every layer of a per-sample-norm
        network treats each image on its own. Synthetic batches keep their fixed size."""
        if self.memory_format == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        n = len(x)
        pad = self.compiled and self.per_sample and n > 0 and not x.requires_grad
        if pad and bucket_size(n) > n:
            x = torch.cat([x, x.new_zeros((bucket_size(n) - n, *x.shape[1:]))])
        fn = (
            self._embed if n > 0 else self.net.embed
        )  # an empty batch is not worth a compiled graph
        limit = contextlib.nullcontext()
        if self.compiled:
            import torch._dynamo as dynamo  # noqa: PLC0415  (torch.compile has loaded it already)

            limit = dynamo.config.patch(recompile_limit=_RECOMPILE_LIMIT)
        with limit, self._precision():
            features = fn(x)
        return features[:n].float()

    def embed_groups(self, groups: list[Tensor]) -> list[Tensor]:
        """Features of several batches: one forward each ("loop") or one for all ("batched")."""
        if self.forward_mode == "loop" or len(groups) == 1:
            return [self.embed(g) for g in groups]
        features = self.embed(torch.cat(groups))
        return list(torch.split(features, [len(g) for g in groups]))

    def private_features(self, groups: list[Tensor]) -> list[Tensor]:
        """Features of private batches. They are never differentiated (only their clipped, noised
        sum is released), so they are computed under ``torch.inference_mode``: no autograd
        records, no version counters."""
        with torch.inference_mode():
            return self.embed_groups(groups)
