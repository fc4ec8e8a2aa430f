"""Corrected inputs for a day that is published already: upstream re-delivers its landing."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd

from support import naive


def redeliver(
    landing: Path, ds: dt.date, start: dt.date, events: int = 400, follows: int = 100
) -> list[Path]:
    """Upstream re-delivers day ``ds`` with ``events`` more events (in its last hour, so they
    reach the feeds) of the day's first 100 producers, and ``follows`` more follows (a change
    log) of the day's consumers; returns the files written (``late.csv`` beside the day's
    own), for a test to copy them elsewhere (an S3 landing)."""
    producers = sorted(naive.events(landing, ds, start).producer_id.unique())[:100]
    consumers = sorted({c for c, _ in naive.graph(landing, ds, start)})
    at = pd.Timestamp(ds, tz="UTC") + pd.Timedelta(hours=23)
    written = [landing / "events" / f"ds={ds}" / "late.csv"]
    pd.DataFrame(
        {
            "event_id": [f"late-{i:03d}" for i in range(events)],
            "producer_id": [producers[i % len(producers)] for i in range(events)],
            "created_at": [(at + pd.Timedelta(seconds=i)).isoformat() for i in range(events)],
        }
    ).to_csv(written[0], index=False)
    if follows:
        written.append(landing / "follows" / f"ds={ds}" / "late.csv")
        pd.DataFrame(
            {
                "consumer_id": consumers[:follows],
                "producer_id": [producers[(i * 7) % len(producers)] for i in range(follows)],
                "ts": [(at + pd.Timedelta(minutes=30)).isoformat()] * follows,
                "op": ["follow"] * follows,
            }
        ).to_csv(written[1], index=False)
    return written
