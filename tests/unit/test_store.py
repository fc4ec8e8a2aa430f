"""The feed store's foundation against a real Redis server started by the test: reaching it
(and failing in one line), the key layout's hash slots, the feed order of its sorted sets,
and the served-day pointer (docs/serving.md)."""

from __future__ import annotations

import datetime as dt
import itertools
import random

import pytest
import redis
from redis.crc import key_slot

from jobs.common import store
from jobs.common.config import ConfigError, Settings
from jobs.dev import store_server


@pytest.fixture()
def client(redis_server):
    c = store.connect(redis_server.url)
    c.flushdb()
    return c


def test_a_store_is_reached_and_every_failure_is_one_line_without_the_password(
    tmp_path, redis_server
):
    assert store.connect(redis_server.url).ping()
    closed = store_server.free_port()
    with pytest.raises(store.StoreError) as e:
        store.connect(f"redis://127.0.0.1:{closed}/0")
    assert str(e.value).startswith(f"cannot reach the feed store at redis://127.0.0.1:{closed}/0")
    assert "\n" not in str(e.value)
    with pytest.raises(store.StoreError, match="not a redis:// or rediss:// URL"):
        store.connect("http://127.0.0.1:1/0")

    with store_server.running(tmp_path / "locked", password="s3cret-pw") as locked:
        assert store.connect(locked.url).ping()  # the password in the URL
        bare = f"redis://127.0.0.1:{locked.port}/0"
        with pytest.raises(store.StoreError, match="refused") as e:
            store.connect(bare, environ={})
        assert "\n" not in str(e.value)
        wrong = f"redis://:not-it@127.0.0.1:{locked.port}/0"
        with pytest.raises(store.StoreError, match="refused the credentials") as e:
            store.connect(wrong, environ={})
        assert "not-it" not in str(e.value) and "redis://:***@127.0.0.1" in str(e.value)
        # the password from the environment when the URL has none
        assert store.connect(bare, environ={"FEEDPIPE_STORE_PASSWORD": "s3cret-pw"}).ping()


def test_the_store_setting_is_checked_and_never_printed_with_its_password():
    with pytest.raises(ConfigError, match="store must be a redis:// or rediss:// URL"):
        Settings(store="127.0.0.1:6379")
    s = Settings(store="rediss://app:hunter2@cache.internal:6380/1")
    assert s.as_dict()["store"] == "rediss://app:***@cache.internal:6380/1"
    with pytest.raises(ConfigError) as e:
        Settings(store="http://app:hunter2@cache.internal")
    assert "hunter2" not in str(e.value)


def test_a_sorted_set_returns_items_in_feed_order_and_holds_an_event_once(client):
    """Members scored by created_at come back newest first, ties by event_id descending (the
    Parquet reader's order, computed here with Python's sort), whatever the ids hold."""
    rnd = random.Random(3)
    base = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    alphabet = ["a", "b", "z", "0", "9", "é", "ö", "🦉", "-", " ", "\u00ff", "\u0100"]
    items = {}
    for _ in range(400):
        event_id = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 4)))
        at = base + dt.timedelta(seconds=rnd.randint(0, 30), microseconds=rnd.randint(0, 2))
        items[event_id] = (at, f"p{rnd.randint(0, 9)}")
    key = store.Keys("g1").consumer_feed("c1")
    mapping = {store.member(e, p): store.score(at) for e, (at, p) in items.items()}
    client.zadd(key, mapping)
    client.zadd(key, dict(list(mapping.items())[:50]))  # added again: nothing changes
    got = [
        (store.at(s), *store.unmember(m)) for m, s in client.zrevrange(key, 0, -1, withscores=True)
    ]
    expected = sorted(((at, e, p) for e, (at, p) in items.items()), reverse=True)
    assert got == expected
    assert len({e for _, e, _ in got}) == len(items)
    assert any(a[0] == b[0] for a, b in itertools.pairwise(got))  # ties were tested


def test_scores_keep_microseconds_exactly():
    for at in (
        dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        dt.datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC),
        dt.datetime(2255, 6, 1, 0, 0, 0, 1, tzinfo=dt.UTC),
    ):
        s = store.score(at)
        assert float(s) == s and store.at(float(s)) == at
    naive = dt.datetime(2026, 1, 1, 12)
    assert store.score(naive) == store.score(naive.replace(tzinfo=dt.UTC))


def test_a_consumers_keys_share_one_hash_slot_and_generations_are_apart():
    g1, g2 = store.Keys("20260301-aaaa"), store.Keys("20260302-bbbb")
    assert key_slot(g1.sources("c:1").encode()) == key_slot(g1.consumer_feed("c:1").encode())
    assert key_slot(g1.sources("c:1").encode()) == key_slot(g2.consumer_feed("c:1").encode())
    assert key_slot(g1.stream("p1").encode()) == key_slot(g1.targets("p1").encode())
    assert g1.consumer_feed("u") != g2.consumer_feed("u")
    assert g1.consumer_feed("u").startswith(g1.pattern()[:-1])
    slots = {key_slot(g1.consumer_feed(f"u{i}").encode()) for i in range(200)}
    assert len(slots) > 150  # consumers spread over the slots


def test_the_served_day_switches_in_one_step(client):
    assert store.served(client) is None
    d1 = store.ServedDay("2026-03-01", store.new_generation(dt.date(2026, 3, 1)))
    d2 = store.ServedDay("2026-03-02", store.new_generation(dt.date(2026, 3, 2)), feed_k=30)
    assert d1.generation.startswith("20260301-") and d1.generation != d2.generation
    live = store.switch(client, d1)
    assert store.served(client) == live and live.since and live.generation == d1.generation
    store.switch(client, d2)
    now = store.served(client)
    assert now is not None and (now.ds, now.feed_k) == ("2026-03-02", 30)
    assert set(client.hkeys(store.GENERATIONS)) == {d1.generation.encode(), d2.generation.encode()}
    assert isinstance(client, redis.Redis)
