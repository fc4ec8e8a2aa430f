"""The one place a SparkSession is built (always from an entry point, never at import)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from jobs.common.config import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
T = TypeVar("T")


def spark_defaults(settings: Settings) -> dict[str, str]:
    """Settings every stage relies on; ``settings.spark_conf`` may override any of them."""
    conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.sql.parquet.compression.codec": "zstd",
        # readers outside Spark (pyarrow, DuckDB, pandas) get UTC-adjusted timestamps
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.driver.memory": "3g",
        "spark.ui.enabled": "false",
        "spark.log.level": "WARN",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    from jobs.cds import driver_java_options

    if java_options := driver_java_options():  # takes effect where this process starts the JVM
        conf["spark.driver.extraJavaOptions"] = java_options

    if any(root.startswith(("s3://", "s3a://")) for root in (settings.landing, settings.warehouse)):
        from jobs.s3a import s3a_conf

        conf.update(s3a_conf())
    conf.update(settings.spark_conf)
    return conf


def launched_by_spark_submit() -> bool:
    """True inside a driver started by ``spark-submit`` (it owns master and memory)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(settings: Settings, app_name: str) -> SparkSession:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if not launched_by_spark_submit():
        builder = builder.master(settings.spark_master)
        # Python workers (applyInPandas) run this interpreter, with its packages, whatever
        # the PATH says; spark-submit and cluster deployments set their own
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in spark_defaults(settings).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    log.info("spark session %s on %s", app_name, spark.conf.get("spark.master", "?"))
    return spark


UNCOMPRESSED_CACHE = {"spark.sql.inMemoryColumnarStorage.compressed": "false"}
"""Settings (``scoped_conf``) of a stage whose kept frames are built once and scanned many
times: ``plan``'s kept plans, ``validate``'s check frames built with a join. Their ids and
timestamps barely compress, and compressing the cache cost more than it saved: at ``ff2010
--scale 4`` building the kept plan (4.1M rows, 135 MB in memory either way) took 21.5 s
compressed against 13.5 s (docs/benchmarks.md, "A sixth round"), and the consumer feed's
check frame (15.6M rows) 29.9 s against 11.9 s ("An eleventh round"). A kept frame that
outgrows memory goes to local disk either way (``MEMORY_AND_DISK``)."""


@contextmanager
def scoped_conf(spark: SparkSession, conf: Mapping[str, str], settings: Settings) -> Iterator[None]:
    """Sets the SQL settings ``conf`` for the block and restores the session's own after it,
    so one stage's tuning does not leak into the next stage of a shared session (``feedpipe
    run``). A key the operator sets is left as they set it: in ``spark_conf``, or for the
    whole application at its launch (``spark-submit --conf``, ``spark-defaults.conf``)."""
    app = spark.sparkContext.getConf()
    saved: dict[str, str | None] = {}
    for key, value in conf.items():
        if key in settings.spark_conf or app.contains(key):
            continue
        saved[key] = spark.conf.get(key, None)
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def side_by_side(spark: SparkSession, *tasks: Callable[[], T]) -> list[T]:
    """Runs ``tasks``, each of which submits its own Spark jobs, in threads of this driver and
    returns their results in order once all have stopped; the first task's error, if any, is
    raised then (a failed task never leaves the others running).

    For independent outputs of one stage: while one task builds its query in Python or waits
    on its last few tasks or a one-task stage, the other's tasks use the idle cores. Each
    thread keeps the job description it sets (PySpark's pinned threads) and starts with the
    caller's local properties and session tags (``inheritable_thread_target``)."""
    from pyspark.util import inheritable_thread_target

    inherit = inheritable_thread_target(spark)
    with ThreadPoolExecutor(max_workers=max(len(tasks), 1)) as pool:
        futures = [pool.submit(inherit(task)) for task in tasks]
        wait(futures)
    return [f.result() for f in futures]
