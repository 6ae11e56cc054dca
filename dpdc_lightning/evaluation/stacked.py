"""Evaluation without a Lightning Trainer: the runs of one evaluation trained by a plain loop.

The protocol is the one of :mod:`dpdc_lightning.evaluation.train_eval` (the reference's
``evaluate_synset``): SGD with momentum and weight decay, ``range(epochs + 1)`` passes, each a fresh
permutation split into batches, DSA per batch with parameters per image, lr x 0.1 with the momentum
buffers dropped after ``decay_epoch`` passes, train mode while training, eval mode for the test.
Run ``r`` draws its initialisation, its order and its DSA parameters from the same derived
generators as the Lightning path (``(seed, "eval", model, r[, "shuffle" | "dsa"])``), so it sees
the same data whatever the engine and however many runs are trained beside it.

Two ways to run the ``R`` runs:

* ``sequential``: one run after another, every step through ONE forward-and-loss function shared by
  all runs (the weights are its arguments), compiled once with ``torch.compile`` when asked. On a
  CPU this is the fast way: the step is bound by memory-heavy elementwise work that compilation
  fuses, while stacking runs only makes the convolutions grouped, which CPU kernels run slower.
* ``stacked``: all runs in one step, ``torch.func.vmap`` over the stacked weights of the ``R``
  networks (``stack_module_state``); each run keeps its own batch, DSA draw, momentum buffers and
  batch-norm running statistics. On a GPU this turns ``R`` small launches into one wide one.

The optimiser is SGD written out on the (stacked) tensors with the formulas of ``torch.optim.SGD``
(dampening 0, no Nesterov): ``d = g + wd * w``; ``b = d`` on the first step after a (re)start,
else ``b = momentum * b + d``; ``w -= lr * b``. The sum of the runs' mean losses is differentiated,
which gives every run the gradient of its own mean loss.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from dpdc_lightning.errors import UserError
from dpdc_lightning.evaluation.engines import ENGINES, wants_compile
from dpdc_lightning.seeding import derive_generator

if TYPE_CHECKING:
    from dpdc_lightning.evaluation.progress import EvalProgress

# A train_eval.EvalProtocol; not imported, because train_eval imports this module.
_Protocol = Any


def resolve_engine(engine: str, device: torch.device) -> str:
    """``auto`` is ``stacked`` on a GPU and ``sequential`` elsewhere (measured, see
    benchmarks/results/eval_speed_cpu.md); other names stand for themselves."""
    if engine not in ENGINES:
        raise UserError(f"eval.engine={engine!r} is not allowed; choose one of: {', '.join(ENGINES)}")
    if engine != "auto":
        return engine
    return "stacked" if device.type == "cuda" else "sequential"


def resolve_device(accelerator: str) -> torch.device:
    """The device Lightning would pick for ``accelerator`` (auto: CUDA, then MPS, then CPU)."""
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    if accelerator == "mps" or (accelerator == "auto" and torch.backends.mps.is_available()):
        return torch.device("mps")
    return torch.device("cpu")


def check_inputs(images: Tensor, labels: Tensor, test_images: Tensor, test_labels: Tensor, num_classes: int) -> None:
    """One-line ``UserError`` for a training or test set the evaluation cannot use."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise UserError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    for name, x, y in (("synthetic", images, labels), ("test", test_images, test_labels)):
        if x.dim() != 4:
            raise UserError(f"{name} images must have shape (N, C, H, W), got {tuple(x.shape)}")
        if y.dim() != 1 or len(y) != len(x):
            raise UserError(f"{name} labels must have shape ({len(x)},), got {tuple(y.shape)}")
        if len(x) == 0:
            raise UserError(f"{name} set is empty")
        if y.min() < 0 or y.max() >= num_classes:
            raise UserError(f"{name} labels must lie in [0, {num_classes - 1}]")
    if test_images.shape[1:] != images.shape[1:]:
        raise UserError(f"test images are {tuple(test_images.shape[1:])}, synthetic images are "
                        f"{tuple(images.shape[1:])}; they must match")


class StepFunction:
    """The forward-and-loss function of one architecture, shared by every run trained with it.

    The weights are arguments (``functional_call`` on a "meta" copy of the network), so one
    compiled function serves all runs: it is compiled once per input shape, not once per run.
    With ``vmapped`` every weight carries a leading run dimension and the forward is vmapped over it.
    """

    def __init__(self, network: nn.Module, *, vmapped: bool, compile: bool) -> None:
        self.base = copy.deepcopy(network).to("meta")
        self.template = copy.deepcopy(network).cpu()  # to hand out trained networks
        self.vmapped = vmapped
        self._fn: Callable[..., tuple[Tensor, Tensor]] = (
            torch.compile(self._eager, dynamic=False) if compile else self._eager
        )
        self.compiled = compile

    def _eager(self, params: dict[str, Tensor], buffers: dict[str, Tensor], x: Tensor,
               y: Tensor | None) -> tuple[Tensor, Tensor]:
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
        return F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum") / y.shape[-1], logits

    def __call__(self, params: dict[str, Tensor], buffers: dict[str, Tensor], x: Tensor, y: Tensor | None, *,
                 train: bool) -> tuple[Tensor, Tensor]:
        self.base.train(train)
        if not self.compiled:
            return self._eager(params, buffers, x, y)
        saved = {k: v.clone() for k, v in buffers.items()}
        try:
            return self._fn(params, buffers, x, y)
        except Exception as err:  # no working compiler (e.g. no C++ toolchain): run eagerly
            warnings.warn(f"evaluation: torch.compile failed ({type(err).__name__}: {err}); continuing without it",
                          RuntimeWarning, stacklevel=2)
            for k, v in saved.items():  # undo any batch-norm statistics the failed call updated
                buffers[k].copy_(v)
            self.compiled, self._fn = False, self._eager
            return self._eager(params, buffers, x, y)


class _Runs:
    """The weights, momentum buffers and batch-norm statistics of the runs trained together."""

    def __init__(self, networks: list[nn.Module], step_function: StepFunction) -> None:
        self.fn = step_function
        if step_function.vmapped:
            params, self.buffers = stack_module_state(networks)
        else:
            if len(networks) != 1:
                raise ValueError("without vmap the runs are trained one at a time")
            params = dict(networks[0].named_parameters())
            self.buffers = {k: v.detach().clone() for k, v in networks[0].named_buffers()}
        self.params = {k: v.detach().clone().requires_grad_() for k, v in params.items()}
        self.momentum: list[Tensor] | None = None

    def step(self, x: Tensor, y: Tensor, *, lr: float, momentum: float, weight_decay: float) -> None:
        """One SGD step of every run on its own batch (x: [R, B, ...] when vmapped)."""
        loss, _ = self.fn(self.params, self.buffers, x, y, train=True)
        params = list(self.params.values())
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            update = torch._foreach_add(grads, params, alpha=weight_decay) if weight_decay else list(grads)
            if self.momentum is None or momentum == 0:  # torch.optim.SGD: buffer = d on its first step
                self.momentum = [u.clone() for u in update]
            else:
                torch._foreach_mul_(self.momentum, momentum)
                torch._foreach_add_(self.momentum, update)
            torch._foreach_add_(params, self.momentum, alpha=-lr)

    @torch.no_grad()
    def correct(self, x: Tensor, y: Tensor) -> Tensor:
        """Correct predictions of every run on one test batch ([R] when vmapped, else [1])."""
        _, logits = self.fn(self.params, self.buffers, x, None, train=False)
        return (logits.argmax(dim=-1) == y).sum(dim=-1).reshape(-1)

    def networks(self) -> list[nn.Module]:
        """The trained runs as ordinary networks (CPU, eval mode)."""
        vmapped = self.fn.vmapped
        count = next(iter(self.params.values())).shape[0] if vmapped else 1
        out = []
        for r in range(count):
            state = {k: (v[r] if vmapped else v).detach().cpu() for k, v in {**self.params, **self.buffers}.items()}
            network = copy.deepcopy(self.fn.template)
            network.load_state_dict(state)
            out.append(network.eval())
        return out


def _stream(images: Tensor, labels: Tensor, *, protocol: _Protocol, seed: int, model: str, run: int):
    """Run ``run``'s training batches, in order: one permutation per pass (the "shuffle"
    generator), split into batches, each augmented with one DSA call (the "dsa" generator)."""
    shuffle = derive_generator(seed, "eval", model, run, "shuffle")
    dsa_generator = derive_generator(seed, "eval", model, run, "dsa")
    dsa = None
    if protocol.dsa:
        from dpdc_lightning.augment import DSA

        dsa = DSA(protocol.dsa_strategy, mode=protocol.dsa_mode)
    for _ in range(protocol.train_epochs):
        order = torch.randperm(len(images), generator=shuffle)
        for index in order.split(protocol.batch_size):
            index = index.to(images.device)
            x, y = images[index], labels[index]
            if dsa is not None:
                x = dsa(x, generator=dsa_generator, siamese=False)
            yield x, y


def train_runs(images: Tensor, labels: Tensor, *, model: str, num_classes: int, protocol: _Protocol,
               seed: int, runs: Sequence[int], model_options: dict | None = None,
               device: torch.device | str = "cpu", stacked: bool = False, compile: bool = False,
               step_function: StepFunction | None = None, progress: EvalProgress | None = None) -> _Runs:
    """Train runs ``runs`` of the protocol on (images, labels): all together when ``stacked``,
    else exactly one run. ``step_function`` (one made by an earlier call for the same model and
    ``stacked``) is reused when given. PEA, if any, is already applied to ``images``."""
    from dpdc_lightning.models import build_network

    device = torch.device(device)
    images, labels = images.detach().float().to(device), labels.detach().long().to(device)
    networks = [build_network(model, channels=images.shape[1], num_classes=num_classes,
                              image_size=(images.shape[2], images.shape[3]),
                              generator=derive_generator(seed, "eval", model, r),
                              **(model_options or {})).to(device) for r in runs]
    if step_function is None:
        step_function = StepFunction(networks[0], vmapped=stacked, compile=compile)
    state = _Runs(networks, step_function)
    streams = [_stream(images, labels, protocol=protocol, seed=seed, model=model, run=r) for r in runs]
    steps_per_epoch = math.ceil(len(images) / protocol.batch_size)
    decay_step = protocol.decay_epoch * steps_per_epoch
    lr = protocol.lr
    for step in range(protocol.train_epochs * steps_per_epoch):
        if step == decay_step:  # the reference's fresh optimiser at lr x 0.1: momentum dropped too
            lr, state.momentum = protocol.lr * 0.1, None
        batches = [next(s) for s in streams]
        if step_function.vmapped:
            x, y = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])
        else:
            (x, y), = batches
        state.step(x, y, lr=lr, momentum=protocol.momentum, weight_decay=protocol.weight_decay)
        if progress is not None and (step + 1) % steps_per_epoch == 0:
            progress.epoch_done((step + 1) // steps_per_epoch)
    return state


@torch.no_grad()
def test_runs(state: _Runs, test_images: Tensor, test_labels: Tensor, *, batch_size: int) -> list[float]:
    """Accuracy in [0, 1] of every run of ``state`` on the test split."""
    device = next(iter(state.params.values())).device
    correct = torch.zeros(1, dtype=torch.long, device=device)
    for start in range(0, len(test_images), batch_size):
        x = test_images[start:start + batch_size].detach().float().to(device)
        y = test_labels[start:start + batch_size].detach().long().to(device)
        if state.fn.compiled and len(x) < batch_size <= len(test_images):
            # One shape for every test batch: padding the last one (label -1 never counts as
            # correct; eval mode treats images one by one) is cheaper than compiling a second graph.
            x = torch.cat([x, x.new_zeros(batch_size - len(x), *x.shape[1:])])
            y = torch.cat([y, y.new_full((batch_size - len(y),), -1)])
        correct = correct + state.correct(x, y)
    return [int(c) / len(test_images) for c in correct.cpu()]


def train_and_test_direct(images: Tensor, labels: Tensor, *, test_images: Tensor, test_labels: Tensor,
                          model: str, num_classes: int, protocol: _Protocol, seed: int,
                          model_options: dict | None = None, device: torch.device | str = "cpu",
                          stacked: bool = False, compile: str | bool = "auto",
                          progress: EvalProgress | None = None) -> list[float]:
    """:func:`train_eval.train_and_test` without Lightning (``images`` as trained on, PEA applied):
    ``stacked`` trains all runs in one vmapped step, otherwise they run one after another through
    one shared (compiled once) step function."""
    steps = protocol.train_epochs * math.ceil(len(images) / protocol.batch_size)
    compiled = wants_compile(compile, steps=steps)
    groups = [list(range(protocol.runs))] if stacked else [[r] for r in range(protocol.runs)]
    step_function = None
    accuracies: list[float] = []
    for group in groups:
        if progress is not None:
            which = f"runs 1-{protocol.runs}" if stacked else f"run {group[0] + 1}"
            progress.start_run(f"{model} {which}/{protocol.runs}", protocol.train_epochs)
        state = train_runs(images, labels, model=model, num_classes=num_classes, protocol=protocol, seed=seed,
                           runs=group, model_options=model_options, device=device, stacked=stacked,
                           compile=compiled, step_function=step_function, progress=progress)
        step_function = state.fn
        group_accuracies = test_runs(state, test_images, test_labels, batch_size=protocol.test_batch_size)
        accuracies += group_accuracies
        if progress is not None:
            for accuracy in group_accuracies:
                progress.end_run(accuracy)
    return accuracies
