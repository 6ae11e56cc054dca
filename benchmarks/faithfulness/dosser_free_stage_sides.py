"""The two sides of ``dosser_free_stage_vs_reference.py``: their bank and loop, built by their own
classes from a patched temporary copy of their code, and our ``Dosser`` handed the same state;
each side's free step with every intermediate recorded."""

from __future__ import annotations

import numpy as np
import torch
from reference_code import fail, recording, replaced

import dpdc_lightning.methods.dosser as dosser_module
from dpdc_lightning.config.methods import AuxiliaryConfig, DosserConfig
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.auxiliary import AuxiliarySet
from dpdc_lightning.methods.dosser import Dosser
from dpdc_lightning.methods.feature_matching import FeatureMatchingMethod
from dpdc_lightning.methods.subspace import SubspaceCache
from dpdc_lightning.privacy.planning.planner import make_plan
from dpdc_lightning.seeding import derive_generator

STRATEGY = "color_crop_cutout_flip_scale_rotate"


def their_session(ref, data, args, classes: int):
    """Their bank (precomputed on our toy data) and their synthetic set, built by their classes."""
    cfg = ref.TrainingConfig(
        dataset="MNIST",
        images_per_class=args.ipc,
        sampling_iterations=args.sampling_steps,
        training_iterations=args.iterations,
        enable_pea=True,
        enable_ser=True,
        ser_dimension=args.dim,
        group_size=float(args.group_size),
        max_norm=args.clip_norm,
        noise_sigma=args.sigma,
        device="cpu",
    )
    manager = object.__new__(ref.DatasetManager)  # their loader reads torchvision files: skipped
    manager.config, manager.device, manager.channels, manager.image_size = cfg, "cpu", 1, (28, 28)
    manager.num_classes = classes
    picked = [data.train_images[data.train_labels == c] for c in range(classes)]
    manager.real_images = torch.cat(picked)
    sizes = np.cumsum([0] + [len(p) for p in picked])
    manager.class_indices = [list(range(sizes[c], sizes[c + 1])) for c in range(classes)]
    aux = object.__new__(ref.AuxiliaryDataManager)
    aux.config, aux.num_classes, aux.device = cfg, classes, "cpu"
    aux.auxiliary_images = data.test_images.clone()
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    bank = ref.TrainingSignalPrecomputer(cfg, manager, aux)
    bank.precompute_training_signals()
    return bank, ref.SyntheticDataGenerator(cfg, manager)


class TheirDSA:
    """Their DiffAugment with a bank entry's stored seed, in the place of our DSA (see the module
    docstring): ``sample`` hands back the seed ``Dosser._dsa_params`` seeded its generator with."""

    def __init__(self, utils) -> None:
        self.utils, self.param = utils, utils.ParamDiffAug()

    def sample(self, n: int, *, image_size, generator: torch.Generator) -> int:
        return int(generator.initial_seed())

    def apply(self, images: torch.Tensor, seed: int) -> torch.Tensor:
        return self.utils.DiffAugment(images, STRATEGY, seed=seed, param=self.param)


def our_method(data, args, bank, utils, *, clip_gradient: str) -> Dosser:
    spec = DataSpec.of(data)
    config = DosserConfig(
        ipc=args.ipc,
        group_size=float(args.group_size),
        clip_norm=args.clip_norm,
        sampling_steps=args.sampling_steps,
        optimisation_steps=args.iterations,
        subspace_dim=args.dim,
        pea=True,
        ema=0.99,
        clip_gradient=clip_gradient,
        aux=AuxiliaryConfig(source="public_split"),
    )
    plan = make_plan(
        Dosser.schedule(config),
        class_sizes=spec.class_sizes,
        method="dosser",
        noise_multiplier=args.sigma,
        target_epsilon=None,
        delta=1e-5,
        calibrate="sigma",
        accountant="rdp",
    )
    method = Dosser(
        config,
        data=spec,
        plan=plan,
        seed=args.seed,
        noise_seed=0,
        model=ModelConfig(),  # ConvNet 128 x 3, instance norm, average pooling: theirs
        auxiliary=AuxiliarySet(data.test_images, data.test_labels, "toy test split"),
        reproducible_noise=True,
    )
    FeatureMatchingMethod.on_fit_start(method)
    method.dsa = TheirDSA(utils)
    method._load_theta = lambda i: load_network(method.extractor.net, bank.networks[i])
    method.subspaces = SubspaceCache(args.sampling_steps)
    for i, (basis, mean) in enumerate(bank.pca_components):
        method.subspaces.get(i, lambda b=basis, m=mean: (m.float(), b.float()))
    return method


def load_network(ours: torch.nn.Module, theirs: torch.nn.Module) -> None:
    """Their network's feature layers into ours, parameter by parameter (same layers, same order;
    the classifier, sized by the class count, is not used by the embedding)."""

    def layers(net):
        return [v for k, v in net.state_dict().items() if k.startswith("features.")]

    pairs = list(zip(layers(ours), layers(theirs), strict=True))
    with torch.no_grad():
        for mine, their in pairs:
            if mine.shape != their.shape:
                fail(f"network layers differ: {tuple(mine.shape)} vs {tuple(their.shape)}")
            mine.copy_(their)


def their_iteration(ref, bank, generator, entry: int, sigma: float, clip: float) -> dict:
    """One of their train_step calls on ``entry``, every intermediate recorded."""
    keys = ("pea", "features", "projected", "noise", "loss", "grad", "after")
    record: dict = {k: [] for k in keys}
    images = generator.synthetic_images
    record["before"] = images.detach().clone()
    step = generator.optimizer.step

    def stepping(*a, **k):
        record["grad"].append(images.grad.detach().clone())
        step(*a, **k)
        record["after"].append(images.detach().clone())

    backward = torch.Tensor.backward

    def backwarding(self, *a, **k):
        record["loss"].append(self.detach().clone())
        return backward(self, *a, **k)

    with (
        replaced(ref.random, "choice", lambda seq: entry),
        replaced(
            ref, "number_sign_augment", recording(ref.number_sign_augment, record["pea"], first)
        ),
        replaced(ref, "project_new_data", input_output(ref.project_new_data, record)),
        replaced(torch, "randn_like", recording(torch.randn_like, record["noise"])),
        replaced(torch.Tensor, "backward", backwarding),
        replaced(generator.optimizer, "step", stepping),
    ):
        generator.train_step(bank)
    sums = bank.real_output_sums[entry]
    # their noisy target, combined as their line combines it: sum + sigma * draw * max_norm
    record["target"] = [s + sigma * n * clip for s, n in zip(sums, record["noise"])]
    record["ema"] = generator.parameter_averager.shadow[0].clone()
    return record


def first(output):
    return output[0]


def input_output(project, record: dict):
    """``project`` recording its input features and its output rows."""

    def wrapper(features, *args, **kwargs):
        record["features"].append(features.detach().clone())
        return recording(project, record["projected"])(features, *args, **kwargs)

    return wrapper


def our_iteration(method: Dosser, step: int, owned: list[int]) -> dict:
    """One of our free steps, every intermediate recorded."""
    keys = ("pea", "features", "projected", "target", "entries", "loss")
    record: dict = {k: [] for k in keys}
    images = method.synthetic.images
    record["before"] = images.detach().clone()
    method.owned = owned
    signal, optimise = method.bank.signal, method.optimise

    def reading(entry: int, c: int) -> torch.Tensor:
        record["entries"].append(entry)
        value = signal(entry, c)
        record["target"].append(method.plan.sample_size * value)  # as the loss scales it
        return value

    def optimising(loss: torch.Tensor, **options) -> None:
        record["loss"].append(loss.detach().clone())
        optimise(loss, **options)
        record["grad"] = images.grad.detach().clone()

    with (
        replaced(
            dosser_module,
            "partition_and_expand",
            recording(dosser_module.partition_and_expand, record["pea"], first),
        ),
        replaced(dosser_module, "project", input_output(dosser_module.project, record)),
        replaced(method.bank, "signal", reading),
        replaced(method, "optimise", optimising),
    ):
        method.free_step(step)
    record["after"] = images.detach().clone()
    record["ema"] = method.ema_images.detach().clone()
    return record


def our_entry(seed: int, step: int, sampling_steps: int) -> int:
    """The bank entry our free step ``step`` draws (its keyed draw, read before the step so that
    their loop can be given the same entry; the step's own read is checked against it)."""
    generator = derive_generator(seed, "entry", step)
    return int(torch.randint(sampling_steps, (1,), generator=generator))


def store_targets(method: Dosser, bank, entry: int, targets: list[torch.Tensor]) -> None:
    """Their noisy targets of ``entry`` as our stored signals (their sum + their noise) / L, once:
    our bank refuses a second write, so a reuse replays the first draw."""
    if bool(method.bank.filled[entry, : len(targets)].all()):
        return
    for c, target in enumerate(targets):
        seed = int(bank.seeds[entry][c])
        method.bank.store(
            entry, c, target / method.plan.sample_size, theta_seed=entry, dsa_seed=seed
        )


def synchronise(method: Dosser, generator, count: int) -> None:
    """Their images, momentum buffer and moving average copied into ours (first ``count``)."""
    theirs = generator.synthetic_images
    ours = method.synthetic.images
    with torch.no_grad():
        ours[:count].copy_(theirs)
        method.ema_images[:count].copy_(generator.parameter_averager.shadow[0])
        buffer = method.optimizer.state[ours]["momentum_buffer"]
        buffer[:count].copy_(generator.optimizer.state[theirs]["momentum_buffer"])
