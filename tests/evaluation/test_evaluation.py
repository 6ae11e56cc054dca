"""Evaluation protocol: training fresh networks on a synthetic set and reporting the results."""

from __future__ import annotations

import importlib.util
import json
import logging
import statistics
import warnings
from pathlib import Path

import pytest
import torch

import dpdc_lightning.models as models
from dpdc_lightning.augment import DSA
from dpdc_lightning.cli import run as cli_run
from dpdc_lightning.data.subsets import random_real_subset
from dpdc_lightning.errors import UserError
from dpdc_lightning.evaluation import (
    REDUCED_BANNER,
    EvalProtocol,
    ModelResult,
    format_table,
    results_to_json,
    train_and_test,
)
from dpdc_lightning.evaluation.protocol import ProtocolSGD

NUM_CLASSES = 4


def patterns(per_class: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Four easy 1x28x28 classes: top half lit, bottom half lit, horizontal and vertical stripes.

    Chosen to survive DSA (a horizontal flip keeps every class; crops and rotations are small).
    """
    rows = torch.arange(28).view(28, 1).expand(28, 28)
    cols = torch.arange(28).view(1, 28).expand(28, 28)
    base = (
        torch.stack([(rows < 14), (rows >= 14), (rows // 4) % 2 == 1, (cols // 4) % 2 == 1]).float()
        * 2
        - 1
    )
    labels = torch.arange(NUM_CLASSES).repeat_interleave(per_class)
    noise = 0.3 * torch.randn(len(labels), 1, 28, 28, generator=generator)
    return base[labels].unsqueeze(1) + noise, labels


@pytest.fixture(scope="module")
def data() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    images, labels = patterns(10, g)
    test_images, test_labels = patterns(25, g)
    return dict(images=images, labels=labels, test_images=test_images, test_labels=test_labels)


def run(
    data, *, model="mlp", protocol=None, seed=0, model_options=None, engine="lightning", **kwargs
) -> list[float]:
    return train_and_test(
        data["images"],
        data["labels"],
        test_images=data["test_images"],
        test_labels=data["test_labels"],
        model=model,
        num_classes=NUM_CLASSES,
        protocol=protocol or EvalProtocol(epochs=3, runs=1),
        seed=seed,
        model_options=model_options,
        accelerator="cpu",
        engine=engine,  # the Lightning path unless a test names another; test_eval_engines compares them
        **kwargs,
    )


@pytest.fixture
def built_networks(monkeypatch) -> list[torch.nn.Module]:
    """Every network train_and_test builds, in order (they are trained in place)."""
    built: list[torch.nn.Module] = []
    real_build = models.build_network

    def spy(*args, **kwargs):
        network = real_build(*args, **kwargs)
        built.append(network)
        return network

    monkeypatch.setattr(models, "build_network", spy)
    return built


@pytest.fixture
def recorded_steps(monkeypatch) -> list[dict]:
    """lr, batch size, labels and DSA mode of every training step, whatever the engine: read where
    every engine passes (the loss, the protocol's optimiser, DSA)."""
    steps: list[dict] = []
    real_loss, real_step, real_dsa = (
        torch.nn.functional.cross_entropy,
        ProtocolSGD.step,
        DSA.__call__,
    )
    modes: list[
        str
    ] = []  # the k-th DSA call made the k-th batch (a loader may fetch it a step early)

    def loss(logits, labels, *args, **kwargs):
        if torch.is_grad_enabled():  # a training step (the test pass runs without gradients)
            steps.append(
                dict(
                    size=len(labels),
                    labels=labels.clone(),
                    dsa_mode=modes[len(steps)] if modes else None,
                )
            )
        return real_loss(logits, labels, *args, **kwargs)

    def step(self, closure=None):
        result = real_step(self, closure)
        steps[-1]["lr"] = self.param_groups[0]["lr"]
        return result

    def dsa(self, x, **kwargs):
        modes.append(self.mode)
        return real_dsa(self, x, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", loss)
    monkeypatch.setattr(ProtocolSGD, "step", step)
    monkeypatch.setattr(DSA, "__call__", dsa)
    return steps


def flat_weights(network: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in network.parameters()])


# ------------------------------------------------------------------ training


@pytest.mark.parametrize(
    "model, options, floor",
    [("convnet", {"width": 16}, 0.85), ("mlp", None, 0.55)],
)
def test_networks_learn_easy_patterns_well_above_chance(data, model, options, floor):
    protocol = EvalProtocol(epochs=30, runs=2)
    accuracies = run(data, model=model, model_options=options, protocol=protocol)
    assert len(accuracies) == 2
    assert all(0.0 <= a <= 1.0 for a in accuracies)
    # Chance is 0.25 on four balanced classes.
    assert min(accuracies) >= floor, accuracies


def test_same_seed_same_result_other_seed_or_run_differs(data, built_networks):
    protocol = EvalProtocol(epochs=4, runs=2)
    rng_before = torch.get_rng_state()
    first = run(data, model="convnet", model_options={"width": 8}, protocol=protocol, seed=7)
    again = run(data, model="convnet", model_options={"width": 8}, protocol=protocol, seed=7)
    run(data, model="convnet", model_options={"width": 8}, protocol=protocol, seed=8)
    assert torch.equal(torch.get_rng_state(), rng_before), "the global RNG was used"
    assert first == again
    w = [flat_weights(n) for n in built_networks]
    assert len(w) == 6
    assert torch.equal(w[0], w[2]) and torch.equal(w[1], w[3])
    assert not torch.allclose(w[0], w[1]), "two runs of one call trained identical networks"
    assert not torch.allclose(w[0], w[4]) and not torch.allclose(w[1], w[5])


@pytest.mark.parametrize("engine", ["sequential", "stacked"])
def test_a_resumed_evaluation_trains_only_the_missing_runs_and_returns_the_same(
    data, built_networks, engine
):
    """A long protocol resumes by run (benchmarks/faithfulness/reproduce.py at the papers' scale): the runs
    named in ``done`` are returned as given, never retrained, and the others equal an
    uninterrupted call's, whichever runs they are trained beside."""
    protocol = EvalProtocol(epochs=3, runs=3)
    options = dict(model="convnet", model_options={"width": 8}, protocol=protocol, engine=engine)
    whole = run(data, **options)
    built_networks.clear()
    finished: list[tuple[int, float]] = []
    marker = 0.123  # not an accuracy the runs can reach (a multiple of 1/100 test images)
    resumed = run(data, **options, done={1: marker}, on_run=lambda r, a: finished.append((r, a)))
    assert resumed == [whole[0], marker, whole[2]]
    assert finished == [(0, whole[0]), (2, whole[2])]
    assert len(built_networks) == 2, "a run named in done was trained again"
    with pytest.raises(ValueError, match="outside"):
        run(data, **options, done={3: 0.5})


@pytest.mark.parametrize("engine", ["lightning", "sequential"])
def test_lr_schedule_and_step_count_follow_the_reference(data, recorded_steps, engine):
    # 40 images in batches of 16: 3 steps per pass (16, 16, 8), the last one short. The reference
    # with Epoch = 6 trains range(7) = 7 passes and decays after pass 6 // 2 + 1 = 4, i.e. passes
    # 0..4 (15 steps) at the initial lr and passes 5..6 (6 steps) at a tenth of it.
    protocol = EvalProtocol(epochs=6, runs=1, batch_size=16, lr=0.02)
    assert (protocol.train_epochs, protocol.decay_epoch) == (7, 5)
    run(data, protocol=protocol, engine=engine, compile="false")
    lrs = [s["lr"] for s in recorded_steps]
    assert len(lrs) == 7 * 3
    assert lrs[:15] == pytest.approx([0.02] * 15)
    assert lrs[15:] == pytest.approx([0.002] * 6)
    assert [s["size"] for s in recorded_steps] == [16, 16, 8] * 7
    # Each protocol pass is one pass over a permutation of the whole set.
    for epoch in range(7):
        seen = torch.cat([s["labels"] for s in recorded_steps[3 * epoch : 3 * epoch + 3]])
        assert torch.equal(seen.bincount(minlength=NUM_CLASSES), torch.full((NUM_CLASSES,), 10))


def test_the_protocol_optimiser_is_sgd_replaced_by_a_fresh_one_at_the_decay():
    # The reference: torch.optim.SGD at lr until the decay step, then a NEW SGD at lr x 0.1 (its
    # momentum buffers start empty). ProtocolSGD must step the same weights from the same gradients.
    protocol = EvalProtocol(epochs=6, batch_size=16, lr=0.02)
    schedule = protocol.schedule(40)
    assert (schedule.total_steps, schedule.decay_step) == (21, 15)
    target = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    ours, theirs = (torch.zeros(3, 5, requires_grad=True) for _ in range(2))
    optimiser = ProtocolSGD([ours], schedule=schedule, momentum=0.9, weight_decay=5e-4)
    reference = torch.optim.SGD([theirs], lr=0.02, momentum=0.9, weight_decay=5e-4)
    for step in range(schedule.total_steps):
        if step == schedule.decay_step:
            reference = torch.optim.SGD([theirs], lr=0.002, momentum=0.9, weight_decay=5e-4)
        for weights, opt in ((ours, optimiser), (theirs, reference)):
            opt.zero_grad()
            ((weights - target) ** 2 * (step + 1)).sum().backward()
            opt.step()
        assert torch.equal(ours, theirs), step
    # ...and a carried momentum buffer would have made a difference at the decay.
    kept = torch.zeros(3, 5, requires_grad=True)
    carried = torch.optim.SGD([kept], lr=0.02, momentum=0.9, weight_decay=5e-4)
    for step in range(schedule.total_steps):
        carried.param_groups[0]["lr"] = schedule.lr_at(step)
        carried.zero_grad()
        ((kept - target) ** 2 * (step + 1)).sum().backward()
        carried.step()
    assert not torch.allclose(kept, ours)


@pytest.mark.parametrize("mode", ["single", "all"])
def test_training_augments_with_the_protocol_dsa_mode(data, recorded_steps, mode):
    run(data, protocol=EvalProtocol(epochs=1, runs=1, dsa_mode=mode))
    assert recorded_steps and {s["dsa_mode"] for s in recorded_steps} == {mode}


def test_pea_quadruples_the_training_set(data, recorded_steps):
    run(data, protocol=EvalProtocol(epochs=1, runs=1, dsa=False), pea=True)
    assert [s["size"] for s in recorded_steps] == [4 * len(data["labels"])] * 2  # range(1 + 1)


def test_inner_training_is_quiet_and_leaves_logging_and_warnings_as_found(data, capfd, caplog):
    names = ("lightning", "lightning.pytorch", "lightning.fabric")
    levels = [logging.getLogger(n).level for n in names]
    filters = list(warnings.filters)
    with caplog.at_level(logging.INFO):
        run(data, protocol=EvalProtocol(epochs=1, runs=1))
    out = capfd.readouterr()
    text = out.out + out.err + caplog.text
    for banner in ("GPU available", "TPU available", "Tip", "num_workers"):
        assert banner not in text
    assert [logging.getLogger(n).level for n in names] == levels
    assert list(warnings.filters) == filters


def test_bad_inputs_raise_user_error(data):
    with pytest.raises(UserError, match="labels"):
        train_and_test(
            data["images"],
            data["labels"][:-1],
            test_images=data["test_images"],
            test_labels=data["test_labels"],
            model="mlp",
            num_classes=NUM_CLASSES,
            protocol=EvalProtocol(epochs=1, runs=1),
            seed=0,
        )
    with pytest.raises(UserError, match="must match"):
        train_and_test(
            data["images"],
            data["labels"],
            test_images=data["test_images"][..., :20],
            test_labels=data["test_labels"],
            model="mlp",
            num_classes=NUM_CLASSES,
            protocol=EvalProtocol(epochs=1, runs=1),
            seed=0,
        )


# ------------------------------------------------------------------ protocol and results


def test_protocol_defaults_are_the_papers_and_reduced_ones_say_so():
    paper = EvalProtocol()
    assert not paper.is_reduced()
    assert (
        paper.epochs,
        paper.runs,
        paper.lr,
        paper.momentum,
        paper.weight_decay,
        paper.batch_size,
        paper.train_epochs,
        paper.decay_epoch,
        paper.dsa_mode,
    ) == (1000, 5, 0.01, 0.9, 5e-4, 256, 1001, 502, "single")
    # 300 epochs: range(301), lr_schedule = [151] -> 152 passes at the initial lr
    assert (EvalProtocol(epochs=300).train_epochs, EvalProtocol(epochs=300).decay_epoch) == (
        301,
        152,
    )
    assert EvalProtocol(epochs=1).decay_epoch == 2  # never past the last pass
    assert "no lr decay" in EvalProtocol(epochs=1).describe()
    assert "momentum reset after 502 passes" in paper.describe()
    assert (
        "mode single" in paper.describe() and "mode all" in EvalProtocol(dsa_mode="all").describe()
    )
    assert "reduced" not in paper.describe()
    assert EvalProtocol(epochs=999).is_reduced() and EvalProtocol(runs=4).is_reduced()
    text = EvalProtocol(epochs=300, runs=3).describe("ConvNet")
    assert text.startswith("ConvNet, 300 epochs (reduced; paper 1000), 3 runs (reduced")
    for bad in (
        dict(epochs=0),
        dict(runs=-1),
        dict(lr=0.0),
        dict(lr_decay_at=1.5),
        dict(dsa_mode="multiple"),
    ):
        with pytest.raises(UserError):
            EvalProtocol(**bad)


def test_model_result_mean_and_population_std_in_percent():
    result = ModelResult("convnet", [0.5, 0.6, 0.85])
    assert result.mean == pytest.approx(100 * statistics.mean([0.5, 0.6, 0.85]))
    assert result.std == pytest.approx(100 * statistics.pstdev([0.5, 0.6, 0.85]))
    assert result.cell() == f"{result.mean:.2f} ± {result.std:.2f}"


def test_format_table_marks_reduced_protocols_and_prints_mean_pm_std():
    results = [ModelResult("convnet", [0.5, 0.6]), ModelResult("mlp", [0.25])]
    reduced = format_table(
        results, title="digits, IPC 10", protocol=EvalProtocol(epochs=30), extra={"epsilon": "1.0"}
    )
    assert REDUCED_BANNER in reduced and "30 epochs (reduced; paper 1000)" in reduced
    assert "| model | accuracy (%) | runs |" in reduced
    assert "| convnet | 55.00 ± 5.00 | 2 |" in reduced
    assert "| mlp | 25.00 ± 0.00 | 1 |" in reduced
    assert "- epsilon: 1.0" in reduced
    # The protocol line comes before the table.
    assert reduced.index(REDUCED_BANNER) < reduced.index("| model |")
    full = format_table(results, title="digits, IPC 10", protocol=EvalProtocol())
    assert REDUCED_BANNER not in full and "1000 epochs" in full


def test_results_to_json_round_trips_through_json():
    protocol = EvalProtocol(epochs=10, runs=2, dsa_mode="all")
    payload = json.loads(
        json.dumps(
            results_to_json(
                [ModelResult("convnet", [0.5, 0.6]), ModelResult("lenet", [])], protocol=protocol
            )
        )
    )
    assert payload["protocol"]["epochs"] == 10 and payload["protocol"]["reduced"] is True
    assert (
        payload["protocol"]["dsa_mode"] == "all"
        and "mode all" in payload["protocol"]["description"]
    )
    assert payload["results"]["convnet"]["mean"] == pytest.approx(55.0)
    assert payload["results"]["convnet"]["std"] == pytest.approx(5.0)
    assert payload["results"]["convnet"]["accuracies"] == pytest.approx([50.0, 60.0])
    assert payload["results"]["lenet"]["mean"] is None


# ------------------------------------------------------------------ random real subset


def test_random_real_subset_takes_ipc_distinct_real_images_per_class():
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(3).repeat(20)[torch.randperm(60, generator=g)]
    images = torch.arange(60, dtype=torch.float32).view(60, 1, 1, 1).expand(60, 1, 2, 2) + 0.0
    images = images + labels.view(60, 1, 1, 1) * 1000  # the label can be read back from the pixels

    sub_images, sub_labels = random_real_subset(images, labels, ipc=5, num_classes=3, seed=1)
    assert torch.equal(sub_labels, torch.arange(3).repeat_interleave(5))
    index = sub_images[:, 0, 0, 0].long() % 1000
    assert len(set(index.tolist())) == 15
    assert torch.equal(sub_images, images[index]) and torch.equal(labels[index], sub_labels)

    same, _ = random_real_subset(images, labels, ipc=5, num_classes=3, seed=1)
    other, _ = random_real_subset(images, labels, ipc=5, num_classes=3, seed=2)
    assert torch.equal(same, sub_images) and not torch.equal(other, sub_images)
    with pytest.raises(UserError, match="fewer than ipc"):
        random_real_subset(images, labels, ipc=21, num_classes=3, seed=1)


# ------------------------------------------------------------------ evaluate.py --images FILE.pt


def _evaluate_entry():
    path = Path(__file__).resolve().parents[2] / "evaluate.py"
    spec = importlib.util.spec_from_file_location("_entry_evaluate_images", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


IMAGES_ARGS = ["dataset=toy", "model=mlp", "eval.epochs=1", "eval.runs=1", "eval.accelerator=cpu"]


@pytest.fixture
def toy_set(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    g = torch.Generator().manual_seed(0)
    images = torch.randn(8, 1, 28, 28, generator=g)
    labels = torch.arange(4).repeat(2)
    path = tmp_path / "set.pt"
    torch.save({"images": images, "labels": labels}, path)
    return path


def test_images_file_is_evaluated_and_says_it_has_no_privacy_report(toy_set, capsys):
    main = _evaluate_entry()
    assert cli_run(main, ["--images", str(toy_set), *IMAGES_ARGS]) == 0
    out = capsys.readouterr().out
    title = next(line for line in out.splitlines() if line.startswith("### "))
    assert "set.pt" in title and "no privacy report" in title
    first = toy_set.with_name("set.eval.json")
    payload = json.loads(first.read_text())
    assert "no privacy report" in payload["title"] and "no privacy report" in payload["privacy"]
    assert payload["protocol"]["dsa_mode"] == "single" and payload["protocol"]["epochs"] == 1
    assert len(payload["results"]["mlp"]["accuracies"]) == 1
    # which engine trained the networks is recorded (a compiled step rounds differently)
    assert payload["engine"].startswith("sequential on cpu (eval.engine=auto")
    # a second evaluation never overwrites the first: it picks the next free name
    before = first.read_bytes()
    assert cli_run(main, [f"--images={toy_set}", *IMAGES_ARGS, "augment.mode=all"]) == 0
    assert first.read_bytes() == before
    second = json.loads(toy_set.with_name("set.eval-2.json").read_text())
    assert second["protocol"]["dsa_mode"] == "all"
    assert "results written to" in capsys.readouterr().out


def _write(path, payload):
    torch.save(payload, path)
    return path


@pytest.mark.parametrize(
    "label, payload, fragment",
    [
        ("missing labels", lambda x, y: {"images": x}, "lacks tensor(s) 'labels'"),
        ("not a dict", lambda x, y: x, "must hold a dict"),
        (
            "wrong image size",
            lambda x, y: {"images": x[..., :16, :16], "labels": y},
            "expected [N, 1, 28, 28]",
        ),
        ("3-d images", lambda x, y: {"images": x[:, 0], "labels": y}, "expected [N, 1, 28, 28]"),
        ("integer images", lambda x, y: {"images": x.long(), "labels": y}, "float tensor"),
        ("float labels", lambda x, y: {"images": x, "labels": y.float()}, "integer tensor"),
        ("label count", lambda x, y: {"images": x, "labels": y[:-1]}, "labels have shape"),
        ("label out of range", lambda x, y: {"images": x, "labels": y + 1}, "lie in [0, 3]"),
        ("negative label", lambda x, y: {"images": x, "labels": y - 1}, "lie in [0, 3]"),
        (
            "nan pixel",
            lambda x, y: {"images": x.index_fill(0, torch.tensor([2]), float("nan")), "labels": y},
            "NaN or infinite",
        ),
        (
            "pickled object",
            lambda x, y: {"images": x, "labels": y, "extra": Path("/")},
            "pickled Python objects",
        ),
    ],
)
def test_images_file_bad_inputs_end_in_one_error_line(
    tmp_path, monkeypatch, capsys, label, payload, fragment
):
    monkeypatch.chdir(tmp_path)
    images, labels = torch.randn(8, 1, 28, 28), torch.arange(4).repeat(2)
    path = _write(tmp_path / "bad.pt", payload(images, labels))
    assert cli_run(_evaluate_entry(), ["--images", str(path), *IMAGES_ARGS]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert fragment in err, err
    assert not list(tmp_path.glob("*.json")), "a refused file must not leave results behind"


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--images", "nope.pt", *IMAGES_ARGS], "does not exist"),
        (["--images"], "--images needs a file"),
        (["--images", "a.pt", "--baseline", "random-real"], "exactly one"),
        (["somedir", "--images", "a.pt"], "exactly one"),
    ],
)
def test_images_flag_misuse_ends_in_one_error_line(tmp_path, monkeypatch, capsys, argv, fragment):
    monkeypatch.chdir(tmp_path)
    assert cli_run(_evaluate_entry(), argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and fragment in err, err


def test_images_file_that_is_not_a_torch_file_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "junk.pt").write_bytes(b"not a tensor file at all")
    assert cli_run(_evaluate_entry(), ["--images", "junk.pt", *IMAGES_ARGS]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "is truncated, corrupt or not a tensor file" in err, err


def test_a_new_only_write_never_replaces_and_leaves_no_partial_file(tmp_path):
    """FILE.eval.json is created whole or not at all, and an existing one is never replaced."""
    from dpdc_lightning.engine.bundle import atomic_write, atomic_write_text

    target = tmp_path / "set.eval.json"
    atomic_write_text(target, "first\n", replace=False)
    with pytest.raises(FileExistsError):
        atomic_write_text(target, "second\n", replace=False)
    assert target.read_text() == "first\n"

    def crash(tmp):
        tmp.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "other.eval.json", crash, replace=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set.eval.json"]


def test_workers_on_another_device_are_refused_in_one_line(data, monkeypatch):
    import dpdc_lightning.evaluation.train_test as train_test

    monkeypatch.setattr(train_test, "resolve_device", lambda accelerator: torch.device("cuda"))
    with pytest.raises(UserError, match="eval.workers=2 trains runs in CPU processes"):
        run(data, protocol=EvalProtocol(epochs=1, runs=2), engine="sequential", workers=2)


@pytest.mark.slow
def test_runs_in_worker_processes_equal_the_runs_trained_here(data):
    """eval.workers: each run trained in a spawned worker (one thread) equals the run trained in
    this process on one thread, whatever run it is handed with; resumed runs are not retrained."""
    protocol = EvalProtocol(epochs=2, runs=3)
    options = dict(model="convnet", model_options={"width": 8}, protocol=protocol)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        here = run(data, engine="sequential", **options)
        torch.set_num_threads(2)  # shared out: one thread per worker
        finished: list[int] = []
        there = run(
            data,
            engine="sequential",
            workers=2,
            done={0: here[0]},
            on_run=lambda r, a: finished.append(r),
            **options,
        )
    finally:
        torch.set_num_threads(threads)
    assert there == here
    assert sorted(finished) == [1, 2]
