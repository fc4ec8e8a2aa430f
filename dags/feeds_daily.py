"""
### feeds_daily

Every day, for the logical date `ds`, feedpipe runs its six stages in order, each as its own
Spark application submitted with `spark-submit` to the master of the `feedpipe_spark`
connection (`local[*]` on the embedded default), once the day's landing has arrived:

`wait_for_landing` -> `ingest` -> `rates` -> `plan` -> `materialize` -> `validate` -> `publish`

and, when a feed store is configured (`FEEDPIPE_STORE` in the environment the DAG is parsed
in), `load_store` after `publish`: the published day is loaded into the store and readers are
switched to it (docs/serving.md). A backfilled day older than the one the store serves is not
loaded.

`wait_for_landing` is a sensor in reschedule mode (it frees its worker slot between checks):
it checks every `FEEDPIPE_LANDING_POKE_SECONDS` (300) that the day's `events/` and `views/`
folders are there (and `follows/` when there is no previous graph; with
`landing_ready = "marker"`, an upstream `_SUCCESS` in each), and fails after
`FEEDPIPE_LANDING_TIMEOUT_MINUTES` (720).

Tasks pass nothing but the date: stages read and write tables under the warehouse
(`FEEDPIPE_WAREHOUSE`, or `warehouse` in `feedpipe.toml`). A failed validation fails
`validate_tables`, and `publish_day` does not run, so the day is never marked complete.

Manual runs take typed params: `strategy` (serve this strategy instead of the configured
one), `full_refresh` (rebuild the feeds from all clean events and plan every shared-view part
afresh), `allow_empty` (landing tables to run as empty after a known upstream outage, e.g.
`events,views`) and `accept_gates` (gates to accept for the day although they fail, a known
anomaly: `volume`, `follows`).
Every task depends on the same task of the previous run (`depends_on_past`), so days run in
order. Backfills: `airflow backfill create --dag-id feeds_daily --from-date ... --to-date ...
--reprocess-behavior failed` (see docs/operations.md).

"""

from __future__ import annotations

import importlib.util
import os
import sys

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.sensors.python import PythonSensor
from airflow.sdk import DAG, Asset, Param

# the stage order, the task ids and the strategies have one home each in the package (which
# imports only the standard library here)
from jobs.common.config import DEFAULT_WAREHOUSE, STRATEGIES, driver_memory
from jobs.common.pipeline import (
    PUBLISHED_ASSET,
    REGISTRY,
    WAIT_TASK_ID,
    published_asset_uri,
)

STRATEGY_CHOICES = [None, "auto", *STRATEGIES]

PUBLISHED_FEEDS = Asset(
    name=PUBLISHED_ASSET,
    uri=published_asset_uri(os.environ.get("FEEDPIPE_WAREHOUSE") or DEFAULT_WAREHOUSE),
)
"""Updated by ``publish_day`` each time a day is published (a refused or gated day fails its
task and updates nothing): schedule a downstream DAG on it."""


def _entry_point() -> str:
    """The file spark-submit runs: ``jobs/__main__.py`` of the installed package."""
    spec = importlib.util.find_spec("jobs")
    if spec is None or spec.origin is None:
        raise RuntimeError("the feedpipe package (jobs) is not installed on this worker")
    return os.path.join(os.path.dirname(spec.origin), "__main__.py")


def _stage_env() -> dict[str, str]:
    """The environment of each spark-submit: this worker's Python for the driver and its
    Python workers, and the run's strategy param. ``SPARK_LOCAL_IP`` passes through only when
    the worker sets it (the embedded default sets 127.0.0.1; on a cluster the driver must
    bind an address the executors can reach)."""
    python_bin = os.path.dirname(sys.executable)
    env = {
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "PATH": f"{python_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "FEEDPIPE_STRATEGY": "{{ params.strategy or '' }}",
        "FEEDPIPE_ALLOW_EMPTY": "{{ params.allow_empty or '' }}",
        "FEEDPIPE_ACCEPT_GATES": "{{ params.accept_gates or '' }}",
    }
    if os.environ.get("SPARK_LOCAL_IP"):
        env["SPARK_LOCAL_IP"] = os.environ["SPARK_LOCAL_IP"]
    return env


def landing_ready(ds: str, allow_empty: str | None) -> bool:
    """The sensor's check: day ``ds``'s landing has arrived (jobs/common/readiness.py), under
    the configuration the stages will run with."""
    import datetime as dt

    from jobs.common.config import load_settings
    from jobs.common.readiness import missing
    from jobs.common.storage import Storage

    settings = load_settings(overrides={"allow_empty": allow_empty or None})
    gone = missing(settings, dt.date.fromisoformat(ds), Storage.at(settings.warehouse))
    if gone:  # the task's output is its log
        print(f"{ds}: waiting for {', '.join(gone.values())}", flush=True)
    return not gone


def _s3a_jars() -> str | None:
    """S3A jars for spark-submit when a storage root is on S3 (``FEEDPIPE_LANDING``,
    ``FEEDPIPE_WAREHOUSE``; the variables, not a TOML file: the
    DAG reads no files when it is parsed). They must be on the driver's class path when its
    JVM starts, which is before the stage builds its session; the S3A settings themselves
    are applied by the stage (jobs/common/s3a.py)."""
    roots = [os.environ.get(f"FEEDPIPE_{name}", "") for name in ("LANDING", "WAREHOUSE")]
    if not any(r.startswith(("s3://", "s3a://")) for r in roots):
        return None
    from jobs.common.s3a import jar_paths

    return ",".join(jar_paths()) or None


def _driver_conf() -> dict[str, str]:
    """The driver JVM runs the drivers' collector and maps the class-data archive ``make
    install`` built, when there is one (jobs/common/cds.py); the driver runs on this worker, so the
    archive is this worker's."""
    from jobs.common.cds import driver_java_options

    return {"spark.driver.extraJavaOptions": driver_java_options()}


with DAG(
    dag_id="feeds_daily",
    doc_md=__doc__,
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["feedpipe"],
    params={
        "strategy": Param(
            None,
            type=["null", "string"],
            enum=STRATEGY_CHOICES,
            description="Serve this strategy (empty: use the configuration, normally auto).",
        ),
        "full_refresh": Param(
            False,
            type="boolean",
            description="Rebuild feeds from all clean events; plan every shared-view part afresh.",
        ),
        "allow_empty": Param(
            "",
            type=["null", "string"],
            description="Landing tables to run as empty (a known outage), e.g. events,views.",
        ),
        "accept_gates": Param(
            "",
            type=["null", "string"],
            description="Gates to accept for this day although they fail (a known anomaly): "
            "volume, follows.",
        ),
    },
    default_args={
        # a day's rates read the previous days' clean events and its feeds build on the
        # previous day's: each task waits for the same task of the previous run, so a backfill
        # (whose own max_active_runs defaults to 10) still runs the days in order
        "depends_on_past": True,
        "retries": 2,
        "retry_delay": pendulum.duration(minutes=2),
        "execution_timeout": pendulum.duration(hours=3),
    },
) as dag:
    previous = PythonSensor(
        task_id=WAIT_TASK_ID,
        python_callable=landing_ready,
        op_kwargs={"ds": "{{ ds }}", "allow_empty": "{{ params.allow_empty or '' }}"},
        mode="reschedule",
        poke_interval=float(os.environ.get("FEEDPIPE_LANDING_POKE_SECONDS", "300")),
        timeout=60 * float(os.environ.get("FEEDPIPE_LANDING_TIMEOUT_MINUTES", "720")),
        retries=0,  # a timeout is final: the day's landing did not arrive in time
    )
    for stage in REGISTRY:
        if stage.needs and not os.environ.get(f"FEEDPIPE_{stage.needs.upper()}"):
            continue  # load_store: only when a feed store is configured
        args = [*stage.argv, "--ds", "{{ ds }}"]
        if "full_refresh" in stage.options:  # the param as the stage's flag, either way
            args.append("{{ '--full-refresh' if params.full_refresh else '--no-full-refresh' }}")
        task = SparkSubmitOperator(
            task_id=stage.task_id,
            conn_id="feedpipe_spark",
            application=_entry_point(),
            application_args=args,
            name=f"feedpipe-{stage.name}-{{{{ ds }}}}",
            driver_memory=driver_memory(),
            jars=_s3a_jars(),
            conf=_driver_conf(),
            env_vars=_stage_env(),
            retries=2 if stage.retried else 0,  # a failed expectation is not transient
            outlets=[PUBLISHED_FEEDS] if stage.name == "publish" else [],
        )
        previous >> task
        previous = task
