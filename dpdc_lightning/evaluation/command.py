"""``python evaluate.py``: train fresh networks on a bundle, a plain tensor file, or a baseline.

    python evaluate.py RUN_DIR [model=convnet,mlp,...] [eval.runs=5] [eval.epochs=1000]
    python evaluate.py --images FILE.pt dataset=NAME [model=...] [eval.*=...]
    python evaluate.py --baseline random-real dataset=digits method.ipc=10

``--images`` evaluates a set made by any tool on exactly the protocol used for bundles. Such a file
comes without a privacy report, so its table and its ``FILE.eval.json`` say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

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
NO_PRIVACY_REPORT = "no privacy report (plain tensor file: its privacy is unknown)"
USAGE = ("usage: python evaluate.py RUN_DIR [model=a,b] [eval.runs=N] "
         "| --images FILE.pt dataset=NAME [model=a,b] [eval.*=...] "
         "| --baseline random-real [dataset=NAME] [method.ipc=N]")


def evaluate_main(argv: list[str]) -> int:
    baseline, image_file, run_dir, tokens = _parse(argv)
    selections, dotted = parse_overrides(tokens, groups=("model",))
    model_names = selections.get("model", "convnet").split(",")
    eval_path: Path | None = None
    privacy_note: dict[str, str] = {}
    if image_file is not None:
        config = compose(dotted)
        data = _load(config)
        path = Path(image_file)
        images, labels = load_image_file(path, data)
        title = f"{path.name} on {config.dataset.name}, {NO_PRIVACY_REPORT}"
        privacy_note = {"privacy": NO_PRIVACY_REPORT, "images_file": str(path.resolve())}
        eval_path = _fresh_eval_path(path)
        out_dir = eval_path.parent
    elif baseline:
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
    # eval.pea trains on the PEA expansion of the set (4 images per image); the record must say so.
    notes = {**privacy_note, **({"pea": "on: each image split into 2x2 quadrants, each upsampled x2"}
                                if config.eval.pea else {})}
    print(format_table(results, title=title, protocol=protocol, extra=notes or None))
    payload = {"title": title, **privacy_note, "pea": bool(config.eval.pea),
               **results_to_json(results, protocol=protocol, extra=notes or None)}
    text = json.dumps(payload, indent=2) + "\n"
    if eval_path is not None:
        _write_new(eval_path, text)
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        eval_path = out_dir / EVAL_FILE
        atomic_write_text(eval_path, text)
    print(f"results written to {eval_path}")
    return 0


def load_image_file(path: Path, data: ImageData) -> tuple[Tensor, Tensor]:
    """``images`` / ``labels`` of a plain tensor file, checked against ``data``'s test split.

    The file must load with ``torch.load(weights_only=True)`` (no pickled objects) and hold a
    float tensor ``images`` [N, C, H, W] with the test split's C, H, W and finite pixels (in the
    dataset's normalised space) and an integer tensor ``labels`` [N] in [0, num_classes).
    """
    if not path.is_file():
        raise UserError(f"--images file {path} does not exist")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # weights_only refuses pickled objects; any failure is an unusable file
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(f"{path} cannot be loaded as plain tensors (torch.load weights_only): {first}") from None
    if not isinstance(payload, dict):
        raise UserError(f"{path} must hold a dict with tensors 'images' and 'labels', got {type(payload).__name__}")
    missing = [key for key in ("images", "labels") if not isinstance(payload.get(key), Tensor)]
    if missing:
        raise UserError(f"{path} lacks tensor(s) {', '.join(repr(k) for k in missing)}; "
                        f"it must hold 'images' [N, C, H, W] float and 'labels' [N] int")
    images, labels = payload["images"], payload["labels"]
    expected = tuple(data.test_images.shape[1:])
    if images.dim() != 4 or tuple(images.shape[1:]) != expected or len(images) == 0:
        raise UserError(f"{path}: images have shape {tuple(images.shape)}, expected [N, {', '.join(map(str, expected))}] "
                        f"with N >= 1 (the test split's images)")
    if not images.is_floating_point():
        raise UserError(f"{path}: images must be a float tensor, got {images.dtype}")
    if labels.dtype == torch.bool or labels.is_floating_point() or labels.is_complex():
        raise UserError(f"{path}: labels must be an integer tensor, got {labels.dtype}")
    if labels.dim() != 1 or len(labels) != len(images):
        raise UserError(f"{path}: labels have shape {tuple(labels.shape)}, expected [{len(images)}]")
    if int(labels.min()) < 0 or int(labels.max()) >= data.num_classes:
        raise UserError(f"{path}: labels must lie in [0, {data.num_classes - 1}], "
                        f"found {int(labels.min())}..{int(labels.max())}")
    if not torch.isfinite(images).all():
        raise UserError(f"{path}: images contain NaN or infinite pixels")
    return images.detach().float().contiguous(), labels.detach().long().contiguous()


def _fresh_eval_path(path: Path) -> Path:
    """``FILE.eval.json`` next to ``FILE.pt``, or ``FILE.eval-2.json``, ... if that exists: an
    earlier evaluation's results are never overwritten."""
    stem = path.name[: -len(path.suffix)] if path.suffix else path.name
    for k in range(1, 1000):
        candidate = path.with_name(f"{stem}.eval{'' if k == 1 else f'-{k}'}.json")
        if not candidate.exists():
            return candidate
    raise UserError(f"{path.parent} already holds 999 evaluations of {path.name}; move some away")


def _write_new(path: Path, text: str) -> None:
    """Create ``path`` whole or not at all, never replacing it (an evaluation started meanwhile keeps its file)."""
    try:
        atomic_write_text(path, text, replace=False)
    except FileExistsError:
        raise UserError(f"{path} appeared while evaluating; results not written, rerun to pick a new name") from None
    except OSError as err:
        raise UserError(f"cannot write {path}: {err.strerror or err}") from None


def _parse(argv: list[str]) -> tuple[bool, str | None, str | None, list[str]]:
    baseline, image_file, run_dir, tokens = False, None, None, []
    args = iter(argv)
    for arg in args:
        if arg.startswith("--baseline"):
            value = arg.split("=", 1)[1] if "=" in arg else next(args, "")
            if value not in BASELINES:
                raise UserError(f"--baseline {value!r} is not known; choose one of: {', '.join(BASELINES)}")
            baseline = True
        elif arg == "--images" or arg.startswith("--images="):
            value = arg.split("=", 1)[1] if "=" in arg else next(args, "")
            if not value or value.startswith("-"):
                raise UserError(f"--images needs a file; {USAGE}")
            image_file = value
        elif arg.startswith("-"):
            raise UserError(f"unknown flag {arg}; {USAGE}")
        elif "=" not in arg and run_dir is None:
            run_dir = arg
        else:
            tokens.append(arg)
    if baseline + (image_file is not None) + (run_dir is not None) != 1:
        raise UserError("give exactly one of: a run directory, --images FILE.pt, --baseline random-real")
    return baseline, image_file, run_dir, tokens


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
