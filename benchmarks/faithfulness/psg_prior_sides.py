"""The two sides of ``psg_prior_vs_reference.py``: their loop body read from ``main_prior.py`` and
the namespace it runs in, and our ``PSG`` holding their generator and network; each side's step
with what is compared recorded."""

from __future__ import annotations

import ast
import copy
import types
from pathlib import Path

import torch
from reference_code import replaced
from torch import nn

import dpdc_lightning.methods.psg as psg_module
from dpdc_lightning.config.methods import PSGConfig
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.psg import PSG
from dpdc_lightning.methods.synthetic import GeneratedImages
from dpdc_lightning.privacy.planning.planner import make_plan


def their_loop_code(folder: Path) -> tuple[types.CodeType, types.CodeType]:
    """(the batch loop's body, the inner update after it) of ``main_prior.py``'s outer loop."""
    path = folder / "main_prior.py"
    tree = ast.parse(path.read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    outer = next(
        n for n in ast.walk(main) if isinstance(n, ast.For) and ast.unparse(n.target) == "ol"
    )
    batch = next(
        n
        for n in outer.body
        if isinstance(n, ast.For) and ast.unparse(n.iter) == "range(args.batch_loop)"
    )
    after = outer.body[outer.body.index(batch) + 1 :]
    inner = [n for n in after if not (isinstance(n, ast.If) and "break" in ast.unparse(n))]

    def compiled(nodes):
        return compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec")

    return compiled(batch.body), compiled(inner)


class Flat(nn.Module):
    """Their generator (flat 784-pixel rows) as an image module for our synthetic set."""

    def __init__(self, generator: nn.Module, shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.generator, self.shape = generator, shape

    def forward(self, codes: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.generator(codes, labels).view(-1, *self.shape)


class InjectedRelease:
    """Their ``optimizer_net_grad``: ``step()`` leaves OUR release of the step in the shadow
    network's gradients (where their Opacus engine would leave its noisy mean)."""

    def __init__(self, shadow: nn.Module) -> None:
        self.shadow = shadow
        self.release: list[torch.Tensor] = []

    def step(self) -> None:
        for p, g in zip(self.shadow.parameters(), self.release, strict=True):
            p.grad = g.detach().clone()


def their_namespace(ops, misc, gan, data, args) -> dict:
    """What their loop body reads, built as their ``main()`` builds it."""
    classes = data.num_classes
    settings = types.SimpleNamespace(
        dsa=False,
        enable_privacy=True,
        device="cpu",
        dis_metric="gm",
        batch_train=256,
        inner_loop=args.inner,
        outer_loop=args.outer,
        batch_loop=args.batches,
    )
    torch.manual_seed(args.seed)
    net_g = gan.GeneratorDCGAN(z_dim=10, num_classes=classes, outact=nn.Identity())
    net = misc.get_network("ConvNet", 1, classes, (28, 28))  # their network θ (clock-seeded)
    shadow = copy.deepcopy(net)
    return {
        "torch": torch,
        "args": settings,
        "netG": net_g,
        "net": net,
        "net_shadow": shadow,
        "net_parameters": list(net.parameters()),
        "net_shadow_parameters": list(shadow.parameters()),
        "fix_noise": torch.randn(args.ipc * classes, 10),
        "fix_label": torch.arange(classes).repeat_interleave(args.ipc),
        "channel": 1,
        "im_size": (28, 28),
        "criterion": nn.CrossEntropyLoss(reduction="mean"),
        "optimizer_img": torch.optim.Adam(net_g.parameters(), lr=0.01),  # their --lr_img
        "optimizer_net": torch.optim.SGD(net.parameters(), lr=args.lr_net),
        "optimizer_net_grad": InjectedRelease(shadow),
        "match_loss": ops.match_loss,
        "epoch": ops.epoch,
        "TensorDataset": misc.TensorDataset,
        "loss_avg": 0.0,
    }


def our_method(data, theirs: dict, args) -> PSG:
    spec = DataSpec.of(data)
    config = PSGConfig(
        ipc=args.ipc,
        iterations=1,
        batches=args.batches,
        batch_size=float(args.batch_size),
        prior="generator",
        outer_loop=args.outer,
        inner_loop=args.inner,
        lr_net=args.lr_net,
    )
    plan = make_plan(
        PSG.schedule(config),
        class_sizes=spec.class_sizes,
        method="psg",
        noise_multiplier=1.0,
        target_epsilon=None,
        delta=1e-5,
        calibrate="sigma",
        accountant="rdp",
    )
    method = PSG(
        config,
        data=spec,
        plan=plan,
        seed=args.seed,
        noise_seed=0,
        model=ModelConfig(),
        reproducible_noise=True,
    )
    generator = Flat(copy.deepcopy(theirs["netG"]), spec.image_shape)
    synthetic = GeneratedImages(
        generator,
        num_classes=spec.num_classes,
        ipc=args.ipc,
        image_shape=spec.image_shape,
        latent_dim=10,
        rng=torch.Generator(),
    )
    synthetic.latents.copy_(theirs["fix_noise"])
    method.synthetic = synthetic
    method.on_fit_start()
    method.inner.net.load_state_dict(theirs["net"].state_dict())
    method.start_round = lambda round_index: None  # θ is theirs, not a keyed draw
    return method


def our_step(method: PSG, batch: dict, step: int) -> dict:
    record: dict = {"before_g": [p.detach().clone() for p in method.synthetic.parameters()]}
    unflatten, gradient = psg_module.unflatten_like, method.network_gradient

    def releasing(flat, like):
        record["release"] = [g.detach().clone() for g in unflatten(flat, like)]
        return unflatten(flat, like)

    def synthetic_gradient(images, labels, *, create_graph):
        grads = gradient(images, labels, create_graph=create_graph)
        if create_graph:
            record["images"] = images.detach().clone()
            record["g_syn"] = [g.detach().clone() for g in grads]
        return grads

    with (
        replaced(psg_module, "unflatten_like", releasing),
        replaced(method, "network_gradient", synthetic_gradient),
    ):
        record["loss"] = method.condensation_step(batch, step)
    params = list(method.synthetic.parameters())
    record["grad_g"] = [p.grad.detach().clone() for p in params]
    record["after_g"] = [p.detach().clone() for p in params]
    record["net"] = [p.detach().clone() for p in method.inner.params()]
    return record


def their_step(code, ns: dict, batch: dict, release: list[torch.Tensor]) -> dict:
    ns["inf_loader"] = iter([(batch["images"], batch["labels"])])
    before = [p.detach().clone() for p in ns["netG"].parameters()]
    ns["optimizer_net_grad"].release = release
    exec(code, ns)  # their batch-loop body, as written
    net_g = ns["netG"]
    return {
        "images": ns["img_syn"].detach().clone(),
        "g_syn": [g.detach().clone() for g in ns["gw_syn"]],
        "g_real": [g.detach().clone() for g in ns["gw_real"]],
        "loss": ns["loss"].detach().clone(),
        "grad_g": [p.grad.detach().clone() for p in net_g.parameters()],
        "after_g": [p.detach().clone() for p in net_g.parameters()],
        "before_g": before,
    }


def flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.flatten() for t in tensors])
