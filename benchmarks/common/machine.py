"""The machine a benchmark ran on, as its results file states it: the CPU's model and the vector
instruction sets that change float32 results (AVX2 against AVX-512 add terms in other orders)."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return ", ".join(
                    sorted(f for f in flags if f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16"))
                )
    except OSError:
        pass
    return "unknown"
