"""Temporary replacements of attributes and items, undone in reverse order: what the harness uses
to fix a run's secret, tap the mechanism and couple sampling. The interface is that of pytest's
``MonkeyPatch`` (``setattr``, ``setitem``), so the tests hand theirs to the same functions; the
package does not depend on pytest."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

_MISSING = object()


class Patches:
    def __init__(self) -> None:
        self._undo: list[tuple[Any, ...]] = []

    def setattr(self, target: Any, name: str, value: Any) -> None:
        self._undo.append(("attr", target, name, getattr(target, name, _MISSING)))
        setattr(target, name, value)

    def setitem(self, mapping: MutableMapping, key: Any, value: Any) -> None:
        self._undo.append(("item", mapping, key, mapping.get(key, _MISSING)))
        mapping[key] = value

    def undo(self) -> None:
        while self._undo:
            kind, target, name, old = self._undo.pop()
            if kind == "attr":
                if old is _MISSING:
                    delattr(target, name)
                else:
                    setattr(target, name, old)
            elif old is _MISSING:
                del target[name]
            else:
                target[name] = old


@contextmanager
def patched() -> Iterator[Patches]:
    patches = Patches()
    try:
        yield patches
    finally:
        patches.undo()
