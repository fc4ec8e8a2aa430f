"""Live events on a loaded day and across the switch to the next, against a real Redis server
started by the test: at several moments every sampled consumer's feed from the store equals
the naive answer over the served day's follow graph and every event added so far
(docs/serving.md, "Live events")."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from jobs import cli
from jobs.common import live, store
from jobs.common.storage import Storage
from jobs.serving.store_reader import StoreReader
from jobs.stages import store_load
from support import naive
from support.workloads import LAST, START, TOPIC_DATES, K, build

D = LAST - dt.timedelta(days=1)


def oracle(
    landing: Path, ds: dt.date, added: list[live.LiveEvent], consumers: list[str]
) -> dict[str, list[str]]:
    """The naive feeds (event ids) over the follow graph at the end of ``ds``, the events
    landed until ``ds`` in their streams (``naive.streams``: their authors' and the topics
    they matched) plus ``added``, each in its author's stream and in the stream of every topic
    in force on ``ds`` whose predicate holds for it (term by term; pandas, from the landing
    files)."""
    from jobs.common.predicates import holds

    edges = naive.graph(landing, ds, START)
    wanted = set(consumers)
    g = pd.DataFrame(sorted((c, p) for c, p in edges if c in wanted), columns=["c", "stream_id"])
    ev = naive.streams(landing, ds, START)[["stream_id", "event_id", "producer_id", "created_at"]]
    topics = naive.valid_topics(landing, ds, START)
    extra = pd.DataFrame(
        [
            (stream, e.event_id, e.producer_id, e.created_at)
            for e in added
            for stream in [
                e.producer_id,
                *(t for t, terms in topics.items() if e.attributes and holds(terms, e.attributes)),
            ]
        ],
        columns=["stream_id", "event_id", "producer_id", "created_at"],
    )
    if not extra.empty:
        extra = extra.assign(created_at=pd.to_datetime(extra["created_at"], utc=True))
        ev = pd.concat([ev, extra])
    ev = ev.drop_duplicates(["stream_id", "event_id"])
    joined = g.merge(ev, on="stream_id").drop_duplicates(["c", "event_id"])
    joined = joined.sort_values(["c", "created_at", "event_id"], ascending=[True, False, False])
    out: dict[str, list[str]] = {c: [] for c in consumers}
    for c, ids in joined.groupby("c", sort=False)["event_id"]:
        out[c] = list(ids)[:K]
    return out


def from_store(url: str, consumers: list[str]) -> dict[str, list[str]]:
    got = StoreReader(url).feeds(consumers, K)
    return {c: [it.event_id for it in f] for c, f in got.items()}


def landed(landing: Path, ds: dt.date) -> list[live.LiveEvent]:
    """The events landed on ``ds``, as the application would have added them live."""
    df = naive.read_table(landing, "events", ds)

    def instant(value: object) -> object:  # as landed: ISO-8601 text or epoch seconds
        return value.isoformat() if isinstance(value, pd.Timestamp) else value

    def payload(row: object) -> dict[str, Any]:
        value = getattr(row, "payload", None)
        attributes = naive.attributes(getattr(row, "attributes", None))
        return ({"payload": value} if isinstance(value, str) and value else {}) | (
            {"attributes": attributes} if attributes else {}
        )

    lines = [
        json.dumps(
            {
                "event_id": r.event_id,
                "producer_id": r.producer_id,
                "created_at": instant(r.created_at),
                **payload(r),
            }
        )
        for r in df.itertuples()
    ]
    return live.parse_events(lines, f"events of {ds}")


def test_live_events_reach_every_feed_now_and_across_the_switch(spark, built_copy, redis_server):
    client = store.connect(redis_server.url)
    client.flushdb()
    s = dataclasses.replace(built_copy, store=redis_server.url, store_grace_seconds=0)
    wh, landing = Storage.at(s.warehouse), Path(s.landing)
    build(spark, s, [D], ("validate", "publish"))
    store_load.load(spark, s, D, wh)
    everyone = sorted({c for c, _ in naive.graph(landing, D, START)})
    sample = sorted(random.Random(5).sample(everyone, min(300, len(everyone))))
    assert from_store(redis_server.url, sample) == oracle(landing, D, [], sample)

    # the next day's events arrive live, in three batches, in the order they were created
    arriving = sorted(landed(landing, LAST), key=lambda e: (e.created_at, e.event_id))
    assert len(arriving) > 300
    added: list[live.LiveEvent] = []
    for batch in (arriving[:100], arriving[100:300], arriving[300:]):
        result = live.add_events(client, batch)
        added += batch
        assert result.events == len(batch) and result.insertions > 0
        assert from_store(redis_server.url, sample) == oracle(landing, D, added, sample)
    # payloads: the served day's from its event store, the live events' from the live log
    assert any(e.payload for e in added), "the landing has no payloads to check"
    landed_payloads = naive.events(landing, D, START, payload=True).set_index("event_id")["payload"]
    live_payloads = {e.event_id: e.payload for e in added}
    answer = StoreReader(redis_server.url, s.warehouse).answer(sample, K, with_payload=True)
    shown = [it for f in answer.feeds.values() for it in f]
    assert any(it.event_id in live_payloads for it in shown)
    for it in shown:
        assert it.content is not None
        want = (
            live_payloads[it.event_id]
            if it.event_id in live_payloads
            else landed_payloads[it.event_id]
        )
        assert it.content.payload == want, it.event_id
    before = {k: client.zcard(k) for k in client.scan_iter(match="fp:*:feed")}
    live.add_events(client, arriving[:150])  # delivered again: nothing changes
    assert {k: client.zcard(k) for k in client.scan_iter(match="fp:*:feed")} == before
    assert from_store(redis_server.url, sample) == oracle(landing, D, added, sample)

    # a producer the plan does not know: its stream only
    stranger = live.LiveEvent("e-stranger", "nobody-follows-me", arriving[-1].created_at)
    assert live.add_events(client, [stranger]).unplanned == 1
    served = store.served(client)
    assert served is not None
    assert client.zcard(served.keys.stream("nobody-follows-me")) == 1

    # events created after the next day ends arrive before it is loaded; then it is published,
    # loaded and switched in: every feed has them, none is lost or repeated
    after = LAST + dt.timedelta(days=1)
    producers = sorted({e.producer_id for e in arriving})
    rnd = random.Random(11)
    early = [
        live.LiveEvent(
            f"late-{i}",
            rnd.choice(producers),
            dt.datetime(after.year, after.month, after.day, tzinfo=dt.UTC)
            + dt.timedelta(minutes=i),
        )
        for i in range(60)
    ]
    live.add_events(client, early)
    build(spark, s, [LAST], ("validate", "publish"))
    record = store_load.load(spark, s, LAST, wh)
    assert record.caught_up == len(early)
    everyone = sorted({c for c, _ in naive.graph(landing, LAST, START)})
    sample = sorted(random.Random(6).sample(everyone, min(300, len(everyone))))
    expected = oracle(landing, LAST, early, sample)
    assert any(any(e.startswith("late-") for e in f) for f in expected.values())
    assert from_store(redis_server.url, sample) == expected
    # the live log keeps only what the served day's tables do not hold
    assert {m.decode() for m in client.zrange(live.LIVE, 0, -1)} == {e.event_id for e in early}


def test_a_malformed_event_line_adds_nothing_and_says_which(tmp_path, redis_server, capsys):
    client = store.connect(redis_server.url)
    client.flushdb()
    events = tmp_path / "events.jsonl"
    events.write_text(
        '{"event_id": "e1", "producer_id": "p1", "created_at": "2026-01-06T10:00:00Z"}\n'
        '{"event_id": "e2", "producer_id": "p1"}\n'
    )
    assert cli.main(["store", "add-event", "--store", redis_server.url, "--file", str(events)]) == 1
    err = capsys.readouterr().err
    assert f"{events} line 2: no created_at; no event of it was added" in err
    assert err.count("\n") == 1
    assert client.zcard(live.LIVE) == 0
    for line, why in (
        ("not json", "not JSON"),
        ('["e1"]', "not a JSON object"),
        ('{"event_id": 5, "producer_id": "p", "created_at": 0}', "event_id must be a string"),
        ('{"event_id": "e", "producer_id": "p", "created_at": "yesterday"}', "Invalid isoformat"),
        ('{"event_id": "e", "producer_id": "p", "created_at": 0, "attributes": [1]}', "attributes"),
    ):
        with pytest.raises(live.BadEvent, match=why):
            live.parse_events([line], "x")
    e = live.parse_event('{"event_id": "e", "producer_id": "p", "created_at": 86400}')
    assert e.created_at == dt.datetime(1970, 1, 2, tzinfo=dt.UTC)
    e = live.parse_event('{"event_id": "e", "producer_id": "p", "created_at": "2026-01-06T10:00"}')
    assert e.created_at == dt.datetime(2026, 1, 6, 10, tzinfo=dt.UTC)


def test_live_events_reach_the_topics_they_match(spark, topics_copy, redis_server):
    """The topic days (support.workloads.topics_workload): the second day served, the third
    day's events (with their attributes) added live; every sampled consumer, among them every
    follower of a topic, gets the naive feed over the second day's graph and the topic
    definitions in force on it, the live events matched term by term."""
    client = store.connect(redis_server.url)
    client.flushdb()
    s = dataclasses.replace(topics_copy, store=redis_server.url)
    landing = Path(s.landing)
    served, arriving_on = TOPIC_DATES[-2], TOPIC_DATES[-1]
    build(spark, s, [served], ("validate", "publish", "store"))
    defined = client.hgetall(store.served(client).keys.topics())
    assert {t.decode() for t in defined} == set(naive.valid_topics(landing, served, START))
    topics = set(naive.valid_topics(landing, served, START))
    edges = naive.graph(landing, served, START)
    followers = sorted({c for c, p in edges if p in topics})
    everyone = sorted({c for c, _ in edges})
    sample = sorted(set(followers[:200]) | set(random.Random(7).sample(everyone, 100)))
    assert from_store(redis_server.url, sample) == oracle(landing, served, [], sample)

    arriving = sorted(landed(landing, arriving_on), key=lambda e: (e.created_at, e.event_id))
    assert sum(1 for e in arriving if e.attributes) > 50
    result = live.add_events(client, arriving)
    assert result.insertions > 0
    expected = oracle(landing, served, arriving, sample)
    matched = {e.event_id for e in arriving if e.attributes}
    assert any(set(expected[c]) & matched for c in followers[:200]), "no topic event in a feed"
    assert from_store(redis_server.url, sample) == expected
