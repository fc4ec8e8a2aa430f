"""A reader that polls a day's feeds while the day is killed and rebuilt (tests/e2e).

What a test asserts is what was read, never how many reads the machine's speed allowed:
:meth:`Poller.sync` waits for one read that started after the call (so a test can place a
read before, between and after the moments it cares about), and :func:`phases` collapses
the reads into the versions they returned, in order (``["old", "new"]``: some reads returned
exactly the old feeds, then every later one exactly the new ones).
"""

from __future__ import annotations

import datetime as dt
import itertools
import threading
import time
from collections.abc import Hashable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Read:
    """One read of the day: the name of the expected answer its feeds equal ("mixed" when
    none, ``error: ...`` when it failed) and the run folders of the version the reader
    resolved (``layer/table`` -> ``run=...``, empty when it failed)."""

    answer: str
    folders: tuple[tuple[str, str], ...]
    started: float


class Poller(threading.Thread):
    """Reads ``consumers``' feeds of day ``ds`` over and over, each through the published
    version as ``feedpipe feed`` does; each read is named after the expected answer it
    equals."""

    def __init__(
        self,
        warehouse: str,
        ds: dt.date,
        expected: dict[str, dict[str, list[str]]],
        k: int,
        interval: float = 1.0,
    ):
        super().__init__(daemon=True)
        self.warehouse, self.ds, self.expected, self.k = warehouse, ds, expected, k
        self.interval = interval  # seconds between reads: the reads share the test's cores
        self.consumers = sorted(next(iter(expected.values())))
        self.reads: list[Read] = []
        self.stop = threading.Event()
        self.done = threading.Condition()

    def read_once(self) -> tuple[dict[str, list[str]], tuple[tuple[str, str], ...]]:
        """One read: the feeds' event ids, and the version they came from (the published
        version's run folders, after any resolving again mid-read)."""
        from jobs.serving.reader import FeedReader

        reader = FeedReader(self.warehouse, self.ds)
        got = reader.feeds(self.consumers, self.k)
        ids = {c: [i.event_id for i in f] for c, f in got.items()}
        return ids, tuple(sorted(reader.version.folders.items()))

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                ids, version = self.read_once()
                name = next((n for n, e in self.expected.items() if e == ids), "mixed")
                read = Read(name, version, started)
            except Exception as exc:
                read = Read(f"error: {exc}", (), started)
            with self.done:
                self.reads.append(read)
                self.done.notify_all()
            time.sleep(self.interval)

    @property
    def seen(self) -> list[str]:
        return [r.answer for r in self.reads]

    def sync(self, timeout: float = 120) -> Read:
        """The first read that started after this call, once it has finished."""
        since = time.monotonic()
        deadline = since + timeout
        with self.done:
            while True:
                later = [r for r in self.reads if r.started >= since]
                if later:
                    return later[0]
                assert self.is_alive(), "the poller stopped"
                left = deadline - time.monotonic()
                assert left > 0, f"no read of {self.ds} finished within {timeout} s"
                self.done.wait(left)

    def finish(self) -> list[Read]:
        self.stop.set()
        self.join(30)
        return self.reads


def phases(values: Iterable[Hashable]) -> list[Hashable]:
    """``values`` with each run of equal neighbours collapsed into one: the versions the
    reads returned, in the order they returned them."""
    return [v for v, _ in itertools.groupby(values)]


class StorePoller(Poller):
    """Reads ``consumers``' feeds from the feed store at ``url`` over and over, through one
    reader kept open as a service keeps it; a read's version is the generation it read."""

    def __init__(self, url: str, expected: dict[str, dict[str, list[str]]], k: int, **kw):
        super().__init__("", dt.date.min, expected, k, **kw)
        self.url = url
        self.reader: object | None = None

    def read_once(self) -> tuple[dict[str, list[str]], tuple[tuple[str, str], ...]]:
        from jobs.serving.store_reader import StoreReader

        if self.reader is None:
            self.reader = StoreReader(self.url)
        assert isinstance(self.reader, StoreReader)
        answer = self.reader.answer(self.consumers, self.k)
        ids = {c: [i.event_id for i in f] for c, f in answer.feeds.items()}
        return ids, (("generation", self.reader.day.generation),)
