"""Plans served from a feed store and replayed, measured as the papers measured them: the
store's own CPU, its commands and memory, and each read's latency from the client.

Two users: ``python -m bench.serving`` (a day built by the stages, loaded by ``feedpipe store
load``, the next day's landing replayed) and the store experiments of ``feedpipe evaluate
--experiment ... --store URL`` (``jobs.evaluation.store_experiments``), which serve a drawn
workload's plans (:class:`Served`) without building days: each plan is written into the store
in the layout ``feedpipe store load`` writes (``jobs.common.store``: the same keys, members
and scores; docs/serving.md) and an hour of the workload's events and feed views, drawn from
its true rates, is replayed through the same operations the application uses (the live add,
``jobs.common.live``, and the reader, ``jobs.serving.store_reader``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from jobs.common import live, store
from jobs.serving.store_reader import StoreReader

EVENT_BATCH = 100
"""Consecutive events added in one call (an application adds what arrived together)."""

Op = tuple[dt.datetime, str, Any]
"""One operation of a replay: (time, ``"event"`` or ``"view"``, a ``LiveEvent`` or a
consumer id)."""


def _server(client: Any) -> tuple[float, int]:
    cpu = client.info("cpu")
    stats = client.info("stats")
    used = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    return used, int(stats["total_commands_processed"])


@dataclass(frozen=True)
class Measured:
    """One replay: what the store spent on it and what its readers waited."""

    wall_s: float
    cpu_s: float
    commands: int
    memory_loaded_bytes: int
    memory_replayed_bytes: int
    reads: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def replay(url: str, ops: Sequence[Op], rate: float | None = None) -> Measured:
    """``ops`` against the day the store at ``url`` serves, in order: consecutive events in
    one live add (at most :data:`EVENT_BATCH`), each view one consumer's read, as fast as the
    store takes them or at ``rate`` operations a second (open loop: a late operation is not
    skipped, its successors are not delayed). The store's CPU and commands are read before
    and after."""
    client = store.connect(url)
    reader = StoreReader(url)
    memory_before = int(client.info("memory")["used_memory"])
    cpu0, commands0 = _server(client)
    latencies: list[float] = []
    pending: list[live.LiveEvent] = []
    started = time.perf_counter()
    for i, (_, kind, what) in enumerate(ops):
        if rate:
            due = started + i / rate
            now = time.perf_counter()
            if now < due:
                time.sleep(due - now)
        if kind == "event":
            pending.append(what)
            if len(pending) == EVENT_BATCH:
                live.add_events(client, pending)
                pending = []
            continue
        if pending:
            live.add_events(client, pending)
            pending = []
        t = time.perf_counter()
        reader.feeds([what])
        latencies.append(time.perf_counter() - t)
    if pending:
        live.add_events(client, pending)
    wall = time.perf_counter() - started
    cpu1, commands1 = _server(client)
    ms = sorted(x * 1000 for x in latencies) or [0.0]
    q = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return Measured(
        wall_s=round(wall, 2),
        cpu_s=round(cpu1 - cpu0, 3),
        commands=commands1 - commands0,
        memory_loaded_bytes=memory_before,
        memory_replayed_bytes=int(client.info("memory")["used_memory"]),
        reads=len(latencies),
        p50_ms=round(q[49], 3),
        p95_ms=round(q[94], 3),
        p99_ms=round(q[98], 3),
        mean_ms=round(statistics.fmean(ms), 3),
    )


@dataclass(frozen=True)
class Served:
    """One strategy's plan of a workload, as the store holds it: every follow edge's mode
    (``push``, ``pull`` or ``view`` with its view id) and each shared view's producers. Ids are
    ``jobs.workloads.generate.user_ids`` of the workload's indices."""

    strategy: str
    edges: tuple[tuple[str, str, str, str | None], ...]
    """(consumer_id, producer_id, mode, source_id)."""
    views: dict[str, tuple[str, ...]]

    @classmethod
    def of(cls, plans: Any, strategy: str) -> Served:
        """``strategy``'s plan from ``jobs.stages.plan.plans_of``'s plans. The experiments'
        workloads are drawn in the driver (numpy arrays of a few thousand users), so the plan
        is collected there too."""
        from pyspark.sql import functions as F

        rows = (
            plans.stacked.where(F.col("strategy") == strategy)
            .select("consumer_id", "producer_id", "mode", "source_id")
            .collect()
        )
        members: dict[str, list[str]] = defaultdict(list)
        for m in (
            plans.members.where(F.col("strategy") == strategy)
            .select("view_id", "producer_id")
            .collect()
        ):
            members[m["view_id"]].append(m["producer_id"])
        return cls(
            strategy,
            tuple((r[0], r[1], r[2], r[3]) for r in rows),
            {v: tuple(sorted(p)) for v, p in members.items()},
        )

    def sources(self) -> dict[str, list[str]]:
        """Each consumer's sources in the store's form: ``c`` (its materialized feed, when it
        pushes any producer), ``p:<producer>`` per pull, ``v:<view>`` per view read."""
        out: dict[str, list[str]] = defaultdict(list)
        pushes = set()
        viewed: dict[str, set[str]] = defaultdict(set)
        for consumer, producer, mode, source in self.edges:
            if mode == "push":
                pushes.add(consumer)
            elif mode == "pull":
                out[consumer].append(f"p:{producer}")
            else:
                viewed[consumer].add(f"v:{source}")
        for consumer in {c for c, *_ in self.edges}:
            head = ["c"] if consumer in pushes else []
            out[consumer] = head + sorted(out.get(consumer, [])) + sorted(viewed[consumer])
        return dict(out)

    def targets(self) -> dict[str, set[str]]:
        """Each producer's push targets: ``c:<consumer>`` per pushed edge, ``v:<view>`` per view
        it is a member of."""
        out: dict[str, set[str]] = defaultdict(set)
        for consumer, producer, mode, _ in self.edges:
            if mode == "push":
                out[producer].add(f"c:{consumer}")
        for view, producers in self.views.items():
            for p in producers:
                out[p].add(f"v:{view}")
        return dict(out)


def history(
    producers: Sequence[str], phi: np.ndarray, k: int, until: dt.datetime, seed: int
) -> dict[str, list[tuple[str, dt.datetime]]]:
    """Each producer's latest ``k`` events before ``until``: a Poisson process of its rate
    ``phi`` (events per hour) run backwards, ids ``h<index>-<n>``."""
    rng = np.random.default_rng([seed, 21])
    gaps = rng.exponential(1.0, size=(len(producers), k)) / np.maximum(phi, 1e-6)[:, None]
    hours = np.cumsum(gaps, axis=1)
    return {
        p: [
            (f"h{i}-{j}", until - dt.timedelta(hours=float(hours[i, j])))
            for j in range(k)
            if hours[i, j] < 24 * 365
        ]
        for i, p in enumerate(producers)
    }


def load(
    url: str,
    served: Served,
    streams: dict[str, list[tuple[str, dt.datetime]]],
    ds: dt.date,
    k: int = 20,
) -> store.ServedDay:
    """``served`` written into a new generation of the store at ``url`` and switched in, with
    ``streams`` as the producers' latest events: each producer's stream, each pushing
    consumer's feed and each view's feed (the newest ``k`` of their producers' streams), the
    sources and the push targets. Generations it replaced are removed."""
    client = store.connect(url)
    day = store.begin(
        client, store.ServedDay(ds=ds.isoformat(), generation=store.new_generation(ds), feed_k=k)
    )
    keys = day.keys
    pipe = client.pipeline(transaction=False)
    n = 0

    def flush() -> None:
        nonlocal n
        n += 1
        if n % 2000 == 0:
            pipe.execute()

    items = {
        p: {store.member(e, p): store.score(at) for e, at in events}
        for p, events in streams.items()
    }

    def newest(producers: Sequence[str]) -> dict[bytes, int]:
        merged: dict[bytes, int] = {}
        for p in producers:
            merged.update(items.get(p, {}))
        best = sorted(merged.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k]
        return dict(best)

    for p, its in items.items():
        if its:
            pipe.zadd(keys.stream(p), its)
            flush()
    pushed: dict[str, list[str]] = defaultdict(list)
    for consumer, producer, mode, _ in served.edges:
        if mode == "push":
            pushed[consumer].append(producer)
    for consumer, producers in pushed.items():
        feed = newest(producers)
        if feed:
            pipe.zadd(keys.consumer_feed(consumer), feed)
            flush()
    for view, members in served.views.items():
        feed = newest(members)
        if feed:
            pipe.zadd(keys.view_feed(view), feed)
            flush()
    for consumer, sources in served.sources().items():
        if sources:
            pipe.rpush(keys.sources(consumer), *sources)
            flush()
    for producer, targets in served.targets().items():
        pipe.sadd(keys.targets(producer), *sorted(targets))
        flush()
    pipe.execute()
    now = store.switch(client, day)
    clear(url, keep=now.generation)
    return now


def clear(url: str, keep: str | None = None) -> None:
    """Every generation but ``keep`` removed, with the live log; with no ``keep``, the served
    pointer and the list of generations too (the store as before the first :func:`load`)."""
    client = store.connect(url)
    for raw_gen in client.hkeys(store.GENERATIONS):
        generation = raw_gen.decode() if isinstance(raw_gen, bytes) else str(raw_gen)
        if generation != keep:
            store.remove_generation(client, generation)
    client.delete(live.LIVE, live.LIVE_EVENTS)
    if keep is None:
        client.delete(store.SERVED, store.GENERATIONS)


def hour_of(
    producers: Sequence[str],
    phi: np.ndarray,
    consumers: Sequence[str],
    theta: np.ndarray,
    start: dt.datetime,
    hours: float,
    seed: int,
) -> list[Op]:
    """``hours`` of a workload from ``start``: each producer posts and each consumer views as
    a Poisson process of its true rate (per hour), times uniform; in time order."""
    rng = np.random.default_rng([seed, 22])
    ops: list[Op] = []
    posts = rng.poisson(phi * hours)
    for i, n in enumerate(posts):
        for j, at in enumerate(np.sort(rng.uniform(0, hours, n))):
            when = start + dt.timedelta(hours=float(at))
            ops.append((when, "event", live.LiveEvent(f"r{i}-{j}", producers[i], when, {})))
    looks = rng.poisson(theta * hours)
    for i, n in enumerate(looks):
        for at in rng.uniform(0, hours, n):
            ops.append((start + dt.timedelta(hours=float(at)), "view", consumers[i]))
    ops.sort(key=lambda o: (o[0], o[1]))
    return ops
