"""The feed store, measured: loading a day, reading feeds under an offered load, live fan-out
and memory, beside the Parquet reader in the same run (docs/serving.md, docs/benchmarks.md).

    python -m bench.store [--scale 1] [--seconds 10] [--work var/bench]

Builds (once per scale, shared with ``bench.feed``) one published day of ``ff2010`` with
FF-PerPair served, starts a throwaway Redis server on 127.0.0.1 (``jobs.dev.store_server``;
its build is recorded), then:

* **load**: ``feedpipe store load`` as a command (a Spark application: its start included)
  and the load's own time from its record (the tables written, the switch);
* **memory**: the server's ``used_memory`` before and after the load, and ``MEMORY USAGE`` of
  a sample of each kind of key times the count of that kind: bytes per consumer (its feed and
  sources) and per follow edge (the sources and push targets that hold it);
* **reads**: one consumer's feed (k = 20) through ``StoreReader`` at an offered load of
  ``--rate`` reads a second for ``--seconds`` (open loop: each read's latency counts from the
  moment it was due, so a queue behind a slow read counts), by two client processes; then at
  rates rising by a quarter until p99 reaches 10 ms (the rate where it crosses is reported).
  The Parquet reader (``FeedReader``) reads the same consumers, one at a time, in the same
  run;
* **fan-out**: events of producers with push targets added in batches of 500 through
  ``live.add_events``: feed and view insertions a second.

Writes ``bench/results/store_ff2010_<scale>.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import ROOT, provenance
from bench.feed import DAY, SEED, build, consumers, percentiles
from jobs.common import live, store
from jobs.dev import store_server
from jobs.serving.reader import FeedReader
from jobs.serving.store_reader import StoreReader

K = 20
TARGET_P99_MS = 10.0
KINDS = {
    "consumer feeds": "{c:*}:feed",
    "consumer sources": "{c:*}:sources",
    "producer streams": "{p:*}:stream",
    "push targets": "{p:*}:push",
    "view feeds": "{v:*}:feed",
}


def load(url: str, warehouse: str) -> dict[str, Any]:
    """``feedpipe store load`` as a command: its wall time and its record's load time."""
    cmd = [sys.executable, "-m", "jobs", "store", "load", "--ds", str(DAY)]
    cmd += ["--store", url, "--warehouse", warehouse]
    t = time.perf_counter()
    done = subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t
    record = json.loads(done.stdout)
    return {"command_s": round(wall, 1), "load_s": record["load_seconds"]}


def memory(client: Any, before: int, n_consumers: int, n_edges: int) -> dict[str, Any]:
    """Bytes per kind of key (a sample's ``MEMORY USAGE`` times the kind's count), per
    consumer and per follow edge."""
    served = store.served(client)
    assert served is not None
    kinds: dict[str, dict[str, Any]] = {}
    rng = random.Random(SEED)
    for kind, pattern in KINDS.items():
        keys = list(client.scan_iter(match=f"fp:{served.generation}:{pattern}", count=5000))
        sample = rng.sample(keys, min(2000, len(keys)))
        used = [client.memory_usage(key, samples=0) or 0 for key in sample]
        mean = sum(used) / len(used) if used else 0.0
        kinds[kind] = {"keys": len(keys), "bytes": round(mean * len(keys))}
    after = int(client.info("memory")["used_memory"])
    per_consumer = kinds["consumer feeds"]["bytes"] + kinds["consumer sources"]["bytes"]
    network = kinds["consumer sources"]["bytes"] + kinds["push targets"]["bytes"]
    return {
        "used_memory_bytes": after - before,
        "kinds": kinds,
        "bytes_per_consumer": round(per_consumer / n_consumers),
        "network_bytes_per_edge": round(network / n_edges),
        "used_bytes_per_consumer": round((after - before) / n_consumers),
        "used_bytes_per_edge": round((after - before) / n_edges),
    }


def _offered(args: tuple[str, list[str], float, float]) -> list[float]:
    """One client process: read ``ids`` in turn at ``rate`` a second from ``start`` (a wall
    clock time); each latency from the moment the read was due."""
    url, ids, rate, start = args
    reader = StoreReader(url)
    reader.feeds(ids[:1], K)  # connected, the served day resolved
    while time.time() < start:
        time.sleep(0.001)
    origin = time.perf_counter() - (time.time() - start)
    out = []
    for i, c in enumerate(ids):
        due = origin + i / rate
        now = time.perf_counter()
        if now < due:
            time.sleep(due - now)
        reader.feeds([c], K)
        out.append(time.perf_counter() - due)
    return out


def reads_at(url: str, sample: list[str], rate: float, seconds: float) -> dict[str, Any]:
    """Reads at ``rate`` a second for ``seconds``, split over two client processes."""
    n = int(rate * seconds)
    ids = [sample[i % len(sample)] for i in range(n)]
    start = time.time() + 1.0
    work = [(url, ids[w::2], rate / 2, start) for w in range(2)]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        parts = pool.map(_offered, work)
    took = [s for p in parts for s in p]
    return {"offered_per_s": rate, "reads": len(took), **percentiles(took)}


def parquet_reads(warehouse: str, sample: list[str]) -> dict[str, Any]:
    """The Parquet reader on the same consumers, one at a time (closed loop)."""
    reader = FeedReader(warehouse, DAY)
    took = []
    for c in sample:
        t = time.perf_counter()
        reader.feeds([c], K)
        took.append(time.perf_counter() - t)
    return {"reads": len(took), **percentiles(took)}


def saturation(
    url: str, sample: list[str], seconds: float, first: dict[str, Any]
) -> dict[str, Any]:
    """Offered rates rising by a quarter from ``first`` (the measured base rate) until p99
    passes 10 ms; the crossing rate interpolated between the last two."""
    steps = [first]
    rate = float(first["offered_per_s"])
    while steps[-1]["p99_ms"] < TARGET_P99_MS and rate < 64_000:
        rate *= 1.25
        steps.append(reads_at(url, sample, rate, seconds))
    crossing = None
    if steps[-1]["p99_ms"] >= TARGET_P99_MS and len(steps) > 1:
        lo, hi = steps[-2], steps[-1]
        share = (TARGET_P99_MS - lo["p99_ms"]) / (hi["p99_ms"] - lo["p99_ms"])
        crossing = round(lo["offered_per_s"] + share * (hi["offered_per_s"] - lo["offered_per_s"]))
    return {"steps": steps, "rate_at_p99_10ms": crossing}


def fan_out(url: str, warehouse: str, events: int) -> dict[str, Any]:
    """Events of pushed producers added in batches of 500: insertions a second."""
    from jobs.serving import published

    plan = published.dataset(warehouse, "plan/edge_plan", DAY)
    rows = plan.to_table(columns=["producer_id", "mode"]).to_pylist()
    pushed = sorted({r["producer_id"] for r in rows if r["mode"] == "push"})
    rng = random.Random(SEED)
    at = dt.datetime.combine(DAY + dt.timedelta(days=1), dt.time(1), dt.UTC)
    batch = [
        live.LiveEvent(f"bench-{i}", rng.choice(pushed), at + dt.timedelta(milliseconds=i))
        for i in range(events)
    ]
    client = store.connect(url)
    t = time.perf_counter()
    insertions = 0
    for i in range(0, len(batch), 500):
        insertions += live.add_events(client, batch[i : i + 500]).insertions
    seconds = time.perf_counter() - t
    return {
        "events": events,
        "insertions": insertions,
        "seconds": round(seconds, 2),
        "insertions_per_s": round(insertions / seconds),
        "events_per_s": round(events / seconds),
    }


def table(r: dict[str, Any]) -> str:
    ld, mem, at, pq, sat, fo = (
        r["load"],
        r["memory"],
        r["reads"],
        r["parquet"],
        r["saturation"],
        r["fan_out"],
    )
    rows = [
        f"ff2010 scale {r['scale']:g}: {r['consumers']:,} consumers, {r['edges']:,} follows; "
        f"{r['server']}",
        "",
        "| measure | feed store | Parquet reader |",
        "|---|---|---|",
        f"| one feed (k = {K}), p50 at {at['offered_per_s']:,.0f} reads/s | "
        f"{at['p50_ms']} ms | {pq['p50_ms']} ms (one at a time) |",
        f"| p99 | {at['p99_ms']} ms | {pq['p99_ms']} ms |",
        f"| read rate at p99 = 10 ms | {sat['rate_at_p99_10ms'] or 'not reached'} /s | |",
        f"| load and switch (`store load`, whole command) | {ld['command_s']} s "
        f"(load {ld['load_s']} s) | |",
        f"| live fan-out | {fo['insertions_per_s']:,} insertions/s "
        f"({fo['events_per_s']:,} events/s) | |",
        f"| memory per consumer (feed + sources) | {mem['bytes_per_consumer']:,} B | |",
        f"| memory per follow edge (sources + push targets) | "
        f"{mem['network_bytes_per_edge']} B | |",
        f"| server memory, whole day | {mem['used_memory_bytes'] / 2**20:,.0f} MiB | |",
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=10.0, help="per offered rate")
    ap.add_argument("--rate", type=float, default=1000.0, help="the offered read rate")
    ap.add_argument("--sample", type=int, default=5000, help="consumers read")
    ap.add_argument("--events", type=int, default=20_000, help="live events added")
    ap.add_argument("--work", type=Path, default=ROOT / "var" / "bench")
    args = ap.parse_args(argv)
    base = args.work / f"feed-ff2010-{args.scale:g}"
    base.mkdir(parents=True, exist_ok=True)
    warehouse, took = build(base, args.scale)
    everyone = consumers(warehouse)
    from jobs.serving import published

    edges = published.dataset(warehouse, "plan/edge_plan", DAY).count_rows()
    sample = random.Random(SEED).sample(everyone, min(args.sample, len(everyone)))
    result: dict[str, Any] = {
        "scale": args.scale,
        "consumers": len(everyone),
        "edges": edges,
        "server": store_server.server_version(),
        **took,
    }
    with store_server.running(base / "store") as server:
        client = store.connect(server.url)
        before = int(client.info("memory")["used_memory"])
        result["load"] = load(server.url, warehouse)
        result["memory"] = memory(client, before, len(everyone), edges)
        result["parquet"] = parquet_reads(warehouse, sample[:500])
        result["reads"] = reads_at(server.url, sample, args.rate, args.seconds)
        result["saturation"] = saturation(server.url, sample, args.seconds, result["reads"])
        result["fan_out"] = fan_out(server.url, warehouse, args.events)
    result["provenance"] = provenance(vars(args))
    out = ROOT / "bench" / "results" / f"store_ff2010_{args.scale:g}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"\n{out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
