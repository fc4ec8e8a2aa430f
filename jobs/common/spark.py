"""The one place a SparkSession is built (always from an entry point, never at import)."""

from __future__ import annotations

import contextvars
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from jobs.common.config import DRIVER_MEMORY, Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
        "spark.driver.memory": DRIVER_MEMORY,
        "spark.ui.enabled": "false",
        "spark.log.level": "WARN",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # PySpark's DataFrame debugging records the Python call site of every DataFrame call
        # in the JVM, in more Py4J calls per call: driver work that small days feel
        # (docs/tuning.md, "No DataFrame call sites")
        "spark.python.sql.dataFrameDebugging.enabled": "false",
    }
    from jobs.common.cds import driver_java_options

    # the collector and the class archive; takes effect where this process starts the JVM
    conf["spark.driver.extraJavaOptions"] = driver_java_options()

    if any(root.startswith(("s3://", "s3a://")) for root in (settings.landing, settings.warehouse)):
        from jobs.common.s3a import s3a_conf

        conf.update(s3a_conf())
    conf.update(settings.spark_conf)
    return conf


def launched_by_spark_submit() -> bool:
    """True inside a driver started by ``spark-submit`` (it owns master and memory)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(settings: Settings, app_name: str) -> SparkSession:
    from pyspark.sql import SparkSession

    if settings.spark_remote:
        return _remote_session(settings, app_name)
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


def _remote_session(settings: Settings, app_name: str) -> SparkSession:
    """A Spark Connect session on ``settings.spark_remote``. The server holds the application
    settings (``feedpipe connect-server`` starts it with :func:`spark_defaults`); this session
    sets the SQL settings again, its own, so a server started otherwise computes the same."""
    from pyspark.sql import SparkSession

    # a process spark-submit started (the DAG's tasks) has its master in MASTER, which the
    # builder refuses beside a remote URL; this process starts no Spark of its own
    os.environ.pop("MASTER", None)
    spark = SparkSession.builder.remote(settings.spark_remote).getOrCreate()
    for key, value in spark_defaults(settings).items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)
    log.info("spark connect session %s on %s", app_name, settings.spark_remote)
    return spark


def is_remote(spark: SparkSession) -> bool:
    """True for a Spark Connect session: no SparkContext or JVM in this process."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def parallelism(spark: SparkSession) -> int:
    """Spark's default parallelism (the cores of a local master). A Spark Connect client
    reads ``spark.default.parallelism``, which ``feedpipe connect-server`` sets."""
    if not is_remote(spark):
        return int(spark.sparkContext.defaultParallelism)
    return int(spark.conf.get("spark.default.parallelism", None) or os.cpu_count() or 2)


def empty_frame(spark: SparkSession, schema: str) -> DataFrame:
    """A frame with no rows: an RDD without partitions (no task, no Python worker), or for a
    Spark Connect client an empty local relation."""
    if is_remote(spark):
        return spark.createDataFrame([], schema)
    return spark.createDataFrame(spark.sparkContext.emptyRDD(), schema)


@contextmanager
def job_description(spark: SparkSession, text: str) -> Iterator[None]:
    """Names the block's Spark jobs in the Spark UI and event logs (``bench/eventlog.py``).
    A Spark Connect client's jobs carry their operation tags instead."""
    if is_remote(spark):
        yield
        return
    sc = spark.sparkContext
    sc.setJobDescription(text)
    try:
        yield
    finally:
        sc.setJobDescription(None)  # type: ignore[arg-type]


def local_cores(master: str) -> int | None:
    """The cores of a ``local``, ``local[N]`` or ``local[*]`` master; None for a cluster."""
    if master == "local":
        return 1
    if master.startswith("local[") and master.endswith("]"):
        n = master[6:-1].split(",")[0]
        return os.cpu_count() or 1 if n == "*" else int(n)
    return None


def connect_server_command(
    settings: Settings, host: str, port: int, driver_memory: str
) -> list[str]:
    """``spark-submit`` of a Spark Connect server with the settings every stage relies on
    (:func:`spark_defaults`), on ``settings.spark_master``, listening on ``host:port``.

    The driver is ``jobs/common/connect_service.py``, which holds a session open; the service is
    Spark's Connect plugin, with :data:`CONNECT_SERVER_CONF`: the client sessions share
    the classes Spark generates for their queries, so a stage run reuses the code earlier
    runs compiled and the JVM warmed up."""
    conf = spark_defaults(settings)
    conf.pop("spark.driver.memory", None)
    conf["spark.connect.grpc.binding.address"] = host
    conf["spark.connect.grpc.binding.port"] = str(port)
    cores = local_cores(settings.spark_master)
    if cores is not None:
        conf.setdefault("spark.default.parallelism", str(cores))
    plugins = [p for p in conf.get("spark.plugins", "").split(",") if p]
    for key, value in CONNECT_SERVER_CONF.items():
        if key == "spark.plugins":
            conf[key] = ",".join([*plugins, value] if value not in plugins else plugins)
        elif key not in settings.spark_conf:  # the operator's own setting stands
            conf[key] = value
    options = conf.get("spark.driver.extraJavaOptions", "")
    if "ReservedCodeCacheSize" not in options:
        conf["spark.driver.extraJavaOptions"] = f"{options} {SERVER_CODE_CACHE}".strip()
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    cmd = [submit, "--master", settings.spark_master, "--driver-memory", driver_memory]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    driver = os.path.join(os.path.dirname(__file__), "connect_service.py")
    return [*cmd, "--name", "feedpipe-connect", driver]


CONNECT_SERVER_CONF = {
    "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
    # Spark keys its cache of generated classes by class loader. With artifact isolation
    # (what Spark's own SparkConnectServer forces) each client session runs its queries under
    # a class loader of its own, so every stage run compiled all its code again: at ff2010
    # --scale 4 a warm plan run took 42 to 50 s with it and 30 to 34 s without
    # (docs/tuning.md, "Connect server without artifact isolation"). The stages add no
    # jars or classes to their sessions, which is what isolation keeps apart.
    "spark.sql.artifact.isolation.enabled": "false",
    "spark.sql.artifact.isolation.alwaysApplyClassloader": "false",
    # and keeps up to 100 of those classes by default, the least recently used going first: a
    # day's rates, plan and materialize compile over 200, so each stage found its classes of
    # the day before gone and compiled them all again (ibid.)
    "spark.sql.codegen.cache.maxEntries": "1000",
}
"""Launch settings of ``feedpipe connect-server`` on top of :func:`spark_defaults`."""


SERVER_CODE_CACHE = "-XX:ReservedCodeCacheSize=240m"
"""The Connect server's room for compiled code, unless its driver options name their own:
the JVM's default under tiered compilation, kept when ``FEEDPIPE_JAVA_OPTIONS`` asks for the
first compiler only (``-XX:TieredStopAtLevel=1``), whose default is 48 MB. A long-lived server
compiles the code of every stage run of every day it serves; with 48 MB its cache was full
after 90 s of a two-day Airflow backfill and the JVM stopped ("Out of space in CodeCache"),
taking the stages that used it down."""


UNCOMPRESSED_CACHE = {"spark.sql.inMemoryColumnarStorage.compressed": "false"}
"""Settings (``scoped_conf``) of a stage whose kept frames are built once and scanned many
times: ``plan``'s kept plans, ``validate``'s check frames built with a join. Their ids and
timestamps barely compress, and compressing the cache cost more than it saved: at ``ff2010
--scale 4`` building the kept plan (4.1M rows, 135 MB in memory either way) took 21.5 s
compressed against 13.5 s, and the consumer feed's check frame (15.6M rows) 29.9 s against
11.9 s (docs/tuning.md, "Uncompressed in-memory cache"). A kept frame that
outgrows memory goes to local disk either way (``MEMORY_AND_DISK``)."""


@contextmanager
def scoped_conf(spark: SparkSession, conf: Mapping[str, str], settings: Settings) -> Iterator[None]:
    """Sets the SQL settings ``conf`` for the block and restores the session's own after it,
    so one stage's tuning does not leak into the next stage of a shared session (``feedpipe
    run``). A key the operator sets is left as they set it: in ``spark_conf``, or for the
    whole application at its launch (``spark-submit --conf``, ``spark-defaults.conf``)."""
    # a Spark Connect client cannot see the server's launch settings: it sets the keys for
    # its own session, which the server's settings do not override
    app = None if is_remote(spark) else spark.sparkContext.getConf()
    saved: dict[str, str | None] = {}
    for key, value in conf.items():
        if key in settings.spark_conf or (app is not None and app.contains(key)):
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
        # each thread runs in a copy of the caller's context: the stage's run (its writes'
        # folder, jobs.common.versions) is a context variable
        futures = [pool.submit(contextvars.copy_context().run, inherit(task)) for task in tasks]
        wait(futures)
    return [f.result() for f in futures]
