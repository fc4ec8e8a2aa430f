"""A reader that polls a day's feeds while the day is killed and rebuilt (tests/e2e)."""

from __future__ import annotations

import datetime as dt
import threading
import time


class Poller(threading.Thread):
    """Reads ``consumers``' feeds of day ``ds`` over and over, each through the published
    version as ``feedpipe feed`` does; each read is named after the expected answer it equals
    ("mixed" when none, the error when the read failed)."""

    def __init__(
        self, warehouse: str, ds: dt.date, expected: dict[str, dict[str, list[str]]], k: int
    ):
        super().__init__(daemon=True)
        self.warehouse, self.ds, self.expected, self.k = warehouse, ds, expected, k
        self.consumers = sorted(next(iter(expected.values())))
        self.seen: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        from jobs.serving.reader import FeedReader

        while not self.stop.is_set():
            try:
                got = FeedReader(self.warehouse, self.ds).feeds(self.consumers, self.k)
                ids = {c: [i.event_id for i in f] for c, f in got.items()}
                self.seen.append(next((n for n, e in self.expected.items() if e == ids), "mixed"))
            except Exception as exc:
                self.seen.append(f"error: {exc}")
            time.sleep(0.25)

    def finish(self) -> list[str]:
        self.stop.set()
        self.join(30)
        return self.seen
