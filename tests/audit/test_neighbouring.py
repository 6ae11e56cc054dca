"""Issue 19: neighbouring runs through ``python train.py`` with the same secret (the harness:
dpdc_lightning/audit/neighbours/).

Each case runs D and D' (one record removed, or replaced where the class sizes are declared public)
and asserts (a) every output outside privacy/receipts/ledger.py is identical, (b) a record nothing accounted
reads leaves every output bit-identical, (c) each mechanism call's pre-noise sum moves by at most
the sensitivity that scales its noise, on the same state (releases coupled to D's).

The fast cases cover each method family, each kind of data and record, and every leak the harness
has caught; the whole matrix (every method x class sizes x Dosser auxiliary source x data with and
without a test root, and two sweeps) is marked slow. The cases marked "leak N" failed on the code
before issue 19's fixes (1: PSG's exact N; 2: a private held-out split read as public; 3: a record
that stops the run; 5: a held-out split redrawn when one record is removed). The self-tests at the end plant a bug of each kind and check that the harness reports it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from dpdc_lightning.audit import neighbours
from dpdc_lightning.audit.neighbours import Case
from dpdc_lightning.audit.neighbours.compare import in_ledger
from dpdc_lightning.cli.commands import train_main
from dpdc_lightning.config.registry import method_entry
from dpdc_lightning.methods import METHODS
from dpdc_lightning.privacy.receipts.ledger import LEDGER, TEXT_OUTPUTS

AUX_SOURCES = ("public_split", "file", "dp", "none")
DATA = (
    ("digits", False),
    ("tensors", False),
    ("tensors", True),
    ("imagefolder", False),
    ("imagefolder", True),
)
TRAIN_RECORDS = ("typical", "largest", "smallest_class")


def run_case(case: Case, work: Path, **options) -> neighbours.Verdict:
    """A case through the command line's own train_main (argument parsing, sweeps)."""
    return neighbours.run_case(case, work, runner=train_main, **options)


def _configurations() -> list[tuple[str, str, str | None, str, str, bool]]:
    """(method, variant, aux, sizes, data, test_root) of every installed method (built-in and
    plug-ins; not those registered at runtime by other tests)."""
    return [
        (method, variant, aux, sizes, data, test_root)
        for method in METHODS
        if not method_entry(method).origin.startswith("registered")
        for variant in ("", *METHODS[method].checks.variants)
        for aux in (AUX_SOURCES if METHODS[method].uses_auxiliary else (None,))
        for sizes in (("public", "private") if METHODS[method].private else ("public",))
        for data, test_root in DATA
    ]


def _calibrated(method: str) -> bool:
    """Noise calibrated to a target ε (slow RDP evaluations): methods of per-class sampling
    without free steps (LDPDC, NDPDC)."""
    cls = METHODS[method]
    return cls.sampling == "per_class_poisson" and not cls.free_steps(cls.config_class())


def matrix() -> list[Case]:
    """Every method (with each variant; with every auxiliary source where it takes one) x class
    sizes public/private (private methods) x data (digits; tensors and imagefolder files, each
    with and without a test root). Each configuration runs one training record, the kind rotating
    over the configurations so that every method meets every kind (typical, largest, smallest
    class), then its held-out record (a second training record where the method reads a public
    test split). The noise is calibrated to a target ε on digits with private sizes; two
    configurations run as 2-member sweeps."""
    cases = []
    for i, (method, variant, aux, sizes, data, test_root) in enumerate(_configurations()):
        common = dict(
            method=method,
            variant=variant,
            data=data,
            sizes=sizes,
            test_root=test_root,
            aux=aux,
            target=sizes == "private" and _calibrated(method) and data == "digits",
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


def param(case: Case):
    return pytest.param(case, id=case.id)


@pytest.fixture(scope="session")
def work_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("neighbouring")


FAST = [
    Case("psg", "tensors", "largest", sizes="private", test_root=True),  # leak 1
    Case("dosser", "tensors", "held_out", aux="public_split"),  # leak 2
    Case("ndpdc", "api", "extreme", sizes="private"),  # leak 3
    Case("ndpdc", "tensors", "typical", sizes="private"),  # leak 5
    Case("ndpdc", "digits", "largest", sizes="private"),
    Case("ldpdc", "imagefolder", "held_out"),
    Case("dosser", "tensors", "smallest_class", sizes="private", test_root=True, aux="file"),
    Case("dm", "digits", "typical"),
]


@pytest.mark.parametrize("case", [param(case) for case in FAST])
def test_neighbouring_runs(case, work_root):
    verdict = run_case(case, work_root / case.folder)
    verdict.check()
    assert verdict.calls > 0 or not case.private or verdict.refused


@pytest.mark.slow
@pytest.mark.parametrize("case", [param(case) for case in matrix()])
def test_neighbouring_matrix(case, work_root):
    verdict = run_case(case, work_root / case.folder)
    verdict.check()
    assert verdict.calls > 0 or not case.private or verdict.refused


@pytest.mark.slow
def test_every_ledger_entry_names_a_real_output(work_root):
    """A ledger entry that matches no output of any configuration is stale (or misspelt). The
    configurations below produce every kind of output; epsilon_note appears only when ε is clamped at
    0 (a δ so large that the conversion goes negative), which no neighbouring case uses."""
    configurations = [
        Case("psg", "tensors", "typical", sizes="private", test_root=True),
        Case("psg", "tensors", "typical", sizes="private", test_root=True, variant="generator"),
        Case("dosser", "tensors", "typical", sizes="private", test_root=True, aux="dp"),
        Case(
            "ndpdc", "tensors", "typical", sizes="private", test_root=True, target=True, sweep=True
        ),
        Case("dc", "digits", "typical"),
        # one privacy-consuming phase: the page shows privacy.json's own "steps" (with class sizes
        # released too it shows every phase's steps instead)
        Case("ndpdc", "tensors", "typical"),
    ]
    keys: set[str] = set()
    text = {name: "" for name in TEXT_OUTPUTS}
    for case in configurations:
        outcome = neighbours.reference(case, work_root / case.folder, runner=train_main)
        assert outcome.exit_code == 0, outcome.outputs["stderr"]
        keys |= set(outcome.outputs)
        for name in TEXT_OUTPUTS:
            text[name] += outcome.outputs[name]
    stale = [
        entry
        for entry in LEDGER
        if entry.field != "epsilon_note"
        and not (
            re.search(entry.field, text[entry.output])
            if entry.output in TEXT_OUTPUTS
            else any(in_ledger(key, (entry,)) for key in keys)
        )
    ]
    assert not stale, stale


# --------------------------------------------------------------------------- the harness finds planted bugs


def _planted(
    case: Case, work_root: Path, patch: pytest.MonkeyPatch, plant, modes: tuple[str, ...]
) -> list[str]:
    plant(patch)
    return run_case(case, work_root / case.folder, modes=modes).problems


def test_harness_catches_a_report_field_computed_from_exact_counts(work_root, monkeypatch):
    """privacy.json states the exact number of training records although the class sizes are private."""
    from dpdc_lightning.engine.condense import Condensation

    original = Condensation.fit

    def fit(self, **options):
        result = original(self, **options)
        result.report["records"] = len(self.datamodule.data.train_labels)
        return result

    case = Case(
        "ndpdc", "tensors", "smallest_class", sizes="private", test_root=True, planted="exact-n"
    )
    problems = _planted(
        case,
        work_root,
        monkeypatch,
        lambda patch: patch.setattr(Condensation, "fit", fit),
        modes=("plain",),
    )
    assert problems == ["(a) same secret: privacy.json:records: D 152 | D' 151"], problems


def test_harness_catches_noise_scaled_to_an_understated_sensitivity(work_root, monkeypatch):
    """Rows clipped to 3G while the noise is scaled to G: a removed record moves the sum by more than G."""
    from dpdc_lightning.privacy.mechanisms import gaussian as mechanisms

    original = mechanisms.clip_rows
    case = Case("ndpdc", "tensors", "largest", sizes="private", test_root=True, planted="clip-3g")
    problems = _planted(
        case,
        work_root,
        monkeypatch,
        lambda patch: patch.setattr(
            mechanisms,
            "clip_rows",
            lambda x, *, max_norm, **kw: original(x, max_norm=3 * max_norm, **kw),
        ),
        modes=("coupled",),
    )
    moved = [
        float(m)
        for p in problems
        for m in re.findall(
            r"^\(c\) call \d+ noise key \[[^]]*\]: the pre-noise sum moved by (\S+), "
            r"more than 1 x sensitivity 1$",
            p,
        )
    ]
    assert moved and 1 < max(moved) <= 3 * (1 + neighbours.ROUNDING), problems


def test_harness_catches_a_mechanism_reading_the_held_out_split(work_root, monkeypatch):
    """The held-out records join the sampled pools: changing one moves a release it should not touch."""
    from dpdc_lightning.engine.datamodule import PrivateDataModule

    original = PrivateDataModule.sample

    def reads_held_out(self, step, classes):
        batch = original(self, step, classes)
        if "classes" in batch:  # every held-out record of the class joins each sample
            batch["images"] = [
                torch.cat([rows, self.data.test_images[self.data.test_labels == c]])
                for c, rows in zip(batch["classes"], batch["images"])
            ]
        return batch

    case = Case("ldpdc", "tensors", "held_out", planted="reads-held-out")
    problems = _planted(
        case,
        work_root,
        monkeypatch,
        lambda patch: patch.setattr(PrivateDataModule, "sample", reads_held_out),
        modes=("coupled",),
    )
    assert problems and all(
        re.match(
            r"\(c\) call \d+ noise key \[[^]]*\]: the pre-noise sum moved by \S+, more than 0 x sensitivity 12$",
            p,
        )
        for p in problems
    ), problems  # LDPDC on 1x12x12 images: sensitivity b sqrt(d) = 12
