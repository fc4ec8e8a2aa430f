"""Days and instants: ranges of logical dates, a day's bounds, the instant a day's feeds show."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator


def days(start: dt.date, end: dt.date) -> Iterator[dt.date]:
    """``start`` to ``end``, both included, in order."""
    if end < start:
        raise ValueError(f"end {end} is before start {start}")
    for i in range((end - start).days + 1):
        yield start + dt.timedelta(days=i)


def day_bounds(ds: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """The first instant of ``ds`` and of the day after (naive, UTC)."""
    start = dt.datetime(ds.year, ds.month, ds.day)
    return start, start + dt.timedelta(days=1)


def feed_time(ds: dt.date) -> dt.datetime:
    """The instant a day's feeds describe: the end of ds (UTC)."""
    return dt.datetime.combine(ds + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)


def recent_since(ds: dt.date, hours: float) -> dt.datetime:
    """Events at or after this instant count as recent for k,t-diversity (t = ``hours``;
    Feeding Frenzy 2.2.1, docs/feeds.md)."""
    return feed_time(ds) - dt.timedelta(hours=hours)
