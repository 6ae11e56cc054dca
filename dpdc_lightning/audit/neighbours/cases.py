"""The cases of the neighbouring-run harness: one method's tiny configuration on one kind of data,
one changed record. A method's tiny size is its own (``checks.tiny`` of its class, with ``{group}``,
``{batch}`` and ``{real}`` filled per data set), so any registered method, a plug-in included, has
cases without the harness knowing its name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from dpdc_lightning.audit.neighbours.records import API_DATASET
from dpdc_lightning.methods import CondensationMethod, method_class

COMMON = ["model.width=4", "model.depth=1", "trainer.enable_progress_bar=false"]
# Tiny runs sample about 10 % of each class (Opacus' RDP analysis slows down sharply at larger
# rates; a DP auxiliary run and a calibrated noise sample less): {group}, {batch} and {real} per
# data set, the harness's own files ("own") being smaller than the digits.
SCALE = {
    "digits": {"group": 14, "batch": 144, "real": 32},
    "own": {"group": 5, "batch": 14, "real": 16},
}
SWEEP_AXIS = "seed=0,1"


@dataclass(frozen=True)
class Case:
    method: str  # a registered name
    data: str  # digits, tensors, imagefolder, or api (data handed over from Python)
    record: str  # typical, largest, smallest_class, outlier, sole, held_out, extreme
    sizes: str = "public"
    test_root: bool = False
    aux: str | None = None  # method.aux.source of a method that takes an auxiliary set
    target: bool = False  # calibrate the noise to privacy.target_epsilon (else the default noise)
    sweep: bool = False  # run as a 2-member -m sweep over the run seed (a CLI runner only)
    planted: str = ""  # names a bug a self-test plants (keeps its runs apart from the real ones)
    variant: str = ""  # one of the method's checks.variants
    overrides: tuple[str, ...] = ()  # more overrides (audit.py check method=NAME KEY=VALUE ...)
    whole_plan: bool = False  # every step of the method's real plan (its step keys not made tiny)

    @property
    def id(self) -> str:
        parts = [
            self.method
            + (f"+{self.variant}" if self.variant else "")
            + (f"[{self.aux}]" if self.aux else ""),
            f"sizes={self.sizes}",
            self.data + ("+test_root" if self.test_root else ""),
            self.record,
        ]
        return (
            "-".join(parts)
            + ("-target" if self.target else "")
            + ("-sweep" if self.sweep else "")
            + ("-whole_plan" if self.whole_plan else "")
            + (f"-planted={self.planted}" if self.planted else "")
        )

    @property
    def config_key(self) -> tuple[Any, ...]:
        """Everything but the record: the configuration whose D all records share (an outlier
        record is added to D: its D is its own)."""
        return (
            self.method,
            self.variant,
            self.data,
            self.sizes,
            self.test_root,
            self.aux,
            self.target,
            self.sweep,
            self.planted,
            self.overrides,
            self.whole_plan,
            self.outlier,
        )

    @property
    def outlier(self) -> bool:
        """D holds an outlier record (the harness's own data): the record this case removes."""
        return self.record == "outlier"

    @property
    def folder(self) -> str:
        """A folder name for the configuration (the same for all its records: D and D' share
        paths)."""
        # No "=": a path in an override (dataset.root=PATH) must parse.
        return re.sub(r"[^A-Za-z0-9_.+-]", "_", "-".join(str(p) for p in self.config_key))[:200]

    @cached_property
    def method_class(self) -> type[CondensationMethod]:
        return method_class(self.method)

    @property
    def private(self) -> bool:
        return self.method_class.private

    @property
    def global_pool(self) -> bool:
        """The method samples the whole data set (one partition, -1), not each class."""
        return self.method_class.sampling == "global_poisson"

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
        """The method's auxiliary set is the test split, declared public."""
        return self.aux == "public_split"

    @property
    def may_be_refused(self) -> bool:
        """Issue 19 asks that a private held-out split read as a public one be refused."""
        return self.reads_test_split and self.test_split_is_private

    def applicable(self) -> bool:
        """A removed public record that the method reads is a change of public input, not a
        neighbour."""
        return not (
            self.record == "held_out" and self.reads_test_split and not self.test_split_is_private
        )

    def tokens(self, work: Path) -> list[str]:
        scale = dict(SCALE["digits" if self.data == "digits" else "own"])
        if self.target:  # calibrating the noise evaluates the RDP analysis often: a small rate
            scale["group"] = max(2, scale["group"] // 3)
        checks = self.method_class.checks
        sizes = [*checks.tiny, *(checks.variants[self.variant] if self.variant else ())]
        if self.whole_plan:  # the method's own step count (or the overrides'), not the tiny one
            steps = self.method_class.config_class.step_keys
            sizes = [t for t in sizes if t.partition("=")[0] not in steps]
        tokens = [
            f"method={self.method}",
            *(t.format(**scale) for t in sizes),
            *COMMON,
            f"dataset={API_DATASET if self.data == 'api' else self.data}",
            *self._data_tokens(work),
            *self._privacy_tokens(),
            *self._aux_tokens(work, scale),
            *self.overrides,
        ]
        if self.sweep:
            return [*tokens, SWEEP_AXIS, f"run_dir={work / 'out'}", "-m"]
        return [*tokens, f"run_dir={work / 'out'}"]

    def _data_tokens(self, work: Path) -> list[str]:
        if self.data not in ("tensors", "imagefolder"):
            return []
        folder = self.data == "imagefolder"
        tokens = [f"dataset.root={work / ('images' if folder else 'data.pt')}"]
        if self.test_root:
            tokens.append(f"dataset.test_root={work / ('test_images' if folder else 'test.pt')}")
        return tokens

    def _privacy_tokens(self) -> list[str]:
        tokens = []
        if self.target:
            tokens.append("privacy.target_epsilon=3")
        elif self.private:
            tokens.append("privacy.noise_multiplier=2")
        if self.sizes == "private":
            tokens += ["privacy.class_sizes=private", "privacy.count_epsilon=1"]
        return tokens

    def _aux_tokens(self, work: Path, scale: dict[str, int]) -> list[str]:
        if self.aux is None:
            return []
        tokens = [f"method.aux.source={self.aux}"]
        if self.aux == "file":
            tokens.append(f"method.aux.path={work / 'aux.pt'}")
        if self.aux == "dp":
            tokens += [
                "method.aux.epsilon=0.5",
                "method.aux.ipc=2",
                "method.aux.iterations=2",
                f"method.aux.group_size={max(2, scale['group'] // 3)}",
            ]
        return tokens


def check_cases(method: str, overrides: tuple[str, ...] = ()) -> list[Case]:
    """What ``audit.py check`` runs for ``method``: an outlier removed from own files with a test
    root (pixels opposite to its class: the largest norm a record can have, which clipping must cut
    down, and the record that moves a batch statistic most); over the method's WHOLE plan, the
    record some step samples alone in its class, removed from a set whose held-out split is
    private (that class's sample is then empty in D'); the variants with a typical record; a
    held-out record nothing accounted reads (every output bit-identical); a record replaced under
    public class sizes on the digits (two sensitivities); a record of extreme pixels handed over
    from Python. A method that takes an auxiliary set reads a public file in the cases on own files
    and the digits' declared-public test split on the digits (its default could be a source a case
    refuses)."""
    uses_aux = method_class(method).uses_auxiliary
    own = {"overrides": tuple(overrides), "aux": "file" if uses_aux else None}
    digits = {**own, "aux": "public_split" if uses_aux else None}
    cases = [
        Case(method, "tensors", "outlier", sizes="private", test_root=True, **own),
        Case(method, "tensors", "sole", sizes="private", whole_plan=True, **own),
        Case(method, "tensors", "held_out", sizes="private", **own),
        Case(method, "digits", "typical", **digits),
        Case(method, "api", "extreme", sizes="private", overrides=tuple(overrides)),
    ]
    variants = method_class(method).checks.variants
    return cases + [
        Case(method, "tensors", "typical", sizes="private", variant=variant, **own)
        for variant in variants
    ]
