"""The neighbouring-run harness (issue 19): run D and D' through ``python train.py`` in process with
the SAME secret, observe every call of the Gaussian mechanism, and compare every output.

D' is D with one record removed (``privacy.class_sizes=private``: the add/remove relation of the
guarantee) or, where the class sizes are declared public (the default), replaced by its pixel
inversion: the sizes stay what the owner declared, and a replacement is a removal plus an addition,
so it may move a release by two sensitivities. The record is a typical one (median norm of the
largest class), the largest, one of the smallest class, or one of the test split (held out of the
private data without a test root; public otherwise). Executions of a case:

- D, recorded: every call of ``privacy.mechanisms.gaussian_sum`` (wherever it is bound) with its
  pre-noise sum, sensitivity and event; every output flattened to ``output:field`` keys (run or
  sweep folder: JSON, YAML, tensors, checkpoints, TensorBoard events, tables; stdout, stderr,
  warnings, log records, exit code). The secret is chosen so that D's Poisson samples include the
  record (else (c) would hold vacuously); D is shared by the records of a configuration;
- "plain", D' with the same secret as is: every output outside the release ledger
  (privacy/ledger.py) must equal D's once times are removed (paths are equal by construction: D'
  is written where D was); where nothing accounted reads the record, every output must be equal;
- "coupled", D' whose every mechanism call releases D's value of the same call (the noise shifted
  by the difference of the pre-noise sums, the coupling of the DP argument): each call must be the
  same (noise key, event, sensitivity), its pre-noise sum may move by at most k sensitivities (k = 1
  removed, 2 replaced, 0 never read), and since every release is then D's, each step runs on D's
  state and every output must equal D's exactly. Poisson sampling is coupled too: the removed
  record's uniform is drawn and dropped, so any other record is sampled in D' iff it is in D.

A configuration that issue 19 asks to refuse (Dosser reading a private held-out split as public)
may exit 2 if D' is refused alike; a bad record refused at load (before any release) may exit 2.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from coupling import Call, MechanismTap, couple_sampling
from run_outputs import differences, run_cli
from torch import Tensor

from dpdc_lightning.data import ImageData, clear_dataset_cache, normalise
from dpdc_lightning.data.loaders import embedded
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.ledger import ledger_for

condense_module = importlib.import_module(
    "dpdc_lightning.engine.planning"
)  # where the run secret is drawn

SECRET = 0x9E3779B97F4A7C15F39CC0605CEDC8341082276BF3A27251F86C6A11D0C18E95  # both runs' secret (a test constant)
# Float tolerance of (c): features and per-example gradients are float32, computed on batches
# whose composition differs by the one record, so each clipped row may move by a few float32 ulps
# of its norm (<= sensitivity); 64 rows x 2^-20 relative bounds that with a wide margin.
ROUNDING = 64 * 2.0**-20

COMMON = ["model.width=4", "model.depth=1", "trainer.enable_progress_bar=false"]
# Tiny runs of 3 data steps (2 for the baselines). Private methods sample about 10 % of each class
# (Opacus' RDP analysis slows down sharply at larger rates; a DP auxiliary run and a calibrated
# noise sample less). {group}, {batch} and {real} scale with the data (SCALE).
METHOD_TOKENS = {
    "dm": ["method=dm", "method.ipc=1", "method.iterations=2", "method.batch_real={real}"],
    "dc": ["method=dc", "method.ipc=1", "method.iterations=2", "method.batch_real={real}"],
    "ldpdc": ["method=ldpdc", "method.ipc=3", "method.group_size={group}"],
    "ndpdc": ["method=ndpdc", "method.ipc=1", "method.iterations=3", "method.group_size={group}"],
    "psg": [
        "method=psg",
        "method.ipc=1",
        "method.iterations=1",
        "method.batches=3",
        "method.batch_size={batch}",
    ],
    "psg+generator": [
        "method=psg",
        "method.ipc=1",
        "method.iterations=1",
        "method.batches=3",
        "method.batch_size={batch}",
        "method.prior=generator",
        "method.generator_width=4",
        "method.latent_dim=3",
    ],
    "dosser": [
        "method=dosser",
        "method.ipc=1",
        "method.group_size={group}",
        "method.sampling_steps=3",
        "method.optimisation_steps=2",
        "method.subspace_dim=2",
    ],
}
SCALE = {
    "digits": {"group": 14, "batch": 144, "real": 32},
    "own": {"group": 5, "batch": 14, "real": 16},
}
PRIVATE_METHODS = ("ldpdc", "ndpdc", "psg", "psg+generator", "dosser")
AUX_SOURCES = ("public_split", "file", "dp", "none")
DATA = (
    ("digits", False),
    ("tensors", False),
    ("tensors", True),
    ("imagefolder", False),
    ("imagefolder", True),
)
TRAIN_RECORDS = ("typical", "largest", "smallest_class")
SWEEP_AXIS = "seed=0,1"


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    method: str
    data: str
    record: str
    sizes: str = "public"
    test_root: bool = False
    aux: str | None = None  # Dosser's method.aux.source
    target: bool = (
        False  # calibrate the noise to privacy.target_epsilon (else the method's default noise)
    )
    sweep: bool = False  # run as a 2-member -m sweep over the run seed
    planted: str = ""  # names a bug a self-test plants (keeps its runs apart from the real ones)

    @property
    def id(self) -> str:
        parts = [
            self.method + (f"[{self.aux}]" if self.aux else ""),
            f"sizes={self.sizes}",
            self.data + ("+test_root" if self.test_root else ""),
            self.record,
        ]
        return (
            "-".join(parts)
            + ("-target" if self.target else "")
            + ("-sweep" if self.sweep else "")
            + (f"-planted={self.planted}" if self.planted else "")
        )

    @property
    def config_key(self) -> tuple[Any, ...]:
        """Everything but the record: the configuration whose D all records share."""
        return (
            self.method,
            self.data,
            self.sizes,
            self.test_root,
            self.aux,
            self.target,
            self.sweep,
            self.planted,
        )

    @property
    def folder(self) -> str:
        """A folder name for the configuration (the same for all its records: D and D' share paths)."""
        return re.sub(r"[^A-Za-z0-9_.=+-]", "_", "-".join(str(part) for part in self.config_key))

    @property
    def private(self) -> bool:
        return self.method in PRIVATE_METHODS

    @property
    def relation(self) -> str:
        """remove (add/remove relation) unless the class sizes are declared public: replace."""
        return "remove" if self.sizes == "private" else "replace"

    @property
    def test_split_is_private(self) -> bool:
        """Own data without a test root: the held-out split comes from the private records."""
        return self.data in ("tensors", "imagefolder") and not self.test_root

    @property
    def reads_test_split(self) -> bool:
        """Dosser's SER reads the test split as a declared-public auxiliary set."""
        return self.method == "dosser" and self.aux == "public_split"

    @property
    def may_be_refused(self) -> bool:
        """Issue 19 asks that Dosser refuse to read a private held-out split as a public one."""
        return self.reads_test_split and self.test_split_is_private

    def applicable(self) -> bool:
        """A removed public record that the method reads is a change of public input, not a neighbour."""
        return not (
            self.record == "held_out" and self.reads_test_split and not self.test_split_is_private
        )

    def tokens(self, work: Path) -> list[str]:
        scale = dict(SCALE["digits" if self.data == "digits" else "own"])
        if (
            self.target
        ):  # calibrating the noise evaluates the RDP analysis often: keep its rate small
            scale["group"] = max(2, scale["group"] // 3)
        tokens = [
            *(t.format(**scale) for t in METHOD_TOKENS[self.method]),
            *COMMON,
            f"dataset={API_DATASET if self.data == 'api' else self.data}",
        ]
        if self.data in ("tensors", "imagefolder"):
            tokens.append(
                f"dataset.root={work / ('images' if self.data == 'imagefolder' else 'data.pt')}"
            )
            if self.test_root:
                tokens.append(
                    f"dataset.test_root={work / ('test_images' if self.data == 'imagefolder' else 'test.pt')}"
                )
        if self.target:
            tokens.append("privacy.target_epsilon=3")
        elif self.private:
            tokens.append("privacy.noise_multiplier=2")
        if self.sizes == "private":
            tokens += ["privacy.class_sizes=private", "privacy.count_epsilon=1"]
        if self.aux is not None:
            tokens.append(f"method.aux.source={self.aux}")
            if self.aux == "file":
                tokens.append(f"method.aux.path={work / 'aux.pt'}")
            if self.aux == "dp":
                tokens += [
                    "method.aux.epsilon=0.5",
                    "method.aux.ipc=2",
                    "method.aux.iterations=2",
                    f"method.aux.group_size={max(2, scale['group'] // 3)}",
                ]
        if self.sweep:
            tokens += [SWEEP_AXIS, f"run_dir={work / 'out'}", "-m"]
        else:
            tokens.append(f"run_dir={work / 'out'}")
        return tokens


def matrix() -> list[Case]:
    """Every method (Dosser with every auxiliary source) x class sizes public/private (private
    methods) x data (digits; tensors and imagefolder files, each with and without a test root).
    Each configuration runs one training record, the kind rotating over the configurations so that
    every method meets every kind (typical, largest, smallest class), then its held-out record (a
    second training record where Dosser reads a public test split). The noise is calibrated to a
    target ε on digits with private sizes; two configurations run as 2-member sweeps."""
    configs = [
        (method, aux, sizes, data, test_root)
        for method in METHOD_TOKENS
        for aux in (AUX_SOURCES if method == "dosser" else (None,))
        for sizes in (("public", "private") if method in PRIVATE_METHODS else ("public",))
        for data, test_root in DATA
    ]
    cases = []
    for i, (method, aux, sizes, data, test_root) in enumerate(configs):
        common = dict(
            method=method,
            data=data,
            sizes=sizes,
            test_root=test_root,
            aux=aux,
            target=sizes == "private" and method in ("ldpdc", "ndpdc") and data == "digits",
        )
        held_out = Case(record="held_out", **common)
        second = (
            held_out if held_out.applicable() else Case(record=TRAIN_RECORDS[(i + 1) % 3], **common)
        )
        cases += [Case(record=TRAIN_RECORDS[i % 3], **common), second]
    sweeps = [
        Case("ndpdc", "tensors", "typical", sizes="private", test_root=True, sweep=True),
        Case("dm", "imagefolder", "held_out", sweep=True),
    ]
    return cases + sweeps


# --------------------------------------------------------------------------- data on disk

CLASS_NAMES = ("ant", "bee", "cat")
OWN_SIZES = (64, 48, 40)  # per class in the file; 20 % of each is held out without a test root
SIDE = 12


def _own_arrays(sizes: tuple[int, ...], seed: int) -> tuple[Tensor, Tensor]:
    """uint8 [N, 1, SIDE, SIDE]: class c is a bright bar on rows 3c+1..3c+3 plus noise; all distinct."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.cat([torch.full((n,), c, dtype=torch.int64) for c, n in enumerate(sizes)])
    images = torch.randint(0, 90, (len(labels), 1, SIDE, SIDE), generator=generator)
    for row, c in enumerate(labels.tolist()):
        images[row, 0, 3 * c + 1 : 3 * c + 4] += 150
    return images.clamp(0, 255).to(torch.uint8), labels


def _inverted_on_the_same_side(image: Tensor, label: int) -> Tensor:
    """The pixel inversion of a record, nudged (first pixel) until the hold-out of data/loaders/own.py (default
    fraction and seed) puts it on the same side of the split as the record it replaces: the
    replacement then changes one record of one split, as the relation means. (Each record's side is
    its own hash, so a plain inversion could cross to the other split.)"""
    from dpdc_lightning.data.loaders.own import hold_out

    def held_out(pixels: Tensor) -> bool:
        return bool(
            hold_out(pixels[None].float() / 127.5 - 1, torch.tensor([label]), fraction=0.2, seed=0)[
                0
            ]
        )

    side, inverted = held_out(image), 255 - image
    for nudge in range(256):
        candidate = inverted.clone()
        candidate.view(-1)[0] = (int(inverted.view(-1)[0]) + nudge) % 256
        if held_out(candidate) == side:
            return candidate
    raise AssertionError("no replacement on the same side of the split")


@dataclass
class OwnData:
    """A user's data as files: train (and test root) records with stable file names."""

    images: Tensor
    labels: Tensor
    names: list[str]
    test_images: Tensor
    test_labels: Tensor
    test_names: list[str]

    @classmethod
    def make(cls) -> OwnData:
        images, labels = _own_arrays(OWN_SIZES, seed=11)
        test_images, test_labels = _own_arrays((4, 4, 4), seed=12)
        return cls(
            images,
            labels,
            [f"{i:03d}.png" for i in range(len(labels))],
            test_images,
            test_labels,
            [f"t{i:03d}.png" for i in range(len(test_labels))],
        )

    def changed(self, split: str, index: int, relation: str) -> OwnData:
        """A copy with record ``index`` of ``split`` ("train" or "test") removed or inverted."""
        parts = {
            "train": [self.images, self.labels, self.names],
            "test": [self.test_images, self.test_labels, self.test_names],
        }
        images, labels, names = parts[split]
        if relation == "remove":
            keep = [i for i in range(len(labels)) if i != index]
            parts[split] = [images[keep], labels[keep], [names[i] for i in keep]]
        else:
            images = images.clone()
            images[index] = _inverted_on_the_same_side(images[index], int(labels[index]))
            parts[split] = [images, labels, list(names)]
        return OwnData(*parts["train"], *parts["test"])

    def write(self, work: Path, kind: str) -> None:
        if kind == "tensors":
            torch.save(
                {"images": self.images, "labels": self.labels, "class_names": list(CLASS_NAMES)},
                work / "data.pt",
            )
            torch.save({"images": self.test_images, "labels": self.test_labels}, work / "test.pt")
            return
        from PIL import Image

        for folder, images, labels, names in (
            ("images", self.images, self.labels, self.names),
            ("test_images", self.test_images, self.test_labels, self.test_names),
        ):
            shutil.rmtree(work / folder, ignore_errors=True)
            for image, label, name in zip(images, labels.tolist(), names):
                path = work / folder / CLASS_NAMES[label] / name
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(image[0].numpy(), "L").save(path)

    def unit_rows(self, split: str) -> Tensor:
        images = self.images if split == "train" else self.test_images
        return normalise(images.float() / 255.0)


API_DATASET = "neighbouring_api"  # data handed over from Python (register_dataset)
EXTREME = 1e30  # a finite pixel value far outside [-1, 1]
_API: dict[
    str, Callable[[], ImageData]
] = {}  # what the registered loader builds (D, or D' while patched)


def _api_data() -> ImageData:
    """The harness's own records as normalised tensors (the Python API), plus one record of pixels at
    EXTREME at the end of the smallest class, the last training record (finite: the load check of
    the code this harness was written against let it pass)."""
    own = OwnData.make()
    labels = torch.cat([own.labels, torch.tensor([len(OWN_SIZES) - 1])])
    images = torch.cat([own.unit_rows("train"), torch.full((1, 1, SIDE, SIDE), EXTREME)])
    return ImageData.from_tensors(
        images,
        labels,
        test_images=own.unit_rows("test"),
        test_labels=own.test_labels,
        name=API_DATASET,
    )


def write_aux_file(work: Path, image_shape: tuple[int, ...]) -> None:
    """A public auxiliary file for Dosser's SER (method.aux.source=file): 10 float images in [-1, 1]."""
    generator = torch.Generator().manual_seed(13)
    torch.save(
        {"images": torch.rand(10, *image_shape, generator=generator) * 2 - 1}, work / "aux.pt"
    )


def _norms(images: Tensor) -> Tensor:
    return torch.linalg.vector_norm(images.flatten(1).double(), dim=1)


def _median_member(images: Tensor, members: Tensor) -> int:
    norms = _norms(images[members])
    return int(members[torch.argsort(norms)[len(members) // 2]])


def pick_record(data: ImageData, record: str) -> tuple[str, int]:
    """(split, row in the loaded split) of the record ``record`` names in D as loaded."""
    sizes = torch.tensor(data.class_sizes)
    labels = data.train_labels
    if record == "typical":
        return "train", _median_member(
            data.train_images, torch.nonzero(labels == int(sizes.argmax())).flatten()
        )
    if record == "largest":
        return "train", int(_norms(data.train_images).argmax())
    if record == "extreme":
        return "train", len(labels) - 1
    if record == "smallest_class":
        return "train", _median_member(
            data.train_images, torch.nonzero(labels == int(sizes.argmin())).flatten()
        )
    return "test", int(_norms(data.test_images).argmax())


def _changed_image_data(data: ImageData, split: str, index: int, relation: str) -> ImageData:
    images = data.train_images if split == "train" else data.test_images
    labels = data.train_labels if split == "train" else data.test_labels
    if relation == "remove":
        keep = torch.tensor([i for i in range(len(labels)) if i != index])
        images, labels = images[keep].contiguous(), labels[keep].contiguous()
    else:
        images = images.clone()
        images[index] = -images[index]  # inversion in the normalised space, as 255 - v in uint8
    train = (images, labels) if split == "train" else (data.train_images, data.train_labels)
    test = (images, labels) if split == "test" else (data.test_images, data.test_labels)
    return ImageData(
        data.name,
        *train,
        *test,
        data.num_classes,
        data.class_names,
        source=data.source,
        test_is_private=data.test_is_private,
    )


# --------------------------------------------------------------------------- one execution


@dataclass
class Outcome:
    exit_code: int
    outputs: dict[str, Any]  # every output, flattened (run_outputs.py)
    calls: list[Call]  # every mechanism call, in order


def execute(
    tokens: list[str],
    *,
    work: Path,
    tap: MechanismTap,
    secret: int,
    removed: dict[int, int] | None = None,
    patches: Callable[[pytest.MonkeyPatch], None] = lambda patch: None,
) -> Outcome:
    """``python train.py TOKENS`` with ``secret`` as the run's secret, ``tap`` on the mechanism and,
    with ``removed``, Poisson sampling coupled to D's; the run folder is ``work/out``."""

    def install(patch: pytest.MonkeyPatch) -> None:
        patch.setattr(condense_module, "new_secret", lambda: secret)
        tap.install(patch)
        if removed:
            couple_sampling(patch, removed)
        patches(patch)

    code, outputs = run_cli(tokens, folder=work / "out", work=work, patches=install)
    return Outcome(code, outputs, tap.calls)


# --------------------------------------------------------------------------- one case


@dataclass
class Prepared:
    """The data of one configuration: D's records (on disk under ``work`` for own data) as loaded."""

    work: Path
    own: OwnData | None
    data: ImageData | None  # None: refused at load (a bad record, see _refusal)

    def write(self, case: Case) -> None:
        """(Re)write D's files: a previous case may have left D' there."""
        if self.own is not None:
            self.own.write(self.work, case.data)


_PREPARED: dict[tuple[Any, ...], Prepared] = {}
_REFERENCES: dict[tuple[tuple[Any, ...], int], Outcome] = {}


def prepared(case: Case, work: Path) -> Prepared:
    """D's data of ``case``'s configuration, made once per process."""
    key = case.config_key
    if key not in _PREPARED:
        work.mkdir(parents=True, exist_ok=True)
        own = OwnData.make() if case.data in ("tensors", "imagefolder") else None
        if own is not None:
            own.write(work, case.data)
        if case.data == "api":
            from dpdc_lightning.data.registry import register_dataset

            _API["make"] = _api_data
            register_dataset(API_DATASET, lambda root: _API["make"]())
        try:
            data = _load(case, work)
        except UserError:  # a bad record refused at load: run() says so in one line (run_case)
            if case.record != "extreme":
                raise
            data = None
        if case.aux == "file":
            write_aux_file(work, tuple(data.train_images.shape[1:]))
        _PREPARED[key] = Prepared(work, own, data)
    return _PREPARED[key]


def reference(case: Case, work: Path, secret: int = SECRET) -> Outcome:
    """D of ``case``'s configuration run with ``secret``, once per process: every record of the
    configuration that can use this secret is compared with the same D (in the same folder)."""
    key = (case.config_key, secret)
    if key not in _REFERENCES:
        prepared(case, work).write(case)
        _REFERENCES[key] = execute(case.tokens(work), work=work, tap=MechanismTap(), secret=secret)
    return _REFERENCES[key]


def choose_secret(case: Case, prep: Prepared, split: str, index: int) -> int:
    """The first secret (SECRET, SECRET + 1, ...) whose Poisson samples in D include the record,
    so that (c) is never vacuous; found with the run's own plan and data stream (privacy/plan.py,
    engine/datamodule.py). Any secret does for a record no mechanism samples."""
    if split == "test" or not case.private:
        return next((secret for config, secret in _REFERENCES if config == case.config_key), SECRET)
    from dpdc_lightning.engine.datamodule import PrivateDataModule
    from dpdc_lightning.engine.planning import plan_run
    from dpdc_lightning.methods import DataSpec

    # The rates do not depend on the noise, the target or the auxiliary set: plan without them (fast).
    plain = dataclasses.replace(case, aux=None, target=False, sweep=False)
    config = _config(plain.tokens(prep.work))
    record, label = prep.data.train_images[index], int(prep.data.train_labels[index])
    for secret in range(SECRET, SECRET + 200):
        plan = plan_run(config, DataSpec.of(prep.data), noise_seed=secret)
        stream = PrivateDataModule(prep.data, plan=plan, sampling_seed=secret)
        for step in range(plan.data_steps):
            batch = stream.sample(step, list(range(prep.data.num_classes)))
            rows = batch["images"] if plan.sampling == "global_poisson" else batch["images"][label]
            if bool((rows == record).flatten(1).all(1).any()):
                return secret
    raise AssertionError(f"{case.id}: no secret tried samples the record")


_CONFIGS: dict[tuple[str, ...], Any] = {}


def _config(tokens: list[str]) -> Any:
    """The RunConfig of ``tokens`` (a run-directory-free line), composed once: only read here."""
    from dpdc_lightning.config import compose

    key = tuple(t for t in tokens if t not in (SWEEP_AXIS, "-m") and not t.startswith("run_dir="))
    if key not in _CONFIGS:
        _CONFIGS[key] = compose(list(key))
    return _CONFIGS[key]


def _load(case: Case, work: Path) -> ImageData:
    from dpdc_lightning.engine.planning import load_data

    clear_dataset_cache()
    try:
        return load_data(_config(case.tokens(work)))
    finally:
        clear_dataset_cache()


@dataclass
class Verdict:
    """What a case found; ``problems`` is empty when the case passes."""

    case: Case
    problems: list[str] = field(default_factory=list)
    calls: int = 0  # mechanism calls D made
    read: int = 0  # calls whose pre-noise sum the changed record moved (coupled mode)
    refused: str | None = None  # why D ran nothing, where that is allowed

    def check(self) -> None:
        assert not self.problems, f"{self.case.id}:\n  " + "\n  ".join(self.problems[:12])


def _pools(data: ImageData, global_pool: bool) -> dict[int, Tensor]:
    pools = {c: data.train_images[data.train_labels == c] for c in range(data.num_classes)}
    if global_pool:
        pools[-1] = data.train_images
    return pools


def _removal(before: Tensor, after: Tensor) -> tuple[str, int] | None:
    """How ``after`` follows from ``before``: ("same", -1), ("replaced", i), ("removed", i), or None."""
    if before.shape == after.shape:
        rows = torch.nonzero((before != after).flatten(1).any(1)).flatten().tolist()
        return ("same", -1) if not rows else ("replaced", rows[0]) if len(rows) == 1 else None
    if len(after) != len(before) - 1:
        return None
    rows = torch.nonzero((before[:-1] != after).flatten(1).any(1)).flatten().tolist()
    position = rows[0] if rows else len(before) - 1
    return (
        ("removed", position)
        if torch.equal(torch.cat([before[:position], before[position + 1 :]]), after)
        else None
    )


def _differing(before: Tensor, after: Tensor) -> int:
    return sum(1 for row in before if not bool((after == row).flatten(1).all(1).any()))


def _neighbour(
    case: Case, prep: Prepared, split: str, index: int
) -> Callable[[pytest.MonkeyPatch], None]:
    """Write D' (own data files) or prepare its loader (digits, the Python API); returns the loader patch."""
    if prep.own is None:
        changed = _changed_image_data(prep.data, split, index, case.relation)
        if case.data == "api":
            return lambda patch: patch.setitem(_API, "make", lambda: changed)
        return lambda patch: patch.setattr(embedded, "load_digits", lambda *args: changed)
    loaded = prep.data.train_images if split == "train" else prep.data.test_images
    # Without a test root the held-out records lie in the training file itself.
    in_file = "test" if split == "test" and not case.test_split_is_private else "train"
    matches = torch.nonzero(
        (prep.own.unit_rows(in_file) == loaded[index]).flatten(1).all(1)
    ).flatten()
    assert len(matches) == 1, "the harness's own data must have distinct records"
    prep.own.changed(in_file, int(matches[0]), case.relation).write(prep.work, case.data)
    return lambda patch: None


def _pool_changes(
    case: Case, before: ImageData, after: ImageData, split: str
) -> tuple[dict[int, int], list[int], list[str]]:
    """Where D' differs from D in what the data stream samples from: the removed position of each
    partition, the partitions that changed at all, and every difference beyond the one record."""
    global_pool = case.method.startswith("psg")
    pools_before, pools_after = _pools(before, global_pool), _pools(after, global_pool)
    removed, moved, problems = {}, [], []
    for partition, pool in pools_before.items():
        how = _removal(pool, pools_after[partition])
        if how is None:
            change = f"with one record {case.relation}d" if split == "train" else "unchanged"
            problems.append(
                f"the training records of D' are not D's {change}: partition {partition} has {len(pool)} records in D "
                f"and {len(pools_after[partition])} in D' ({_differing(pool, pools_after[partition])} of D's records "
                "are not in D')"
            )
        elif how[0] != "same":
            moved.append(partition)
            if how[0] == "removed":
                removed[partition] = how[1]
    return removed, moved, problems


def run_case(case: Case, work: Path, *, modes: tuple[str, ...] | None = None) -> Verdict:
    """Compare D' with D in ``modes`` ("plain": same secret; "coupled": releases coupled to D's).
    Default: both for a record the method reads, "coupled" alone for one nothing accounted reads
    (the two are then the same run), "plain" alone for a non-private method (nothing to couple)."""
    verdict = Verdict(case)
    prep = prepared(case, work)
    if prep.data is None:  # D's data was refused at load
        ref = reference(case, work)
        return _refusal(verdict, ref, work, SECRET, lambda patch: None)
    split, index = pick_record(prep.data, case.record)
    patches = _neighbour(case, prep, split, index)
    with pytest.MonkeyPatch.context() as patch:
        patches(patch)
        data_prime = _load(case, work)
    removed, moved, changes = _pool_changes(case, prep.data, data_prime, split)
    secret = choose_secret(case, prep, split, index)
    ref = reference(case, work, secret)
    verdict.calls = len(ref.calls)
    if (
        ref.exit_code != 0
    ):  # a refused configuration reads no record: where D' trains does not matter
        return _refusal(verdict, ref, work, secret, _neighbour(case, prep, split, index))
    if changes:  # D' does not differ from D by the one record: no coupling to check
        verdict.problems += changes
        return verdict
    _neighbour(case, prep, split, index)  # D's run rewrote D's files
    expected = (
        []
        if split == "test"
        else [int(prep.data.train_labels[index])] + ([-1] if case.method.startswith("psg") else [])
    )
    assert sorted(moved) == sorted(expected), (
        f"the change of D' is not where the harness put it: {moved}"
    )
    # A private held-out split is read by no accounted mechanism; a public one only by Dosser public_split.
    never_read = split == "test" and (case.test_split_is_private or not case.reads_test_split)
    if modes is None:
        modes = (
            ("plain",) if not case.private else ("coupled",) if never_read else ("plain", "coupled")
        )
    ledger = ledger_for(class_sizes=case.sizes, auxiliary_source=case.aux)
    tokens = case.tokens(work)
    if "plain" in modes:
        plain = execute(tokens, work=work, tap=MechanismTap(), secret=secret, patches=patches)
        found = differences(ref.outputs, plain.outputs, ledger=() if never_read else ledger)
        verdict.problems += (
            ["(b) a record nothing accounted reads changed the outputs"]
            if never_read and found
            else []
        )
        verdict.problems += [f"(a) same secret: {line}" for line in found]
    if "coupled" in modes:
        coupled = execute(
            tokens,
            work=work,
            tap=MechanismTap(ref.calls),
            secret=secret,
            removed=removed,
            patches=patches,
        )
        bound = 0 if never_read else (1 if case.relation == "remove" else 2)
        verdict.problems += [
            f"(c) {line}" for line in _check_calls(ref.calls, coupled.calls, bound)
        ]
        verdict.problems += [
            f"(a) coupled releases: {line}" for line in differences(ref.outputs, coupled.outputs)
        ]
        verdict.read = sum(
            1
            for mine, theirs in zip(ref.calls, coupled.calls)
            if mine.pre.shape == theirs.pre.shape and not torch.equal(mine.pre, theirs.pre)
        )
        if split == "train" and not verdict.read:
            verdict.problems.append(
                "(c) vacuous: the changed record moved no pre-noise sum, though D's secret was "
                "chosen to sample it"
            )
    return verdict


def _refusal(
    verdict: Verdict,
    ref: Outcome,
    work: Path,
    secret: int,
    patches: Callable[[pytest.MonkeyPatch], None],
) -> Verdict:
    """D stopped with an error. Allowed where issue 19 asks for a refusal, before any release: a
    configuration that would read a private split as public (D' must be refused alike), or a bad
    record refused at load (nothing released: no mechanism call, no run folder)."""
    case = verdict.case
    error = (ref.outputs["stderr"].strip().splitlines() or [""])[-1]
    if case.record == "extreme" and not ref.calls and ref.outputs["files"] is None:
        verdict.refused = f"D's bad record was refused at load: {error}"
    elif case.may_be_refused and ref.exit_code == 2:
        verdict.refused = f"the configuration was refused: {error}"
        prime = execute(
            case.tokens(work), work=work, tap=MechanismTap(), secret=secret, patches=patches
        )
        verdict.problems += [
            f"(a) refused: {line}" for line in differences(ref.outputs, prime.outputs)
        ]
    else:
        verdict.problems.append(
            f"D did not run (exit code {ref.exit_code}, {verdict.calls} mechanism calls made): "
            f"{error}"
        )
    return verdict


def _check_calls(reference: list[Call], coupled: list[Call], records: int) -> list[str]:
    """Each call of D' against D's: same noise key, event and sensitivity; pre-noise sums at most
    ``records`` sensitivities apart (exactly equal for 0)."""
    problems = []
    if len(reference) != len(coupled):
        problems.append(f"D made {len(reference)} mechanism calls, D' {len(coupled)}")
    for index, (mine, theirs) in enumerate(zip(reference, coupled)):
        where = f"call {index}"
        if (
            mine.key,
            mine.sensitivity,
            mine.noise_multiplier,
            mine.sample_rate,
            mine.pre.shape,
        ) != (
            theirs.key,
            theirs.sensitivity,
            theirs.noise_multiplier,
            theirs.sample_rate,
            theirs.pre.shape,
        ):
            problems.append(
                f"{where}: D' called the mechanism differently (noise key, event, sensitivity or shape)"
            )
            continue
        moved = float(torch.linalg.vector_norm(theirs.pre - mine.pre))
        limit = records * mine.sensitivity * (1 + ROUNDING)
        if (records == 0 and moved != 0.0) or moved > limit:
            problems.append(
                f"{where}: the pre-noise sum moved by {moved:.6g}, more than {records} x sensitivity "
                f"{mine.sensitivity:g}"
            )
    return problems
