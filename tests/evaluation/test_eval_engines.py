"""The evaluation engines (evaluation/engines/) against each other, the compile decision and the step cache."""

from __future__ import annotations

import math

import pytest
import torch
from rounding import EPS32, float32_rounding

from dpdc_lightning.config import compose
from dpdc_lightning.errors import UserError
from dpdc_lightning.evaluation import EvalProgress, EvalProtocol, train_and_test, train_network
from dpdc_lightning.evaluation.engines import cost, functional
from dpdc_lightning.evaluation.engines.base import EvalTask, resolve_engine
from dpdc_lightning.evaluation.engines.cost import CompilePlan
from dpdc_lightning.evaluation.engines.sequential import SequentialEngine
from dpdc_lightning.evaluation.engines.stacked import StackedEngine

CPU = torch.device("cpu")

NUM_CLASSES = 4
# 40 images in batches of 16: three steps per pass, the last one short; 4 passes, lr decay after 3.
PROTOCOL = EvalProtocol(epochs=3, runs=3, batch_size=16)
MODELS = [("convnet", {"width": 8, "norm": "batchnorm"}), ("convnet", {"width": 8}), ("mlp", {})]


@pytest.fixture(scope="module")
def data() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    labels = torch.arange(NUM_CLASSES).repeat(10)
    images = torch.randn(len(labels), 1, 28, 28, generator=g) + labels.view(-1, 1, 1, 1) * 0.5
    test_labels = torch.arange(NUM_CLASSES).repeat(5)
    test_images = (
        torch.randn(len(test_labels), 1, 28, 28, generator=g) + test_labels.view(-1, 1, 1, 1) * 0.5
    )
    return dict(images=images, labels=labels, test_images=test_images, test_labels=test_labels)


@pytest.fixture(autouse=True)
def fresh_step_cache():
    """Step functions live for the process; each test starts without any (and leaves none behind)."""
    functional.clear_step_cache()
    yield
    functional.clear_step_cache()


def trained(
    data, model, options, runs, *, stacked_runs, protocol=PROTOCOL, compile=False
) -> list[torch.nn.Module]:
    task = EvalTask(
        images=data["images"],
        labels=data["labels"],
        model=model,
        num_classes=NUM_CLASSES,
        protocol=protocol,
        seed=5,
        model_options=options,
    )
    engine = (StackedEngine if stacked_runs else SequentialEngine)(
        CPU, compile=CompilePlan(compile, compile)
    )
    return engine.networks(engine.train(task, runs))


# Two engines (Lightning's torch.optim.SGD or SGD written out on the tensors, one run or vmapped
# grouped kernels) round each step's mean-loss gradient differently. Allowed: one eps32 of the
# weights' norm per image per step, 16 images x 12 steps (measured: under 0.4 eps32 in total, AVX2
# and AVX-512, 1 and 2 threads). The smallest planted bug, dropping weight decay, moves the weights
# by 1.8e-4 of their norm, 8 times the tolerance.
STEPS = PROTOCOL.train_epochs * math.ceil(NUM_CLASSES * 10 / PROTOCOL.batch_size)
WEIGHTS = float32_rounding(PROTOCOL.batch_size * STEPS)


def relative_difference(a: torch.nn.Module, b: torch.nn.Module) -> float:
    """‖a − b‖ / ‖b‖ over every weight, bias and batch-norm statistic, as one vector."""
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    floats = [k for k in sa if sa[k].is_floating_point()]
    difference = torch.cat([(sa[k].double() - sb[k].double()).flatten() for k in floats])
    return float(difference.norm() / torch.cat([sb[k].double().flatten() for k in floats]).norm())


def largest_difference(a: torch.nn.Module, b: torch.nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max(float((sa[k].double() - sb[k].double()).abs().max()) for k in sa)


@pytest.mark.parametrize("model, options", MODELS)
def test_sequential_engine_gives_the_lightning_weights(data, model, options):
    # Weights, biases and batch-norm running statistics after 12 steps across an lr decay.
    for run in (0, 2):
        reference = train_network(
            data["images"],
            data["labels"],
            model=model,
            num_classes=NUM_CLASSES,
            protocol=PROTOCOL,
            seed=5,
            run=run,
            model_options=options,
            accelerator="cpu",
            engine="lightning",
        )
        (ours,) = trained(data, model, options, [run], stacked_runs=False)
        assert relative_difference(ours, reference) <= WEIGHTS
    # ...and the comparison can tell runs apart.
    assert (
        largest_difference(reference, trained(data, model, options, [1], stacked_runs=False)[0])
        > 1e-2
    )


@pytest.mark.parametrize("model, options", MODELS)
def test_stacked_runs_equal_independent_runs(data, model, options):
    alone = [trained(data, model, options, [r], stacked_runs=False)[0] for r in range(3)]
    together = trained(data, model, options, [0, 1, 2], stacked_runs=True)
    assert max(relative_difference(b, a) for a, b in zip(alone, together)) <= WEIGHTS
    if options.get("norm") == "batchnorm":  # running statistics are per run, and they moved
        stats = [n.state_dict()["features.1.running_mean"] for n in together]
        assert not torch.equal(stats[0], stats[1]) and stats[0].abs().sum() > 0


def test_a_runs_draws_do_not_depend_on_how_many_runs_are_trained(data):
    model, options = MODELS[0]
    of_three = trained(data, model, options, [0, 1, 2], stacked_runs=True)[2]
    of_five = trained(data, model, options, [0, 1, 2, 3, 4], stacked_runs=True)[2]
    alone = trained(data, model, options, [2], stacked_runs=False)[0]
    assert relative_difference(of_three, of_five) <= WEIGHTS
    assert relative_difference(of_three, alone) <= WEIGHTS
    assert (
        largest_difference(of_five, trained(data, model, options, [3], stacked_runs=False)[0])
        > 1e-2
    )


def test_engines_report_the_same_accuracies(data):
    protocol = EvalProtocol(epochs=4, runs=2, batch_size=16)

    def accuracies(engine, pea=False):
        return train_and_test(
            data["images"],
            data["labels"],
            test_images=data["test_images"],
            test_labels=data["test_labels"],
            model="convnet",
            num_classes=NUM_CLASSES,
            protocol=protocol,
            seed=1,
            model_options={"width": 8},
            accelerator="cpu",
            engine=engine,
            compile="false",
            pea=pea,
        )

    def near_ties(pea=False) -> list[int]:
        # Test records whose two largest logits (Lightning's network) lie within 1e-3 of the logits'
        # scale, 40x the weights' tolerance: only their predictions may flip under rounding.
        counts = []
        for run in range(protocol.runs):
            network = train_network(
                data["images"],
                data["labels"],
                model="convnet",
                num_classes=NUM_CLASSES,
                protocol=protocol,
                seed=1,
                run=run,
                model_options={"width": 8},
                accelerator="cpu",
                pea=pea,
                engine="lightning",
            )
            with torch.no_grad():
                logits = network(data["test_images"])
            top = logits.topk(2, dim=1).values
            counts.append(int((top[:, 0] - top[:, 1] <= 1e-3 * logits.abs().max()).sum()))
        return counts

    def agree(ours, reference, ties):
        # Equal counts of correct records but near-ties; torchmetrics reports float32 (within eps32).
        return all(
            abs(a - b) <= t / len(data["test_labels"]) + EPS32
            for a, b, t in zip(ours, reference, ties)
        )

    lightning, ties = accuracies("lightning"), near_ties()
    assert agree(accuracies("sequential"), lightning, ties)
    assert agree(accuracies("auto"), lightning, ties)  # sequential on a CPU
    assert agree(accuracies("stacked"), lightning, ties)
    assert agree(
        accuracies("sequential", pea=True), accuracies("lightning", pea=True), near_ties(pea=True)
    )


def test_progress_counts_every_run_of_a_stacked_group(data):
    calls: list[tuple] = []

    class Recording(EvalProgress):
        def start_run(self, label, epochs):
            calls.append(("start", label, epochs))

        def epoch_done(self, epochs):
            calls.append(("epoch", epochs))

        def end_run(self, accuracy=None):
            calls.append(("end", accuracy))

    progress = Recording(total_runs=3, enabled=False)
    accuracies = train_and_test(
        data["images"],
        data["labels"],
        test_images=data["test_images"],
        test_labels=data["test_labels"],
        model="mlp",
        num_classes=NUM_CLASSES,
        protocol=PROTOCOL,
        seed=0,
        accelerator="cpu",
        engine="stacked",
        compile="false",
        progress=progress,
    )
    progress.close()
    assert calls[0] == ("start", "mlp runs 1-3/3", PROTOCOL.train_epochs)
    assert [c[1] for c in calls if c[0] == "epoch"] == list(range(1, PROTOCOL.train_epochs + 1))
    assert [c[1] for c in calls if c[0] == "end"] == accuracies and len(accuracies) == 3


def test_a_failing_compiler_falls_back_to_eager_with_a_warning(data, monkeypatch):
    def broken_compile(fn, **kwargs):
        def call(*args):
            raise RuntimeError("no C++ compiler")

        return call

    model, options = MODELS[0]  # batch norm: the failed call must not leave its statistics behind
    eager = trained(data, model, options, [1], stacked_runs=False)[0]
    monkeypatch.setattr(torch, "compile", broken_compile)
    with pytest.warns(RuntimeWarning, match="torch.compile failed"):
        fallback = trained(data, model, options, [1], stacked_runs=False, compile=True)[0]
    assert largest_difference(eager, fallback) == 0


def test_engine_and_compile_settings_are_checked():
    assert compose(["eval.engine=stacked", "eval.compile=true"]).eval.compile == "true"
    with pytest.raises(UserError, match="eval.engine='fast' is not allowed"):
        compose(["eval.engine=fast"])
    with pytest.raises(UserError, match="eval.compile='maybe' is not allowed"):
        compose(["eval.compile=maybe"])
    assert resolve_engine("auto", CPU) == "sequential"
    assert resolve_engine("auto", torch.device("cuda")) == "stacked"
    with pytest.raises(UserError, match="eval.compile='maybe' is not allowed"):
        cost.plan_compile(
            "maybe", device=CPU, model="convnet", pixels=1, train_images=1, test_images=1
        )


def test_compiled_test_pass_pads_its_last_batch_without_changing_the_accuracy(data, monkeypatch):
    # torch.compile replaced by the identity: the compiled code path (one padded test shape) runs eagerly.
    protocol = EvalProtocol(
        epochs=2, runs=2, batch_size=16, test_batch_size=6
    )  # 20 test images: 6+6+6+2

    def accuracies(compile):
        return train_and_test(
            data["images"],
            data["labels"],
            test_images=data["test_images"],
            test_labels=data["test_labels"],
            model="convnet",
            num_classes=NUM_CLASSES,
            protocol=protocol,
            seed=2,
            model_options={"width": 8},
            accelerator="cpu",
            engine="sequential",
            compile=compile,
        )

    plain = accuracies("false")
    shapes: list[int] = []

    def identity_compile(fn, **kwargs):
        def call(params, buffers, x, y):
            shapes.append(len(x))
            return fn(params, buffers, x, y)

        return call

    monkeypatch.setattr(torch, "compile", identity_compile)
    assert accuracies("true") == plain
    assert set(shapes) == {
        16,
        8,
        6,
    }  # training batches 16, 16, 8; every test batch 6 (the last one padded)


def test_compile_auto_compiles_a_graph_only_past_its_measured_crossover():
    for pixels in (28 * 28, 16 * 16, 32 * 32):
        costs = cost.measured_costs(CPU, "convnet", pixels)
        crossing = int(costs["train"].crossover_pixels() / pixels)
        assert cost.plan_compile(
            "auto",
            device=CPU,
            model="convnet",
            pixels=pixels,
            train_images=crossing - 1,
            test_images=0,
        ) == CompilePlan(train=False, test=False)
        assert cost.plan_compile(
            "auto",
            device=CPU,
            model="convnet",
            pixels=pixels,
            train_images=crossing + 1,
            test_images=0,
        ) == CompilePlan(train=True, test=False)
    # The 16x16 measurement applies to 16x16 (a later crossover than 28x28), 28x28 and up use theirs.
    assert (
        cost.measured_costs(CPU, "convnet", 256)["train"].crossover_pixels()
        > cost.measured_costs(CPU, "convnet", 784)["train"].crossover_pixels()
    )
    assert cost.measured_costs(CPU, "convnet", 1024) == cost.measured_costs(CPU, "convnet", 784)
    test = cost.measured_costs(CPU, "convnet", 784)["test"]
    many_tests = int(test.crossover_pixels() / 784) + 1
    assert cost.plan_compile(
        "auto", device=CPU, model="convnet", pixels=784, train_images=0, test_images=many_tests
    ) == CompilePlan(train=False, test=True)
    # Unmeasured: a test graph at 16x16, images below 16x16, another architecture or device: eager.
    for model, pixels in (("convnet", 256), ("convnet", 8 * 8), ("lenet", 784)):
        assert (
            cost.plan_compile(
                "auto",
                device=CPU,
                model=model,
                pixels=pixels,
                train_images=0 if pixels == 256 else 10**12,
                test_images=10**12,
            )
            == CompilePlan()
        )
    assert (
        cost.plan_compile(
            "auto",
            device=torch.device("cuda"),
            model="convnet",
            pixels=784,
            train_images=10**12,
            test_images=10**12,
        )
        == CompilePlan()
    )
    assert cost.plan_compile(
        "true", device=CPU, model="lenet", pixels=1, train_images=1, test_images=1
    ) == CompilePlan(train=True, test=True)
    assert (
        cost.plan_compile(
            False, device=CPU, model="convnet", pixels=784, train_images=10**12, test_images=10**12
        )
        == CompilePlan()
    )


def test_the_cost_model_counts_every_run_that_shares_the_step(data, monkeypatch):
    from dpdc_lightning.evaluation import train_test

    seen: list[dict] = []

    def recording(compile, **kwargs):
        seen.append(kwargs)
        return CompilePlan()

    monkeypatch.setattr(train_test, "plan_compile", recording)
    protocol = EvalProtocol(epochs=2, runs=3, batch_size=16)
    train_and_test(
        data["images"],
        data["labels"],
        test_images=data["test_images"],
        test_labels=data["test_labels"],
        model="mlp",
        num_classes=NUM_CLASSES,
        protocol=protocol,
        seed=0,
        accelerator="cpu",
    )
    train_network(
        data["images"],
        data["labels"],
        model="mlp",
        num_classes=NUM_CLASSES,
        protocol=protocol,
        seed=0,
        accelerator="cpu",
        shared_runs=7,
    )
    n, passes = len(data["images"]), protocol.train_epochs
    assert (seen[0]["train_images"], seen[0]["test_images"]) == (
        passes * n * 3,
        len(data["test_images"]) * 3,
    )
    assert (seen[1]["train_images"], seen[1]["test_images"]) == (passes * n * 7, 0)
    assert seen[0]["pixels"] == data["images"].shape[2] * data["images"].shape[3]


def test_one_compilation_serves_every_later_evaluation_of_the_architecture(data, monkeypatch):
    # An audit's shadows, a sweep's bundles: the process keeps the step function, so the graph is
    # compiled once. torch.compile is counted (and replaced by the identity, so nothing compiles here).
    compiled: list[object] = []

    def counting_compile(fn, **kwargs):
        compiled.append(fn)
        return fn

    monkeypatch.setattr(torch, "compile", counting_compile)
    protocol = EvalProtocol(epochs=1, runs=2, batch_size=16)
    for seed in (0, 1):
        train_and_test(
            data["images"],
            data["labels"],
            test_images=data["test_images"],
            test_labels=data["test_labels"],
            model="convnet",
            num_classes=NUM_CLASSES,
            protocol=protocol,
            seed=seed,
            model_options={"width": 8},
            accelerator="cpu",
            engine="sequential",
            compile="true",
        )
    assert len(compiled) == 1
    # ...and another architecture gets its own.
    train_and_test(
        data["images"],
        data["labels"],
        test_images=data["test_images"],
        test_labels=data["test_labels"],
        model="mlp",
        num_classes=NUM_CLASSES,
        protocol=protocol,
        seed=0,
        accelerator="cpu",
        engine="sequential",
        compile="true",
    )
    assert len(compiled) == 2
