"""Real data sets into the landing layout (``feedpipe import NAME``).

* ``snap-edges``: any SNAP edge list (``#`` comment lines, tab- or space-separated, CRLF
  tolerated). Edge ``A B`` is read as consumer A follows producer B (``--reverse`` swaps);
  self-loops are dropped and counted, repeated edges are kept once. The graph lands as a
  follows snapshot on ``--ds``, or, with ``--growth-days N``, as a growing network: the edges
  in a seeded random order, split into N near-equal parts, the first landed as the snapshot of
  ``--ds`` and each next one as a change log of ``follow`` rows on the next day. Optionally
  (``--activity-profile``) events and views are generated for ``--days`` days with that
  profile's rate distributions, for graphs that have no activity of their own (e.g. wiki-Vote).
* ``higgs``: SNAP higgs-twitter (De Domenico et al., 2013). The retweet network
  (``userA userB weight``: A retweeted B) is the follow graph, as a snapshot on the first day
  of activity; every row of the activity log (``userA userB unix_ts type``) is an event posted
  by userA and a feed view by userA at ``unix_ts``; rows are split into days by timestamp.

Importers stream their input, so their memory does not grow with the file.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from jobs.common.errors import FeedpipeError
from jobs.common.storage import Storage
from jobs.workloads.generate import (
    PROFILES,
    Population,
    day_rng,
    scaled,
    uniform_times,
)
from jobs.workloads.landing import LandingWriter

log = logging.getLogger(__name__)
BATCH = 200_000


class SourceError(FeedpipeError, ValueError):
    """The source file is missing or not in the expected format."""


def _open_text(path: Path) -> io.TextIOBase:
    if not path.exists():
        raise SourceError(f"{path}: no such file")
    raw = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline=None)


@dataclass
class EdgeStats:
    lines: int = 0
    comments: int = 0
    blank: int = 0
    self_loops: int = 0
    malformed: int = 0
    edges: int = 0
    duplicates: int = 0
    examples: list[str] = field(default_factory=list)


def read_snap_edges(
    path: Path, stats: EdgeStats, reverse: bool = False
) -> Iterator[tuple[str, str]]:
    """(consumer, producer) pairs of a SNAP edge list, in file order, self-loops dropped."""
    with _open_text(path) as fh:
        for line in fh:
            stats.lines += 1
            text = line.strip()
            if not text:
                stats.blank += 1
                continue
            if text.startswith("#"):
                stats.comments += 1
                continue
            parts = text.split()
            if len(parts) < 2:
                stats.malformed += 1
                if len(stats.examples) < 5:
                    stats.examples.append(f"line {stats.lines}: {text[:80]}")
                continue
            a, b = parts[0], parts[1]
            if a == b:
                stats.self_loops += 1
                continue
            yield (b, a) if reverse else (a, b)


def _ts_start(day: dt.date) -> pa.Array:
    return pa.array(
        [dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")
    )


def import_edges(
    src: Path, out: Storage, ds: dt.date, reverse: bool = False
) -> tuple[EdgeStats, set[tuple[str, str]]]:
    """A SNAP edge list as day ``ds``'s follows snapshot (Parquet, written in batches), each
    edge once; returns the line accounting and the edges."""
    stats = EdgeStats()
    seen: set[tuple[str, str]] = set()
    with LandingWriter(out, "follows", ds, "parquet", False) as writer:
        consumers: list[str] = []
        producers: list[str] = []
        start = _ts_start(ds)[0].as_py()
        for c, p in read_snap_edges(src, stats, reverse):
            if (c, p) in seen:
                stats.duplicates += 1
                continue
            seen.add((c, p))
            consumers.append(c)
            producers.append(p)
            if len(consumers) >= BATCH:
                _write_edges(writer, consumers, producers, start)
                consumers, producers = [], []
        _write_edges(writer, consumers, producers, start)
    stats.edges = len(seen)
    return stats, seen


def import_snap_edges(
    src: Path,
    out: Storage,
    ds: dt.date,
    reverse: bool = False,
    activity_profile: str | None = None,
    days: int = 1,
    seed: int = 7,
    growth_days: int = 1,
) -> dict[str, object]:
    """A SNAP edge list as ``ds``'s snapshot (``growth_days`` 1), or landed over
    ``growth_days`` days as a growing network (:func:`land_growth`); ``activity_profile``
    also generates ``days`` days of events and views."""
    if growth_days < 1:
        raise SourceError(f"--growth-days must be at least 1, got {growth_days}")
    if growth_days > 1 and activity_profile and days < growth_days:
        raise SourceError(
            f"--days {days} is shorter than --growth-days {growth_days}: every day that lands"
            " follows needs its events and views"
        )
    stats, seen = import_edges(src, out, ds, reverse)
    if stats.edges == 0:
        raise SourceError(
            f"{src}: no edges found ({stats.lines} lines, {stats.malformed} malformed)"
        )
    result: dict[str, object] = {"follows": stats.__dict__}
    if growth_days > 1:
        result["growth"] = land_growth(out, seen, ds, growth_days, seed)
    if activity_profile:
        result["activity"] = _generate_activity(out, seen, ds, days, activity_profile, seed)
    log.info("imported %s: %s", src, result)
    return result


def land_growth(
    out: Storage, edges: set[tuple[str, str]], start: dt.date, days: int, seed: int
) -> dict[str, int]:
    """The graph as a network growing over ``days`` days: the edges in a seeded random order,
    split into ``days`` near-equal parts; the first replaces ``start``'s snapshot, each next
    part lands on the next day as ``op = follow`` rows (a change log). Returns the edges landed
    per day."""
    order = sorted(edges)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(order))
    parts = np.array_split(perm, days)
    landed: dict[str, int] = {}
    for i, part in enumerate(parts):
        day = start + dt.timedelta(days=i)
        consumers = [order[j][0] for j in part]
        producers = [order[j][1] for j in part]
        with LandingWriter(out, "follows", day, "parquet", False) as writer:
            at = _ts_start(day)[0].as_py()
            if i == 0:
                _write_edges(writer, consumers, producers, at)
            elif consumers:
                writer.write(
                    pa.table(
                        {
                            "consumer_id": pa.array(consumers, pa.string()),
                            "producer_id": pa.array(producers, pa.string()),
                            "ts": pa.array([at] * len(consumers), pa.timestamp("us", tz="UTC")),
                            "op": pa.array(["follow"] * len(consumers), pa.string()),
                        }
                    )
                )
        landed[day.isoformat()] = len(consumers)
    return landed


def _write_edges(
    writer: LandingWriter, consumers: list[str], producers: list[str], at: dt.datetime
) -> None:
    if not consumers:
        return
    writer.write(
        pa.table(
            {
                "consumer_id": pa.array(consumers, pa.string()),
                "producer_id": pa.array(producers, pa.string()),
                "ts": pa.array([at] * len(consumers), pa.timestamp("us", tz="UTC")),
            }
        )
    )


def _generate_activity(
    out: Storage,
    edges: set[tuple[str, str]],
    start: dt.date,
    days: int,
    profile_name: str,
    seed: int,
) -> dict[str, int]:
    """Events and views for a real graph: rates drawn from the profile's distributions."""
    cons = np.array(sorted({c for c, _ in edges}))
    prods = np.array(sorted({p for _, p in edges}))
    base = PROFILES[profile_name]
    profile = scaled(base, 1.0)
    profile = type(profile)(**{**profile.__dict__, "consumers": len(cons), "producers": len(prods)})
    pop = Population.draw(profile, seed)
    totals = {"events": 0, "views": 0}
    for i in range(days):
        day = start + dt.timedelta(days=i)
        rng = day_rng(seed, i, 1)
        counts = rng.poisson(pop.event_rate * 24.0)
        who = np.repeat(np.arange(len(prods)), counts)
        with LandingWriter(out, "events", day, "parquet", False) as ev:
            ids = np.char.add(f"ev-{day:%Y%m%d}-", np.arange(who.size).astype(str))
            ev.write(
                pa.table(
                    {
                        "event_id": pa.array(ids),
                        "producer_id": pa.array(prods[who]),
                        "created_at": pa.array(
                            uniform_times(day, who.size, rng), pa.timestamp("us", tz="UTC")
                        ),
                    }
                )
            )
        rng = day_rng(seed, i, 2)
        counts = rng.poisson(pop.view_rate * 24.0)
        who = np.repeat(np.arange(len(cons)), counts)
        with LandingWriter(out, "views", day, "parquet", False) as vw:
            vw.write(
                pa.table(
                    {
                        "consumer_id": pa.array(cons[who]),
                        "viewed_at": pa.array(
                            uniform_times(day, who.size, rng), pa.timestamp("us", tz="UTC")
                        ),
                    }
                )
            )
        totals["events"] += ev.rows
        totals["views"] += vw.rows
    return totals


def import_higgs(src: Path, out: Storage) -> dict[str, object]:
    """Higgs-twitter: retweet network as the graph, activity as events and views per day."""
    activity = src / "higgs-activity_time.txt.gz"
    network = src / "higgs-retweet_network.edgelist.gz"
    for f in (activity, network):
        if not f.exists():
            raise SourceError(f"{f}: missing (expected the SNAP higgs-twitter files in {src})")
    per_day: dict[dt.date, dict[str, list]] = {}
    rows = bad = 0
    with _open_text(activity) as fh:
        for n, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) < 4 or not parts[2].isdigit():
                bad += 1
                continue
            user, ts = parts[0], int(parts[2])
            when = dt.datetime.fromtimestamp(ts, dt.UTC)
            bucket = per_day.setdefault(when.date(), {"user": [], "ts": [], "row": []})
            bucket["user"].append(user)
            bucket["ts"].append(when)
            bucket["row"].append(n)
            rows += 1
    if not per_day:
        raise SourceError(f"{activity}: no activity rows")
    first = min(per_day)
    stats, _ = import_edges(network, out, first)
    days = {}
    for day, b in sorted(per_day.items()):
        ts = pa.array(b["ts"], pa.timestamp("us", tz="UTC"))
        with LandingWriter(out, "events", day, "parquet", False) as ev:
            ev.write(
                pa.table(
                    {
                        "event_id": pa.array([f"higgs-{r}" for r in b["row"]]),
                        "producer_id": pa.array(b["user"]),
                        "created_at": ts,
                    }
                )
            )
        with LandingWriter(out, "views", day, "parquet", False) as vw:
            vw.write(pa.table({"consumer_id": pa.array(b["user"]), "viewed_at": ts}))
        days[day.isoformat()] = len(b["user"])
    result = {
        "follows": stats.__dict__,
        "activity_rows": rows,
        "malformed_activity_rows": bad,
        "days": days,
    }
    log.info("imported higgs: %s", result)
    return result
