"""The feed store: the client, the key layout and the served-day pointer, shared by the loader
(a stage) and the reader (``jobs/serving/``) (docs/serving.md, "The feed store").

The store holds what Feeding Frenzy's Section 4 names ProducerPivoted (each producer's latest
events), ConsumerPivoted (each materialized consumer feed and shared view, latest k) and the
ConnectionNetwork (each consumer's sources, each producer's push targets), as Redis sorted sets,
lists and sets, the way Mastodon's feed manager keeps home feeds (a sorted set per feed,
trimmed to a fixed length).

Every loaded day is a *generation*: its keys carry the generation's id, so a day loads beside
the one being served, and readers move from one to the next when one ``SET`` replaces the
served pointer (:data:`SERVED`), which Redis applies atomically. A reader sends the pointer's
``GET`` in the same pipelined round trip as its consumer's keys of the generation it last saw,
and reads again only when the pointer has moved, so it reads one generation, never two.

Keys, for Redis Cluster: every command touches one hash slot. A consumer's keys share the slot
of ``{c:<id>}``, a producer's of ``{p:<id>}``, a view's of ``{v:<id>}``; the pointers have
slots of their own.

Feed items are sorted-set members ``<event_id>\\0<producer_id>`` scored by ``created_at`` in
microseconds since the epoch: Redis orders equal scores by member bytes, so a reverse range
gives the feed order (``created_at`` descending, then ``event_id`` descending, as UTF-8 byte
order is code point order) and an event added twice is one member.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from jobs.common.config import redact
from jobs.common.errors import FeedpipeError

if TYPE_CHECKING:
    import redis

PREFIX = "fp"
"""Every key of the store starts with it: one store may serve other applications too."""

SERVED = f"{PREFIX}:served"
"""The served day: a JSON :class:`ServedDay`. Replacing it switches readers."""

GENERATIONS = f"{PREFIX}:generations"
"""A hash: each generation loaded and not yet removed -> its :class:`ServedDay` as JSON."""

SEP = b"\x00"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class StoreError(FeedpipeError, RuntimeError):
    """The feed store cannot be reached, refuses the credentials, or holds no served day."""


def connect(url: str, environ: dict[str, str] | None = None) -> redis.Redis:
    """A client of the store at ``url`` (``redis://`` or ``rediss://``), checked with a
    ``PING``; the password comes from the URL, else ``FEEDPIPE_STORE_PASSWORD`` (and the user
    from ``FEEDPIPE_STORE_USERNAME``). Any failure is one line naming the store without its
    password."""
    import redis

    env = os.environ if environ is None else environ
    if not url.startswith(("redis://", "rediss://")):
        raise StoreError(f"not a redis:// or rediss:// URL: {redact(url)!r}")
    where = redact(url)
    extra: dict[str, Any] = {}
    if env.get("FEEDPIPE_STORE_PASSWORD") and "@" not in url:
        extra["password"] = env["FEEDPIPE_STORE_PASSWORD"]
        if env.get("FEEDPIPE_STORE_USERNAME"):
            extra["username"] = env["FEEDPIPE_STORE_USERNAME"]
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30, **extra)
        client.ping()
    except redis.AuthenticationError as exc:
        raise StoreError(f"the feed store at {where} refused the credentials: {exc}") from None
    except redis.ResponseError as exc:  # e.g. NOAUTH: a password is needed
        raise StoreError(f"the feed store at {where} refused the connection: {exc}") from None
    except (redis.ConnectionError, redis.TimeoutError, ValueError) as exc:
        raise StoreError(f"cannot reach the feed store at {where}: {exc}") from None
    return client


def score(created_at: dt.datetime) -> int:
    """A feed item's sort score: ``created_at`` in whole microseconds since the epoch (exact
    in a double until the year 2255)."""
    at = created_at if created_at.tzinfo else created_at.replace(tzinfo=dt.UTC)
    delta = at - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def at(micros: float) -> dt.datetime:
    """The inverse of :func:`score` (UTC)."""
    return EPOCH + dt.timedelta(microseconds=int(micros))


def member(event_id: str, producer_id: str) -> bytes:
    """A feed item as a sorted-set member (ids may hold any character but NUL)."""
    return event_id.encode() + SEP + producer_id.encode()


def unmember(raw: bytes) -> tuple[str, str]:
    """``(event_id, producer_id)`` of a member."""
    event_id, producer_id = raw.split(SEP, 1)
    return event_id.decode(), producer_id.decode()


def new_generation(ds: dt.date) -> str:
    """A fresh generation id for a load of day ``ds``: the day and a random suffix."""
    return f"{ds:%Y%m%d}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Keys:
    """The keys of one generation (docs/serving.md, "Key layout")."""

    generation: str

    def _key(self, tag: str, name: str) -> str:
        return f"{PREFIX}:{self.generation}:{{{tag}}}:{name}"

    def sources(self, consumer: str) -> str:
        """List: the consumer's pulled producers (``p:<id>``) and shared views (``v:<id>``)."""
        return self._key(f"c:{consumer}", "sources")

    def consumer_feed(self, consumer: str) -> str:
        """Sorted set: the consumer's materialized feed (its pushed producers' events)."""
        return self._key(f"c:{consumer}", "feed")

    def stream(self, producer: str) -> str:
        """Sorted set: the producer's latest events (a topic's: its matches)."""
        return self._key(f"p:{producer}", "stream")

    def targets(self, producer: str) -> str:
        """Set: the consumers (``c:<id>``) and views (``v:<id>``) the plan pushes the producer
        into."""
        return self._key(f"p:{producer}", "push")

    def view_feed(self, view: str) -> str:
        """Sorted set: a shared view's materialized feed."""
        return self._key(f"v:{view}", "feed")

    def topics(self) -> str:
        """Hash: the topic definitions in force (topic id -> predicate), for live events."""
        return self._key("topics", "definitions")

    def pattern(self) -> str:
        """A ``SCAN`` pattern matching every key of the generation."""
        return f"{PREFIX}:{self.generation}:*"


@dataclass(frozen=True)
class ServedDay:
    """A loaded generation: the day, its id, when it was switched in (ISO-8601, UTC; empty
    while loading), its feeds' k, and when its load started and when another generation
    replaced it (seconds since the epoch; 0: not yet)."""

    ds: str
    generation: str
    since: str = ""
    feed_k: int = 20
    started: float = 0.0
    replaced: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> ServedDay:
        return cls(**json.loads(raw))

    @property
    def keys(self) -> Keys:
        return Keys(self.generation)


def served(client: redis.Redis) -> ServedDay | None:
    """The served day, or None when nothing was switched in yet."""
    raw = client.get(SERVED)
    return ServedDay.from_json(raw) if raw is not None else None


def begin(client: redis.Redis, day: ServedDay) -> ServedDay:
    """Record that ``day``'s generation is being loaded (so that a load killed half-way is
    found and removed later)."""
    started = replace(day, started=time.time())
    client.hset(GENERATIONS, started.generation, started.to_json())
    return started


def switch(client: redis.Redis, day: ServedDay) -> ServedDay:
    """Serve ``day`` from now on: one ``SET`` of the pointer, which readers see whole or not
    at all; the generation it replaces is marked replaced now. Returns the day as served."""
    now = time.time()
    live = replace(
        day,
        since=dt.datetime.fromtimestamp(now, dt.UTC).isoformat(timespec="seconds"),
        started=day.started or now,
    )
    before = served(client)
    client.hset(GENERATIONS, live.generation, live.to_json())
    client.set(SERVED, live.to_json())
    if before is not None and before.generation != live.generation:
        client.hset(GENERATIONS, before.generation, replace(before, replaced=now).to_json())
    return live


def status(client: redis.Redis) -> dict[str, Any]:
    """What the store serves: the served day and since when, every generation it holds (the
    served one, those replaced and kept for their grace period, loads in progress or killed)
    with its keys, and the server's memory (one ``SCAN`` over the store's keys)."""
    day = served(client)
    counts: dict[str, int] = {}
    for key in client.scan_iter(match=f"{PREFIX}:*", count=1000):
        parts = key.decode().split(":", 2)
        if len(parts) == 3 and parts[1] not in ("served", "generations"):
            counts[parts[1]] = counts.get(parts[1], 0) + 1
    generations = []
    for _, raw in sorted(client.hgetall(GENERATIONS).items()):
        g = ServedDay.from_json(raw)
        state = (
            "served"
            if day and g.generation == day.generation
            else ("replaced" if g.replaced else "loading or killed")
        )
        generations.append(
            {
                "ds": g.ds,
                "generation": g.generation,
                "state": state,
                "keys": counts.get(g.generation, 0),
            }
        )
    memory = client.info("memory")
    return {
        "served": None
        if day is None
        else {"ds": day.ds, "generation": day.generation, "since": day.since, "feed_k": day.feed_k},
        "generations": generations,
        "used_memory_bytes": int(memory["used_memory"]),
        "server": client.info("server").get("redis_version"),
    }


def remove_generation(client: Any, generation: str) -> int:
    """Delete every key of a generation (``SCAN`` + ``UNLINK``, a batch at a time); returns
    how many."""
    removed = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=Keys(generation).pattern(), count=1000):
        batch.append(key)
        if len(batch) == 1000:
            removed += client.unlink(*batch)
            batch = []
    if batch:
        removed += client.unlink(*batch)
    client.hdel(GENERATIONS, generation)
    return removed


# The read operations (``jobs.serving.store_reader`` merges what they return into feeds; the
# load's read probe and ``feedpipe calibrate`` time them).


def for_reads(client: Any) -> Any:
    """``client``, its feeds coming back as the server sends them (:func:`newest`)."""
    client.set_response_callback("ZREVRANGE", _as_sent)
    return client


def first_trip(pipe: Any, keys: Keys, consumers: Sequence[str], k: int) -> None:
    """A read's first round trip (after whatever the caller sends first): each consumer's
    sources and the newest ``k`` of its materialized feed."""
    for c in consumers:
        pipe.lrange(keys.sources(c), 0, -1)
        newest(pipe, keys.consumer_feed(c), k)


Items = list[tuple[bytes, int]]
"""(member, score) pairs of a feed, as :func:`pairs` reads them."""


def second_trip(
    client: Any, keys: Keys, asked: Sequence[str], rows: Sequence[Any], k: int
) -> tuple[dict[str, Items], dict[str, list[str]]]:
    """From the first trip's ``rows``: the newest ``k`` of every pulled producer and shared
    view the consumers read, in one round trip (none when they read none); returns each
    consumer's items (its own feed's and its sources', not merged) and its sources."""
    own: dict[str, Items] = {}
    reads: dict[str, list[str]] = {}
    for i, c in enumerate(asked):
        reads[c] = [s.decode() for s in rows[2 * i]]
        own[c] = pairs(rows[2 * i + 1])
    wanted = sorted({s for ss in reads.values() for s in ss if s != "c"})
    latest: dict[str, Items] = {}
    if wanted:
        pipe = client.pipeline(transaction=False)
        for s in wanted:
            kind, name = s.split(":", 1)
            key = keys.stream(name) if kind == "p" else keys.view_feed(name)
            newest(pipe, key, k)
        latest = {s: pairs(got) for s, got in zip(wanted, pipe.execute(), strict=True)}
    items = {c: own[c] + [it for s in reads[c] if s != "c" for it in latest[s]] for c in asked}
    return items, reads


def _as_sent(response: Any, **options: Any) -> Any:
    return response


def newest(pipe: Any, key: str, k: int) -> None:
    """The newest ``k`` items of a feed, with their scores, as the server sends them (a flat
    list, member then score: no per-item conversion by the client; :func:`pairs` reads it)."""
    pipe.execute_command("ZREVRANGE", key, 0, k - 1, "WITHSCORES")


def pairs(reply: list[Any]) -> Items:
    """(member, score) pairs of a :func:`newest` reply: pairs under RESP3, a flat list under
    RESP2 (scores are whole microseconds)."""
    if reply and not isinstance(reply[0], bytes):
        return [(m, int(score)) for m, score in reply]
    return [(reply[i], int(reply[i + 1])) for i in range(0, len(reply), 2)]
