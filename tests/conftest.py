"""Fixtures of every tier: one Spark session per test process (built as the stages build
theirs, through ``jobs.common.spark``), settings rooted in a test's own folder, an S3 server.

Tiers: ``unit/`` (pure functions on tiny inputs), ``stages/`` (a stage's run on a small
warehouse), ``e2e/`` (Airflow, a cluster, Spark Connect, S3, several days, real data);
``support/`` holds the naive oracle and helpers. ``make check`` runs the first two.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Every driver of the suite compiles with C1 only: the session each test process keeps for its
# whole run (`spark` below) and the drivers the tests start (`feedpipe` subprocesses, the DAG's
# tasks, a Connect server), except the Higgs week's (tests/e2e/test_real_data.py). The suite's
# two processes share two cores, where C2's compilations cost more CPU than they save on small
# days (docs/tuning.md, "C1-only drivers on small days"; docs/operations.md, "Driver JVM
# options"), with room for the code a whole run compiles (C1's own default, 48 MB, fills up and
# the JVM stops compiling).
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
os.environ.setdefault("FEEDPIPE_JAVA_OPTIONS", JAVA_OPTIONS)

TEST_SPARK = {"spark.driver.memory": "2g"}
"""The test session's own settings on top of the stages' (``jobs.common.spark``)."""

LONGEST_FIRST = (
    "e2e/test_airflow.py",
    "e2e/test_kill.py",
    "e2e/test_s3.py",
    "e2e/test_remote_spark.py",
    "e2e/test_real_data.py",
    "e2e/test_strategies.py",
    "stages/test_plan.py",
    "stages/test_ingest.py",
    "unit/test_views.py",
)
"""The files that take longest (``--durations``), started first: ``make test`` hands whole
files to its two processes in collection order (``--no-loadscope-reorder``), and a long file
handed out last would leave one process working alone at the end. The other files follow in
their own order, the short unit files last."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> tuple[int, int]:
        path = Path(str(item.fspath)).resolve().relative_to(Path(__file__).parent).as_posix()
        first = LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)
        return first, ("e2e/", "stages/", "unit/").index(path[: path.index("/") + 1])

    items.sort(key=rank)


@pytest.fixture(scope="session")
def spark(tmp_path_factory) -> Iterator:
    from jobs.common.config import Settings
    from jobs.common.spark import build_session

    # Spark SQL's own warehouse (tables a catalog test creates) in the run's temporary
    # folder, not in the working directory: the tests write nothing into the checkout
    conf = {**TEST_SPARK, "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("spark-sql"))}
    settings = Settings(spark_master="local[2]", shuffle_partitions=4, spark_conf=conf)
    session = build_session(settings, "feedpipe-tests")
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


@pytest.fixture(scope="module")
def s3_server() -> Iterator[dict[str, str]]:
    """A real S3-compatible HTTP server on 127.0.0.1 (``support.servers.s3_server``)."""
    from support.servers import s3_server as serve

    with serve() as env:
        yield env


@pytest.fixture(scope="session")
def churn_landing(tmp_path_factory) -> Path:
    """The landing files of ``support.workloads.churn``, written once per run."""
    from support import workloads
    from support.once import shared_folder

    return shared_folder(tmp_path_factory, "churn-landing", workloads.churn)


BUILT_STRATEGIES = ("push-all", "pull-all", "ff-per-pair")
"""What the shared warehouse computes each day: the served FF-PerPair (a mix of push and pull)
and the two pure strategies beside it; a test that needs another strategy plans it itself."""


def built_settings(landing: Path, warehouse: Path | str):
    from jobs.common.config import Settings
    from support.workloads import HOURS, K_P, K

    return Settings(
        landing=str(landing),
        warehouse=str(warehouse),
        feed_k=K,
        feed_k_per_producer=K_P,
        diversity_hours=HOURS,
        strategy="ff-per-pair",
        strategies=BUILT_STRATEGIES,
        shuffle_partitions=4,
    )


@pytest.fixture(scope="session")
def built(spark, churn_landing, tmp_path_factory):
    """Settings of a warehouse with the five churn days built incrementally (ingest, rates,
    plan, materialize), once per run. Read it only; write in ``built_copy``."""
    from support import workloads
    from support.once import shared_folder

    def build(folder: Path) -> None:
        workloads.build(spark, built_settings(churn_landing, folder), workloads.days())

    return built_settings(churn_landing, shared_folder(tmp_path_factory, "churn-built", build))


@pytest.fixture
def built_copy(built, tmp_path):
    """A private copy of the built warehouse, which the test may change."""
    from support.once import private_copy

    return built_settings(Path(built.landing), private_copy(built.warehouse, tmp_path / "wh"))


@pytest.fixture(scope="session")
def topics_built(spark, tmp_path_factory):
    """Settings of a warehouse with the three topic days built (ingest, rates, plan,
    materialize; ``support.workloads.topics_workload``), once per run. Read it only."""
    from support.once import shared_folder
    from support.workloads import TOPIC_DATES, build, topic_settings, topics_workload

    landing = shared_folder(tmp_path_factory, "topics-landing", topics_workload)

    def make(folder: Path) -> None:
        build(spark, topic_settings(landing, folder), TOPIC_DATES)

    return topic_settings(landing, shared_folder(tmp_path_factory, "topics-built", make))


@pytest.fixture
def topics_copy(topics_built, tmp_path):
    """A private copy of the topic warehouse, which the test may change."""
    import dataclasses

    from support.once import private_copy

    return dataclasses.replace(
        topics_built, warehouse=str(private_copy(topics_built.warehouse, tmp_path / "topics-wh"))
    )


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A throwaway Redis server on 127.0.0.1 (``jobs.dev.store_server``) for the run; each test
    empties what it uses."""
    from jobs.dev import store_server

    with store_server.running(tmp_path_factory.mktemp("redis")) as s:
        yield s
