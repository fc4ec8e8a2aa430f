"""Serving a day's feeds without Spark: one consumer's feed, with and without payloads, and
many consumers' feeds from the command line.

    python -m bench.feed [--scale 1] [--samples 1000] [--batch 10000] [--work var/bench]

Generates one day of ``ff2010`` at ``--scale`` (skipped when its landing is there), runs and
publishes it with FF-PerPair served (``feedpipe run``), then, on the published day:

* latency of ``FeedReader.feeds([c])`` for ``--samples`` random consumers (seeded), with one
  reader kept open as a service would keep it, each consumer without and then with
  ``with_payload`` (the second also looks the feed's ids up in ``feeds/event_store``):
  p50, p99 and the maximum;
* throughput of ``feedpipe feed --consumers FILE`` for ``--batch`` random consumers, with and
  without ``--with-payload``: wall time of the whole command (interpreter start included) and
  consumers per second.

Writes ``bench/results/feed_ff2010_<scale>.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import ROOT, provenance
from jobs.common import ledger
from jobs.common.storage import Storage
from jobs.serving import published
from jobs.serving.reader import FeedReader
from jobs.workloads.generate import PROFILES, generate, scaled

DAY = dt.date(2026, 1, 1)
SEED = 5


def build(base: Path, scale: float) -> tuple[str, dict[str, Any]]:
    """The published day's warehouse (built once per scale), and what building it took."""
    landing, wh = base / "landing", base / "warehouse"
    took: dict[str, Any] = {}
    if not (landing / "follows").is_dir():
        t = time.perf_counter()
        generate(Storage.at(str(landing)), DAY, 1, scaled(PROFILES["ff2010"], scale), seed=SEED)
        took["generate_s"] = round(time.perf_counter() - t, 1)
    if not ledger.is_published(Storage.at(str(wh)), DAY):
        config = base / "feedpipe.toml"
        config.write_text(
            f'landing = "{landing}"\nwarehouse = "{wh}"\n'
            'strategy = "ff-per-pair"\nstrategies = ["ff-per-pair"]\n'
        )
        t = time.perf_counter()
        cmd = [sys.executable, "-m", "jobs", "run", "--ds", str(DAY), "--config", str(config)]
        subprocess.run(cmd, check=True, cwd=ROOT)
        took["run_s"] = round(time.perf_counter() - t, 1)
    return str(wh), took


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return {"p50_ms": round(q[49], 2), "p99_ms": round(q[98], 2), "max_ms": round(ms[-1], 2)}


def consumers(warehouse: str) -> list[str]:
    """Every consumer with a rate on the day (all of the graph's consumers), sorted."""
    data = published.dataset(warehouse, "rates/consumer_rates", DAY)
    return sorted(data.to_table(columns=["consumer_id"]).column("consumer_id").to_pylist())


def latency(warehouse: str, sample: list[str]) -> dict[str, Any]:
    reader = FeedReader(warehouse, DAY)
    plain, full, items = [], [], 0
    for c in sample:
        t = time.perf_counter()
        reader.feeds([c])
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        got = reader.feeds([c], with_payload=True)
        full.append(time.perf_counter() - t)
        items += len(got[c])
    return {
        "consumers": len(sample),
        "items_per_feed": round(items / len(sample), 1),
        "without_payload": percentiles(plain),
        "with_payload": percentiles(full),
    }


def throughput(warehouse: str, sample: list[str], work: Path) -> dict[str, Any]:
    ids = work / "consumers.txt"
    ids.write_text("\n".join(sample) + "\n")
    out: dict[str, Any] = {"consumers": len(sample)}
    for name, extra in (("without_payload", []), ("with_payload", ["--with-payload"])):
        cmd = [sys.executable, "-m", "jobs", "feed", "--warehouse", warehouse, "--ds", str(DAY)]
        cmd += ["--consumers", str(ids), *extra]
        t = time.perf_counter()
        done = subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t
        lines = done.stdout.count("\n")
        assert lines == len(sample), (lines, len(sample))
        out[name] = {"seconds": round(wall, 2), "consumers_per_s": round(len(sample) / wall)}
    return out


def table(result: dict[str, Any]) -> str:
    lat, thr = result["latency"], result["throughput"]
    rows = [
        f"One consumer's feed, {lat['consumers']} random consumers, "
        f"{lat['items_per_feed']} items a feed (scale {result['scale']:g}):",
        "",
        "| | p50 | p99 | max |",
        "|---|---|---|---|",
    ]
    for name in ("without_payload", "with_payload"):
        p = lat[name]
        rows.append(
            f"| {name.replace('_', ' ')} | {p['p50_ms']} ms | {p['p99_ms']} ms | {p['max_ms']} ms |"
        )
    rows += [
        "",
        f"`feedpipe feed --consumers` with {thr['consumers']} ids:",
        "",
        "| | wall | consumers/s |",
        "|---|---|---|",
    ]
    for name in ("without_payload", "with_payload"):
        t = thr[name]
        rows.append(f"| {name.replace('_', ' ')} | {t['seconds']} s | {t['consumers_per_s']} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.feed", description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--work", type=Path, default=ROOT / "var" / "bench")
    args = ap.parse_args(argv)
    base = args.work / f"feed-ff2010-{args.scale:g}"
    base.mkdir(parents=True, exist_ok=True)
    warehouse, took = build(base, args.scale)
    everyone = consumers(warehouse)
    rng = random.Random(SEED)
    settings = {"workload": "ff2010", "seed": SEED, "scale": args.scale}
    settings |= {"samples": args.samples, "batch": args.batch}
    result: dict[str, Any] = {"scale": args.scale, **provenance(settings), **took}
    result["consumers_in_graph"] = len(everyone)
    result["event_store_rows"] = sum(
        loc.rows or 0 for loc in published.locations(warehouse, "feeds/event_store", DAY)
    )
    result["latency"] = latency(warehouse, rng.sample(everyone, args.samples))
    result["throughput"] = throughput(warehouse, rng.sample(everyone, args.batch), base)
    path = ROOT / "bench" / "results" / f"feed_ff2010_{args.scale:g}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
