"""Benchmarks (``python -m bench.NAME``): each answers one question and writes one results file
per question and scale, ``bench/results/NAME_<workload>_<scale>.json``, that records the commit,
the settings and the machine it was measured on (:func:`provenance`). docs/benchmarks.md holds
the current figures and the command behind each."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The checkout's commit, with ``+dirty`` when tracked files differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def machine() -> dict[str, Any]:
    import pyspark

    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    out = {
        "cpus": os.cpu_count(),
        "memory_gb": round(mem_kb / 1024**2, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "java": java.splitlines()[0] if java else "?",
    }
    try:
        import duckdb

        out["duckdb"] = duckdb.__version__
    except ImportError:
        pass
    return out


def provenance(settings: dict[str, Any]) -> dict[str, Any]:
    """What a results file records besides its figures (a folder below the checkout as a
    relative path: the file names no machine's folders)."""

    def plain(value: Any) -> Any:
        if isinstance(value, Path):
            inside = value.is_absolute() and value.is_relative_to(ROOT)
            return str(value.relative_to(ROOT) if inside else value)
        return value

    return {
        "commit": commit(),
        "settings": {k: plain(v) for k, v in settings.items()},
        "machine": machine(),
    }
