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
        self.client = store.for_reads(store.connect(url))
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
            store.first_trip(pipe, keys, consumers, k)
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
        items, reads = store.second_trip(self.client, day.keys, asked, rows, limit)
        feeds = {c: _latest(items[c], limit) for c in asked}
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


def _latest(raw: store.Items, k: int) -> list[FeedItem]:
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
