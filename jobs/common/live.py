"""Live traffic between daily runs (``feedpipe store add-event``; docs/serving.md, "Live
events"): an event added to the store goes into its producer's stream and, trimmed to k,
into every feed and view the served plan pushes that producer into, and into the streams of
the topics it matches (and theirs).

Events go into every generation that may be served: the served one and any being loaded, so
that a day loaded while events arrive has them when it is switched in. Each event is also
kept in the live log (:data:`LIVE`), from which the load of the next day catches up with the
events that arrived after that day ended (:func:`catch_up`). Adding an event twice changes
nothing: a feed is a sorted set of event ids.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobs.common import predicates, store
from jobs.common.errors import FeedpipeError

if TYPE_CHECKING:
    import redis

LIVE = f"{store.PREFIX}:live"
"""Sorted set: the ids of the events added live, scored by ``created_at``."""

LIVE_EVENTS = f"{store.PREFIX}:live:events"
"""Hash: an event added live -> its JSON (what :func:`catch_up` adds again)."""


class BadEvent(FeedpipeError, ValueError):
    """An event line that cannot be added (nothing of its batch is added)."""


@dataclass(frozen=True)
class LiveEvent:
    """An event as the landing's ``events`` table carries it. Feeds hold its id and time; its
    payload and attributes are kept in the live log (:data:`LIVE_EVENTS`) until the day they
    belong to is served from its tables (whose event store has them)."""

    event_id: str
    producer_id: str
    created_at: dt.datetime
    attributes: dict[str, str] = field(default_factory=dict)
    payload: str | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "event_id": self.event_id,
                "producer_id": self.producer_id,
                "created_at": self.created_at.isoformat(),
                "attributes": self.attributes,
                "payload": self.payload,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> LiveEvent:
        row = json.loads(raw)
        return cls(
            row["event_id"],
            row["producer_id"],
            dt.datetime.fromisoformat(row["created_at"]),
            row.get("attributes") or {},
            row.get("payload"),
        )


def _instant(value: Any) -> dt.datetime:
    """ISO-8601 (UTC without an offset) or integer epoch seconds, as the landing takes them."""
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        return dt.datetime.fromtimestamp(int(value), dt.UTC)
    if not isinstance(value, str):
        raise ValueError(f"not a timestamp: {value!r}")
    at = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    return at.replace(tzinfo=dt.UTC) if at.tzinfo is None else at.astimezone(dt.UTC)


def parse_event(line: str) -> LiveEvent:
    """One JSON Lines event: ``event_id``, ``producer_id``, ``created_at``; optional
    ``attributes`` (an object of strings) and ``payload`` (a string)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    for name in ("event_id", "producer_id", "created_at"):
        if row.get(name) in (None, ""):
            raise ValueError(f"no {name}")
    ids = {n: row[n] for n in ("event_id", "producer_id")}
    bad = [n for n, v in ids.items() if not isinstance(v, str) or "\x00" in v]
    if bad:
        raise ValueError(f"{bad[0]} must be a string without NUL")
    attributes = row.get("attributes") or {}
    if not isinstance(attributes, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
    ):
        raise ValueError("attributes must be an object of strings")
    payload = row.get("payload")
    if payload is not None and not isinstance(payload, str):
        raise ValueError("payload must be a string")
    at = _instant(row["created_at"])
    return LiveEvent(ids["event_id"], ids["producer_id"], at, attributes, payload)


def parse_events(lines: Iterable[str], source: str) -> list[LiveEvent]:
    """Every non-blank line of ``source`` as an event; the first bad one is a
    :class:`BadEvent` naming its line."""
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(parse_event(line))
        except ValueError as exc:
            raise BadEvent(f"{source} line {n}: {exc}; no event of it was added") from None
    return out


@dataclass(frozen=True)
class Added:
    """What an add did: events, feed and view insertions (per generation written), and the
    events whose producer the served plan does not know (their streams only)."""

    events: int
    insertions: int
    unplanned: int
    generations: tuple[str, ...]


def open_generations(client: redis.Redis) -> list[store.ServedDay]:
    """The generations live events go into: the served one and those being loaded."""
    served = store.served(client)
    out = [served] if served else []
    for raw in client.hvals(store.GENERATIONS):
        day = store.ServedDay.from_json(raw)
        if (
            not day.since
            and not day.replaced
            and (not served or day.generation != served.generation)
        ):
            out.append(day)
    return out


def _fan_out(
    client: redis.Redis, day: store.ServedDay, events: Sequence[LiveEvent]
) -> tuple[int, int]:
    """The events into one generation: streams, then the topics they match, then every push
    target; returns (insertions into feeds and views, events of producers without targets)."""
    keys, k = day.keys, day.feed_k
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.topics())
    for e in events:
        pipe.smembers(keys.targets(e.producer_id))
    topics_raw, *targets_raw = pipe.execute()
    topics = {t.decode(): predicates.parse(p.decode()) for t, p in topics_raw.items()}
    streams: dict[str, list[tuple[bytes, int]]] = defaultdict(list)
    for e in events:
        item = (store.member(e.event_id, e.producer_id), store.score(e.created_at))
        streams[e.producer_id].append(item)
        for topic, terms in topics.items():
            if e.attributes and predicates.holds(terms, e.attributes):
                streams[topic].append(item)
    topic_targets: dict[str, set[bytes]] = {}
    matched = [t for t in streams if t in topics]
    if matched:
        pipe = client.pipeline(transaction=False)
        for t in matched:
            pipe.smembers(keys.targets(t))
        topic_targets = dict(zip(matched, pipe.execute(), strict=True))
    by_producer = {e.producer_id: t for e, t in zip(events, targets_raw, strict=True)}
    pipe = client.pipeline(transaction=False)
    insertions = 0
    for stream, items in streams.items():
        _add(pipe, keys.stream(stream), items, k)
        for target in by_producer.get(stream) or topic_targets.get(stream) or ():
            kind, name = target.decode().split(":", 1)
            feed = keys.consumer_feed(name) if kind == "c" else keys.view_feed(name)
            _add(pipe, feed, items, k)
            insertions += len(items)
    pipe.execute()
    unplanned = sum(1 for e in events if not by_producer.get(e.producer_id))
    return insertions, unplanned


def _add(pipe: Any, key: str, items: list[tuple[bytes, int]], k: int) -> None:
    """Items into a sorted set, which keeps its newest ``k`` (Mastodon's ``ZADD`` then
    ``ZREMRANGEBYRANK``)."""
    pipe.zadd(key, dict(items))
    pipe.zremrangebyrank(key, 0, -(k + 1))


def add_events(
    client: redis.Redis,
    events: Sequence[LiveEvent],
    generations: Sequence[store.ServedDay] | None = None,
    log: bool = True,
) -> Added:
    """Add ``events`` to ``generations`` (default: :func:`open_generations`) and, with
    ``log``, to the live log."""
    if not events:
        return Added(0, 0, 0, ())
    chosen = list(generations) if generations is not None else open_generations(client)
    if log:
        pipe = client.pipeline(transaction=False)
        pipe.zadd(LIVE, {e.event_id: store.score(e.created_at) for e in events})
        pipe.hset(LIVE_EVENTS, mapping={e.event_id: e.to_json() for e in events})
        pipe.execute()
    insertions = unplanned = 0
    for day in chosen:
        n, u = _fan_out(client, day, events)
        insertions += n
        unplanned = max(unplanned, u)
    return Added(len(events), insertions, unplanned, tuple(d.generation for d in chosen))


def logged_since(client: redis.Redis, since: dt.datetime) -> list[LiveEvent]:
    """The events of the live log created at or after ``since``."""
    ids: list[bytes] = list(client.zrangebyscore(LIVE, store.score(since), "+inf"))  # type: ignore[arg-type]
    if not ids:
        return []
    return [LiveEvent.from_json(raw) for raw in client.hmget(LIVE_EVENTS, ids) if raw is not None]


def logged(client: redis.Redis, event_ids: Sequence[str]) -> dict[str, LiveEvent]:
    """The events of ``event_ids`` that the live log holds."""
    if not event_ids:
        return {}
    found = client.hmget(LIVE_EVENTS, list(event_ids))
    return {i: LiveEvent.from_json(raw) for i, raw in zip(event_ids, found, strict=True) if raw}


def catch_up(client: redis.Redis, day: store.ServedDay, ends: dt.datetime) -> int:
    """Before (and again after) ``day`` is switched in: the events added live that were created
    at or after ``ends`` (the end of the loaded day: its tables hold the rest) into its
    generation. Returns how many."""
    events = logged_since(client, ends)
    add_events(client, events, [day], log=False)
    return len(events)


def forget_before(client: redis.Redis, ends: dt.datetime) -> int:
    """Drop from the live log the events created before ``ends`` (a served day's tables hold
    them). Returns how many."""
    old = client.zrangebyscore(LIVE, "-inf", f"({store.score(ends)}")
    if old:
        pipe = client.pipeline(transaction=False)
        pipe.zrem(LIVE, *old)
        pipe.hdel(LIVE_EVENTS, *old)
        pipe.execute()
    return len(old)
