"""Whether a day's landing has arrived (``../shared/DESIGN.md``, "Runs, idempotency, backfills").

A day needs its ``events/ds=D`` and ``views/ds=D`` folders; ``follows/ds=D`` only when the
warehouse holds no graph of the day before (a change log applies to the previous graph, so a
day without follow changes may have no folder, as the Higgs and SNAP importers write them).
Under ``landing_ready = "marker"`` each required folder must also hold ``landing_marker``,
which the upstream export writes last. Tables in ``allow_empty`` are not required: a known
outage, run on purpose.

``ingest`` refuses a day that is not ready before it touches anything (the runner checks
first, so the day's records and publication stay as they were); the ``feeds_daily`` DAG waits
for readiness in its ``wait_for_landing`` sensor. Only listings are made here, no Spark.
"""

from __future__ import annotations

import datetime as dt

from jobs.common.config import Settings
from jobs.common.errors import FeedpipeError
from jobs.common.pipeline import LANDING_TABLES, REQUIRED_LANDING
from jobs.common.storage import Storage, ds_dir


class LandingNotReady(FeedpipeError, RuntimeError):
    """A required landing folder (or its marker) of the day is missing."""


def has_previous_graph(wh: Storage, ds: dt.date) -> bool:
    """The warehouse holds the follow graph of the day before ``ds``."""
    return wh.is_dir("clean", "follows", ds_dir(ds - dt.timedelta(days=1)))


def required(wh: Storage, ds: dt.date, allow_empty: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The landing tables day ``ds`` cannot run without."""
    need = set(REQUIRED_LANDING)
    if not has_previous_graph(wh, ds):
        need.add("follows")
    return tuple(t for t in LANDING_TABLES if t in need and t not in allow_empty)


def missing(
    settings: Settings, ds: dt.date, wh: Storage, landing: Storage | None = None
) -> dict[str, str]:
    """Per table, the location (its folder, or its marker) day ``ds`` still waits for; empty
    when the day is ready."""
    landing = landing or Storage.at(settings.landing)
    out = {}
    for table in required(wh, ds, settings.allow_empty):
        folder = (table, ds_dir(ds))
        if not landing.is_dir(*folder):
            out[table] = landing.uri(*folder)
        elif settings.landing_ready == "marker" and not landing.exists(
            *folder, settings.landing_marker
        ):
            out[table] = landing.uri(*folder, settings.landing_marker)
    return out


def check(settings: Settings, ds: dt.date, wh: Storage, landing: Storage | None = None) -> None:
    """Raise :class:`LandingNotReady`, in one line naming the day and the paths, unless day
    ``ds``'s landing is ready."""
    gone = missing(settings, ds, wh, landing)
    if gone:
        raise LandingNotReady(
            f"{ds}: landing not ready, missing {', '.join(gone.values())} (after a known "
            f"upstream outage, run the day with --allow-empty {','.join(gone)})"
        )
