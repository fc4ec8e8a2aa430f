"""The DAG file as Airflow parses it: the stages in order, one task each, the params of a
manual run (every strategy the plan stage knows), what each spark-submit gets."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

from jobs.common.config import STRATEGIES
from jobs.common.pipeline import DAY_STAGES, TASK_IDS, WAIT_TASK_ID
from jobs.dev.local_airflow import REPO


def load_dag():
    spec = importlib.util.spec_from_file_location("feeds_daily", REPO / "dags" / "feeds_daily.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def test_dag_structure(monkeypatch):
    monkeypatch.delenv("FEEDPIPE_STORE", raising=False)
    dag = load_dag()
    assert dag.dag_id == "feeds_daily"
    order = [
        "wait_for_landing",
        "ingest_landing",
        "estimate_rates",
        "plan_views",
        "materialize_feeds",
        "validate_tables",
        "publish_day",
    ]
    assert [t.task_id for t in dag.topological_sort()] == order
    for upstream, downstream in itertools.pairwise(order):
        assert dag.get_task(downstream).upstream_task_ids == {upstream}
    assert dag.max_active_runs == 1 and not dag.catchup
    assert set(dag.params) == {"strategy", "full_refresh", "allow_empty", "accept_gates"}
    wait = dag.get_task("wait_for_landing")
    assert wait.mode == "reschedule" and wait.retries == 0  # frees its slot; a timeout is final
    assert wait.poke_interval == 300 and wait.timeout == 720 * 60
    assert wait.op_kwargs == {"ds": "{{ ds }}", "allow_empty": "{{ params.allow_empty or '' }}"}
    ingest = dag.get_task("ingest_landing")
    assert ingest.application_args == ["ingest", "--ds", "{{ ds }}"]
    assert ingest.retries == 2 and dag.get_task("validate_tables").retries == 0
    assert all(t.depends_on_past for t in dag.tasks)

    assert Path(ingest.application).name == "__main__.py"


def test_a_configured_store_adds_its_load_after_publish(monkeypatch):
    monkeypatch.setenv("FEEDPIPE_STORE", "redis://store.example:6379/0")
    dag = load_dag()
    assert [t.task_id for t in dag.topological_sort()][-2:] == ["publish_day", "load_store"]
    load = dag.get_task("load_store")
    assert load.upstream_task_ids == {"publish_day"}
    assert load.application_args == ["store", "load", "--ds", "{{ ds }}"]
    assert load.retries == 2  # an unreachable store may come back
    assert dag.get_task("publish_day").downstream_task_ids == {"load_store"}


def test_spark_submit_takes_the_workers_address_and_s3a_jars_from_its_environment(monkeypatch):
    from jobs.common.s3a import jar_paths

    for name in ("SPARK_LOCAL_IP", "FEEDPIPE_LANDING", "FEEDPIPE_WAREHOUSE"):
        monkeypatch.delenv(name, raising=False)
    task = load_dag().get_task("plan_views")
    assert "SPARK_LOCAL_IP" not in task.env_vars  # a cluster driver binds its own address
    assert task.jars is None  # local roots: no S3 connector shipped to every executor
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.1.2.3")
    monkeypatch.setenv("FEEDPIPE_WAREHOUSE", "s3://bucket/warehouse")
    task = load_dag().get_task("plan_views")
    assert task.env_vars["SPARK_LOCAL_IP"] == "10.1.2.3"
    jars = jar_paths()
    assert (task.jars or "").split(",") == jars if jars else task.jars is None


def test_spark_submit_maps_the_class_archive_when_there_is_one(monkeypatch):
    from jobs.common.cds import current_archive

    monkeypatch.delenv("FEEDPIPE_CDS", raising=False)
    monkeypatch.delenv("FEEDPIPE_JAVA_OPTIONS", raising=False)
    archive = current_archive()
    assert archive is not None  # make install builds it (tests/test_cds.py)
    task = load_dag().get_task("plan_views")
    options = f"-XX:+UseParallelGC -XX:SharedArchiveFile={archive}"
    assert task.conf == {"spark.driver.extraJavaOptions": options}
    monkeypatch.setenv("FEEDPIPE_CDS", "off")  # the collector stays
    assert load_dag().get_task("validate_tables").conf == {
        "spark.driver.extraJavaOptions": "-XX:+UseParallelGC"
    }


def test_the_tasks_are_the_pipelines_stages_in_order(monkeypatch):
    monkeypatch.delenv("FEEDPIPE_STORE", raising=False)
    assert [t.task_id for t in load_dag().topological_sort()] == [
        WAIT_TASK_ID,
        *(TASK_IDS[s] for s in DAY_STAGES),
    ]


def test_the_sensor_checks_the_days_landing_under_the_stages_configuration(
    tmp_path, monkeypatch, capsys
):
    """``landing_ready``, the sensor's callable, as Airflow calls it (rendered arguments; the
    settings from the worker's environment, as the stages get them)."""
    monkeypatch.setenv("FEEDPIPE_LANDING", str(tmp_path / "landing"))
    monkeypatch.setenv("FEEDPIPE_WAREHOUSE", str(tmp_path / "wh"))
    monkeypatch.delenv("FEEDPIPE_CONFIG", raising=False)
    ready = load_dag().get_task("wait_for_landing").python_callable
    for table in ("follows", "events"):
        (tmp_path / "landing" / table / "ds=2026-03-01").mkdir(parents=True)
    assert not ready(ds="2026-03-01", allow_empty="")
    views = tmp_path / "landing" / "views" / "ds=2026-03-01"
    assert capsys.readouterr().out == f"2026-03-01: waiting for {views}\n"
    assert ready(ds="2026-03-01", allow_empty="views")
    (tmp_path / "landing" / "views" / "ds=2026-03-01").mkdir(parents=True)
    assert ready(ds="2026-03-01", allow_empty="")
    monkeypatch.setenv("FEEDPIPE_LANDING_READY", "marker")  # now each folder needs _SUCCESS
    assert not ready(ds="2026-03-01", allow_empty="")


def test_the_stages_get_the_runs_allowed_empty_tables():
    env = load_dag().get_task("ingest_landing").env_vars
    assert env["FEEDPIPE_ALLOW_EMPTY"] == "{{ params.allow_empty or '' }}"
    assert env["FEEDPIPE_ACCEPT_GATES"] == "{{ params.accept_gates or '' }}"


def test_a_manual_run_can_force_every_strategy_the_plan_knows():
    from jobs.common.config import Settings

    enum = load_dag().params.get_param("strategy").schema["enum"]
    assert enum == [None, "auto", *STRATEGIES]
    # among them the latency-constrained and shared-view ones a manual run could not force
    wanted = {"ff-latency-pair", "ff-latency-consumer", "cz-hierarchy2", "cz-greedy"}
    assert wanted | {"cz-hierarchy1"} <= set(enum)
    for strategy in enum[1:]:
        assert Settings(strategy=strategy).strategy == strategy  # the plan stage accepts it


def test_publish_updates_the_published_feeds_asset_and_the_example_consumer_is_scheduled_on_it(
    monkeypatch,
):
    monkeypatch.setenv("FEEDPIPE_WAREHOUSE", "s3a://bucket/warehouse/")
    dag = load_dag()
    (asset,) = dag.get_task("publish_day").outlets
    assert (asset.name, asset.uri) == (
        "feedpipe_published_feeds",
        "s3://bucket/warehouse/manifests",
    )
    assert all(not t.outlets for t in dag.tasks if t.task_id != "publish_day")
    spec = importlib.util.spec_from_file_location(
        "feeds_consumer_example", REPO / "dags" / "feeds_consumer_example.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    consumer = module.dag
    assert consumer.dag_id == "feeds_consumer_example"
    assert consumer.timetable.asset_condition.objects == (asset,)
    assert [t.task_id for t in consumer.tasks] == ["summarize_published_day"]


def test_the_full_refresh_param_reaches_materialize_as_the_command_lines_flag():
    """The materialize task's argument, rendered as Airflow renders it for each value of the
    param, is the flag `feedpipe materialize` takes (the same form as `run` and `backfill`)."""
    import jinja2

    from jobs.cli import build_parser

    (*_, flag) = load_dag().get_task("materialize_feeds").application_args
    for full_refresh in (True, False):
        rendered = jinja2.Template(flag).render(params={"full_refresh": full_refresh})
        args = build_parser().parse_args(["materialize", "--ds", "2026-01-03", rendered])
        assert args.full_refresh is full_refresh
        for verb in ("run", "backfill"):
            dates = ["--ds", "2026-01-03"] if verb == "run" else ["--start", "2026-01-03"]
            dates += [] if verb == "run" else ["--end", "2026-01-04"]
            assert build_parser().parse_args([verb, *dates, rendered]).full_refresh is full_refresh
