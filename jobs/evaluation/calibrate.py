"""``feedpipe calibrate``: the cost model's H and L measured on a feed store.

Chen & Zhou (Section IV-D) estimate H/L "by executing push and pull only queries on the given
system ... by linear regression using the result from 10 different number of random queries'
CPU usages with only one push or pull operation". Here, on the store ``store`` names, in keys
of a throwaway generation (removed afterwards; the served day is not touched):

* a **push** is what a live event costs per feed it is pushed into (``jobs.common.live``):
  ``ZADD`` of the item and ``ZREMRANGEBYRANK`` trimming the feed to k, on a feed of k items;
* a **pull** is what a feed read costs per source it reads (``jobs.serving.store_reader``):
  ``ZREVRANGE 0 k-1 WITHSCORES`` of a stream of k items.

For each of ``sizes`` workload sizes n (n operations of one kind on n random feeds, pipelined
as the product pipelines them), the server's own CPU (``used_cpu_user + used_cpu_sys`` of
``INFO cpu``) is read before and after; H and L are the slopes of CPU against n (ordinary
least squares), per repetition. Their ratio H/L is what the planner uses (``push_cost`` with
``pull_cost = 1``); the fit's R² and the ratio's spread over repetitions say how far to trust
it. Read latency is fitted too, as ``a + b * sources`` milliseconds from the client, over
reads of consumers with 0 to 32 pulled sources (the reader's two round trips).
"""

from __future__ import annotations

import math
import random
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jobs.common import store

DEFAULT_SIZES = tuple(2_000 * i for i in range(1, 11))
"""Ten workload sizes (operations per run), as Chen & Zhou's ten."""
SOURCES = (0, 1, 2, 4, 8, 16, 32)
"""Pulled sources of the consumers whose reads the latency fit times."""
BATCH = 500
"""Operations per pipelined round trip (the loader's and the live path's batches are of this
order)."""


@dataclass(frozen=True)
class Fit:
    """``y = intercept + slope * x`` by ordinary least squares, with its R²."""

    slope: float
    intercept: float
    r2: float

    @classmethod
    def of(cls, xs: Sequence[float], ys: Sequence[float]) -> Fit:
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
        slope = sxy / sxx
        intercept = my - slope * mx
        ss_res = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
        ss_tot = sum((y - my) ** 2 for y in ys)
        return cls(slope, intercept, 1.0 - ss_res / ss_tot if ss_tot else 1.0)


@dataclass(frozen=True)
class Calibration:
    """What ``feedpipe calibrate`` measured: H and L in microseconds of server CPU per
    operation (the median over repetitions), each repetition's fits, the ratio's spread, and
    the read latency fit in milliseconds."""

    server: str
    sizes: tuple[int, ...]
    push_us: float
    pull_us: float
    ratio: float
    ratio_min: float
    ratio_max: float
    ratio_stdev: float
    push_fits: tuple[Fit, ...]
    pull_fits: tuple[Fit, ...]
    latency_ms_base: float
    latency_ms_per_source: float
    latency_r2: float

    def settings(self) -> dict[str, float]:
        """The settings to use: H relative to L = 1, and the read-latency fit that
        ``latency_metric = "ms"`` maps its bound with."""
        return {
            "push_cost": round(self.ratio, 3),
            "pull_cost": 1.0,
            "latency_ms_base": round(max(self.latency_ms_base, 0.0), 4),
            "latency_ms_per_source": round(max(self.latency_ms_per_source, 0.0), 5),
        }

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _fill(client: Any, keys: Sequence[str], k: int) -> None:
    """Each key a sorted set of ``k`` items (the state a push or a pull meets)."""
    pipe = client.pipeline(transaction=False)
    for i, key in enumerate(keys):
        pipe.zadd(key, {store.member(f"e{j}", "p"): j for j in range(k)})
        if i % BATCH == BATCH - 1:
            pipe.execute()
    pipe.execute()


def _timed(client: Any, n: int, keys: Sequence[str], op: str, k: int, rng: random.Random) -> float:
    """Server CPU seconds of ``n`` operations of kind ``op`` on random ``keys``."""
    chosen = [keys[rng.randrange(len(keys))] for _ in range(n)]
    before = _cpu(client)
    pipe = client.pipeline(transaction=False)
    for i, key in enumerate(chosen):
        if op == "push":
            pipe.zadd(key, {store.member(f"x{i}-{rng.random()}", "p"): k + i})
            pipe.zremrangebyrank(key, 0, -(k + 1))
        else:
            pipe.execute_command("ZREVRANGE", key, 0, k - 1, "WITHSCORES")
        if i % BATCH == BATCH - 1:
            pipe.execute()
    pipe.execute()
    return _cpu(client) - before


def _latency(client: Any, keys: store.Keys, k: int, reads: int, rng: random.Random) -> Fit:
    """Client-side milliseconds of one consumer's read against its pulled sources."""
    streams = [f"s{i}" for i in range(max(SOURCES))]
    _fill(client, [keys.stream(s) for s in streams], k)
    consumers = {n: f"c{n}" for n in SOURCES}
    pipe = client.pipeline(transaction=False)
    for n, c in consumers.items():
        pipe.rpush(keys.sources(c), "c", *(f"p:{s}" for s in streams[:n]))
    pipe.execute()
    _fill(client, [keys.consumer_feed(c) for c in consumers.values()], k)
    xs, ys = [], []
    order = [n for n in SOURCES for _ in range(reads)]
    rng.shuffle(order)
    for n in order:
        c = consumers[n]
        started = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        pipe.get(store.SERVED)  # as a reader's first trip carries the served pointer
        store.first_trip(pipe, keys, [c], k)
        rows = pipe.execute()[1:]
        store.second_trip(client, keys, [c], rows, k)
        xs.append(float(n))
        ys.append((time.perf_counter() - started) * 1000)
    return Fit.of(xs, ys)


def calibrate(
    url: str,
    sizes: Sequence[int] = DEFAULT_SIZES,
    repetitions: int = 3,
    k: int = 20,
    reads: int = 200,
    seed: int = 7,
) -> Calibration:
    """Measure H and L on the store at ``url`` (see the module); its keys are removed."""
    client = store.for_reads(store.connect(url))
    keys = store.Keys(f"calibrate-{uuid.uuid4().hex[:8]}")
    rng = random.Random(seed)
    feeds = [keys.consumer_feed(f"c{i}") for i in range(max(sizes))]
    streams = [keys.stream(f"p{i}") for i in range(max(sizes))]
    try:
        _fill(client, feeds, k)
        _fill(client, streams, k)
        push_fits, pull_fits = [], []
        for _ in range(repetitions):
            order = list(sizes)
            rng.shuffle(order)  # no drift over time passes for a slope
            push = {n: _timed(client, n, feeds, "push", k, rng) for n in order}
            pull = {n: _timed(client, n, streams, "pull", k, rng) for n in order}
            push_fits.append(Fit.of(list(push), [push[n] * 1e6 for n in push]))
            pull_fits.append(Fit.of(list(pull), [pull[n] * 1e6 for n in pull]))
        latency = _latency(client, keys, k, reads, rng)
    finally:
        store.remove_generation(client, keys.generation)
    ratios = [h.slope / l_.slope for h, l_ in zip(push_fits, pull_fits, strict=True)]
    push_us = statistics.median(f.slope for f in push_fits)
    pull_us = statistics.median(f.slope for f in pull_fits)
    return Calibration(
        server=str(client.info("server").get("redis_version")),
        sizes=tuple(sizes),
        push_us=push_us,
        pull_us=pull_us,
        ratio=push_us / pull_us,
        ratio_min=min(ratios),
        ratio_max=max(ratios),
        ratio_stdev=statistics.stdev(ratios) if len(ratios) > 1 else math.nan,
        push_fits=tuple(push_fits),
        pull_fits=tuple(pull_fits),
        latency_ms_base=latency.intercept,
        latency_ms_per_source=latency.slope,
        latency_r2=latency.r2,
    )


def report(c: Calibration) -> str:
    """The calibration as text, ending with the settings to use."""
    r2 = min(f.r2 for f in (*c.push_fits, *c.pull_fits))
    lines = [
        f"feed store: Redis {c.server}; {len(c.push_fits)} repetition(s) of {len(c.sizes)} "
        f"workload sizes, {min(c.sizes):,} to {max(c.sizes):,} operations",
        f"H (a push: ZADD + trim to k)   {c.push_us:.3f} us of server CPU",
        f"L (a pull: ZREVRANGE of k)     {c.pull_us:.3f} us of server CPU",
        f"H/L {c.ratio:.2f} (repetitions {c.ratio_min:.2f} to {c.ratio_max:.2f}, "
        f"stdev {c.ratio_stdev:.2f}); every fit's R2 >= {r2:.3f}",
        f"read latency {c.latency_ms_base:.3f} ms + {c.latency_ms_per_source:.4f} ms a source "
        f"(R2 {c.latency_r2:.3f})",
        "",
        "settings to use (feedpipe.toml; --write FILE puts them there):",
    ]
    lines += [f"{name} = {value}" for name, value in c.settings().items()]
    return "\n".join(lines)


def write_settings(path: Path, settings: dict[str, float]) -> None:
    """Set ``settings`` at the top level of the TOML file ``path`` (created if missing): each
    line ``name = ...`` before the first table is replaced, or added there."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    first_table = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("[")), None)
    top = lines if first_table is None else lines[:first_table]
    rest = [] if first_table is None else lines[first_table:]
    left = dict(settings)
    out = []
    for line in top:
        name = line.split("=", 1)[0].strip() if "=" in line else ""
        if name in left:
            out.append(f"{name} = {left.pop(name)}")
        else:
            out.append(line)
    out += [f"{name} = {value}" for name, value in left.items()]
    path.write_text("\n".join([*out, *rest]) + "\n", encoding="utf-8")
