"""Shared fixtures: one local SparkSession for the whole run, small settings per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)  # type: ignore[attr-defined]

SHARED = Path(__file__).resolve().parents[2] / "shared"


@pytest.fixture(scope="session")
def spark() -> Iterator:
    from pyspark.sql import SparkSession

    from jobs.common.cds import driver_java_options

    session = (
        SparkSession.builder.master("local[2]")
        .appName("feedpipe-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.log.level", "WARN")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.extraJavaOptions", driver_java_options())
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture
def make_settings(tmp_path: Path):
    """Settings rooted in the test's temporary folder (overrides as keyword arguments)."""
    from jobs.common.config import Settings

    def make(**overrides):
        values = {
            "landing": str(tmp_path / "landing"),
            "warehouse": str(tmp_path / "warehouse"),
            "shuffle_partitions": 4,
            **overrides,
        }
        return Settings(**values)

    return make


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_server() -> Iterator[dict[str, str]]:
    """A real S3-compatible HTTP server (moto's, in its own process) on 127.0.0.1, accepting
    multipart parts from 1 KiB (AWS: 5 MiB) so small test files can go up in several parts.
    Yields the environment that points boto3, pyarrow and S3A at it."""
    import subprocess
    import sys
    import time
    import urllib.request

    port = free_port()
    env = {**os.environ, "S3_UPLOAD_PART_MIN_SIZE": "1024"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the S3 server on port {port} did not start") from None
            time.sleep(0.2)
    yield {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "FEEDPIPE_S3_ENDPOINT": endpoint,
    }
    proc.terminate()
    proc.wait(timeout=30)
