"""kill -9 of a whole `feedpipe run` (the Python driver and its JVM, one process group) at
several moments, first of a new day, then of a published day being reprocessed with corrected
inputs, while readers poll: no read ever returns a wrong, missing or mixed feed, no killed
attempt's outputs are ever published, and the day ends equal to an uninterrupted run's."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from jobs.common import ledger, versions
from jobs.common.storage import Storage
from jobs.common.tables import PUBLISHED_TABLES
from jobs.serving.reader import FeedError, FeedReader
from jobs.stages import runner
from jobs.stages.publish import PublishRefused
from support import naive
from support.paths import version
from support.same_day import rows
from support.workloads import LAST, START, K

PREV = LAST - dt.timedelta(days=1)


def toml(settings) -> str:
    """The settings the shared build was made with, as a feedpipe.toml."""
    out = []
    for name in (
        "landing",
        "warehouse",
        "feed_k",
        "feed_k_per_producer",
        "diversity_hours",
        "strategy",
        "shuffle_partitions",
    ):
        value = getattr(settings, name)
        out.append(f"{name} = {value!r}" if not isinstance(value, str) else f'{name} = "{value}"')
    out.append("strategies = [" + ", ".join(f'"{x}"' for x in settings.strategies) + "]")
    return "\n".join(out) + "\n"


class Poller(threading.Thread):
    """Reads ``consumers``' feeds of day ``ds`` over and over; each read is named after the
    expected answer it equals ("mixed" when none, the error when the read failed)."""

    def __init__(self, warehouse: str, ds: dt.date, expected: dict[str, dict[str, list[str]]]):
        super().__init__(daemon=True)
        self.warehouse, self.ds, self.expected = warehouse, ds, expected
        self.consumers = sorted(next(iter(expected.values())))
        self.seen: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                got = FeedReader(self.warehouse, self.ds).feeds(self.consumers, K)
                ids = {c: [i.event_id for i in f] for c, f in got.items()}
                self.seen.append(next((n for n, e in self.expected.items() if e == ids), "mixed"))
            except Exception as exc:
                self.seen.append(f"error: {exc}")
            time.sleep(0.05)

    def finish(self) -> list[str]:
        self.stop.set()
        self.join(30)
        return self.seen


def newer(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except FileNotFoundError:
        return False


def moments(wh: Path, ds: dt.date) -> dict[str, Callable[[set[Path], float], bool]]:
    """When to kill, given the day's run folders and the time before the run started: ingest
    writing its clean tables, plan running (rates has recorded), materialize writing the
    feeds, validate running (materialize has recorded), publish starting (the validation
    results are written)."""
    day = wh / "manifests" / f"ds={ds}"

    def writing(layer: str) -> Callable[[set[Path], float], bool]:
        return lambda before, _: bool(set(wh.glob(f"{layer}/*/ds={ds}/run=*")) - before)

    def recorded(path: Path) -> Callable[[set[Path], float], bool]:
        return lambda _, since: newer(path, since)

    return {
        "ingest writing": writing("clean"),
        "plan running": recorded(day / "stages" / "rates.json"),
        "materialize writing": writing("feeds"),
        "validate running": recorded(day / "stages" / "materialize.json"),
        "publish starting": recorded(wh / "quality" / f"ds={ds}" / "results.json"),
    }


def run_day(config: Path, ds: dt.date, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "jobs", "run", "--ds", str(ds), "--config", str(config), "-q"]
    return subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=log.open("a"), start_new_session=True
    )


def kill_at(config: Path, wh: Path, ds: dt.date, moment: str, log: Path) -> float:
    """Start the day's run and kill its process group once ``moment`` is reached; returns
    the seconds it ran."""
    before = set(wh.glob(f"*/*/ds={ds}/run=*"))
    reached = moments(wh, ds)[moment]
    since = time.time() - 0.01
    started = time.monotonic()
    proc = run_day(config, ds, log)
    while not reached(before, since):
        if proc.poll() is not None:
            pytest.fail(f"the run of {ds} ended ({proc.returncode}) before '{moment}': {log}")
        assert time.monotonic() - started < 600, f"'{moment}' not reached in 600 s"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    return time.monotonic() - started


def complete(config: Path, ds: dt.date, log: Path) -> None:
    proc = run_day(config, ds, log)
    assert proc.wait(900) == 0, log.read_text()[-3000:]


def correct(landing: Path, ds: dt.date) -> None:
    """Upstream re-delivers day ``ds`` with 400 more events (late in the day, so they reach
    the feeds) and 100 more follows of existing producers."""
    events = naive.events(landing, ds, START)
    producers = sorted(events.producer_id.unique())[:100]
    consumers = sorted({c for c, _ in naive.graph(landing, ds, START)})
    at = pd.Timestamp(ds, tz="UTC") + pd.Timedelta(hours=23)
    pd.DataFrame(
        {
            "event_id": [f"late-{i:03d}" for i in range(400)],
            "producer_id": [producers[i % len(producers)] for i in range(400)],
            "created_at": [(at + pd.Timedelta(seconds=i)).isoformat() for i in range(400)],
        }
    ).to_csv(landing / "events" / f"ds={ds}" / "late.csv", index=False)
    pd.DataFrame(
        {
            "consumer_id": consumers[:100],
            "producer_id": [producers[(i * 7) % len(producers)] for i in range(100)],
            "ts": [(at + pd.Timedelta(minutes=30)).isoformat()] * 100,
            "op": ["follow"] * 100,
        }
    ).to_csv(landing / "follows" / f"ds={ds}" / "late.csv", index=False)


def test_kill_9_of_a_new_day_and_of_a_reprocess_never_shows_a_partial_or_mixed_day(
    spark, built_copy, churn_landing, tmp_path
):
    landing = tmp_path / "landing"
    shutil.copytree(churn_landing, landing)
    s = dataclasses.replace(built_copy, landing=str(landing))
    wh, store = Path(s.warehouse), Storage.at(s.warehouse)
    config = tmp_path / "feedpipe.toml"
    config.write_text(toml(s))
    log = tmp_path / "runs.log"
    # the uninterrupted run of LAST: the shared build's, with the same settings
    reference = {
        f"{ly}/{t}": rows(s.warehouse, ly, t, LAST, published=False) for ly, t in PUBLISHED_TABLES
    }
    for stage in ("validate", "publish"):
        runner.run_stage(stage, s, PREV, spark)
    consumers = sorted(naive.feeds(landing, LAST, START, K))
    sample = consumers[::4]
    prev_feeds = naive.feeds(landing, PREV, START, K, set(sample))

    # 1. a new day, killed at every moment; the previous day is polled meanwhile
    poll_prev = Poller(s.warehouse, PREV, {"published": prev_feeds})
    poll_prev.start()
    took = {}
    # (killed in publish, a new day may be published: that moment is the reprocess's)
    for moment in ("ingest writing", "materialize writing", "validate running"):
        took[moment] = kill_at(config, wh, LAST, moment, log)
        with pytest.raises(FeedError, match="has not been published"):
            FeedReader(s.warehouse, LAST)
        with pytest.raises(PublishRefused):  # no attempt's outputs are ever published
            runner.run_stage("publish", s, LAST)
        assert ledger.latest(store) == PREV
    complete(config, LAST, log)
    seen = poll_prev.finish()
    assert set(seen) == {"published"} and len(seen) > 50, set(seen)
    got = {k: rows(s.warehouse, *k.split("/"), LAST) for k in reference}
    assert [k for k in reference if got[k] != reference[k]] == []
    old_feeds = naive.feeds(landing, LAST, START, K, set(sample))
    assert FeedReader(s.warehouse, LAST).feeds(sample, K) and ledger.latest(store) == LAST
    old_version = versions.published(store, LAST)

    # 2. upstream re-delivers LAST corrected; the published day is reprocessed, killed at
    # every moment, while both days are polled
    correct(landing, LAST)
    new_feeds = naive.feeds(landing, LAST, START, K, set(sample))
    differ = sum(new_feeds[c] != old_feeds[c] for c in sample)
    assert differ > len(sample) // 4, differ
    poll_prev = Poller(s.warehouse, PREV, {"published": prev_feeds})
    poll_last = Poller(s.warehouse, LAST, {"old": old_feeds, "new": new_feeds})
    poll_prev.start()
    poll_last.start()
    for moment in ("plan running", "materialize writing", "publish starting"):
        took[f"reprocess, {moment}"] = kill_at(config, wh, LAST, moment, log)
        published = versions.published(store, LAST)
        assert published is not None and published.folders.keys() == old_version.folders.keys()
        assert ledger.latest(store) == LAST
    complete(config, LAST, log)
    seen_last = poll_last.finish()
    assert set(poll_prev.finish()) == {"published"}
    assert set(seen_last) <= {"old", "new"}, sorted(set(seen_last))
    first_new = seen_last.index("new") if "new" in seen_last else len(seen_last)
    assert "old" not in seen_last[first_new:], "a read went back to the old version"
    assert len(seen_last) > 50
    got = FeedReader(s.warehouse, LAST).feeds(consumers, K)
    assert {c: [i.event_id for i in f] for c, f in got.items()} == naive.feeds(
        landing, LAST, START, K
    )
    # only the published version and the one it replaced are left of the day
    left = {
        (p.parent.parent.parent.name, p.parent.parent.name, p.name)
        for p in wh.glob(f"*/*/ds={LAST}/run=*")
    }
    assert len(left) <= 2 * len(versions.published(store, LAST).folders)
    # a past day published again leaves `latest` where it is
    runner.run_stage("publish", s, PREV)
    assert ledger.latest(store) == LAST
    print("kill moments, seconds run before the kill:", {k: round(v, 1) for k, v in took.items()})
    print(
        "reads of the reprocessed day:", dict(Counter(seen_last)), "of the day before:", len(seen)
    )
    assert version(s.warehouse, "feeds", "consumer_feed", LAST, published=True).exists()
