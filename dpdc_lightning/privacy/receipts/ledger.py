"""The release ledger: every output of a run that an accounted mechanism released, in one list.

Privacy-critical. A guarantee covers the whole bundle and everything else a run shows (its files,
the lines it prints, its exit code, its step count), not one mechanism. Each output byte is one of:

- a **ledger entry** below: the output of a mechanism that privacy.json accounts for, or a value
  computed from such outputs and public inputs only (post-processing);
- a function of **public inputs only**: the config, the public shape of the data (number of
  classes, image size, and the class sizes while ``privacy.class_sizes=public`` declares them
  public), data the user declared public (``dataset.test_root``, ``method.aux.path``), data public
  by construction (the fixed test split of an embedded data set) and the run's secret.

Mechanisms (:data:`CONDENSATION`, :data:`CLASS_COUNTS`, :data:`AUXILIARY`):

- the condensation's own steps (Gaussian sums of clipped rows, privacy/mechanisms/gaussian.py and
  per_example.py): the synthetic images and every state computed from them or from the stored
  noisy signals; a non-private method (DM, DC) releases the same outputs with no guarantee
  (privacy.json says ε = null);
- ``privacy.class_sizes=private``: the class sizes released by privacy/mechanisms/counts.py, and the
privacy
  plan made from them (sample rates, a calibrated noise multiplier or step count, every ε);
- ``method.aux.source=dp``: the auxiliary image set made by its own private run (Dosser's SER).

An entry names an output (a file pattern relative to the run or sweep folder, or ``stdout`` /
``stderr``) and a field inside it: a key pattern (fnmatch, ``*`` also spans dots) into a JSON or
YAML file, a tensor file or a checkpoint (nested keys joined by dots, list items by index), a
``tag@step`` pattern of a TensorBoard event file, ``row.column`` of a table (summary.csv and
summary.md), the ``data-source`` of a value report.html shows (``FILE:FIELD``, an image ``FILE``),
``*`` for a whole file, or, for printed text, a
regular expression of the released part of a line. tests/audit/test_neighbouring.py runs
neighbouring
data sets with the same secret and checks that every output outside :func:`ledger_for` the run's
configuration is identical, and that with every mechanism output made equal nothing differs at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpdc_lightning.privacy.receipts.run_files import (
    AUXILIARY_FILE,
    BUNDLE_TENSORS,
    CHECKPOINT_DIR,
    GRID_IMAGE,
    HPARAMS_FILE,
    MANIFEST_FILE,
    PLAN_FILE,
    PRIVACY_REPORT,
    REPORT_PAGE,
    TENSORBOARD_DIR,
)

CONDENSATION = "condensation"
CLASS_COUNTS = "class_counts"
AUXILIARY = "auxiliary"
SELECTION = "selection"
TEXT_OUTPUTS = ("stdout", "stderr")


@dataclass(frozen=True)
class Released:
    """One output (or part of one) that ``mechanism`` released or is computed from its release."""

    output: str
    field: str
    mechanism: str
    why: str


def _all(output: str, fields: tuple[str, ...], mechanism: str, why: str) -> tuple[Released, ...]:
    return tuple(Released(output, field, mechanism, why) for field in fields)


_CHECKPOINT = f"{CHECKPOINT_DIR}/*.ckpt"
# PrivacyPlan fields made from the released class sizes (privacy/planning/plan.py; the rest from the
# config)
_PLAN_FIELDS = (
    "sample_rates.*",
    "noise_multiplier",
    "planned_epsilon",
    "data_steps",
    "free_steps",
    "released_class_sizes.*",
    "class_sizes.*",
    "auxiliary_plan.*",
)
_PLAN_SUMMARY = (
    "plan.sample_rate",
    "plan.noise_multiplier",
    "plan.planned_epsilon",
    "plan.data_steps",
    "plan.free_steps",
    "plan.class_sizes.released.*",
    "plan.auxiliary.*",
)
_REPORT_FIELDS = (
    "epsilon",
    "epsilon_note",
    "steps",
    "noise_multiplier",
    "noise_std",
    "sample_rate",
    # PSG: q times the number of records, which is method.batch_size unless q is capped at 1
    "expected_batch_size",
    "phases.*.history.*",
    "phases.*.steps",
    "phases.*.epsilon",
    "plan_sha256",  # the digest of plan.json, made from the released class sizes
    "class_sizes.released.*",
    *_PLAN_SUMMARY,
    "noise.noise_values",
    "noise.truncation_tv_bound",
    "noise.delta_with_truncation",
    # the inputs list: a DP input's ε share and the description of a DP auxiliary set
    "inputs.*.epsilon_alone",
    "inputs.*.detail",
)

# report.html (report/): the released values it shows, by the data-source each carries. A run's
# page shows privacy.json's fields under their own keys, the TensorBoard log's curves by tag; a
# sweep's page its members' rows (sweep.json) and their composed cost.
_PAGE = REPORT_PAGE
_PAGE_CONDENSATION = (GRID_IMAGE, f"{TENSORBOARD_DIR}:loss", f"{PRIVACY_REPORT}:bundle.sha256")
_PAGE_COUNTS = (
    *(
        f"{PRIVACY_REPORT}:{f}"
        for f in (
            "epsilon",
            "steps",
            "noise_multiplier",
            "noise_std",
            "sample_rate",
            "expected_batch_size",
            "phases.*.history.*",
            "phases.*.steps",
            "phases.*.epsilon",
            "plan.noise_multiplier",
            "plan.sample_rate",
            "plan.data_steps",
            "plan.free_steps",
            "plan.planned_epsilon",
            "plan.auxiliary.*",
            "inputs.*.epsilon_alone",
            "inputs.*.detail",
        )
    ),
    f"{TENSORBOARD_DIR}:epsilon",
    "sweep.json:members.*.epsilon",
    "sweep.json:members.*.steps",
    "composition:*",
)

LEDGER: tuple[Released, ...] = (
    # ---- the condensation's per-step releases and what is computed from them
    Released(BUNDLE_TENSORS, "images", CONDENSATION, "the synthetic images: the release itself"),
    Released(GRID_IMAGE, "*", CONDENSATION, "a picture of the synthetic images"),
    Released(PRIVACY_REPORT, "bundle.sha256", CONDENSATION, "digest of the synthetic tensors"),
    # (its "readers" section is written by evaluate and the audits, never by a training run)
    *_all(
        MANIFEST_FILE,
        ("release.*",),
        CONDENSATION,
        "the sha256 of each released file (privacy/receipts/manifest.py): a function of those "
        "files",
    ),
    *_all(
        _CHECKPOINT,
        (
            "state_dict.synthetic.images",
            "state_dict.synthetic.generator.*",
            "state_dict.ema_images",
            "optimizer_states.*.state.*",
            "carried_state.signal_bank.signals",
            "carried_state.inner_network.*",
        ),
        CONDENSATION,
        "resumable state: the synthetic set, its optimiser, the stored noisy signals, "
        "a network trained on it",
    ),
    *_all(
        f"{TENSORBOARD_DIR}/*",
        ("loss@*", "synthetic@*"),
        CONDENSATION,
        "the loss against the noisy release; the image grid",
    ),
    *_all(_PAGE, _PAGE_CONDENSATION, CONDENSATION, "the images, the loss curve, the digest"),
    # ---- privacy.class_sizes=private: the released sizes and the plan made from them
    *_all(PLAN_FILE, _PLAN_FIELDS, CLASS_COUNTS, "the plan is made from the released class sizes"),
    *_all(
        PRIVACY_REPORT,
        _REPORT_FIELDS,
        CLASS_COUNTS,
        "the report of a plan made from the released class sizes",
    ),
    *_all(
        _CHECKPOINT,
        (
            *(f"callbacks.PrivacyCallback.plan.{f}" for f in _PLAN_FIELDS),
            "callbacks.PrivacyCallback.accountant.phases.*.history.*",
            "callbacks.PrivacyCallback.mechanism.*",
            "global_step",
            "loops.*",
            "carried_state.signal_bank.shape.*",
            "carried_state.signal_bank.signals",
            "carried_state.signal_bank.theta_seeds",
            "carried_state.signal_bank.dsa_seeds",
            "carried_state.signal_bank.filled",
        ),
        CLASS_COUNTS,
        "the plan and its history, and step counters when the plan sets the number of steps",
    ),
    *_all(
        f"{TENSORBOARD_DIR}/*",
        ("epsilon@*", "stage@*", "_hparams_/*.hparams.plan.*"),
        CLASS_COUNTS,
        "ε per step, the steps the plan sets, and the plan's outcome in the hparams tab",
    ),
    *_all(
        f"{TENSORBOARD_DIR}/{HPARAMS_FILE}",
        ("plan.noise_multiplier", "plan.data_steps", "plan.planned_epsilon"),
        CLASS_COUNTS,
        "the plan's outcome beside the config",
    ),
    *_all(
        "sweep.json",
        ("members.*.epsilon", "members.*.steps"),
        CLASS_COUNTS,
        "a sweep member's ε and steps",
    ),
    *_all("summary.csv", ("*.epsilon", "*.steps"), CLASS_COUNTS, "a sweep member's ε and steps"),
    *_all(
        "summary.md",
        ("*.ε", "*.steps"),
        CLASS_COUNTS,
        "a sweep member's ε and steps (table rows by member)",
    ),
    *_all(
        "stdout",
        (r"ε = [-+0-9.e]+", r"\d+ privacy-consuming steps?"),
        CLASS_COUNTS,
        "the end-of-run line: ε and steps of the plan",
    ),
    Released(
        "stderr", r"at ε = [-+0-9.e]+ alone", CLASS_COUNTS, "the ε planned for the DP auxiliary run"
    ),
    Released(
        AUXILIARY_FILE, "description", CLASS_COUNTS, "names the ε planned for the DP auxiliary run"
    ),
    *_all(_PAGE, _PAGE_COUNTS, CLASS_COUNTS, "ε, the plan and their curve as the page shows them"),
    # ---- method.aux.source=dp: the auxiliary set its own private run made
    Released(AUXILIARY_FILE, "images", AUXILIARY, "the DP auxiliary set, kept for a resumed run"),
)


# A private selection (``train.py -m GRID select=private``) releases, beyond its winner's own run
# (the condensation ledger above), only the winner's noisy score: the Gaussian count of
# selection/score.py. The winner's identity is the argmax of the released scores, so it
# may change only through them; K, every loser's score, image, line and time are released by no
# mechanism (audit/neighbours/selection.py compares neighbouring selections against this).
_SCORE = "selection.winner.noisy_score"
SELECTION_LEDGER: tuple[Released, ...] = (
    Released(PRIVACY_REPORT, _SCORE, SELECTION, "the winner's score: a Gaussian count"),
    Released(
        _PAGE, f"{PRIVACY_REPORT}:{_SCORE}", SELECTION, "the winner's score as the page shows it"
    ),
    *_all(
        MANIFEST_FILE,
        (f"release.{PRIVACY_REPORT}", f"release.{_PAGE}"),
        SELECTION,
        "the sha256 of the files that show the winner's score (privacy/receipts/manifest.py)",
    ),
)


def mechanisms_of(*, class_sizes: str, auxiliary_source: str | None) -> frozenset[str]:
    """The mechanisms whose outputs a run of this configuration writes or prints."""
    mechanisms = {CONDENSATION}
    if class_sizes == "private":
        mechanisms.add(CLASS_COUNTS)
    if auxiliary_source == "dp":
        mechanisms.add(AUXILIARY)
    return frozenset(mechanisms)


def ledger_for(*, class_sizes: str, auxiliary_source: str | None) -> tuple[Released, ...]:
    """The ledger entries of a run with ``privacy.class_sizes`` and ``method.aux.source`` (None for
    a method without an auxiliary set): every other output must be a function of public inputs."""
    active = mechanisms_of(class_sizes=class_sizes, auxiliary_source=auxiliary_source)
    return tuple(entry for entry in LEDGER if entry.mechanism in active)
