"""Landing and warehouse on S3: a real S3-compatible server (moto in server mode) on 127.0.0.1,
Spark reading and writing through S3A, the reader and publish through pyarrow's S3 client."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys

import boto3
import naive
import pytest

from jobs.common.s3a import jar_paths
from jobs.common.storage import Storage
from jobs.serving.reader import FeedReader
from jobs.workloads.generate import PROFILES, generate, scaled

START = dt.date(2026, 1, 1)
DAYS = 2
K = 5

pytestmark = pytest.mark.skipif(
    len(jar_paths()) < 2, reason="S3A jars not installed (make install)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_env():
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "FEEDPIPE_S3_ENDPOINT": f"http://127.0.0.1:{port}",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    boto3.client("s3", endpoint_url=env["FEEDPIPE_S3_ENDPOINT"]).create_bucket(Bucket="feedpipe")
    yield env
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


def test_a_backfill_on_s3_serves_the_naive_feeds(s3_env, tmp_path):
    profile = scaled(PROFILES["ff2010"], 0.002)
    generate(Storage.at("s3://feedpipe/landing"), START, DAYS, profile, seed=21)
    generate(
        Storage.at(str(tmp_path / "local")), START, DAYS, profile, seed=21
    )  # same seed: same files
    end = START + dt.timedelta(days=DAYS - 1)
    env = {**os.environ, **s3_env, "FEEDPIPE_FEED_K": str(K), "FEEDPIPE_STRATEGY": "ff-per-pair"}
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
    assert not [k for k in keys if k.startswith("warehouse/_staging/") and k.endswith(".parquet")]

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
