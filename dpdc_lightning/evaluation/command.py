"""``python evaluate.py``: train fresh networks on a bundle (or on a random-real baseline).

    python evaluate.py RUN_DIR [model=convnet,mlp,...] [eval.runs=5] [eval.epochs=1000]
    python evaluate.py --baseline random-real dataset=digits method.ipc=10
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dpdc_lightning.config import ModelConfig, RunConfig, compose, parse_overrides, validate, CONF_DIR
from dpdc_lightning.data.datasets import ImageData, load_dataset
from dpdc_lightning.data.subsets import random_real_subset
from dpdc_lightning.errors import UserError
from dpdc_lightning.evaluation.results import ModelResult, format_table, results_to_json
from dpdc_lightning.evaluation.train_eval import train_and_test
from dpdc_lightning.export import CONFIG_FILE, atomic_write_text, load_bundle, new_run_dir

BASELINES = ("random-real",)
EVAL_FILE = "eval.json"


def evaluate_main(argv: list[str]) -> int:
    baseline, run_dir, tokens = _parse(argv)
    selections, dotted = parse_overrides(tokens, groups=("model",))
    model_names = selections.get("model", "convnet").split(",")
    if baseline:
        config = compose(dotted)
        data = _load(config)
        images, labels = random_real_subset(data.train_images, data.train_labels, ipc=config.method.ipc,
                                            num_classes=data.num_classes, seed=config.seed)
        title = f"random-real baseline, {config.dataset.name}, {config.method.ipc} images per class"
        out_dir = new_run_dir(run_dir=config.run_dir, runs_root=config.runs_root,
                              label=f"random-real-{config.dataset.name}-ipc{config.method.ipc}")
    else:
        bundle = load_bundle(run_dir)
        saved = OmegaConf.load(Path(run_dir) / CONFIG_FILE)
        config = validate(OmegaConf.merge(saved, OmegaConf.from_dotlist(dotted)))
        data = _load(config)
        images, labels, out_dir = bundle.images, bundle.labels, Path(run_dir)
        epsilon = bundle.report.get("epsilon")
        title = f"{config.method.name} on {config.dataset.name}, ε = {'∞ (not private)' if epsilon is None else f'{epsilon:.4f}'}"
    if images.shape[1:] != data.test_images.shape[1:]:
        raise UserError(f"synthetic images have shape {tuple(images.shape[1:])}, the test split {tuple(data.test_images.shape[1:])}")
    model_overrides = [t for t in dotted if t.startswith("model.")]
    models = [_model(name, model_overrides) for name in model_names]
    protocol = config.eval.protocol(dsa_mode=config.augment.mode)
    results = [ModelResult(model=m.name, accuracies=train_and_test(
        images, labels, test_images=data.test_images, test_labels=data.test_labels, model=m.name,
        num_classes=data.num_classes, protocol=protocol, seed=config.seed, model_options=m.options(),
        accelerator=config.eval.accelerator, pea=config.eval.pea)) for m in models]
    print(format_table(results, title=title, protocol=protocol))
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {"title": title, **results_to_json(results, protocol=protocol)}
    atomic_write_text(out_dir / EVAL_FILE, json.dumps(payload, indent=2) + "\n")
    print(f"results written to {out_dir / EVAL_FILE}")
    return 0


def _parse(argv: list[str]) -> tuple[bool, str | None, list[str]]:
    baseline, run_dir, tokens = False, None, []
    args = iter(argv)
    for arg in args:
        if arg.startswith("--baseline"):
            value = arg.split("=", 1)[1] if "=" in arg else next(args, "")
            if value not in BASELINES:
                raise UserError(f"--baseline {value!r} is not known; choose one of: {', '.join(BASELINES)}")
            baseline = True
        elif arg.startswith("-"):
            raise UserError(f"unknown flag {arg}; usage: python evaluate.py RUN_DIR [model=a,b] [eval.runs=N] "
                            "| --baseline random-real [dataset=NAME] [method.ipc=N]")
        elif "=" not in arg and run_dir is None:
            run_dir = arg
        else:
            tokens.append(arg)
    if baseline == (run_dir is not None):
        raise UserError("give either a run directory or --baseline random-real (exactly one)")
    return baseline, run_dir, tokens


def _model(name: str, overrides: list[str]) -> ModelConfig:
    """One architecture to evaluate: its conf/model file plus any ``model.*`` overrides."""
    path = CONF_DIR / "model" / f"{name}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
        raise UserError(f"unknown model '{name}'; choose from: {', '.join(names)}")
    patch = OmegaConf.from_dotlist(overrides).get("model", {})
    try:
        merged = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(path), patch)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise UserError(f"invalid model override for {name}: {str(err).splitlines()[0]}") from None


def _load(config: RunConfig) -> ImageData:
    return load_dataset(config.dataset.name, root=config.dataset.root, download=config.dataset.download,
                        cache_dir=config.dataset.cache_dir)
