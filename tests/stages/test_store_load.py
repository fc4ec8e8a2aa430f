"""Published days loaded into a real Redis server (started by the test) and read back: every
consumer's feed from the store equals the Parquet reader's, a new day switches readers in one
step and the replaced generation goes, and what cannot be served is refused in one line
(docs/serving.md)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from jobs import cli
from jobs.common import ledger, store, versions
from jobs.common.records import MaterializeRecord, StoreRecord
from jobs.common.storage import Storage
from jobs.dev import store_server
from jobs.serving import report
from jobs.serving.reader import FeedError, FeedReader
from jobs.serving.store_reader import StoreReader
from jobs.stages import runner, store_load
from support.workloads import LAST, K, build, published_consumers


@pytest.fixture()
def url(redis_server):
    store.connect(redis_server.url).flushdb()
    return redis_server.url


def as_json(answer) -> dict[str, list[dict]]:
    return {c: [it.as_json() for it in feed] for c, feed in answer.feeds.items()}


def generation_keys(url: str, generation: str) -> list[bytes]:
    return list(store.connect(url).scan_iter(match=store.Keys(generation).pattern()))


def test_a_loaded_day_serves_every_consumer_the_parquet_readers_feed(
    spark, built_copy, url, capsys
):
    s = dataclasses.replace(built_copy, store=url, store_grace_seconds=0)
    wh = Storage.at(s.warehouse)
    build(spark, s, [LAST], ("validate", "publish"))
    first = runner.run_stage("store", s, LAST, spark, wh=wh)  # as feedpipe store load runs it
    assert ledger.read_record(wh, LAST, "store") == first and first.inputs == sorted(
        store_load.LOADED
    )
    ids = [*published_consumers(s.warehouse, LAST), "nobody-at-all"]
    assert len(ids) > 100
    # the read probe: every consumer with a rate, or store_probe_reads of them, read once
    n_rated = spark.read.parquet(
        wh.spark_path(*versions.published(wh, LAST).parts("rates/consumer_rates"))
    ).count()
    probe = first.probe
    assert probe is not None and probe.reads == min(s.store_probe_reads, n_rated)
    assert 0 < probe.p50_ms <= probe.p95_ms <= probe.p99_ms
    text = report.text_report(s, LAST)
    assert f"p99 {probe.p99_ms:.2f} ms ({probe.reads:,} reads" in text
    assert "gate volume" in text and "off: off:" not in text  # a gate off says so once
    want = FeedReader(s.warehouse, LAST).answer(ids, K)
    reader = StoreReader(url, s.warehouse)
    got = reader.answer(ids, K)
    assert as_json(got) == as_json(want)
    assert got.unknown == want.unknown == ("nobody-at-all",)
    assert sum(len(f) for f in got.feeds.values()) > (K - 1) * len(ids)  # feeds are not empty
    assert as_json(reader.answer(ids[:50], 2)) == as_json(
        FeedReader(s.warehouse, LAST).answer(ids[:50], 2)
    )
    with pytest.raises(FeedError, match=f"hold {K} events"):
        reader.answer(ids[:1], K + 1)

    # the command line: the same JSON either way
    one = next(c for c in ids if want.feeds[c])
    assert (
        cli.main(["feed", "--consumer", one, "--format", "json", "--warehouse", s.warehouse]) == 0
    )
    from_parquet = capsys.readouterr().out
    assert cli.main(["feed", "--store", url, "--consumer", one, "--format", "json"]) == 0
    assert capsys.readouterr().out == from_parquet and json.loads(from_parquet)

    # the day replanned with shared views served, published and loaded again: a reader that
    # holds the first generation moves to the new one, which no longer matches the old feeds'
    # plan; the first generation's keys are gone (grace 0)
    views = dataclasses.replace(s, strategy="auto", strategies=("ff-per-pair", "cz-hierarchy2"))
    build(spark, views, [LAST], ("plan", "materialize", "validate", "publish"))
    second = store_load.load(spark, views, LAST, wh)
    assert second.generation != first.generation and second.retired == [first.generation]
    assert generation_keys(url, first.generation) == []
    assert any(b":{v:" in k for k in generation_keys(url, second.generation)), "no view loaded"
    assert as_json(reader.answer(ids, K)) == as_json(FeedReader(s.warehouse, LAST).answer(ids, K))
    assert reader.day.generation == second.generation

    assert cli.main(["store", "status", "--store", url]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["served"]["generation"] == second.generation
    assert status["served"]["ds"] == str(LAST)
    (only,) = status["generations"]
    assert only["state"] == "served" and only["keys"] == len(
        generation_keys(url, second.generation)
    )

    # a backfill republishes an earlier day: the store keeps serving the newer one
    earlier = LAST - dt.timedelta(days=1)
    build(spark, views, [earlier], ("validate", "publish", "store"))
    skipped = ledger.read_record(wh, earlier, "store")
    assert isinstance(skipped, StoreRecord) and skipped.skipped == str(LAST)
    assert store.served(store.connect(url)).generation == second.generation


def test_a_killed_load_is_never_read_and_the_next_load_removes_it(spark, built_copy, url):
    s = dataclasses.replace(built_copy, store=url, store_grace_seconds=0)
    wh = Storage.at(s.warehouse)
    build(spark, s, [LAST], ("validate", "publish"))
    served = store_load.load(spark, s, LAST, wh)
    ids = published_consumers(s.warehouse, LAST)[:200]
    before = as_json(StoreReader(url).answer(ids, K))
    client = store.connect(url)
    # a load killed half-way: its generation begun, some of its keys written, no switch
    partial = store.begin(client, store.ServedDay(str(LAST), store.new_generation(LAST)))
    for c in ids:
        client.zadd(partial.keys.consumer_feed(c), {store.member("ghost", "p"): 1.0})
        client.rpush(partial.keys.sources(c), "c")
    assert as_json(StoreReader(url).answer(ids, K)) == before
    states = {g["generation"]: g["state"] for g in store.status(client)["generations"]}
    assert states == {served.generation: "served", partial.generation: "loading or killed"}
    again = store_load.load(spark, s, LAST, wh)
    assert sorted(again.retired) == sorted([served.generation, partial.generation])
    assert generation_keys(url, partial.generation) == []
    assert as_json(StoreReader(url).answer(ids, K)) == before


def test_what_the_store_cannot_serve_is_refused_in_one_line(spark, built_copy, url, tmp_path):
    s = dataclasses.replace(built_copy, store=url)
    wh = Storage.at(s.warehouse)
    with pytest.raises(store_load.LoadRefused, match=f"{LAST} is not published in"):
        store_load.load(spark, s, LAST, wh)  # built, never published
    with pytest.raises(store_load.LoadRefused, match="no feed store configured"):
        store_load.load(spark, built_copy, LAST, wh)
    per_producer = versions.DayVersion(
        LAST, True, {}, {"materialize": MaterializeRecord(coherency="per_producer", feed_k=K)}, None
    )
    with pytest.raises(store_load.LoadRefused, match="serves global coherency only"):
        store_load.served_day(LAST, per_producer)
    with pytest.raises(store.StoreError, match="serves no day yet"):
        StoreReader(url)
    with pytest.raises(store.StoreError, match="cannot reach the feed store"):
        StoreReader(f"redis://127.0.0.1:{store_server.free_port()}/0")
    # the command line says each in one line
    assert (
        cli.main(["store", "load", "--ds", str(LAST), "--store", url, "--warehouse", s.warehouse])
        == 1
    )
    assert cli.main(["feed", "--store", url, "--consumer", "c1"]) == 1
