"""Synthetic follows workloads in the landing layout.

Profiles reproduce the papers' baseline workloads:

* ``ff2010``: Feeding Frenzy (SIGMOD 2010), Section 5.1 and Table 2: 200,000 consumers,
  67,921 producers, 5.1 producers per consumer (Zipf 0.62 fan-in), ~15 consumers per producer
  (Zipf 0.39 fan-out), 1 event/hour per producer (Zipf 0.57), 5.8 views/hour per consumer
  (Zipf 0.62).
* ``cz2015``: Chen & Zhou, Table I: 30,000 users and 10,000 feeds (their "10x" basic size,
  Section V.C), 6.5 feeds per user (Zipf 0.62), 0.1 events and 0.5 queries per interval (Zipf
  0.57 / 0.62). We take one interval as 6 minutes (1 event/hour, 5 views/hour). Table I gives
  no skew for feed popularity; we use Feeding Frenzy's 0.39.
* ``gplus``: the shape of Chen & Zhou's Google+ graph (Section V.A): 99,679 users and 72,271
  feeds, 137.1 feeds per user (Zipf 0.98) and 189.1 users per feed (Zipf 1.43), rates as in
  ``cz2015``. The heads of both Zipf laws exceed what the other side can supply (the most
  active user would follow more feeds than exist, the most followed feed have more followers
  than there are users), so both are capped with the excess spread over the rest, and
  repeated draws are drawn again (``fill_degrees``); the generator reports the realized graph.



A Zipf(s) quantity over n ids gives the id of rank i the value ``mean * i**-s / avg(j**-s)``;
ranks are assigned to ids by a seeded permutation, independently per quantity. The follow
graph is drawn Chung-Lu style: consumer c gets ``d_c`` draws of producers with probability
proportional to their fan-out weight; repeated draws and self-follows are dropped, so the
realized degrees are slightly below the targets (the generator reports them).

Day 1 writes a follows snapshot; later days write a change log (unfollows of existing edges
and new follows, with timestamps). Every day writes events (Poisson per producer, uniform in
the day) and views (Poisson per consumer). Output is streamed per block of ids, so memory stays
far below the data size at ``--scale 1``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from jobs.common.storage import Storage
from jobs.workloads.landing import LandingWriter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Profile:
    name: str
    consumers: int
    producers: int
    producers_per_consumer: float
    fan_in_zipf: float
    fan_out_zipf: float
    events_per_hour: float
    event_zipf: float
    views_per_hour: float
    view_zipf: float
    unfollow_share: float = 0.005
    """Share of edges unfollowed per day after day 1 (as many new follows are added)."""
    follows_format: str = "csv"
    events_format: str = "parquet"
    views_format: str = "parquet"
    trend_share: float = 0.0
    """Share of producers and of consumers whose rate changes by a fixed factor every day."""
    trend_per_day: float = 0.15
    """A trending id's daily growth is drawn uniformly from [-x, +x]."""
    flash_producers: int = 0
    """Producers that post ``flash_factor`` times their rate on day ``flash_day``, drawn from
    the most followed tenth (Feeding Frenzy 5.5's flash event)."""
    flash_day: int = -1
    """Day index (0 = the first day) of the flash event."""
    flash_factor: float = 10.0
    fill_degrees: bool = False
    """Redraw repeated draws so consumers reach their degree (for very skewed popularity)."""
    topics: int = 0
    """Topic producers (``feedpipe generate --topics N``): with topics, events carry
    attributes and day 1 lands the topic definitions and their followers (:func:`topic_table`)."""
    topic_follows: float = 1.0
    """Topics followed per consumer on average (Zipf 0.8 topic popularity)."""


PROFILES = {
    "ff2010": Profile("ff2010", 200_000, 67_921, 5.1, 0.62, 0.39, 1.0, 0.57, 5.8, 0.62),
    "cz2015": Profile("cz2015", 30_000, 10_000, 6.5, 0.62, 0.39, 1.0, 0.57, 5.0, 0.62),
    "gplus": Profile(
        "gplus", 99_679, 72_271, 137.1, 0.98, 1.43, 1.0, 0.57, 5.0, 0.62, fill_degrees=True
    ),
}


def scaled(profile: Profile, scale: float) -> Profile:
    """The same shape with ``scale`` times the consumers and producers."""
    if scale <= 0:
        raise ValueError("scale must be positive")
    return replace(
        profile,
        consumers=max(2, round(profile.consumers * scale)),
        producers=max(2, round(profile.producers * scale)),
    )


def zipf_values(
    n: int, s: float, mean: float, rng: np.random.Generator, cap: float | None = None
) -> np.ndarray:
    """Values with Zipf(s) shape and the given mean, assigned to ids 0..n-1 at random.

    With ``cap``, no value exceeds it: the excess of the capped ones is spread over the rest
    in proportion to their values (repeatedly, until none exceeds the cap), so the mean holds
    while it can (at most ``cap``). Without values above the cap nothing changes."""
    ranks = np.arange(1, n + 1, dtype=np.float64)
    w = ranks**-s
    values = mean * w / w.mean()
    if cap is not None:
        total = min(mean, cap) * n
        for _ in range(100):
            over = values > cap
            if not over.any():
                break
            values[over] = cap
            free = ~(values >= cap)
            if not free.any():
                break
            values[free] *= (total - cap * (~free).sum()) / values[free].sum()
    return values[rng.permutation(n)]


def stochastic_round(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Round keeping the expectation: floor(x) plus 1 with probability frac(x)."""
    base = np.floor(x)
    return (base + (rng.random(x.shape) < (x - base))).astype(np.int64)


def user_ids(idx: np.ndarray) -> np.ndarray:
    """Ids in one user space (``u0000042``): a producer may also be a consumer."""
    return np.char.add("u", np.char.zfill(idx.astype(str), 7))


@dataclass
class Population:
    profile: Profile
    fan_in: np.ndarray  # target producers per consumer
    fan_out_w: np.ndarray  # producer popularity weights (sum 1)
    event_rate: np.ndarray  # events per hour per producer
    view_rate: np.ndarray  # views per hour per consumer
    event_growth: np.ndarray  # daily growth factor per producer (1 = no trend)
    view_growth: np.ndarray
    flash: np.ndarray  # indices of flash producers

    @classmethod
    def draw(cls, profile: Profile, seed: int) -> Population:
        rng = np.random.default_rng([seed, 0])
        # no consumer can follow more producers than exist, no producer have more followers
        # than there are consumers (relative to the mean of 1: C * P / edges)
        fan_in = zipf_values(
            profile.consumers,
            profile.fan_in_zipf,
            profile.producers_per_consumer,
            rng,
            cap=profile.producers - 1,
        )
        edges = profile.producers_per_consumer * profile.consumers
        fan_out = zipf_values(
            profile.producers,
            profile.fan_out_zipf,
            1.0,
            rng,
            cap=profile.consumers * profile.producers / edges,
        )
        event_rate = zipf_values(
            profile.producers, profile.event_zipf, profile.events_per_hour, rng
        )
        view_rate = zipf_values(profile.consumers, profile.view_zipf, profile.views_per_hour, rng)
        trend = np.random.default_rng([seed, 0, 2])  # separate stream: the base draw is unchanged

        def growth(n: int) -> np.ndarray:
            g = 1.0 + trend.uniform(-profile.trend_per_day, profile.trend_per_day, size=n)
            return np.where(trend.random(n) < profile.trend_share, g, 1.0)

        popular = np.argsort(-fan_out, kind="stable")[: max(1, profile.producers // 10)]
        n_flash = min(profile.flash_producers, popular.size)
        return cls(
            profile=profile,
            fan_in=fan_in,
            fan_out_w=fan_out / fan_out.sum(),
            event_rate=event_rate,
            view_rate=view_rate,
            event_growth=growth(profile.producers),
            view_growth=growth(profile.consumers),
            flash=np.sort(trend.choice(popular, size=n_flash, replace=False)),
        )

    def event_rates(self, day: int) -> np.ndarray:
        """Events per hour of every producer on day ``day`` (trends and the flash applied)."""
        rate = self.event_rate * self.event_growth**day
        if day == self.profile.flash_day and self.flash.size:
            rate = rate.copy()
            rate[self.flash] *= self.profile.flash_factor
        return rate

    def view_rates(self, day: int) -> np.ndarray:
        return self.view_rate * self.view_growth**day

    def draw_edges(
        self,
        consumers: np.ndarray,
        degrees: np.ndarray,
        rng: np.random.Generator,
        fill: bool = False,
    ) -> np.ndarray:
        """Edge keys ``consumer * P + producer`` (unique, no self-follows).

        ``fill``: draw again for repeated draws and self-follows, up to 8 rounds, so each
        consumer (``consumers`` unique) gets close to its degree even when a few producers
        take most draws."""
        n_prod = self.profile.producers

        def draw(cons_idx: np.ndarray, deg: np.ndarray) -> np.ndarray:
            prods = rng.choice(n_prod, size=int(deg.sum()), p=self.fan_out_w)
            cons = np.repeat(cons_idx, deg)
            keep = cons != prods  # consumer i and producer i are the same user
            return cons[keep].astype(np.int64) * n_prod + prods[keep]

        keys = np.unique(draw(consumers, degrees))
        for _ in range(8 if fill else 0):
            have = np.bincount(keys // n_prod, minlength=int(consumers.max()) + 1)[consumers]
            short = np.maximum(degrees - have, 0)
            if not short.any():
                break
            keys = np.unique(np.concatenate([keys, draw(consumers, short)]))
        return keys


def flash_producer_ids(profile: Profile, seed: int) -> list[str]:
    """The ids of the producers that ``generate`` gives a flash event (for tests and reports)."""
    return [str(x) for x in user_ids(Population.draw(profile, seed).flash)]


def day_rng(seed: int, day: int, table: int) -> np.random.Generator:
    """The random stream of one table (0 follows, 1 events, 2 views) of day ``day`` (the
    offset from the first day) under ``seed``: each day's files depend on the seed and the
    day only, so days generated later continue a workload exactly."""
    return np.random.default_rng([seed, 1 + day, table])


def uniform_times(day: dt.date, n: int, rng: np.random.Generator) -> np.ndarray:
    """Microsecond timestamps uniform within ``day`` (UTC)."""
    start = int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()) * 1_000_000
    return start + rng.integers(0, 86_400 * 1_000_000, size=n, dtype=np.int64)


def _ts_array(us: np.ndarray) -> pa.Array:
    return pa.array(us, type=pa.timestamp("us", tz="UTC"))


def _dict_ids(idx: np.ndarray, dictionary: pa.Array) -> pa.Array:
    """Ids as a dictionary-encoded string column (no Python string per row)."""
    return pa.DictionaryArray.from_arrays(pa.array(idx.astype(np.int32)), dictionary)


@dataclass
class DayStats:
    ds: dt.date
    edges: int
    follow_rows: int
    events: int
    views: int


def generate(
    storage: Storage,
    start: dt.date,
    days: int,
    profile: Profile,
    seed: int = 7,
    formats: dict[str, str] | None = None,
    gzip_text: bool = False,
    block: int = 20_000,
) -> list[DayStats]:
    """Write ``days`` days of landing data from ``start``; returns per-day row counts."""
    fmt = {
        "follows": profile.follows_format,
        "events": profile.events_format,
        "views": profile.views_format,
        **(formats or {}),
    }
    pop = Population.draw(profile, seed)
    P, C = profile.producers, profile.consumers
    consumer_ids = pa.array(user_ids(np.arange(C)))
    producer_ids = pa.array(user_ids(np.arange(P)))
    rng0 = np.random.default_rng([seed, 0, 1])
    edges = pop.draw_edges(
        np.arange(C),
        np.clip(stochastic_round(pop.fan_in, rng0), 1, P - 1),
        rng0,
        fill=profile.fill_degrees,
    )
    log.info("graph: %d consumers, %d producers, %d edges", C, P, edges.size)
    vocab = Vocabulary.of(profile)
    if pop.flash.size:
        log.info("flash producers on day %d: %s", profile.flash_day, list(user_ids(pop.flash)))
    spec = Writing(storage, pop, fmt, gzip_text, seed, block, consumer_ids, producer_ids, vocab)
    stats = []
    for i in range(days):
        day = start + dt.timedelta(days=i)
        if i == 0:
            rows = _write_snapshot(spec, day, edges)
            if profile.topics:
                rows += _write_topics(spec, day)
        else:
            edges, rows = _write_changes(spec, day, i, edges)
        n_events = _write_events(spec, day, i)
        n_views = _write_views(spec, day, i)
        stats.append(DayStats(day, int(edges.size), rows, n_events, n_views))
        log.info(
            "%s: %d edges, %d follow rows, %d events, %d views",
            day,
            edges.size,
            rows,
            n_events,
            n_views,
        )
    return stats


def _edge_table(
    keys: np.ndarray, P: int, cids: pa.Array, pids: pa.Array
) -> tuple[pa.Array, pa.Array]:
    return _dict_ids(keys // P, cids), _dict_ids(keys % P, pids)


@dataclass(frozen=True)
class Writing:
    """What every day's writer shares: where, in which format per table, the population with
    its ids and topic vocabulary, the seed and the block of ids drawn at a time."""

    storage: Storage
    pop: Population
    formats: dict[str, str]
    gzip_text: bool
    seed: int
    block: int
    consumer_ids: pa.Array
    producer_ids: pa.Array
    vocab: Vocabulary | None

    def writer(self, table: str, day: dt.date) -> LandingWriter:
        return LandingWriter(self.storage, table, day, self.formats[table], self.gzip_text)


def _write_snapshot(spec: Writing, day: dt.date, edges: np.ndarray) -> int:
    rng = day_rng(spec.seed, 0, 0)
    with spec.writer("follows", day) as w:
        P = spec.pop.profile.producers
        c, p = _edge_table(edges, P, spec.consumer_ids, spec.producer_ids)
        start = (
            int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()) * 1_000_000
        )
        ts = start - rng.integers(1, 365 * 86_400 * 1_000_000, size=edges.size, dtype=np.int64)
        w.write(pa.table({"consumer_id": c, "producer_id": p, "ts": _ts_array(ts)}))
    return w.rows


def _write_changes(
    spec: Writing, day: dt.date, i: int, edges: np.ndarray
) -> tuple[np.ndarray, int]:
    rng = day_rng(spec.seed, i, 0)
    pop = spec.pop
    P = pop.profile.producers
    n = max(1, round(edges.size * pop.profile.unfollow_share))
    gone = rng.choice(edges, size=min(n, edges.size), replace=False)
    who = rng.choice(pop.profile.consumers, size=n, p=pop.fan_in / pop.fan_in.sum())
    new = pop.draw_edges(np.sort(who), np.ones(n, dtype=np.int64), rng)
    new = np.setdiff1d(new, edges)
    # a few follows repeated within the day: the change log must treat them as idempotent
    again = rng.choice(new, size=min(new.size, max(1, n // 50)), replace=False) if new.size else new
    keys = np.concatenate([gone, new, again])
    ops = np.array(["unfollow"] * gone.size + ["follow"] * (new.size + again.size))
    ts = uniform_times(day, keys.size, rng)
    order = np.argsort(ts, kind="stable")
    c, p = _edge_table(keys[order], P, spec.consumer_ids, spec.producer_ids)
    with spec.writer("follows", day) as w:
        w.write(
            pa.table(
                {
                    "consumer_id": c,
                    "producer_id": p,
                    "ts": _ts_array(ts[order]),
                    "op": pa.array(ops[order]),
                }
            )
        )
    edges = np.union1d(np.setdiff1d(edges, gone), new)
    return edges, w.rows


def _blocks(n: int, block: int) -> Iterator[np.ndarray]:
    for lo in range(0, n, block):
        yield np.arange(lo, min(n, lo + block))


def _write_events(spec: Writing, day: dt.date, i: int) -> int:
    rng = day_rng(spec.seed, i, 1)
    attr_rng = day_rng(spec.seed, i, 3)  # its own stream: the other columns do not change
    pop, vocab, fmt = spec.pop, spec.vocab, spec.formats["events"]
    with spec.writer("events", day) as w:
        seq = 0
        tag = day.strftime("%Y%m%d")
        rates = pop.event_rates(i)
        for ids in _blocks(pop.profile.producers, spec.block):
            counts = rng.poisson(rates[ids] * 24.0)
            prod = np.repeat(ids, counts)
            n = prod.size
            if n == 0:
                continue
            ts = uniform_times(day, n, rng)
            nums = np.arange(seq, seq + n)
            seq += n
            event_ids = np.char.add(f"ev-{tag}-", nums.astype(str))
            payload = np.char.add("post ", nums.astype(str))
            columns = {
                "event_id": pa.array(event_ids),
                "producer_id": _dict_ids(prod, spec.producer_ids),
                "created_at": _ts_array(ts),
                "payload": pa.array(payload),
            }
            if vocab is not None:
                columns["attributes"] = vocab.attributes(n, attr_rng, as_map=fmt == "parquet")
            w.write(pa.table(columns))
        if w.rows == 0:
            w.write(_empty_events())
    return w.rows


def _empty_events() -> pa.Table:
    return pa.table(
        {
            "event_id": pa.array([], pa.string()),
            "producer_id": pa.array([], pa.string()),
            "created_at": pa.array([], pa.timestamp("us", tz="UTC")),
            "payload": pa.array([], pa.string()),
        }
    )


def _write_views(spec: Writing, day: dt.date, i: int) -> int:
    rng = day_rng(spec.seed, i, 2)
    with spec.writer("views", day) as w:
        rates = spec.pop.view_rates(i)
        for ids in _blocks(spec.pop.profile.consumers, spec.block):
            counts = rng.poisson(rates[ids] * 24.0)
            cons = np.repeat(ids, counts)
            if cons.size == 0:
                continue
            w.write(
                pa.table(
                    {
                        "consumer_id": _dict_ids(cons, spec.consumer_ids),
                        "viewed_at": _ts_array(uniform_times(day, cons.size, rng)),
                    }
                )
            )
        if w.rows == 0:
            w.write(
                pa.table(
                    {
                        "consumer_id": pa.array([], pa.string()),
                        "viewed_at": pa.array([], pa.timestamp("us", tz="UTC")),
                    }
                )
            )
    return w.rows


# -- topic producers ---------------------------------------------------------------------------

CATEGORIES = tuple(f"c{i:02d}" for i in range(24))
REGIONS = ("eu", "na", "as", "sa", "af", "oc")
LANGUAGES = ("en", "es", "de", "fr", "pt", "ja", "ko", "it", "nl", "pl")


def _zipf_p(n: int, s: float) -> np.ndarray:
    w = np.arange(1, n + 1, dtype=np.float64) ** -s
    return w / w.sum()


@dataclass(frozen=True)
class Vocabulary:
    """The events' attributes when a profile has topics: ``category`` (24 values, Zipf 1.0),
    ``region`` (6, Zipf 0.8), ``language`` (10, Zipf 1.1; missing on 10% of events),
    ``score`` (a number 0-99 with one decimal; ``n/a`` on 1%: a numeric term fails on it) and
    ``tag`` (``tags`` values, Zipf 0.6): the topics' access attribute. The number of tags grows
    with the number of topics (``topics / 25``, at least 50) and topics pick their tags
    uniformly, so that an event meets about 25 topics whatever their number."""

    tags: int

    @classmethod
    def of(cls, profile: Profile) -> Vocabulary | None:
        return cls(max(50, profile.topics // 25)) if profile.topics else None

    def tag_names(self, idx: np.ndarray) -> np.ndarray:
        return np.char.add("t", np.char.zfill(idx.astype(str), 6))

    def attributes(self, n: int, rng: np.random.Generator, as_map: bool) -> pa.Array:
        cat = rng.choice(len(CATEGORIES), size=n, p=_zipf_p(len(CATEGORIES), 1.0))
        reg = rng.choice(len(REGIONS), size=n, p=_zipf_p(len(REGIONS), 0.8))
        lang = rng.choice(len(LANGUAGES), size=n, p=_zipf_p(len(LANGUAGES), 1.1))
        tag = rng.choice(self.tags, size=n, p=_zipf_p(self.tags, 0.6))
        score = np.round(rng.random(n) * 100, 1).clip(0, 99.9)
        no_lang = rng.random(n) < 0.10
        bad_score = rng.random(n) < 0.01
        tags = self.tag_names(tag)
        rows = []
        for j in range(n):
            a = {
                "category": CATEGORIES[cat[j]],
                "region": REGIONS[reg[j]],
                "tag": str(tags[j]),
                "score": "n/a" if bad_score[j] else f"{score[j]:.1f}",
            }
            if not no_lang[j]:
                a["language"] = LANGUAGES[lang[j]]
            rows.append(a)
        if as_map:
            return pa.array([list(r.items()) for r in rows], pa.map_(pa.string(), pa.string()))
        import json

        return pa.array([json.dumps(r, separators=(",", ":")) for r in rows])


def topic_ids(idx: np.ndarray) -> np.ndarray:
    """Topic ids (``topic000042``), apart from the user ids."""
    return np.char.add("topic", np.char.zfill(idx.astype(str), 6))


def topic_table(profile: Profile, vocab: Vocabulary, seed: int) -> pa.Table:
    """``topic_id, predicate`` of the profile's topics, of five kinds: one tag (40%), a tag and
    a region (20%), a list of three tags (15%), a tag and a score range (15%), a tag and a
    language other than one (10%); and one topic per category (``category = c03``), the
    sections of a news site, when there are at least 24 topics."""
    rng = np.random.default_rng([seed, 0, 4])
    n = profile.topics
    kind = rng.choice(5, size=n, p=[0.40, 0.20, 0.15, 0.15, 0.10])
    # tags uniform over the vocabulary: an event meets about 25 tag topics whatever N (with
    # Zipf-drawn topic tags the popular tags' topics would grow as N**0.2)
    tags = vocab.tag_names(rng.integers(0, vocab.tags, size=(n, 3)))
    region = rng.choice(len(REGIONS), size=n)
    language = rng.choice(len(LANGUAGES), size=n)
    low = rng.integers(0, 90, size=n)
    preds = []
    for j in range(n):
        t = tags[j]
        if j < len(CATEGORIES) and n >= len(CATEGORIES):
            preds.append(f"category = {CATEGORIES[j]}")
        elif kind[j] == 0:
            preds.append(f"tag = {t[0]}")
        elif kind[j] == 1:
            preds.append(f"tag = '{t[0]}' AND region = {REGIONS[region[j]]}")
        elif kind[j] == 2:
            preds.append(f"tag IN ({t[0]}, {t[1]}, {t[2]})")
        elif kind[j] == 3:
            preds.append(f"tag = {t[0]} and score >= {low[j]} AND score < {low[j] + 10}.5")
        else:
            preds.append(f"tag = {t[0]} AND language != {LANGUAGES[language[j]]}")
    return pa.table({"topic_id": pa.array(topic_ids(np.arange(n))), "predicate": pa.array(preds)})


def _write_topics(spec: Writing, day: dt.date) -> int:
    """Day 1's topic definitions, and their followers added to the follows snapshot (as a
    second file of it): ``topic_follows`` per consumer on average, by Zipf(0.8) popularity."""
    profile, vocab, seed = spec.pop.profile, spec.vocab, spec.seed
    assert vocab is not None  # a profile with topics has their vocabulary
    with LandingWriter(spec.storage, "topics", day, "csv", False) as w:
        w.write(topic_table(profile, vocab, seed))
    rng = np.random.default_rng([seed, 0, 5])
    C, T = profile.consumers, profile.topics
    n = round(C * profile.topic_follows)
    keys = np.unique(
        rng.integers(0, C, size=n).astype(np.int64) * T + rng.choice(T, size=n, p=_zipf_p(T, 0.8))
    )
    fmt = spec.formats["follows"]
    with LandingWriter(spec.storage, "follows", day, fmt, False, part=1) as follows:
        ts = uniform_times(day - dt.timedelta(days=1), keys.size, rng)
        follows.write(
            pa.table(
                {
                    "consumer_id": _dict_ids(keys // T, spec.consumer_ids),
                    "producer_id": pa.array(topic_ids(keys % T)),
                    "ts": _ts_array(ts),
                }
            )
        )
    return follows.rows
