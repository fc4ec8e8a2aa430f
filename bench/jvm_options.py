"""Driver JIT on small days: a two-day ``feedpipe backfill`` of ``ff2010`` at a small scale,
with the drivers' default JIT (tiered, C1 then C2) and with ``FEEDPIPE_JAVA_OPTIONS=
-XX:TieredStopAtLevel=1`` (C1 only), alternated in one run.

    python -m bench.jvm_options [--scale 0.002] [--reps 2] [--work var/bench/jvm]

Each backfill is its own process (one driver JVM for both days, as ``feedpipe backfill``
runs), one strategy (FF-PerPair). Reported per variant: the wall seconds and the CPU seconds
of the whole machine during the run (``/proc/stat``: run it on an otherwise idle machine),
their medians, and the ratio of each to the default's. On a CPU-bound machine (the test
suite's two processes on two cores) the CPU seconds are what the wall time follows. Writes
``bench/results/jvm_options_ff2010_<scale>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import ROOT, provenance
from jobs.common.storage import Storage
from jobs.workloads.generate import PROFILES, generate, scaled

START = dt.date(2026, 1, 1)
SEED = 5
VARIANTS = {"default": "", "c1-only": "-XX:TieredStopAtLevel=1"}


def busy_seconds() -> float:
    """CPU seconds every processor of the machine spent outside idle and I/O wait."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system = (int(x) for x in fields[:3])
    irq, softirq, steal = (int(x) for x in fields[5:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def backfill(landing: Path, warehouse: Path, env: dict[str, str]) -> tuple[float, float]:
    """A two-day ``feedpipe backfill`` (FF-PerPair alone) in a process of its own, with
    ``env`` on top of this one's; returns its wall and the machine's CPU seconds."""
    shutil.rmtree(warehouse, ignore_errors=True)
    full = {**os.environ, "FEEDPIPE_JAVA_OPTIONS": "", "FEEDPIPE_FEED_K": "5", **env}
    full.update(FEEDPIPE_STRATEGY="ff-per-pair", FEEDPIPE_STRATEGIES="ff-per-pair")
    end = START + dt.timedelta(days=1)
    cmd = [sys.executable, "-m", "jobs", "backfill", "--start", str(START), "--end", str(end)]
    cmd += ["--landing", str(landing), "--warehouse", str(warehouse), "-q"]
    cpu, wall = busy_seconds(), time.monotonic()
    subprocess.run(cmd, env=full, check=True, capture_output=True, cwd=ROOT)
    return time.monotonic() - wall, busy_seconds() - cpu


def compare(
    name: str, variants: dict[str, dict[str, str]], argv: list[str] | None, doc: str
) -> dict[str, Any]:
    """Two-day backfills of ``ff2010`` under each of ``variants`` (environment settings, the
    first the reference), alternated ``--reps`` times after a warm-up; writes
    ``bench/results/<name>_ff2010_<scale>.json`` and prints a table of the medians."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=0.002)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--work", default="var/bench/jvm")
    args = ap.parse_args(argv)
    work = Path(args.work).resolve()
    landing = work / f"landing_{args.scale}"
    if not landing.exists():
        generate(
            Storage.at(str(landing)), START, 2, scaled(PROFILES["ff2010"], args.scale), seed=SEED
        )
    runs: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    reference = next(iter(variants))
    backfill(landing, work / "warm-up", variants[reference])  # the page cache, the archive
    for _ in range(args.reps):
        for v, env in variants.items():
            runs[v].append(backfill(landing, work / f"wh-{v}", env))
    med = {
        v: {
            "wall_s": statistics.median(w for w, _ in r),
            "cpu_s": statistics.median(c for _, c in r),
        }
        for v, r in runs.items()
    }
    result: dict[str, Any] = {
        "scale": args.scale,
        "reps": args.reps,
        "runs": {
            v: [{"wall_s": round(w, 1), "cpu_s": round(c, 1)} for w, c in r]
            for v, r in runs.items()
        },
        "median": {v: {k: round(x, 1) for k, x in m.items()} for v, m in med.items()},
        f"ratio_to_{reference}": {
            v: {k: round(m[k] / med[reference][k], 3) for k in m} for v, m in med.items()
        },
        **provenance({"variants": variants, "days": 2, "strategies": ["ff-per-pair"]}),
    }
    out = ROOT / "bench" / "results" / f"{name}_ff2010_{args.scale}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    ref = reference
    print(f"| variant | wall s (median) | CPU s (median) | wall / {ref} | CPU / {ref} |")
    print("|---|---|---|---|---|")
    for v, m in med.items():
        r = result[f"ratio_to_{reference}"][v]
        print(f"| {v} | {m['wall_s']:.1f} | {m['cpu_s']:.1f} | {r['wall_s']} | {r['cpu_s']} |")
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    variants = {name: {"FEEDPIPE_JAVA_OPTIONS": options} for name, options in VARIANTS.items()}
    return compare("jvm_options", variants, argv, __doc__)


if __name__ == "__main__":
    main()
