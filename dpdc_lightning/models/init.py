"""Re-initialise a network's weights in place from an explicit generator.

PyTorch's own ``reset_parameters`` draws from the global RNG; this module draws the same
distributions (the layer defaults) from a caller-supplied ``torch.Generator`` instead. The
condensation methods call :func:`init_weights_` every iteration to sample a fresh random feature
extractor θ, so it re-uses the existing storage and does nothing per call beyond one pass over
the modules.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# Layers whose default init is kaiming_uniform_(a=sqrt(5)) for the weight and
# U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias.
_WEIGHTED = (
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
)
# Normalisation layers: affine weight 1, bias 0, running statistics cleared. _NormBase covers
# BatchNorm*d and InstanceNorm*d.
_NORMS = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)


def _uniform_(tensor: torch.Tensor, bound: float, generator: torch.Generator) -> None:
    """Fill ``tensor`` with U(-bound, bound) drawn from ``generator``.

    When the generator lives on another device than the tensor (a CPU generator for a CUDA
    network), the draw happens on the generator's device and is copied over, so the same seed
    gives the same weights on every device. The copy is asynchronous: a blocking host-to-device copy
    waits for the GPU's queue to drain, once per layer at every re-draw of the extractor; the draw is
    a fresh pageable tensor, which CUDA stages before the call returns, so it may be freed at once.
    """
    if tensor.device == generator.device:
        tensor.uniform_(-bound, bound, generator=generator)
    else:
        draw = torch.empty(tensor.shape, dtype=tensor.dtype, device=generator.device)
        draw.uniform_(-bound, bound, generator=generator)
        tensor.copy_(draw, non_blocking=True)


def _reset_norm_(module: nn.Module) -> None:
    weight = getattr(module, "weight", None)
    bias = getattr(module, "bias", None)
    if weight is not None:
        weight.fill_(1.0)
    if bias is not None:
        bias.zero_()
    if isinstance(module, nn.modules.batchnorm._NormBase) and module.track_running_stats:
        module.reset_running_stats()


@torch.no_grad()
def init_weights_(module: nn.Module, *, generator: torch.Generator) -> nn.Module:
    """Re-initialise every layer of ``module`` in place from ``generator``; returns ``module``.

    Conv and Linear layers get PyTorch's default distributions: the weight from
    ``kaiming_uniform_(a=sqrt(5))``, which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias from
    the same uniform. Normalisation layers get weight 1, bias 0 and cleared running statistics.
    The global RNG is never touched. Equal-seeded generators give identical weights.

    Raises ``TypeError`` for a module type that owns parameters but has no known default here, so
    that no parameter is ever left holding the uninitialised memory of ``to_empty``.
    """
    for layer in module.modules():
        if isinstance(layer, _WEIGHTED):
            weight = layer.weight
            # PyTorch's fan_in: size(1) times the receptive field. For ConvTranspose the weight is
            # (in, out/groups, k...), and PyTorch uses the same formula, so this matches there too.
            fan_in = math.prod(weight.shape[1:])
            bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
            _uniform_(weight, bound, generator)
            if layer.bias is not None:
                _uniform_(layer.bias, bound, generator)
        elif isinstance(layer, _NORMS):
            _reset_norm_(layer)
        elif next(layer.parameters(recurse=False), None) is not None:
            raise TypeError(
                f"init_weights_ does not know how to initialise {type(layer).__name__}; "
                "add its default initialisation to dpdc_lightning/models/init.py"
            )
    return module
