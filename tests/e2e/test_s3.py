"""S3: a real S3-compatible server (moto in server mode) on 127.0.0.1.

* Landing and warehouse on S3: Spark reading and writing through S3A, the reader and publish
  through pyarrow's S3 client; ``publish_to`` marks the warehouse on S3; a reprocess of
  corrected inputs killed with kill -9 while plan runs and while materialize writes never
  disturbs a reader of the published day, and a new day killed stays invisible.
* ``publish_to`` from a local warehouse: whole days copied with boto3, the pointers moved
  after the data; a publish failing half-way moves no pointer."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import boto3
import pytest

from jobs.common.config import Settings
from jobs.common.s3a import jar_paths
from jobs.common.storage import Storage
from jobs.serving import published
from jobs.serving.published import NotPublished
from jobs.serving.reader import FeedError, FeedReader
from jobs.stages import runner
from jobs.stages.publish import PublishRefused
from jobs.workloads.generate import PROFILES, generate, scaled
from support import naive
from support.polling import Poller, phases
from support.redelivery import redeliver
from support.requires import missing
from support.workloads import START as CHURN_START
from support.workloads import K as CHURN_K
from support.workloads import assembled

START = dt.date(2026, 1, 1)
DAYS = 3
"""Two backfilled, and a new day killed before it is published."""
K = 5


@pytest.fixture(scope="module")
def s3_env(s3_server):
    """The S3 server with a ``feedpipe`` bucket, its settings in this process's environment
    (Spark's S3A reads them when a session is built; the S3A jars must be installed)."""
    if len(jar_paths()) < 2:
        missing("the S3A jars", "make install fetches them: python -m jobs.common.s3a")
    saved = {k: os.environ.get(k) for k in s3_server}
    os.environ.update(s3_server)
    boto3.client("s3", endpoint_url=s3_server["FEEDPIPE_S3_ENDPOINT"]).create_bucket(
        Bucket="feedpipe"
    )
    yield s3_server
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


WH = "s3://feedpipe/warehouse"


def bucket_keys(s3, prefix: str) -> list[str]:
    return [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket="feedpipe", Prefix=prefix)
        for o in page.get("Contents", [])
    ]


def body(s3, key: str) -> bytes | None:
    try:
        return bytes(s3.get_object(Bucket="feedpipe", Key=key)["Body"].read())
    except s3.exceptions.NoSuchKey:
        return None


def day_runs(s3, ds: dt.date, layer: str = "") -> set[tuple[str, str]]:
    """(``layer/table``, ``run=...``) of every run folder of day ``ds`` in the warehouse."""
    return {
        (f"{parts[1]}/{parts[2]}", parts[4])
        for parts in (k.split("/") for k in bucket_keys(s3, f"warehouse/{layer}"))
        if len(parts) > 5 and parts[3] == f"ds={ds}" and parts[4].startswith("run=")
    }


def manifest_versions(s3, ds: dt.date) -> dict[str, str]:
    """The run folder of each table the day's published manifest names (``versions``)."""
    manifest = body(s3, f"warehouse/manifests/ds={ds}/manifest.json")
    assert manifest is not None, f"{ds} has no manifest"
    return dict(json.loads(manifest)["versions"])


def kill_when(cmd: list[str], env: dict[str, str], reached, log) -> float:
    """Run ``cmd`` in a process group of its own and kill the group (kill -9, the JVM
    included) once ``reached()``; returns the seconds it ran."""
    started = time.monotonic()
    with log.open("w") as err:
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
        while not reached():
            ended = proc.poll()
            assert ended is None, f"the run ended ({ended}): {log.read_text()[-3000:]}"
            assert time.monotonic() - started < 600, f"not reached in 600 s: {cmd}"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    return time.monotonic() - started


def test_a_backfill_on_s3_serves_the_naive_feeds_and_survives_killed_runs(s3_env, tmp_path):
    """Two days backfilled on S3 serve the naive feeds; the last is re-delivered corrected and
    reprocessed, killed (kill -9, the JVM included) while plan runs and while materialize
    writes: each time its manifest names the old run folders and readers get the old feeds,
    then the finished reprocess serves the corrected landing's naive feeds; a poller's reads
    return the old version, then the new one, each whole. A new day killed while plan runs is
    invisible to readers and leaves ``manifests/latest`` where it was."""
    profile = scaled(PROFILES["ff2010"], 0.002)
    local = tmp_path / "local"
    generate(Storage.at("s3://feedpipe/landing"), START, DAYS, profile, seed=21)
    generate(Storage.at(str(local)), START, DAYS, profile, seed=21)  # same seed: same files
    end = START + dt.timedelta(days=DAYS - 2)  # the last backfilled day
    new_day = end + dt.timedelta(days=1)
    env = {**os.environ, **s3_env, "FEEDPIPE_FEED_K": str(K), "FEEDPIPE_STRATEGY": "ff-per-pair"}
    env["FEEDPIPE_STRATEGIES"] = "ff-per-pair"  # S3 is under test here, not the strategies
    env["FEEDPIPE_SHUFFLE_PARTITIONS"] = "4"  # a small day: fewer, larger objects to commit
    env["FEEDPIPE_PUBLISH_TO"] = "s3://feedpipe/published"  # the warehouse is on S3: marked
    roots = ["--landing", "s3://feedpipe/landing", "--warehouse", WH]
    cmd = [sys.executable, "-m", "jobs", "backfill", "--start", str(START), "--end", str(end), "-q"]
    result = subprocess.run([*cmd, *roots], env=env, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stderr[-4000:]

    s3 = boto3.client("s3", endpoint_url=s3_env["FEEDPIPE_S3_ENDPOINT"])
    keys = bucket_keys(s3, "")
    assert f"warehouse/manifests/ds={end}/_SUCCESS" in keys
    assert any(
        k.startswith(f"warehouse/feeds/consumer_feed/ds={end}/") and k.endswith(".parquet")
        for k in keys
    )
    # each table of the day has exactly the version its manifest names (a backfill writes
    # each day once; nothing was staged or copied inside the bucket)
    old_version = manifest_versions(s3, end)
    assert day_runs(s3, end) == set(old_version.items())

    expected = naive.feeds(local, end, START, K)
    consumers = sorted(expected)
    before = assembled(WH, end, consumers, K, published=True)
    mismatched = [c for c in expected if before[c] != expected[c]]
    assert not mismatched, f"{len(mismatched)} of {len(expected)} feeds differ"

    # publish_to with the warehouse on S3: nothing copied, the pointers name the warehouse
    assert not [k for k in keys if k.startswith("published/snapshots/")]

    def pointers() -> None:
        for ds in (START, end):
            day = json.loads(body(s3, f"published/days/ds={ds}.json") or b"{}")
            assert (day["ds"], day["root"]) == (str(ds), WH)
        latest = json.loads(body(s3, "published/latest") or b"{}")
        assert latest["ds"] == str(end)
        assert FeedReader.published_copy("s3://feedpipe/published", None, s3=s3).ds == end
        assert body(s3, "warehouse/manifests/latest") == str(end).encode()

    pointers()

    # upstream re-delivers the last day corrected (more events late in the day, more
    # follows); the day is reprocessed, killed while plan runs (rates has recorded the
    # corrected day) and while materialize writes the feeds, while a reader polls it
    for path in redeliver(local, end, START, events=300, follows=60):
        s3.upload_file(str(path), "feedpipe", f"landing/{path.relative_to(local).as_posix()}")
    corrected = naive.feeds(local, end, START, K)
    assert corrected.keys() == expected.keys()
    differ = sum(corrected[c] != expected[c] for c in consumers)
    assert differ > len(consumers) // 4, differ
    sample = consumers[::3]
    poll = Poller(
        WH,
        end,
        {n: {c: f[c] for c in sample} for n, f in (("old", expected), ("new", corrected))},
        K,
    )
    poll.start()
    assert poll.sync().answer == "old"
    on_s3 = Settings(
        landing="s3://feedpipe/landing",
        warehouse=WH,
        feed_k=K,
        strategy="ff-per-pair",
        strategies=("ff-per-pair",),
        publish_to="s3://feedpipe/published",
    )

    def rates_recorded(ds: dt.date):
        key = f"warehouse/manifests/ds={ds}/stages/rates.json"
        old = body(s3, key)
        return lambda: body(s3, key) not in (None, old)

    def feeds_writing(ds: dt.date):
        old = day_runs(s3, ds, "feeds")
        return lambda: bool(day_runs(s3, ds, "feeds") - old)

    run_day = [sys.executable, "-m", "jobs", "run", "--ds", str(end), *roots, "-q", "--stages"]
    took = {}
    for moment, stages, when in (
        ("plan running", "ingest,rates,plan,materialize,validate,publish", rates_recorded),
        ("materialize writing", "plan,materialize,validate,publish", feeds_writing),
    ):
        log = tmp_path / f"{moment.replace(' ', '-')}.log"
        took[moment] = kill_when([*run_day, stages], env, when(end), log)
        assert manifest_versions(s3, end) == old_version, moment
        assert day_runs(s3, end) - set(old_version.items()), moment  # the rebuild's output
        assert FeedReader(WH, end).version.folders == old_version, moment
        assert assembled(WH, end, consumers, K, published=True) == before, moment
        with pytest.raises(PublishRefused):  # the killed attempt is never published
            runner.run_stage("publish", on_s3, end)
        assert body(s3, "warehouse/manifests/latest") == str(end).encode()
    finished = subprocess.run(
        [*run_day, "materialize,validate,publish"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert finished.returncode == 0, finished.stderr[-4000:]
    assert poll.sync().answer == "new"
    reads = poll.finish()
    new_version = manifest_versions(s3, end)
    assert new_version.keys() == old_version.keys()
    assert not set(new_version.items()) & set(old_version.items())  # every table rebuilt
    assert FeedReader(WH, end).version.folders == new_version
    after = assembled(WH, end, consumers, K, published=True)
    assert after == corrected != before
    assert phases((r.answer, r.folders) for r in reads) == [
        ("old", tuple(sorted(old_version.items()))),
        ("new", tuple(sorted(new_version.items()))),
    ], Counter(r.answer for r in reads)
    # the published version and the one it replaced are left, the killed runs are gone
    assert day_runs(s3, end) == set(new_version.items()) | set(old_version.items())
    pointers()

    # a new day, killed while plan runs: readers see nothing of it, `latest` stays
    log = tmp_path / "new-day.log"
    run_new = [sys.executable, "-m", "jobs", "run", "--ds", str(new_day), *roots, "-q"]
    took["new day, plan running"] = kill_when(run_new, env, rates_recorded(new_day), log)
    assert day_runs(s3, new_day, "clean") and day_runs(s3, new_day, "rates")
    assert not bucket_keys(s3, f"warehouse/manifests/ds={new_day}/manifest.json")
    assert not bucket_keys(s3, f"warehouse/manifests/ds={new_day}/_SUCCESS")
    with pytest.raises(FeedError, match="has not been published"):
        FeedReader(WH, new_day)
    with pytest.raises(NotPublished):
        published.dataset(WH, "clean.events", new_day)
    days = published.dataset(WH, "clean.events").to_table(columns=["ds"]).column("ds")
    assert sorted(set(days.to_pylist())) == [START, end]
    with pytest.raises(PublishRefused):
        runner.run_stage("publish", on_s3, new_day)
    assert body(s3, f"published/days/ds={new_day}.json") is None
    pointers()
    print("kill moments, seconds run before the kill:", {k: round(v, 1) for k, v in took.items()})
    print("reads of the reprocessed day:", dict(Counter(r.answer for r in reads)))


def test_publish_to_s3_copies_whole_days_and_a_failed_publish_moves_no_pointer(
    spark, churn_landing, built_copy, s3_server, monkeypatch
):
    """``publish_to``: a day is copied to a real S3 server (multipart above the part size), its
    pointers move after the data; a publish failing half-way leaves readers on the previous
    complete day and the retry cleans up; re-publishing a past day keeps ``latest``."""
    import dataclasses
    import threading
    from pathlib import Path

    from jobs.common.pointers import PublishFailed, resolve
    from jobs.common.tables import PUBLISHED_TABLES
    from jobs.stages import publish, runner
    from jobs.stages.publish_s3 import listing

    for key, value in s3_server.items():
        monkeypatch.setenv(key, value)
    part = 16 * 1024
    s = dataclasses.replace(
        built_copy, publish_to="s3://pub/feedpipe", publish_part_mb=part / 1024 / 1024
    )
    s3 = boto3.client("s3", endpoint_url=s3_server["FEEDPIPE_S3_ENDPOINT"])
    s3.create_bucket(Bucket="pub")
    d1, d2 = CHURN_START + dt.timedelta(days=2), CHURN_START + dt.timedelta(days=3)
    for ds in (d1, d2):
        runner.run_stage("validate", s, ds, spark)

    def objects(prefix: str) -> dict[str, int]:
        return listing(s3, "pub", prefix)

    def snapshots(ds: dt.date) -> set[str]:
        prefix = f"feedpipe/snapshots/ds={ds}/"
        return {k[len(prefix) :].split("/", 1)[0] for k in objects(prefix)}

    def published_feeds(ds: dt.date | None) -> dict[str, list[str]]:
        reader = FeedReader.published_copy(s.publish_to, ds, s3=s3)
        got = reader.feeds(consumers, CHURN_K)
        return {c: [it.event_id for it in f] for c, f in got.items()}

    expected = {d: naive.feeds(churn_landing, d, CHURN_START, CHURN_K) for d in (d1, d2)}
    consumers = sorted(expected[d1].keys() | expected[d2].keys())
    for d in (d1, d2):
        expected[d] = {c: expected[d].get(c, []) for c in consumers}

    # day 1: every warehouse file of the day's tables is in the snapshot, byte for byte
    out = publish.run(s, d1, Storage.at(s.warehouse))
    root, day = resolve(s.publish_to, None, s3)
    assert day == d1 and root == out.published["root"]
    snap_key = root[len("s3://pub/") :]
    wh = Path(s.warehouse)
    local = {
        str(p.relative_to(wh)): p
        for layer, table in PUBLISHED_TABLES
        for p in (wh / layer / table / f"ds={d1}").rglob("*.parquet")
    }
    assert local and any(p.stat().st_size > 2 * part for p in local.values())
    for rel, path in local.items():
        head = s3.head_object(Bucket="pub", Key=f"{snap_key}/{rel}")
        body = s3.get_object(Bucket="pub", Key=f"{snap_key}/{rel}")["Body"].read()
        assert body == path.read_bytes(), rel
        size = path.stat().st_size
        if size >= part:  # a multipart upload: the ETag names the number of parts, each of
            chunk = max(part, 5 * 1024 * 1024)  # the part size, at least S3's 5 MiB
            assert head["ETag"].strip('"').endswith(f"-{-(-size // chunk)}"), rel
        else:
            assert "-" not in head["ETag"], rel
    manifest = json.loads(
        s3.get_object(Bucket="pub", Key=f"{snap_key}/manifests/ds={d1}/manifest.json")[
            "Body"
        ].read()
    )
    run = manifest["versions"]["feeds/consumer_feed"]
    assert manifest["tables"]["feeds/consumer_feed"]["location"] == (
        f"{root}/feeds/consumer_feed/ds={d1}/{run}"
    )
    assert published_feeds(None) == expected[d1]

    # day 2, failing after a few uploads: nothing moves, no multipart upload is left open
    faulty = boto3.client("s3", endpoint_url=s3_server["FEEDPIPE_S3_ENDPOINT"])
    calls, lock = [0], threading.Lock()

    def fail_after_five(**_):
        with lock:
            calls[0] += 1
            if calls[0] > 5:
                raise ConnectionError("injected: connection reset mid-publish")

    for op in ("PutObject", "UploadPart"):
        faulty.meta.events.register(f"before-call.s3.{op}", fail_after_five)
    with pytest.raises(PublishFailed, match="injected"):
        publish.run(s, d2, Storage.at(s.warehouse), s3=faulty)
    assert resolve(s.publish_to, None, s3) == (root, d1)
    with pytest.raises(PublishFailed, match=str(d2)):
        resolve(s.publish_to, d2, s3)
    assert not (wh / "manifests" / f"ds={d2}" / "_SUCCESS").exists()
    assert s3.list_multipart_uploads(Bucket="pub").get("Uploads", []) == []
    assert len(snapshots(d2)) == 1  # the failed attempt's files, which nothing points at
    assert published_feeds(None) == expected[d1]

    # the retry publishes day 2 and removes the failed attempt
    out2 = publish.run(s, d2, Storage.at(s.warehouse))
    root2, day = resolve(s.publish_to, None, s3)
    assert day == d2 and root2 == out2.published["root"] != root
    assert snapshots(d2) == {root2.rsplit("/", 1)[1]}
    assert out2.published["removed"] > 0
    assert (wh / "manifests" / f"ds={d2}" / "_SUCCESS").exists()
    assert published_feeds(None) == expected[d2]

    # re-publishing day 1 (a backfill): latest stays on day 2; the day keeps the snapshot
    # readers were sent to until now, and the one before that goes
    publish.run(s, d1, Storage.at(s.warehouse))
    root1b, _ = resolve(s.publish_to, d1, s3)
    assert resolve(s.publish_to, None, s3) == (root2, d2)
    assert snapshots(d1) == {root.rsplit("/", 1)[1], root1b.rsplit("/", 1)[1]}
    publish.run(s, d1, Storage.at(s.warehouse))
    root1c, _ = resolve(s.publish_to, d1, s3)
    assert snapshots(d1) == {root1b.rsplit("/", 1)[1], root1c.rsplit("/", 1)[1]}
    assert published_feeds(d1) == expected[d1]
