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
