"""Loading a published day into the feed store (``feedpipe store load --ds D``;
docs/serving.md, "Loading a day").

The day's published tables are written into a new generation of keys (``jobs.common.store``),
beside the generation being served: each producer's stream (``feeds/producer_feed``, latest
k), each consumer's materialized feed (``feeds/consumer_feed``) and each shared view's
(``feeds/view_feed``), each consumer's sources (``plan/consumer_sources``) and each producer's
push targets (the pushed edges of ``plan/edge_plan`` and the views of ``plan/view_members``).
Every Spark task writes the rows it holds, in pipelined batches over its own connection, so
the load grows with the cluster, not the driver (``mapInArrow``: each task returns one status
row, and a store lost mid-load is one line from the driver). Only when every table is
written, and the events added live since the day ended are added too (``jobs.common.live``),
does one ``SET`` of the served pointer switch readers to the new generation; a load that
fails or is killed before it leaves the served day as it was (its partial generation is
never read, and the next load removes it). Generations replaced more than
``store_grace_seconds`` ago are removed after a switch.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from jobs.common import live, store, versions
from jobs.common.config import Settings, redact
from jobs.common.dates import feed_time
from jobs.common.pipeline import stage
from jobs.common.records import MaterializeRecord, ReadProbe, StoreRecord
from jobs.common.storage import Storage
from jobs.common.tables import contract_of

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

BATCH = 2000
"""Commands per pipelined round trip of a loading task."""

LOADED: tuple[str, ...] = stage("store").reads
"""The published tables a load reads (declared in ``jobs.common.pipeline.REGISTRY``)."""


class LoadRefused(store.StoreError):
    """The day cannot be served from the store (not published, or built in a way the store
    does not serve)."""


STATUS = "rows long, error string"
"""What each loading task returns: the rows it wrote, and the store's error if it failed."""


def _rows_writer(
    url: str, password: str, write: Callable[[Any, dict[str, Any]], None]
) -> Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]:
    """A ``mapInArrow`` function: its task's rows through ``write`` on one connection,
    pipelined :data:`BATCH` at a time (``url`` and ``password`` travel with the closure). It
    returns one row, the rows written and the store's error (the first line): a store lost
    mid-load is reported by the driver in one line, not as a failed task's traceback."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import redis

        env = {"FEEDPIPE_STORE_PASSWORD": password} if password else {}
        n, error = 0, None
        try:
            client = store.connect(url, environ=env)
            pipe = client.pipeline(transaction=False)
            for batch in batches:
                for row in batch.to_pylist():
                    write(pipe, row)
                    n += 1
                    if n % BATCH == 0:
                        pipe.execute()
            pipe.execute()
            client.close()
        except (redis.RedisError, store.StoreError) as exc:
            error = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        yield pa.RecordBatch.from_pylist(
            [{"rows": n, "error": error}],
            schema=pa.schema([("rows", pa.int64()), ("error", pa.string())]),
        )

    return run


def _feed_writer(
    key: Callable[[str], str], owner: str, producer: str
) -> Callable[[Any, dict[str, Any]], None]:
    """ZADD of one feed row: ``owner``'s feed gets the member of (event, ``producer``)."""

    def write(pipe: Any, row: dict[str, Any]) -> None:
        item = store.member(row["event_id"], row[producer])
        pipe.zadd(key(row[owner]), {item: store.score(row["created_at"])})

    return write


def _source_writer(keys: store.Keys) -> Callable[[Any, dict[str, Any]], None]:
    """RPUSH of one source of a consumer: ``p:<producer>``, ``v:<view>`` or ``c`` (its own
    materialized feed)."""

    def write(pipe: Any, row: dict[str, Any]) -> None:
        kind = row["source_type"]
        source = {"producer": "p:", "view": "v:"}.get(kind)
        value = f"{source}{row['source_id']}" if source else "c"
        pipe.rpush(keys.sources(row["consumer_id"]), value)

    return write


def _topic_writer(keys: store.Keys) -> Callable[[Any, dict[str, Any]], None]:
    """HSET of one topic definition in force (live events are matched against it)."""

    def write(pipe: Any, row: dict[str, Any]) -> None:
        pipe.hset(keys.topics(), row["topic_id"], row["predicate"])

    return write


def _target_writer(keys: store.Keys) -> Callable[[Any, dict[str, Any]], None]:
    """SADD of one push target of a producer (a consumer or a view)."""

    def write(pipe: Any, row: dict[str, Any]) -> None:
        pipe.sadd(keys.targets(row["producer_id"]), row["target"])

    return write


def targets(edge_plan: DataFrame, members: DataFrame) -> DataFrame:
    """Each producer's push targets: ``c:<consumer>`` for each pushed edge, ``v:<view>`` for
    each shared view it is a member of."""
    from pyspark.sql import functions as F

    pushed = edge_plan.where(F.col("mode") == "push").select(
        "producer_id", F.concat(F.lit("c:"), "consumer_id").alias("target")
    )
    viewed = members.select("producer_id", F.concat(F.lit("v:"), "view_id").alias("target"))
    return pushed.unionByName(viewed)


def writes(keys: store.Keys, frames: dict[str, DataFrame]) -> Iterable[tuple[str, DataFrame, Any]]:
    """What each table of the day becomes: (name, rows, row writer)."""
    yield (
        "streams",
        frames["feeds/producer_feed"],
        _feed_writer(keys.stream, "producer_id", "author_id"),
    )
    yield (
        "consumer feeds",
        frames["feeds/consumer_feed"],
        _feed_writer(keys.consumer_feed, "consumer_id", "producer_id"),
    )
    yield (
        "view feeds",
        frames["feeds/view_feed"],
        _feed_writer(keys.view_feed, "view_id", "producer_id"),
    )
    yield "sources", frames["plan/consumer_sources"], _source_writer(keys)
    yield "topics", frames["clean/topics"], _topic_writer(keys)
    yield (
        "push targets",
        targets(frames["plan/edge_plan"], frames["plan/view_members"]),
        _target_writer(keys),
    )


def write_generation(
    url: str, client: Any, new: store.ServedDay, frames: dict[str, DataFrame]
) -> dict[str, int]:
    """Every table into ``new``'s generation, each from the Spark tasks that hold its rows
    (each task returns one status row: the driver collects one row per table); returns the
    rows written of each."""
    from pyspark.sql import functions as F

    password = client.connection_pool.connection_kwargs.get("password") or ""
    written: dict[str, int] = {}
    for name, frame, write in writes(new.keys, frames):
        status = frame.mapInArrow(_rows_writer(url, password, write), STATUS)
        rows, error = status.agg(F.sum("rows"), F.first("error", ignorenulls=True)).first() or (
            0,
            None,
        )
        if error is not None:
            raise store.StoreError(
                f"the load of {new.ds} failed writing {name} to the feed store at "
                f"{redact(url)}: {error}; the store still serves the day it served before"
            )
        written[name] = int(rows or 0)
        log.info("store load %s: %s written (%d rows)", new.ds, name, written[name])
    return written


def served_day(ds: dt.date, day: versions.DayVersion) -> store.ServedDay:
    """The new generation's description, from the day's materialize record (refused when its
    feeds are per-producer: the store serves global coherency)."""
    state = day.records.get("materialize")
    state = state if isinstance(state, MaterializeRecord) else MaterializeRecord()
    if (state.coherency or "global") != "global":
        raise LoadRefused(
            f"{ds} was materialized with coherency = {state.coherency}: the feed store serves "
            "global coherency only; read its feeds from Parquet (feedpipe feed)"
        )
    return store.ServedDay(
        ds=ds.isoformat(), generation=store.new_generation(ds), feed_k=state.feed_k or 20
    )


def retire(client: Any, served: store.ServedDay, grace_seconds: float) -> list[str]:
    """Remove the generations that are not ``served`` and were replaced (or left unfinished)
    more than ``grace_seconds`` ago; returns them."""
    now = time.time()
    gone = []
    for raw_gen, raw in client.hgetall(store.GENERATIONS).items():
        generation = raw_gen.decode()
        if generation == served.generation:
            continue
        day = store.ServedDay.from_json(raw)
        ended = day.replaced or day.started
        if ended and now - ended >= grace_seconds:
            store.remove_generation(client, generation)
            gone.append(generation)
    return gone


def load(spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage) -> StoreRecord:
    """Load published day ``ds`` into ``settings.store`` and switch readers to it (the
    ``store`` stage). A day older than the one served is not loaded: the store keeps serving
    the newer day, as ``manifests/latest`` keeps pointing at it, and the record says so."""
    if not settings.store:
        raise LoadRefused("no feed store configured: set store (FEEDPIPE_STORE) or pass --store")
    day = versions.published(wh, ds)
    if day is None:
        raise LoadRefused(f"{ds} is not published in {wh.uri()}: run its stages and publish first")
    client = store.connect(settings.store)
    current = store.served(client)
    if current is not None and current.ds > ds.isoformat():
        # a backfill of a past day republishes it; the store keeps serving the newer day
        log.warning("store load %s skipped: the store serves a newer day, %s", ds, current.ds)
        return StoreRecord(generation=current.generation, since=current.since, skipped=current.ds)
    new = served_day(ds, day)
    frames = {}
    for key in LOADED:
        parts = day.parts(key)
        if parts is None:
            raise LoadRefused(f"{ds} has no published {key} in {wh.uri()}")
        versions.note_read(key, ds)
        frames[key] = spark.read.schema(contract_of(key).schema()).parquet(wh.spark_path(*parts))
    started = time.monotonic()
    import redis

    before = "the store still serves the day it served before"
    try:
        store.begin(client, new)
        written = write_generation(settings.store, client, new, frames)
        # the events added live since the day ended (its tables hold the rest), before the
        # switch and once more after it, for any added while the first catch-up ran
        ended = feed_time(ds)
        caught = live.catch_up(client, new, ended)
    except redis.RedisError as exc:
        where = redact(settings.store)
        raise store.StoreError(
            f"the load of {ds} lost the feed store at {where}: {exc}; {before}"
        ) from None
    served = store.switch(client, new)
    try:
        caught = max(caught, live.catch_up(client, served, ended))
        live.forget_before(client, ended)
        removed = retire(client, served, settings.store_grace_seconds)
    except redis.RedisError as exc:
        raise store.StoreError(
            f"{ds} is served since {served.since}, then the feed store was lost: {exc}; "
            "the next load removes what this one left"
        ) from None
    seconds = round(time.monotonic() - started, 2)
    return StoreRecord(
        generation=served.generation,
        since=served.since,
        caught_up=caught,
        written=written,
        load_seconds=seconds,
        retired=removed,
        probe=read_probe(settings, frames["rates/consumer_rates"]),
    )


def probe_sample(consumer_rates: DataFrame, n: int, seed: int = 11) -> list[tuple[str, float]]:
    """``n`` consumers drawn uniformly (the top ``n`` by a seeded random key: a bounded
    top-n, never a collect of every consumer), each with its feed views per hour."""
    from pyspark.sql import functions as F

    rows = (
        consumer_rates.select("consumer_id", "views_per_hour")
        .orderBy(F.rand(seed), "consumer_id")
        .limit(n)
        .collect()
    )
    return [(r["consumer_id"], float(r["views_per_hour"] or 0.0)) for r in rows]


def read_probe(settings: Settings, consumer_rates: DataFrame) -> ReadProbe | None:
    """The served day's read latency right after the switch (``store_probe_reads`` reads,
    weighted by feed views: ``jobs.serving.store_reader.probe``); None when disabled, or when
    the store is lost meanwhile (the day is served: the probe only measures it)."""
    import redis

    if not settings.store_probe_reads:
        return None
    sample = probe_sample(consumer_rates, settings.store_probe_reads)
    try:
        return probe(settings.store, sample) if sample else None
    except (redis.RedisError, store.StoreError) as exc:
        log.warning("store load: the read probe failed: %s", str(exc).splitlines()[0])
        return None


def probe(url: str, consumers: Sequence[tuple[str, float]]) -> ReadProbe:
    """Each consumer's feed read once from the store at ``url`` as the reader reads it (the
    served pointer with the first trip, then the second: ``jobs.common.store``) and timed;
    the latencies weighted by ``consumers``' feed views per hour (``(consumer_id,
    views_per_hour)``)."""
    client = store.for_reads(store.connect(url))
    day = store.served(client)
    if day is None:
        raise store.StoreError("the store serves no day to probe")
    timed = []
    for consumer, weight in consumers:
        started = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        pipe.get(store.SERVED)
        store.first_trip(pipe, day.keys, [consumer], day.feed_k)
        rows = pipe.execute()[1:]
        store.second_trip(client, day.keys, [consumer], rows, day.feed_k)
        timed.append(((time.perf_counter() - started) * 1000, max(weight, 0.0) or 1e-12))
    return ReadProbe(
        reads=len(timed),
        **{f"p{q}_ms": round(weighted_quantile(timed, q / 100), 3) for q in (50, 95, 99)},
    )


def weighted_quantile(pairs: Sequence[tuple[float, float]], q: float) -> float:
    """The ``q`` quantile of values weighted by weights (``pairs`` of value, weight): the
    least value whose cumulative weight reaches ``q`` of the total (as
    ``jobs.selection.cost.weighted_percentiles``)."""
    if not pairs:
        raise ValueError("a quantile of no values")
    ordered = sorted(pairs)
    total = sum(w for _, w in ordered)
    cumulative = 0.0
    for value, weight in ordered:
        cumulative += weight
        if cumulative >= q * total * (1 - 1e-12):
            return value
    return ordered[-1][0]
