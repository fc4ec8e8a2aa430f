"""S3: a real S3-compatible server (moto in server mode) on 127.0.0.1.

* Landing and warehouse on S3: Spark reading and writing through S3A, the reader and publish
  through pyarrow's S3 client; ``publish_to`` marks the warehouse on S3; a reprocess killed
  with kill -9 while it writes never disturbs a reader of the published day.
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

from jobs.common import versions
from jobs.common.config import Settings
from jobs.common.s3a import jar_paths
from jobs.common.storage import Storage
from jobs.serving.reader import FeedReader
from jobs.stages import runner
from jobs.stages.publish import PublishRefused
from jobs.workloads.generate import PROFILES, generate, scaled
from support import naive
from support.polling import Poller
from support.requires import missing
from support.workloads import START as CHURN_START
from support.workloads import K as CHURN_K

START = dt.date(2026, 1, 1)
DAYS = 2
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


def test_a_backfill_on_s3_serves_the_naive_feeds_and_survives_a_killed_reprocess(s3_env, tmp_path):
    profile = scaled(PROFILES["ff2010"], 0.002)
    generate(Storage.at("s3://feedpipe/landing"), START, DAYS, profile, seed=21)
    generate(
        Storage.at(str(tmp_path / "local")), START, DAYS, profile, seed=21
    )  # same seed: same files
    end = START + dt.timedelta(days=DAYS - 1)
    env = {**os.environ, **s3_env, "FEEDPIPE_FEED_K": str(K), "FEEDPIPE_STRATEGY": "ff-per-pair"}
    env["FEEDPIPE_STRATEGIES"] = "ff-per-pair"  # S3 is under test here, not the strategies
    env["FEEDPIPE_PUBLISH_TO"] = "s3://feedpipe/published"  # the warehouse is on S3: marked
    cmd = [sys.executable, "-m", "jobs", "backfill", "--start", str(START), "--end", str(end), "-q"]
    cmd += ["--landing", "s3://feedpipe/landing", "--warehouse", "s3://feedpipe/warehouse"]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stderr[-4000:]

    s3 = boto3.client("s3", endpoint_url=s3_env["FEEDPIPE_S3_ENDPOINT"])
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket="feedpipe")
        for o in page.get("Contents", [])
    ]
    assert f"warehouse/manifests/ds={end}/_SUCCESS" in keys
    assert any(
        k.startswith(f"warehouse/feeds/consumer_feed/ds={end}/") and k.endswith(".parquet")
        for k in keys
    )
    # each table of the day has exactly the version its manifest names (a backfill writes
    # each day once; nothing was staged or copied inside the bucket)
    manifest = json.loads(
        s3.get_object(Bucket="feedpipe", Key=f"warehouse/manifests/ds={end}/manifest.json")[
            "Body"
        ].read()
    )
    folders = {
        (f"{parts[1]}/{parts[2]}", parts[4])
        for parts in (k.split("/") for k in keys)
        if len(parts) > 5 and parts[3] == f"ds={end}" and parts[4].startswith("run=")
    }
    assert folders == set(manifest["versions"].items())

    expected = naive.feeds(tmp_path / "local", end, START, K)
    got = FeedReader("s3://feedpipe/warehouse", end).feeds(sorted(expected), K)
    mismatched = [c for c in expected if [i.event_id for i in got[c]] != expected[c]]
    assert not mismatched, f"{len(mismatched)} of {len(expected)} feeds differ"

    # publish_to with the warehouse on S3: nothing copied, the pointers name the warehouse
    assert not [k for k in keys if k.startswith("published/snapshots/")]
    for ds in (START, end):
        day = json.loads(
            s3.get_object(Bucket="feedpipe", Key=f"published/days/ds={ds}.json")["Body"].read()
        )
        assert (day["ds"], day["root"]) == (str(ds), "s3://feedpipe/warehouse")
    latest = json.loads(s3.get_object(Bucket="feedpipe", Key="published/latest")["Body"].read())
    assert latest["ds"] == str(end)
    assert FeedReader.published_copy("s3://feedpipe/published", None, s3=s3).ds == end

    # the published last day reprocessed on S3 to serve another plan, its run killed (the
    # process group, JVM included) while materialize writes the feeds, then run to the end;
    # a reader polling the day meanwhile always gets its feeds, through one version or the
    # other, and the killed attempt is never published
    forced = {**env, "FEEDPIPE_STRATEGY": "pull-all", "FEEDPIPE_STRATEGIES": "pull-all"}
    sample = sorted(expected)[::3]
    poll = Poller("s3://feedpipe/warehouse", end, {"day": {c: expected[c] for c in sample}}, K)
    poll.start()

    def runs(layer: str) -> set[str]:
        prefix = f"warehouse/{layer}/"
        return {
            k.rsplit("/", 1)[0]
            for page in s3.get_paginator("list_objects_v2").paginate(
                Bucket="feedpipe", Prefix=prefix
            )
            for o in page.get("Contents", [])
            if f"/ds={end}/run=" in (k := o["Key"])
        }

    before = runs("feeds")
    stages = ["run", "--ds", str(end), "--landing", "s3://feedpipe/landing"]
    stages += ["--warehouse", "s3://feedpipe/warehouse", "--stages"]
    killed = subprocess.Popen(
        [sys.executable, "-m", "jobs", *stages, "plan,materialize,validate,publish", "-q"],
        env=forced,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    while not runs("feeds") - before:
        assert killed.poll() is None, f"the run ended ({killed.returncode}) before materialize"
        assert time.monotonic() < deadline, "materialize did not start writing in 600 s"
        time.sleep(0.2)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(30)
    on_s3 = Settings(
        landing="s3://feedpipe/landing",
        warehouse="s3://feedpipe/warehouse",
        feed_k=K,
        strategy="pull-all",
        strategies=("pull-all",),
        publish_to="s3://feedpipe/published",
    )
    with pytest.raises(PublishRefused, match="materialize"):
        runner.run_stage("publish", on_s3, end)
    rest = [sys.executable, "-m", "jobs", *stages, "materialize,validate,publish", "-q"]
    finished = subprocess.run(rest, env=forced, capture_output=True, text=True, timeout=1200)
    assert finished.returncode == 0, finished.stderr[-4000:]
    seen = poll.finish()
    assert set(seen) == {"day"} and len(seen) > 20, Counter(seen)
    store = Storage.at("s3://feedpipe/warehouse")
    assert versions.published(store, end).manifest["plan"]["served"] == "pull-all"
    got = FeedReader("s3://feedpipe/warehouse", end).feeds(sorted(expected), K)
    assert {c: [i.event_id for i in f] for c, f in got.items()} == expected
    # of the feeds, the published version and the one it replaced are left
    assert len(runs("feeds")) <= 2 * 4


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
    assert day == d1 and root == out["published"]["root"]
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
        if size > part:  # a multipart upload: the ETag names the number of parts
            assert head["ETag"].strip('"').endswith(f"-{-(-size // part)}"), rel
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
    assert day == d2 and root2 == out2["published"]["root"] != root
    assert snapshots(d2) == {root2.rsplit("/", 1)[1]}
    assert out2["published"]["removed"] > 0
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
