"""The feed reader: assemble consumers' feeds from the day's Parquet tables, without Spark.

For consumer c on day D: read c's rows of ``plan/consumer_sources``, then its materialized
feed (``feeds/consumer_feed``), the shared views it reads (``feeds/view_feed``) and the
latest events of its pulled producers (``feeds/producer_feed``); merge, drop repeated event
ids, order by created_at then event_id (both descending) and keep the first k (global
coherency), or choose k with k,t-diversity from each producer's latest k_p
(:func:`select_diverse`, per-producer coherency; the day's materialize record says which).
Every read is a pyarrow scan filtered on the ids, so answering one consumer touches only the
row groups that can hold it. ``with_payload`` then looks the feeds' event ids up in the day's
``feeds/event_store`` (sorted by id in small row groups) for their payloads and attributes.

"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jobs.common import versions
from jobs.common.dates import recent_since
from jobs.common.errors import FeedpipeError
from jobs.common.pointers import resolve
from jobs.common.records import MaterializeRecord
from jobs.common.storage import Storage
from jobs.serving.published import require_warehouse


class FeedError(FeedpipeError, RuntimeError):
    """The day's feeds cannot be read (not materialized, or a bad request)."""


@dataclass(frozen=True)
class Content:
    """An event's content from the event store: the landed payload (None when it had none)
    and its attributes ({} when none)."""

    payload: str | None
    attributes: dict[str, str]


@dataclass(frozen=True)
class FeedItem:
    event_id: str
    producer_id: str
    created_at: dt.datetime
    content: Content | None = None
    """Set by ``feeds(..., with_payload=True)``."""

    def as_json(self) -> dict[str, Any]:
        at = self.created_at
        at = at.replace(tzinfo=dt.UTC) if at.tzinfo is None else at.astimezone(dt.UTC)
        ts = at.isoformat().replace("+00:00", "Z")
        out: dict[str, Any] = {
            "event_id": self.event_id,
            "producer_id": self.producer_id,
            "created_at": ts,
        }
        if self.content is not None:
            out["payload"] = self.content.payload
            out["attributes"] = self.content.attributes
        return out


def sort_key(item: FeedItem) -> tuple[dt.datetime, str]:
    return (item.created_at, item.event_id)


def merge_latest(items: Iterable[FeedItem], k: int) -> list[FeedItem]:
    """Newest first (created_at, then event_id, descending), one per event id, at most k."""
    unique = {it.event_id: it for it in items}
    return sorted(unique.values(), key=sort_key, reverse=True)[:k]


def with_contents(
    feeds: dict[str, list[FeedItem]], found: dict[str, Content], whose: str
) -> dict[str, list[FeedItem]]:
    """Every item of ``feeds`` with its content from ``found`` (an event store's lookup); an
    item without one is a :class:`FeedError` naming ``whose`` feeds."""
    missing = sorted({it.event_id for f in feeds.values() for it in f} - set(found))
    if missing:
        raise FeedError(
            f"{len(missing)} event(s) of {whose} are not in the event store (e.g. {missing[0]!r})"
        )
    return {
        c: [dataclasses.replace(it, content=found[it.event_id]) for it in f]
        for c, f in feeds.items()
    }


def _utc(at: dt.datetime) -> dt.datetime:
    return at.replace(tzinfo=dt.UTC) if at.tzinfo is None else at.astimezone(dt.UTC)


def select_diverse(
    items: Iterable[FeedItem], k: int, k_p: int, since: dt.datetime
) -> list[FeedItem]:
    """Per-producer coherency with k,t-diversity (Feeding Frenzy 2.2.1), newest first.

    The pool holds each producer's latest ``k_p`` events. The feed takes first the newest event
    of every producer that has one since ``since`` (newest first, at most k), then fills up to
    k with the newest remaining pool events. So: if a recent producer is missing, the feed
    is k recent producers' single newest events and no producer shows more than one
    (k,t-diversity for any k >= 1); each producer's shown events are its newest ones
    (gapless); the feed is time-ordered and has no duplicates."""
    unique = sorted({it.event_id: it for it in items}.values(), key=sort_key, reverse=True)
    seen: dict[str, int] = defaultdict(int)
    pool: list[tuple[bool, FeedItem]] = []
    for it in unique:
        seen[it.producer_id] += 1
        if seen[it.producer_id] <= k_p:
            first = seen[it.producer_id] == 1 and _utc(it.created_at) >= since
            pool.append((first, it))
    firsts = [it for first, it in pool if first][:k]
    rest = [it for first, it in pool if not first][: k - len(firsts)]
    return sorted(firsts + rest, key=sort_key, reverse=True)


@dataclass(frozen=True)
class Answer:
    """Feeds read at once: each consumer's, and the ids asked for that are not consumers on
    the day (no source in its plan: they follow no one), whose feeds are empty."""

    feeds: dict[str, list[FeedItem]]
    unknown: tuple[str, ...]


class FeedReader:
    """Feeds of one day, from its published version (:mod:`jobs.common.versions`): the tables
    of one complete run of the day, whatever is being rebuilt meanwhile.

    ``unpublished=True`` reads the day's latest complete run instead, published or not (for
    debugging a day that failed validation or is being reprocessed); ``published`` then says
    whether that run is the day's published version."""

    def __init__(self, warehouse: str, ds: dt.date, unpublished: bool = False):
        self.wh = Storage.at(warehouse)
        self.ds = ds
        self.unpublished = unpublished
        self._resolve()

    def _resolve(self) -> None:
        ds = self.ds
        require_warehouse(self.wh)
        try:
            published = versions.published(self.wh, ds)
            version = versions.working(self.wh, ds) if self.unpublished else published
        except versions.LegacyLayout as exc:
            raise FeedError(str(exc)) from None
        if version is None:
            raise FeedError(
                f"{ds} has not been published in {self.wh.uri()} "
                "(feedpipe feed --unpublished reads its latest complete run)"
            )
        if not version.has("feeds/consumer_feed"):
            raise FeedError(f"no feeds materialized for {ds} in {self.wh.uri('feeds')}")
        self.version = version
        state = version.records.get("materialize")
        state = state if isinstance(state, MaterializeRecord) else MaterializeRecord()
        self.materialized_k = state.feed_k
        self.coherency = state.coherency or "global"
        self.k_per_producer = state.k_per_producer
        self.recent_since = recent_since(ds, state.window_hours)
        self.published = published is not None and published.folders == version.folders

    @classmethod
    def published_copy(cls, target: str, ds: dt.date | None = None, s3: Any = None) -> FeedReader:
        """A reader of day ``ds`` (default: the latest) as published to ``target`` (an
        ``s3://bucket/prefix`` publish target): the snapshot its pointer names."""
        root, day = resolve(target, ds, s3)
        return cls(root, day)

    def _scan(
        self, layer: str, table: str, column: str, ids: Sequence[str], columns: list[str]
    ) -> pa.Table:
        parts = self.version.parts(f"{layer}/{table}")
        if not ids or parts is None:
            return pa.table({c: pa.array([], pa.string()) for c in columns})
        data = self.wh.dataset(*parts)
        return data.to_table(columns=columns, filter=pc.field(column).isin(list(ids)))

    def feeds(
        self, consumers: Sequence[str], k: int | None = None, with_payload: bool = False
    ) -> dict[str, list[FeedItem]]:
        """The assembled feeds of ``consumers`` (an unknown consumer gets an empty feed);
        ``with_payload``: every item carries its :class:`Content` from the event store."""
        return self.answer(consumers, k, with_payload).feeds

    def answer(
        self, consumers: Sequence[str], k: int | None = None, with_payload: bool = False
    ) -> Answer:
        """:meth:`feeds`, and which of ``consumers`` are not consumers on the day.

        Every table is read from the one version resolved; should that version be removed
        meanwhile (the day was published twice since), the day is resolved again and read
        once more from its new version."""
        try:
            return self._answer(consumers, k, with_payload)
        except OSError:  # a file of the version vanished (FileNotFoundError, S3 NoSuchKey)
            self._resolve()
            return self._answer(consumers, k, with_payload)

    def _answer(self, consumers: Sequence[str], k: int | None, with_payload: bool) -> Answer:
        feeds, known = self._feeds(consumers, k)
        unknown = tuple(c for c in dict.fromkeys(consumers) if c not in known)
        return Answer(self._with_content(feeds, with_payload), unknown)

    def contents(self, event_ids: Iterable[str]) -> dict[str, Content]:
        """The stored content of the events (ids the day's feeds can return; others are
        absent from the result)."""
        if not self.version.has("feeds/event_store"):
            raise FeedError(
                f"{self.ds} was materialized without an event store: rebuild it with "
                f"`feedpipe run --ds {self.ds} --full-refresh`"
            )
        ids = sorted(set(event_ids))
        cols = ["event_id", "payload", "attributes"]
        rows = self._scan("feeds", "event_store", "event_id", ids, cols)
        return {
            r["event_id"]: Content(r["payload"], dict(r["attributes"] or ()))
            for r in rows.to_pylist()
        }

    def _with_content(
        self, feeds: dict[str, list[FeedItem]], with_payload: bool
    ) -> dict[str, list[FeedItem]]:
        if not with_payload:
            return feeds
        found = self.contents(it.event_id for f in feeds.values() for it in f)
        # validate's in_event_store expectation keeps a published day from missing any
        return with_contents(feeds, found, f"the feeds of {self.ds}")

    def _feeds(
        self, consumers: Sequence[str], k: int | None
    ) -> tuple[dict[str, list[FeedItem]], set[str]]:
        """The feeds of ``consumers``, and those of them with a source in the day's plan."""
        limit = k if k is not None else self.materialized_k or 20
        if k is not None and self.materialized_k is not None and k > self.materialized_k:
            raise FeedError(
                f"feeds of {self.ds} hold {self.materialized_k} events; --k must be at most that"
            )
        if limit < 1:
            raise FeedError("k must be at least 1")
        sources = self._scan(
            "plan",
            "consumer_sources",
            "consumer_id",
            consumers,
            ["consumer_id", "source_type", "source_id"],
        ).to_pylist()
        pulls: dict[str, list[str]] = defaultdict(list)
        views: dict[str, list[str]] = defaultdict(list)
        for s in sources:
            if s["source_type"] == "producer":
                pulls[s["consumer_id"]].append(s["source_id"])
            elif s["source_type"] == "view":
                views[s["consumer_id"]].append(s["source_id"])
        items: dict[str, list[FeedItem]] = {c: [] for c in consumers}
        cols = ["event_id", "producer_id", "created_at"]
        own = self._scan("feeds", "consumer_feed", "consumer_id", consumers, ["consumer_id", *cols])
        for r in own.to_pylist():
            items[r["consumer_id"]].append(
                FeedItem(r["event_id"], r["producer_id"], r["created_at"])
            )
        by_producer: dict[str, list[FeedItem]] = defaultdict(list)
        wanted = sorted({p for ps in pulls.values() for p in ps})
        per_producer = self.coherency == "per_producer"
        pf_cols = [*cols, "author_id", *(["rank"] if per_producer else [])]
        for r in self._scan("feeds", "producer_feed", "producer_id", wanted, pf_cols).to_pylist():
            if per_producer and r["rank"] > self.k_per_producer:
                continue
            # a topic's feed holds other producers' events: each item names its author
            by_producer[r["producer_id"]].append(
                FeedItem(r["event_id"], r["author_id"], r["created_at"])
            )
        by_view: dict[str, list[FeedItem]] = defaultdict(list)
        wanted_views = sorted({v for vs in views.values() for v in vs})
        for r in self._scan(
            "feeds", "view_feed", "view_id", wanted_views, ["view_id", *cols]
        ).to_pylist():
            by_view[r["view_id"]].append(FeedItem(r["event_id"], r["producer_id"], r["created_at"]))
        for c in consumers:
            for p in pulls.get(c, ()):
                items[c].extend(by_producer.get(p, ()))
            for v in views.get(c, ()):
                items[c].extend(by_view.get(v, ()))
        known = {s["consumer_id"] for s in sources}
        if per_producer:
            k_p, since = self.k_per_producer, self.recent_since
            return {c: select_diverse(items[c], limit, k_p, since) for c in consumers}, known
        return {c: merge_latest(items[c], limit) for c in consumers}, known


ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str) -> str:
    r"""``text`` on one line, as in a JSON string: backslash, line feed, carriage return and
    tab escaped as ``\\``, ``\n``, ``\r``, ``\t``; every other control character and the
    Unicode line and paragraph separators as ``\uXXXX``."""
    out = []
    for ch in text:
        if ch in ESCAPES:
            out.append(ESCAPES[ch])
        elif unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def format_table(consumer: str, feed: list[FeedItem]) -> str:
    """One line per item; with contents, the attributes as JSON and the payload last, each
    on one line (:func:`one_line`; a missing payload shows as ``-``)."""
    with_content = any(it.content is not None for it in feed)
    head = f"{'rank':>4}  {'created_at':<27}  {'producer_id':<20}  event_id"
    lines = [
        f"feed of {consumer} ({len(feed)} events)",
        head + ("  attributes  payload" if with_content else ""),
    ]
    for i, it in enumerate(feed, 1):
        line = f"{i:>4}  {it.as_json()['created_at']:<27}  {it.producer_id:<20}  {it.event_id}"
        if it.content is not None:
            attrs = json.dumps(it.content.attributes, ensure_ascii=False)
            payload = it.content.payload
            line += f"  {attrs}  {'-' if payload is None else one_line(payload)}"
        lines.append(line)
    return "\n".join(lines)


def feed_json(feed: list[FeedItem]) -> list[dict[str, Any]]:
    return [it.as_json() for it in feed]
