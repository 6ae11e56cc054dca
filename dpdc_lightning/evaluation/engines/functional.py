"""What the trainer-free engines (sequential, stacked) share: one step function per architecture
with the weights as its arguments, the weights and momentum buffers of the runs, and a process-wide
cache of step functions so that a compiled step is compiled once per process.

``StepFunction`` runs the forward and the loss through ``functional_call`` on a "meta" copy of the
network, so one (compiled) function serves every run of every evaluation of that architecture and
input shape in the process: the runs of one evaluation, the bundles of a sweep, the shadows of an
audit. With ``vmapped`` every weight carries a leading run dimension and the forward is vmapped.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Hashable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from dpdc_lightning.evaluation.engines.cost import CompilePlan
from dpdc_lightning.evaluation.protocol import EvalProtocol, ProtocolSGD, Schedule


class StepFunction:
    """The forward-and-loss function of one architecture, shared by every run trained with it.

    ``compiled=True`` on a call runs it through one ``torch.compile`` of the function (made on first
    use; its graphs, one per input shape and mode, live as long as this object). The training graph
    and the test graph are compiled independently: each call says whether it wants its graph
    compiled.
    """

    def __init__(self, network: nn.Module, *, vmapped: bool) -> None:
        self.base = copy.deepcopy(network).to("meta")
        self.template = copy.deepcopy(network).cpu()  # to hand out trained networks
        self.vmapped = vmapped
        self._compiled: Callable[..., tuple[Tensor, Tensor]] | None = None
        self.broken = False  # torch.compile failed once: eager for the rest of the process

    def _eager(
        self, params: dict[str, Tensor], buffers: dict[str, Tensor], x: Tensor, y: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        def one(p: dict[str, Tensor], b: dict[str, Tensor], xb: Tensor) -> Tensor:
            return functional_call(self.base, (p, b), (xb,))

        if not self.vmapped:
            logits = one(params, buffers, x)
            return (logits.new_zeros(()) if y is None else F.cross_entropy(logits, y)), logits
        # Training batches are per run ([R, B, ...]); a test batch is shared by every run.
        logits = vmap(one, in_dims=(0, 0, None if y is None else 0))(params, buffers, x)
        if y is None:
            return logits.new_zeros(()), logits
        # The sum over runs of each run's mean loss: each run gets the gradient of its own loss.
        return F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum") / y.shape[
            -1
        ], logits

    def __call__(
        self,
        params: dict[str, Tensor],
        buffers: dict[str, Tensor],
        x: Tensor,
        y: Tensor | None,
        *,
        train: bool,
        compiled: bool,
    ) -> tuple[Tensor, Tensor]:
        self.base.train(train)
        if not compiled or self.broken:
            return self._eager(params, buffers, x, y)
        if self._compiled is None:
            self._compiled = torch.compile(self._eager, dynamic=False)
        saved = {k: v.clone() for k, v in buffers.items()}
        try:
            return self._compiled(params, buffers, x, y)
        except Exception as err:  # no working compiler (e.g. no C++ toolchain): run eagerly
            warnings.warn(
                f"evaluation: torch.compile failed ({type(err).__name__}: {err}); "
                "continuing without it",
                RuntimeWarning,
                stacklevel=2,
            )
            for k, v in saved.items():  # undo any batch-norm statistics the failed call updated
                buffers[k].copy_(v)
            self.broken = True
            return self._eager(params, buffers, x, y)


# One StepFunction per (architecture, input shape, device, vmapped) in the process: a compiled graph
# lives as long as its function object, so reusing the object reuses the graph.
_STEPS: dict[Hashable, StepFunction] = {}


def shared_step(key: Hashable, network: nn.Module, *, vmapped: bool) -> StepFunction:
    """The process's step function for ``key`` (made from ``network`` the first time)."""
    full = (key, vmapped)
    if full not in _STEPS:
        _STEPS[full] = StepFunction(network, vmapped=vmapped)
    return _STEPS[full]


def clear_step_cache() -> None:
    """Drop every cached step function (and the compiled graphs they hold)."""
    _STEPS.clear()


class RunState:
    """The weights, momentum buffers and batch-norm statistics of the runs trained together."""

    def __init__(
        self,
        networks: list[nn.Module],
        step_function: StepFunction,
        *,
        protocol: EvalProtocol,
        schedule: Schedule,
        compile: CompilePlan,
    ) -> None:
        self.fn = step_function
        self.compile = compile
        if step_function.vmapped:
            params, self.buffers = stack_module_state(networks)
        else:
            if len(networks) != 1:
                raise ValueError("without vmap the runs are trained one at a time")
            params = dict(networks[0].named_parameters())
            self.buffers = {k: v.detach().clone() for k, v in networks[0].named_buffers()}
        self.params = {k: v.detach().clone().requires_grad_() for k, v in params.items()}
        self.optimizer = ProtocolSGD(
            list(self.params.values()),
            schedule=schedule,
            momentum=protocol.momentum,
            weight_decay=protocol.weight_decay,
        )

    def step(self, x: Tensor, y: Tensor) -> None:
        """One optimiser step of every run on its own batch (x: [R, B, ...] when vmapped)."""
        loss, _ = self.fn(self.params, self.buffers, x, y, train=True, compiled=self.compile.train)
        params = list(self.params.values())
        for param, grad in zip(params, torch.autograd.grad(loss, params)):
            param.grad = grad
        self.optimizer.step()

    @torch.no_grad()
    def correct(self, x: Tensor, y: Tensor) -> Tensor:
        """Correct predictions of every run on one test batch ([R] when vmapped, else [1])."""
        _, logits = self.fn(
            self.params, self.buffers, x, None, train=False, compiled=self.compile.test
        )
        return (logits.argmax(dim=-1) == y).sum(dim=-1).reshape(-1)

    @torch.no_grad()
    def accuracies(
        self, test_images: Tensor, test_labels: Tensor, *, batch_size: int
    ) -> list[float]:
        """Accuracy in [0, 1] of every run on the test split."""
        device = next(iter(self.params.values())).device
        correct = torch.zeros(1, dtype=torch.long, device=device)
        for start in range(0, len(test_images), batch_size):
            x = test_images[start : start + batch_size].detach().float().to(device)
            y = test_labels[start : start + batch_size].detach().long().to(device)
            if self.compile.test and len(x) < batch_size <= len(test_images):
                # One shape for every test batch: padding the last one (label -1 never counts as
                # correct; eval mode treats images one by one) is cheaper than compiling a second
                # graph.
                x = torch.cat([x, x.new_zeros(batch_size - len(x), *x.shape[1:])])
                y = torch.cat([y, y.new_full((batch_size - len(y),), -1)])
            correct = correct + self.correct(x, y)
        return [int(c) / len(test_images) for c in correct.cpu()]

    def networks(self) -> list[nn.Module]:
        """The trained runs as ordinary networks (CPU, eval mode)."""
        vmapped = self.fn.vmapped
        count = next(iter(self.params.values())).shape[0] if vmapped else 1
        out = []
        for r in range(count):
            state = {
                k: (v[r] if vmapped else v).detach().cpu()
                for k, v in {**self.params, **self.buffers}.items()
            }
            network = copy.deepcopy(self.fn.template)
            network.load_state_dict(state)
            out.append(network.eval())
        return out
