"""Every ``auto`` setting forced branch by branch on any machine (issue 32).

An ``auto`` takes one branch on the machines that build this project and another on users' (CUDA
or MPS present, a GPU's compute capability, a compiled extractor). config/auto.py holds each
decision as a pure function of what it reads, and its table :data:`DECISIONS`; here every branch of
every entry is forced, the table is checked against every ``auto`` default of the config schemas and
the YAML groups (a new ``auto`` without an entry fails), and the thin wrappers that read torch are
checked to pass what they read. The code paths the branches lead to run on a CPU in
tests/config/test_auto_paths.py; the other reads of the machine are in tests/config/test_machine_reads.py.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

from dpdc_lightning.config import METHOD_SCHEMAS, RunConfig
from dpdc_lightning.config.auto import DECISIONS, choose_device
from dpdc_lightning.errors import UserError
from dpdc_lightning.evaluation.engines.cost import CompilePlan

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dpdc_lightning"
CPU, CUDA, MPS = torch.device("cpu"), torch.device("cuda"), torch.device("mps")


def _devices(setting_value: str = "auto") -> list[tuple[dict, str]]:
    return [
        (dict(accelerator=setting_value, cuda_available=True, mps_available=False), "cuda"),
        (dict(accelerator=setting_value, cuda_available=False, mps_available=True), "mps"),
        (dict(accelerator=setting_value, cuda_available=False, mps_available=False), "cpu"),
    ]


def _compile(device: torch.device, model: str, train_images: int, test_images: int) -> dict:
    # 28x28 images: the training graph pays back from 13.3 M pixel-images (17 007 images), the test
    # graph from 4.8 M (6 139 images), cost.MEASURED.
    return dict(
        compile="auto",
        device=device,
        model=model,
        pixels=28 * 28,
        train_images=train_images,
        test_images=test_images,
    )


# Inputs that force each branch of each decision, and the branch they force. Only "auto" inputs:
# an explicit value is passed through (test_explicit_values_are_kept).
CASES: dict[str, list[tuple[dict, str]]] = {
    "eval.accelerator": _devices(),
    "trainer.accelerator": _devices(),
    "eval.engine": [
        (dict(engine="auto", device_type="cuda"), "stacked"),
        (dict(engine="auto", device_type="cpu"), "sequential"),
        (dict(engine="auto", device_type="mps"), "sequential"),
    ],
    "eval.compile": [
        (_compile(CPU, "convnet", 20_000, 10_000), "training and test"),
        (_compile(CPU, "convnet", 20_000, 0), "training"),
        (_compile(CPU, "convnet", 100, 10_000), "test"),
        (_compile(CPU, "convnet", 100, 100), "neither"),
        (_compile(CUDA, "convnet", 10**9, 10**9), "neither"),  # not measured on CUDA: eager
        (_compile(CPU, "mlp", 10**9, 10**9), "neither"),  # nor for other architectures
    ],
    "method.forward": [
        (dict(forward="auto", device_type="cuda", per_sample=True), "batched"),
        (dict(forward="auto", device_type="cuda", per_sample=False), "loop"),
        (dict(forward="auto", device_type="cpu", per_sample=True), "loop"),
    ],
    "method.memory_format": [
        (dict(memory_format="auto", device_type="cpu", compiled=True), "channels_last"),
        (dict(memory_format="auto", device_type="cpu", compiled=False), "contiguous"),
        (dict(memory_format="auto", device_type="cuda", compiled=True), "contiguous"),
    ],
    "method.autocast": [
        (dict(autocast="auto", device_type="cuda", cuda_major=8), "tf32"),
        (dict(autocast="auto", device_type="cuda", cuda_major=9), "tf32"),
        (dict(autocast="auto", device_type="cuda", cuda_major=7), "none"),
        (dict(autocast="auto", device_type="cuda", cuda_major=None), "none"),
        (dict(autocast="auto", device_type="cpu", cuda_major=None), "none"),
        (dict(autocast="auto", device_type="mps", cuda_major=None), "none"),
    ],
    "threads": [
        (dict(threads="auto", cores=2, load=0.2, omp=None), "all cores"),
        (dict(threads="auto", cores=16, load=3.0, omp=None), "the free cores"),
        (dict(threads="auto", cores=2, load=7.9, omp=None), "the free cores"),
        (dict(threads="auto", cores=2, load=0.0, omp="1"), "OMP_NUM_THREADS"),
    ],
    "method.loop_sizes": [
        (dict(loop_sizes="auto", prior="generator"), "authors"),
        (dict(loop_sizes="auto", prior="none"), "table"),
        (dict(loop_sizes="table", prior="generator"), "table"),
    ],
}


def _branch(result: object) -> str:
    if isinstance(result, CompilePlan):
        return {
            (True, True): "training and test",
            (True, False): "training",
            (False, True): "test",
            (False, False): "neither",
        }[(result.train, result.test)]
    return str(result)


@pytest.mark.parametrize("setting", sorted(DECISIONS))
def test_every_branch_of_every_decision_is_forced(setting):
    decision = DECISIONS[setting]
    assert setting in CASES, f"{setting} is in config/auto.py's table but no case forces it here"
    choose = decision.resolve()
    reached = set()
    for inputs, expected in CASES[setting]:
        assert _branch(choose(**inputs)) == expected, (setting, inputs)
        reached.add(expected)
    assert reached == set(decision.branches), (setting, reached)
    assert set(CASES) == set(DECISIONS)


def test_explicit_values_are_kept():
    for setting, value, inputs in (
        ("eval.engine", "lightning", dict(device_type="cuda")),
        ("method.forward", "batched", dict(device_type="cpu", per_sample=True)),
        ("method.memory_format", "channels_last", dict(device_type="cuda", compiled=False)),
        ("method.autocast", "bf16", dict(device_type="cpu", cuda_major=None)),
    ):
        assert DECISIONS[setting].resolve()(value, **inputs) == value
    # An explicit accelerator is the one asked for, whatever is present; tpu computes nowhere else.
    asked = ("gpu", "cuda", "mps", "cpu", "tpu", "GPU")
    chosen = [choose_device(a, cuda_available=False, mps_available=False) for a in asked]
    assert chosen == ["cuda", "cuda", "mps", "cpu", "cpu", "cuda"]


def _schema_autos(schema: type, prefix: str) -> set[str]:
    """``section.key`` of every field of ``schema`` (and its nested sections) defaulting to auto."""
    found = set()
    for field in dataclasses.fields(schema):
        default = field.default
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        if dataclasses.is_dataclass(default):
            found |= _schema_autos(type(default), f"{prefix}{field.name}.")
        elif default == "auto":
            found.add(f"{prefix}{field.name}")
    return found


def _yaml_autos(tree: object, prefix: str) -> set[str]:
    if not isinstance(tree, dict):
        return set()
    found = set()
    for key, value in tree.items():
        if value == "auto":
            found.add(f"{prefix}{key}")
        found |= _yaml_autos(value, f"{prefix}{key}.")
    return found


def test_the_table_holds_every_auto_default_of_the_config():
    found = _schema_autos(RunConfig, "")
    for schema in METHOD_SCHEMAS.values():
        found |= _schema_autos(schema, "method.")
    conf = PACKAGE / "conf"
    for path in conf.rglob("*.yaml"):
        group = path.parent.relative_to(conf).as_posix()
        prefix = "" if group in (".", "experiment") else group.replace("/", ".") + "."
        found |= _yaml_autos(yaml.safe_load(path.read_text()), prefix)
    # The method schemas are the union over methods: method.forward is DM's, NDPDC's and Dosser's.
    assert found == set(DECISIONS), (
        f"auto defaults without an entry in config/auto.py's DECISIONS: {found - set(DECISIONS)}; "
        f"entries no config default uses: {set(DECISIONS) - found}"
    )


def test_every_auto_parameter_default_in_the_package_is_a_setting_of_the_table():
    """A function taking ``x="auto"`` (or a dict literal {"x": "auto"}) decides ``x`` somewhere:
    ``x`` must be one of the table's settings (or Lightning's strategy, which is never auto on
    more than one device here: planning.py fixes devices=1 next to it)."""
    names = {setting.split(".")[-1] for setting in DECISIONS} | {"strategy"}
    unknown = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if '"auto"' not in text and "'auto'" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            pairs: list[tuple[str, ast.expr]] = []
            if isinstance(node, ast.arguments):
                positional = node.posonlyargs + node.args
                pairs += [
                    (a.arg, d)
                    for a, d in zip(
                        positional[len(positional) - len(node.defaults) :], node.defaults
                    )
                ]
                pairs += [(a.arg, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d]
            elif isinstance(node, ast.Dict):
                pairs += [
                    (k.value, v)
                    for k, v in zip(node.keys, node.values)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)
                ]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.value is not None:
                    pairs.append((node.target.id, node.value))
            for name, value in pairs:
                if isinstance(value, ast.Constant) and value.value == "auto" and name not in names:
                    unknown.append(f"{path.relative_to(ROOT)}: {name}")
    assert unknown == []


def test_the_docs_table_lists_every_decision():
    text = (ROOT / "docs" / "methods.md").read_text()
    section = text.split("## Settings that depend on the machine (`auto`)")[1].split("\n## ")[0]
    rows = {
        line.split("|")[1].strip().split(" ")[0].strip("`")
        for line in section.splitlines()
        if line.startswith("| `")
    }
    assert rows == set(DECISIONS)


# ---- the wrappers that read the machine pass what they read ---------------------------------


def test_the_evaluator_and_the_memory_estimate_read_cuda_and_mps(monkeypatch):
    from dpdc_lightning.evaluation.engines.base import resolve_device
    from dpdc_lightning.methods.memory import run_device

    for cuda, mps, expected in ((True, False, "cuda"), (False, True, "mps"), (False, False, "cpu")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda cuda=cuda: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda mps=mps: mps)
        assert resolve_device("auto").type == expected
        assert run_device({"accelerator": "auto"}).type == expected
        assert run_device({}).type == expected  # the trainer's default is auto
    # An explicit GPU that is not there: the estimate counts host memory (Lightning refuses it).
    assert run_device({"accelerator": "gpu"}).type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert run_device({"accelerator": "cuda"}).type == "cuda"
    assert run_device({"accelerator": "cpu"}).type == "cpu"


def test_the_auto_accelerator_is_the_one_lightning_picks(monkeypatch):
    """trainer.accelerator=auto is Lightning's decision; choose_device must agree with it for every
    combination of what is present, or the memory estimate and the evaluator look at another
    device than the condensation's."""
    from lightning.fabric.accelerators.cuda import CUDAAccelerator
    from lightning.fabric.accelerators.mps import MPSAccelerator
    from lightning.fabric.accelerators.xla import XLAAccelerator
    from lightning.fabric.utilities.device_parser import _select_auto_accelerator

    monkeypatch.setattr(XLAAccelerator, "is_available", staticmethod(lambda: False))
    for cuda in (False, True):
        for mps in (False, True):
            monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda c=cuda: c))
            monkeypatch.setattr(MPSAccelerator, "is_available", staticmethod(lambda m=mps: m))
            ours = choose_device("auto", cuda_available=cuda, mps_available=mps)
            assert ours == _select_auto_accelerator(), (cuda, mps)


def test_the_extractor_reads_the_gpus_compute_capability(monkeypatch):
    from dpdc_lightning.methods.extractor import resolve_autocast

    assert resolve_autocast("auto", CPU) == "none"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for capability, expected in (((8, 0), "tf32"), ((9, 0), "tf32"), ((7, 5), "none")):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None, c=capability: c)
        assert resolve_autocast("auto", CUDA) == expected
    assert resolve_autocast("auto", CPU) == "none"  # a CPU run on a machine with a GPU
    assert resolve_autocast("bf16", CUDA) == "bf16"


def test_the_memory_estimate_counts_the_forward_the_extractor_will_run():
    """forward=auto with batch norm forwards class by class even on CUDA (choose_forward); the
    estimate counts that forward, not a batched one of every class."""
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.planning import load_data, plan_run
    from dpdc_lightning.engine.resolved import resolve_run
    from dpdc_lightning.methods import METHODS, DataSpec

    config = compose(["method=dm", "dataset=toy", "model.width=8", "model.depth=2"])
    data = load_data(config.dataset)
    plan = plan_run(resolve_run(config), DataSpec.of(data), noise_seed=0)
    spec = DataSpec.of(data, plan=plan)

    def real_forward(device: torch.device, *, forward: str = "auto", norm: str = "instancenorm"):
        needs = METHODS["dm"].memory_needs(
            dataclasses.replace(config.method, forward=forward),
            data=spec,
            plan=plan,
            model=dataclasses.replace(config.model, norm=norm),
            device=device,
        )
        (need,) = [n for n in needs if n.what == "a real batch's forward"]
        return need.bytes

    assert real_forward(CUDA, norm="batchnorm") == real_forward(
        CPU, forward="loop", norm="batchnorm"
    )
    # With per-sample norms, auto on CUDA is batched: every class at once, more memory.
    assert real_forward(CUDA) == real_forward(CPU, forward="batched")
    assert real_forward(CUDA) > real_forward(CPU) == real_forward(CPU, forward="loop")


def test_a_precision_is_accepted_where_lightning_runs_it_and_refused_where_it_replaces_it():
    """trainer.precision=16 is 16-mixed on a GPU and silently bf16-mixed on a CPU (Lightning's
    choice by accelerator): both outcomes of the check, whatever this machine is."""
    from dpdc_lightning.engine.trainer import _check_precision

    _check_precision("16", "16-mixed")  # what a GPU runs
    _check_precision(None, "32-true")
    with pytest.raises(UserError, match="would silently use bf16-mixed"):
        _check_precision("16", "bf16-mixed")  # what a CPU runs instead
