"""The foundation every method family builds on: condense() in process, the synthetic set as a
module, free steps, state carried in checkpoints, a plan that cannot move on resume, no import circle."""

from __future__ import annotations

import ast
import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from dpdc_lightning.config import compose
from dpdc_lightning.config.methods import NDPDCConfig
from dpdc_lightning.config.schema import PLAN_TRAINER_KEYS
from dpdc_lightning.data import ImageData, load_dataset
from dpdc_lightning.engine.condense import condense
from dpdc_lightning.engine.planning import plan_run
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.engine.training import train
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import METHODS, DataSpec
from dpdc_lightning.methods.dm import DM
from dpdc_lightning.methods.ndpdc import NDPDC
from dpdc_lightning.methods.synthetic import GeneratedImages
from dpdc_lightning.seeding import derive_generator

PACKAGE = Path(__file__).resolve().parents[2] / "dpdc_lightning"
SMALL = [
    "dataset=toy",
    "model.width=8",
    "model.depth=2",
    "method.ipc=2",
    "trainer.enable_progress_bar=false",
]


@pytest.fixture(scope="module")
def toy() -> ImageData:
    return load_dataset("toy")


# --------------------------------------------------------------------------- imports


def _imports(path: Path) -> set[str]:
    """Every dpdc_lightning module a file imports, at module level or inside a function."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:  # "from pkg import module" imports the module
                candidate = f"{base}.{alias.name}"
                found.add(candidate if _module_path(candidate) else base)
    return {name.removesuffix(".__init__") for name in found if name.startswith("dpdc_lightning")}


def _module_path(name: str) -> Path | None:
    path = PACKAGE.parent.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_no_module_imports_itself_through_a_circle():
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(
            ".__init__"
        )
        graph[name] = {
            target for target in _imports(path) if target != name and _module_path(target)
        }
    assert (
        "dpdc_lightning.methods.base" in graph
        and "dpdc_lightning.config" in graph["dpdc_lightning.evaluation.command"]
    )
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                circle = (
                    trail[trail.index(target) :] + [target] if target in trail else [node, target]
                )
                pytest.fail("import circle: " + " -> ".join(circle))
            if target not in state:
                visit(target, trail + [target])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


# --------------------------------------------------------------------------- condense() in process


def _lightning_levels() -> list[int]:
    names = ("lightning.pytorch", "lightning.fabric", "lightning.pytorch.utilities.rank_zero")
    return [logging.getLogger(name).level for name in names]


@pytest.mark.slow
def test_importing_the_engine_leaves_warning_filters_and_lightning_loggers_as_found():
    # A fresh interpreter: the import itself once installed our filters for the whole process.
    code = (
        "import logging, warnings, lightning\n"
        "names = ('lightning.pytorch', 'lightning.fabric', 'lightning.pytorch.utilities.rank_zero')\n"
        "before = (list(warnings.filters), [logging.getLogger(n).level for n in names])\n"
        "import dpdc_lightning.engine.condense, dpdc_lightning.engine.training\n"
        "after = (list(warnings.filters), [logging.getLogger(n).level for n in names])\n"
        "assert before == after, (before, after)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_condense_runs_in_process_on_tensors_and_writes_nothing(tmp_path, toy, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = ImageData.from_tensors(toy.train_images, toy.train_labels)
    config = compose(
        [
            "method=ndpdc",
            *SMALL,
            "method.group_size=4",
            "method.iterations=3",
            "privacy.reproducible_noise=true",
        ]
    )
    torch.manual_seed(0)
    global_rng = torch.get_rng_state()
    filters, levels = list(warnings.filters), _lightning_levels()
    result = condense(config, data)
    # Lightning's messages are silenced while the run fits only: a user's own Lightning (a
    # notebook, the Python API) keeps its warnings and log lines after condense().
    assert list(warnings.filters) == filters and _lightning_levels() == levels
    # A user's own seeded code after condense() draws what it drew before: nothing global moved
    # (a DataLoader without a generator draws its base seed from the global RNG).
    assert torch.equal(torch.get_rng_state(), global_rng), "condense() moved torch's global RNG"
    assert result.images.shape == (8, 1, 28, 28) and result.labels.tolist() == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
        3,
    ]
    assert (
        result.report["steps"] == 3 and result.report["epsilon"] == result.plan.planned_epsilon > 0
    )
    assert list(tmp_path.iterdir()) == []  # no run directory, TensorBoard log or checkpoint
    again = condense(
        config, data
    )  # reproducible noise: the same images; nothing global was touched
    assert torch.equal(again.images, result.images)


def test_the_api_refuses_overrides_in_place_of_a_composed_config():
    for call in (condense, train):
        with pytest.raises(UserError, match=r"composed config.*\(compose\(\[\.\.\.\]\)\)"):
            call(["method=ndpdc", "privacy.target_epsilon=2"])


def test_condense_refuses_several_processes(toy):
    config = compose(
        [
            "method=ndpdc",
            *SMALL,
            "method.group_size=4",
            "trainer.accelerator=cpu",
            "trainer.devices=2",
            "trainer.strategy=ddp",
        ]
    )
    with pytest.raises(UserError, match="one process"):
        condense(config, toy)


def test_condense_on_a_chosen_subset_plans_from_the_subsets_class_sizes(toy):
    keep = torch.randperm(len(toy.train_labels), generator=derive_generator(0, "half"))[
        : len(toy.train_labels) // 2
    ]
    subset = toy.subset(keep)
    assert sum(subset.class_sizes) == len(keep) and subset.test_images is toy.test_images
    config = compose(["method=ndpdc", *SMALL, "method.group_size=4", "method.iterations=2"])
    plan = plan_run(resolve_run(config), DataSpec.of(subset))
    assert plan.sample_rates == tuple(4 / n for n in subset.class_sizes)
    assert condense(config, subset).report["sample_rate"] == max(plan.sample_rates)


# --------------------------------------------------------------------------- synthetic set as a module


class _TinyGenerator(nn.Module):
    def __init__(self, latent_dim: int, num_classes: int, generator: torch.Generator) -> None:
        super().__init__()
        self.embed = nn.Embedding(num_classes, latent_dim)
        self.out = nn.Linear(latent_dim, 28 * 28)
        with torch.no_grad():  # from the caller's generator, never torch's global RNG
            for parameter in self.parameters():
                parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))

    def forward(self, codes: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.out(codes + self.embed(labels))).view(-1, 1, 28, 28)


class _GeneratedDM(DM):
    """DM whose synthetic set is the output of a generator: the base must optimise its weights."""

    def build_synthetic(self):
        weights = derive_generator(self.seed, "generator")
        return GeneratedImages(
            _TinyGenerator(16, self.data.num_classes, weights),
            num_classes=self.data.num_classes,
            ipc=self.config.ipc,
            image_shape=self.data.image_shape,
            latent_dim=16,
            rng=derive_generator(self.seed, "latents"),
        )


def test_a_generated_synthetic_set_optimises_the_generator_weights(toy, monkeypatch):
    monkeypatch.setitem(METHODS, "dm", _GeneratedDM)
    config = compose(
        [
            "method=dm",
            *SMALL,
            "method.init=noise",
            "method.batch_real=8",
            "method.iterations=3",
            "method.lr_img=0.1",
        ]
    )
    captured = {}
    fit_start = _GeneratedDM.on_fit_start

    def remember(self):
        captured["method"] = self
        captured["before"] = {k: v.detach().clone() for k, v in self.synthetic.state_dict().items()}
        fit_start(self)

    monkeypatch.setattr(_GeneratedDM, "on_fit_start", remember)
    result = condense(config, toy)
    method = captured["method"]
    after = method.synthetic.state_dict()
    assert not torch.equal(
        after["generator.out.weight"], captured["before"]["generator.out.weight"]
    )
    assert torch.equal(
        after["latents"], captured["before"]["latents"]
    )  # codes are fixed, not optimised
    assert {id(p) for p in method.synthetic.parameters()} == {
        id(p) for p in method.synthetic.generator.parameters()
    }
    with torch.no_grad():
        assert torch.equal(
            result.images, method.synthetic.generator(after["latents"], after["labels"])
        )


# --------------------------------------------------------------------------- free steps, carried state


class _TwoStage(NDPDC):
    """Private steps, then free steps that read no data (Dosser's shape), with a counter carried
    in checkpoints."""

    @classmethod
    def free_steps(cls, config) -> int:
        return 3

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.free_seen: list[int] = []
        self.counter = self.carry("counter", _Counter())

    def free_step(self, step: int):
        self.free_seen.append(step)
        self.counter.value += 1
        return None


class _Counter:
    def __init__(self) -> None:
        self.value = 0

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


def test_free_steps_follow_the_private_ones_and_spend_nothing(toy, monkeypatch):
    monkeypatch.setitem(METHODS, "ndpdc", _TwoStage)
    config = compose(["method=ndpdc", *SMALL, "method.group_size=4", "method.iterations=2"])
    captured = {}
    original = _TwoStage.on_fit_start
    monkeypatch.setattr(
        _TwoStage,
        "on_fit_start",
        lambda self: (captured.setdefault("method", self), original(self)),
    )
    result = condense(config, toy)
    assert captured["method"].free_seen == [2, 3, 4] and captured["method"].counter.value == 3
    assert result.plan.data_steps == 2 and result.plan.free_steps == 3
    assert result.report["steps"] == 2 and result.report["epsilon"] == result.plan.planned_epsilon


def test_carried_state_is_saved_and_restored_in_either_order():
    spec = DataSpec(num_classes=4, image_shape=(1, 28, 28), class_sizes=(48,) * 4)
    config = NDPDCConfig(ipc=2, group_size=4)
    plan = plan_run(resolve_run(compose(["method=ndpdc", *SMALL, "method.group_size=4"])), spec)
    first = _TwoStage(config, data=spec, plan=plan, seed=0, noise_seed=0)
    first.counter.value = 7
    checkpoint: dict = {}
    first.on_save_checkpoint(checkpoint)
    assert checkpoint["carried_state"] == {"counter": {"value": 7}}
    checkpoint = json.loads(json.dumps(checkpoint))  # plain types only
    restored = _TwoStage(
        config, data=spec, plan=plan, seed=0, noise_seed=0
    )  # carried in __init__, loaded after
    restored.on_load_checkpoint(checkpoint)
    assert restored.counter.value == 7
    late = NDPDC(
        config, data=spec, plan=plan, seed=0, noise_seed=0
    )  # loaded first, carried later (setup())
    late.on_load_checkpoint(checkpoint)
    assert late.carry("counter", _Counter()).value == 7


def test_a_method_is_built_with_its_final_plan():
    spec = DataSpec(num_classes=4, image_shape=(1, 28, 28), class_sizes=(48,) * 4)
    config = compose(["method=ndpdc", *SMALL, "method.group_size=4", "privacy.target_epsilon=3"])
    plan = plan_run(resolve_run(config), spec)
    method = NDPDC(config.method, data=spec, plan=plan, seed=0, noise_seed=1)
    assert method.noise_multiplier == plan.noise_multiplier > 0 and method.plan is plan
    with pytest.raises(AttributeError):
        method.noise_multiplier = 2.0  # read from the plan; nothing can patch it afterwards
    with pytest.raises(ValueError, match="noise seed"):
        NDPDC(config.method, data=spec, plan=plan, seed=0)
    with pytest.raises(ValueError, match="plan"):
        DM(compose(["method=dm"]).method, data=spec, plan=plan, seed=0)


# --------------------------------------------------------------------------- the plan on resume


@pytest.mark.parametrize("key", PLAN_TRAINER_KEYS)
def test_resume_refuses_any_option_that_would_change_the_plan(tmp_path, key):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("method:\n  name: ndpdc\n")
    with pytest.raises(UserError, match="privacy plan"):
        compose([f"resume={run_dir}", f"trainer.{key}=60"])


def test_a_resumed_run_reuses_its_stored_plan(tmp_path, monkeypatch):
    """The issue's scenario: the first start plans 20 steps for ε = 2; the resumed run may not replan."""
    run_dir = train(
        compose(
            [
                "method=ndpdc",
                *SMALL,
                "method.group_size=4",
                "method.iterations=20",
                "privacy.target_epsilon=2",
                "trainer.max_steps=5",
                f"run_dir={tmp_path / 'r'}",
                "method.checkpoint_every=2",
            ]
        )
    )
    stored = json.loads((run_dir / "plan.json").read_text())
    report = json.loads((run_dir / "privacy.json").read_text())
    assert stored["data_steps"] == 5 and report["epsilon"] <= 2.0 and report["steps"] == 5
    os.remove(run_dir / "privacy.json")  # as if it had been killed before the end
    with pytest.raises(UserError, match="privacy plan"):
        compose([f"resume={run_dir}", "trainer.max_steps=60", "trainer.min_steps=60"])
    # An unfinished run whose data changed since it started is refused (its rates would be stale).
    monkeypatch.setattr(
        "dpdc_lightning.engine.training.load_data",
        lambda config: load_dataset("toy").subset(torch.arange(0, 150)),
    )
    with pytest.raises(UserError, match="class sizes changed"):
        train(compose([f"resume={run_dir}"]))
