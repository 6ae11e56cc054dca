"""Config composition, overrides and every validation error."""

from __future__ import annotations

import pytest

from dpdc_lightning.config import compose, config_hash, to_yaml
from dpdc_lightning.errors import UserError


def test_defaults_compose_to_typed_objects():
    config = compose([])
    assert config.method.name == "dm"
    assert config.dataset.name == "digits"
    assert config.model.name == "convnet" and config.model.width == 128
    assert config.privacy.delta == 1e-5 and config.privacy.reproducible_noise is False
    assert config.eval.epochs == 1000 and config.eval.runs == 5


def test_group_selection_and_dotted_overrides():
    config = compose(
        [
            "method=ndpdc",
            "dataset=fashion_mnist",
            "method.ipc=7",
            "privacy.target_epsilon=1",
            "trainer.devices=2",
            "trainer.precision=bf16-mixed",
            "seed=3",
            "run_dir=runs/x",
        ]
    )
    assert config.method.name == "ndpdc" and config.method.ipc == 7
    assert config.dataset.name == "fashion_mnist"
    assert config.privacy.target_epsilon == 1.0
    assert config.trainer["devices"] == 2 and config.trainer["precision"] == "bf16-mixed"
    assert config.seed == 3 and config.run_dir == "runs/x"


def test_experiment_selects_groups_and_cli_wins():
    config = compose(["experiment=dm_paper", "method.ipc=3"])
    assert (
        config.method.name == "dm" and config.method.iterations == 20000 and config.method.ipc == 3
    )


def test_hash_depends_on_values_not_on_paths():
    a, b = compose(["seed=1"]), compose(["seed=1", "run_dir=elsewhere"])
    assert config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash(compose(["seed=2"]))
    assert "method:" in to_yaml(a)


@pytest.mark.parametrize(
    "tokens, fragment",
    [
        (["method=nope"], "unknown method 'nope'"),
        (["dataset=imagenet"], "unknown dataset 'imagenet'"),
        (["experiment=nope"], "unknown experiment"),
        (["method.nope=1"], "nope"),
        (["nokey=1"], "nokey"),
        (["method.ipc=abc"], "method.ipc"),
        (["method.ipc=0"], "method.ipc must be >= 1"),
        (["method.lr_img=-1"], "method.lr_img must be > 0"),
        (["method.momentum=1.5"], "method.momentum"),
        (["method.init=zeros"], "method.init"),
        (["privacy.delta=1"], "privacy.delta must be in (0, 1)"),
        (["privacy.target_epsilon=0"], "privacy.target_epsilon must be > 0"),
        (["privacy.target_epsilon=-2"], "privacy.target_epsilon must be > 0"),
        (["privacy.accountant=gdp"], "privacy.accountant"),
        (["privacy.calibrate=both"], "privacy.calibrate"),
        (["privacy.reproducible_noise=maybe"], "reproducible_noise"),
        (["eval.runs=0"], "eval.runs must be > 0"),
        (["model.width=0"], "model.width must be > 0"),
        (["trainer.logger=false"], "trainer.logger is set by the framework"),
        (["method.name=ndpdc"], "method.name cannot be overridden"),
        (["justaword"], "expected key=value"),
        (["method=ndpdc", "method.init=real"], "init must be noise"),
        (["method=ndpdc", "method.clip_norm=0"], "method.clip_norm must be > 0"),
        (["method=dm", "method=ndpdc"], "selected twice"),
        (
            ["method=ndpdc", "method.autocast=fp16"],
            "method.autocast='fp16' is not allowed; choose one of: none, bf16, tf32, auto",
        ),
        (["method=dm", "method.memory_format=nhwc"], "method.memory_format"),
        (["method=ndpdc", "method.compile=sometimes"], "method.compile"),
    ],
)
def test_bad_input_is_one_line_user_error(tokens, fragment):
    with pytest.raises(UserError) as info:
        compose(tokens)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


def test_unknown_group_name_lists_the_choices():
    with pytest.raises(UserError, match="ndpdc"):
        compose(["method=nope"])


def test_a_trainer_option_lightning_does_not_know_is_refused_by_the_engine():
    """The config takes any trainer.* key (it imports no Lightning); the engine checks them against
    lightning.Trainer before anything is built."""
    from dpdc_lightning.engine.trainer import check_trainer_options

    config = compose(["trainer.nonsense=1"])
    with pytest.raises(UserError, match="unknown trainer option 'nonsense'"):
        check_trainer_options(config.trainer)
