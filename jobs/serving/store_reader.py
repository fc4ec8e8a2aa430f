"""Reading feeds from the feed store (``feedpipe feed --store URL``; docs/serving.md,
"Reading from the store"): read-only, with the Parquet reader's semantics and output.

A read of consumers' feeds is two pipelined round trips: the first gets the served pointer
with each consumer's sources and materialized feed in the generation last seen (and is sent
again, once, if the pointer has moved); the second gets the latest k of every pulled producer
and shared view they read. The items are merged as the Parquet reader merges them
(:func:`jobs.serving.reader.merge_latest`: each event once, newest first, ties by event id).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from jobs.common import live, store
from jobs.common.config import redact
from jobs.common.records import ReadProbe
from jobs.serving.reader import (
    Answer,
    Content,
    FeedError,
    FeedItem,
    FeedReader,
    with_contents,
)


class StoreReader:
    """Feeds of the day the store serves. ``warehouse``: where ``with_payload`` looks the
    events' payloads up (the served day's Parquet event store)."""

    def __init__(self, url: str, warehouse: str | None = None):
        self.url = url
        self.client = for_reads(store.connect(url))
        self.warehouse = warehouse
        self.day = self._served()

    def _served(self) -> store.ServedDay:
        day = store.served(self.client)
        if day is None:
            raise store.StoreError(
                f"the feed store at {redact(self.url)} serves no day yet: "
                "load one with `feedpipe store load --ds D`"
            )
        return day

    @property
    def ds(self) -> dt.date:
        return dt.date.fromisoformat(self.day.ds)

    @property
    def published(self) -> bool:
        return True  # the store serves published days only

    def _lookup(self, consumers: Sequence[str], k: int) -> tuple[store.ServedDay, list[Any]]:
        """The served day and, for each consumer, its sources and its materialized feed, in
        one round trip (again when the pointer has moved since the generation last seen)."""
        for _ in range(3):
            keys = self.day.keys
            pipe = self.client.pipeline(transaction=False)
            pipe.get(store.SERVED)
            first_trip(pipe, keys, consumers, k)
            out = pipe.execute()
            now = store.ServedDay.from_json(out[0]) if out[0] is not None else None
            if now is None:
                raise store.StoreError(f"the feed store at {redact(self.url)} was emptied")
            if now.generation == self.day.generation:
                return now, out[1:]
            self.day = now
        raise store.StoreError("the served day kept changing while the feeds were read")

    def answer(
        self, consumers: Sequence[str], k: int | None = None, with_payload: bool = False
    ) -> Answer:
        limit = self.day.feed_k if k is None else k
        if limit > self.day.feed_k:
            raise FeedError(
                f"feeds of {self.day.ds} hold {self.day.feed_k} events; --k must be at most that"
            )
        asked = list(dict.fromkeys(consumers))
        day, rows = self._lookup(asked, limit)
        feeds, reads = second_trip(self.client, day.keys, asked, rows, limit)
        unknown = tuple(c for c in asked if not reads[c])
        if with_payload:
            feeds = self._with_content(feeds)
        return Answer({c: feeds[c] for c in consumers}, unknown)

    def feeds(
        self, consumers: Sequence[str], k: int | None = None, with_payload: bool = False
    ) -> dict[str, list[FeedItem]]:
        return self.answer(consumers, k, with_payload).feeds

    def _with_content(self, feeds: dict[str, list[FeedItem]]) -> dict[str, list[FeedItem]]:
        """The items with their payloads and attributes: from the served day's event store in
        the warehouse, and for the events added live since, from the live log."""
        if self.warehouse is None:
            raise FeedError("--with-payload reads payloads from the warehouse's event store")
        ids = {it.event_id for f in feeds.values() for it in f}
        found = FeedReader(self.warehouse, self.ds).contents(ids)
        added = live.logged(self.client, sorted(ids - set(found)))
        found.update({i: Content(e.payload, dict(e.attributes)) for i, e in added.items()})
        return with_contents(feeds, found, "the store's feeds")


def for_reads(client: Any) -> Any:
    """``client``, its feeds coming back as the server sends them (:func:`_newest`)."""
    client.set_response_callback("ZREVRANGE", _as_sent)
    return client


def first_trip(pipe: Any, keys: store.Keys, consumers: Sequence[str], k: int) -> None:
    """A read's first round trip (after whatever the caller sends first): each consumer's
    sources and the newest ``k`` of its materialized feed."""
    for c in consumers:
        pipe.lrange(keys.sources(c), 0, -1)
        _newest(pipe, keys.consumer_feed(c), k)


def second_trip(
    client: Any, keys: store.Keys, asked: Sequence[str], rows: Sequence[Any], k: int
) -> tuple[dict[str, list[FeedItem]], dict[str, list[str]]]:
    """From the first trip's ``rows``: the newest ``k`` of every pulled producer and shared
    view the consumers read, in one round trip (none when they read none), merged into each
    consumer's feed; returns the feeds and each consumer's sources."""
    own: dict[str, list[tuple[bytes, float]]] = {}
    reads: dict[str, list[str]] = {}
    for i, c in enumerate(asked):
        reads[c] = [s.decode() for s in rows[2 * i]]
        own[c] = _pairs(rows[2 * i + 1])
    wanted = sorted({s for ss in reads.values() for s in ss if s != "c"})
    latest: dict[str, list[tuple[bytes, float]]] = {}
    if wanted:
        pipe = client.pipeline(transaction=False)
        for s in wanted:
            kind, name = s.split(":", 1)
            key = keys.stream(name) if kind == "p" else keys.view_feed(name)
            _newest(pipe, key, k)
        latest = {s: _pairs(got) for s, got in zip(wanted, pipe.execute(), strict=True)}
    feeds = {}
    for c in asked:
        merged = own[c] + [it for s in reads[c] if s != "c" for it in latest[s]]
        feeds[c] = _latest(merged, k)
    return feeds, reads


def _as_sent(response: Any, **options: Any) -> Any:
    return response


def _newest(pipe: Any, key: str, k: int) -> None:
    """The newest ``k`` items of a feed, with their scores, as the server sends them (a flat
    list, member then score: no per-item conversion by the client; :func:`_pairs` reads it)."""
    pipe.execute_command("ZREVRANGE", key, 0, k - 1, "WITHSCORES")


def _pairs(reply: list[Any]) -> list[tuple[bytes, float]]:
    """(member, score) pairs of a :func:`_newest` reply: pairs under RESP3, a flat list
    under RESP2 (scores are whole microseconds)."""
    if reply and not isinstance(reply[0], bytes):
        return [(m, int(score)) for m, score in reply]
    return [(reply[i], int(reply[i + 1])) for i in range(0, len(reply), 2)]


def _latest(raw: list[tuple[bytes, float]], k: int) -> list[FeedItem]:
    """:func:`jobs.serving.reader.merge_latest` on the store's (member, score) pairs: newest
    first (score, then event id, descending: UTF-8 bytes order as the ids' text does), one per
    event id, at most ``k``; only the items kept are decoded."""
    out: list[FeedItem] = []
    seen: set[bytes] = set()

    def newest(pair: tuple[bytes, float]) -> tuple[float, bytes]:
        return pair[1], pair[0].split(store.SEP, 1)[0]

    for member, score in sorted(raw, key=newest, reverse=True):
        event_id = member.split(store.SEP, 1)[0]
        if event_id in seen:
            continue
        seen.add(event_id)
        out.append(_item(member, score))
        if len(out) == k:
            break
    return out


def _item(raw: bytes, score: float) -> FeedItem:
    event_id, producer_id = store.unmember(raw)
    return FeedItem(event_id, producer_id, store.at(score))


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


def probe(url: str, consumers: Sequence[tuple[str, float]]) -> ReadProbe:
    """Each consumer's feed read once from the store at ``url`` and timed, the latencies
    weighted by ``consumers``' feed views per hour (``(consumer_id, views_per_hour)``)."""
    import time

    reader = StoreReader(url)
    timed = []
    for consumer, weight in consumers:
        started = time.perf_counter()
        reader.feeds([consumer])
        timed.append(((time.perf_counter() - started) * 1000, max(weight, 0.0) or 1e-12))
    return ReadProbe(
        reads=len(timed),
        **{f"p{q}_ms": round(weighted_quantile(timed, q / 100), 3) for q in (50, 95, 99)},
    )
