"""The comparison of two runs' outputs (:mod:`.outputs`) against the release ledger
(privacy/receipts/ledger.py): a field the ledger names may differ between D and D' (an accounted
release or what is computed from releases alone); any other field, file, printed line (times
removed), warning, log record or exit code must be equal."""

from __future__ import annotations

import math
import re
from fnmatch import fnmatch
from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.privacy.receipts.ledger import TEXT_OUTPUTS, Released

TIME = re.compile(r"\b\d+(\.\d+)? s\b|\b\d+ min \d+ s\b|\b\d+ h \d+ min\b")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return (
            isinstance(a, Tensor)
            and isinstance(b, Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(
                torch.equal(a, b)
                or (
                    a.is_floating_point()
                    and torch.equal(a.isnan(), b.isnan())
                    and torch.equal(a.nan_to_num(), b.nan_to_num())
                )
            )
        )
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def in_ledger(key: str, ledger: tuple[Released, ...]) -> bool:
    rel, _, name = key.partition(":")
    return any(
        (fnmatch(rel, entry.output) or fnmatch(rel, "*/" + entry.output))
        and fnmatch(name, entry.field)
        for entry in ledger
        if entry.output not in TEXT_OUTPUTS
    )


def _text_lines(text: str, patterns: list[str]) -> list[str]:
    text = TIME.sub("<time>", text)
    for pattern in patterns:
        text = re.sub(pattern, "<released>", text)
    return text.splitlines()


def _show(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"tensor{tuple(value.shape)} {value.dtype}"
    if isinstance(value, bytes):
        return f"{len(value)} bytes"
    text = repr(value)
    return text if len(text) < 160 else text[:157] + "..."


def differences(
    a: dict[str, Any], b: dict[str, Any], *, ledger: tuple[Released, ...] = ()
) -> list[str]:
    """Outputs of D (``a``) and D' (``b``) that differ outside ``ledger``, one line each."""
    found = []
    for key in sorted(set(a) | set(b)):
        if key in TEXT_OUTPUTS or key in ("warnings", "log"):
            patterns = [entry.field for entry in ledger if entry.output == key]
            lines_a, lines_b = (
                _text_lines(a.get(key, ""), patterns),
                _text_lines(b.get(key, ""), patterns),
            )
            if lines_a != lines_b:
                diff = [
                    f"{x!r} | {y!r}"
                    for x, y in zip(lines_a + [""] * len(lines_b), lines_b + [""] * len(lines_a))
                    if x != y
                ]
                found.append(f"{key}: {diff[0]}")
            continue
        if key not in a or key not in b:
            found.append(
                f"{key}: only in {'D' if key in a else 'D_prime'} ({_show(a.get(key, b.get(key)))})"
            )
        elif not _same(a[key], b[key]) and not in_ledger(key, ledger):
            found.append(f"{key}: D {_show(a[key])} | D' {_show(b[key])}" + _delta(a[key], b[key]))
    return found


def _delta(a: Any, b: Any) -> str:
    if (
        isinstance(a, Tensor)
        and isinstance(b, Tensor)
        and a.shape == b.shape
        and a.is_floating_point()
    ):
        return f" (max |difference| {float((a.double() - b.double()).abs().max()):.3g})"
    if isinstance(a, str) and isinstance(b, str):  # a long text (report.html's page): where
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        near = slice(max(0, at - 40), at + 40)
        return f" (first difference at {at}: {a[near]!r} | {b[near]!r})"
    return ""
