"""The Airflow DAG: it parses, it is wired as documented, and it runs for real.

One day runs through ``airflow dags test`` (the demo's path). Then Airflow's api-server,
scheduler and dag-processor run on 127.0.0.1: a backfill requested through the REST API runs
two days, and the plugin's pages are fetched from the API server. Both use a real (SQLite)
metadata database and submit every stage with spark-submit to ``local[*]``.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import itertools
import json
from pathlib import Path

import pytest

from jobs.common.storage import Storage
from jobs.dev.local_airflow import REPO, airflow, airflow_env, dags_test, migrate
from jobs.workloads.generate import PROFILES, generate, scaled


def load_dag():
    spec = importlib.util.spec_from_file_location("feeds_daily", REPO / "dags" / "feeds_daily.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def test_dag_structure():
    dag = load_dag()
    assert dag.dag_id == "feeds_daily"
    order = [
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
    assert set(dag.params) == {"strategy", "full_refresh"}
    ingest = dag.get_task("ingest_landing")
    assert ingest.application_args == ["ingest", "--ds", "{{ ds }}"]
    assert ingest.retries == 2 and dag.get_task("validate_tables").retries == 0
    assert all(t.depends_on_past for t in dag.tasks)

    assert Path(ingest.application).name == "__main__.py"


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
    archive = current_archive()
    assert archive is not None  # make install builds it (tests/test_cds.py)
    task = load_dag().get_task("plan_views")
    options = f"-XX:+UseParallelGC -XX:SharedArchiveFile={archive}"
    assert task.conf == {"spark.driver.extraJavaOptions": options}
    monkeypatch.setenv("FEEDPIPE_CDS", "off")  # the collector stays
    assert load_dag().get_task("validate_tables").conf == {
        "spark.driver.extraJavaOptions": "-XX:+UseParallelGC"
    }


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory):
    root = tmp_path_factory.mktemp("af")
    landing, warehouse = root / "landing", root / "warehouse"
    generate(
        Storage.at(str(landing)), dt.date(2026, 1, 1), 1, scaled(PROFILES["ff2010"], 0.002), seed=3
    )
    env = airflow_env(root / "airflow", str(landing), str(warehouse))
    migrate(env)
    return env, warehouse


def last_json(stdout: str):
    """The JSON document an Airflow CLI command printed last (after any warnings)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    return json.loads(lines[-1]) if lines else []


def test_dag_folder_has_no_import_errors(airflow_home):
    env, _ = airflow_home
    errors = airflow(env, "dags", "list-import-errors", "--local", "--output", "json", check=False)
    assert errors.returncode == 0, errors.stderr[-2000:]
    assert last_json(errors.stdout) == []
    listed = airflow(env, "dags", "list", "--local", "--output", "json")
    assert "feeds_daily" in {d["dag_id"] for d in last_json(listed.stdout)}


@pytest.mark.slow
def test_feeds_daily_runs_one_day_through_airflow(airflow_home):
    """``airflow dags test`` (what ``make demo`` runs), with every strategy computed."""
    env, warehouse = airflow_home
    ds = dt.date(2026, 1, 1)
    result = dags_test(env, ds)
    assert result.returncode == 0, result.stderr[-4000:]
    done = warehouse / "manifests" / f"ds={ds}"
    assert (done / "_SUCCESS").exists(), result.stderr[-4000:]
    manifest = json.loads((done / "manifest.json").read_text())
    assert (
        manifest["tables"]["plan/edge_plan"]["rows"]
        == manifest["tables"]["clean/follows"]["rows"]
        > 0
    )
    assert set(manifest["stages"]) == {"ingest", "rates", "plan", "materialize", "validate"}


@pytest.mark.slow
def test_a_rest_api_backfill_publishes_two_days_in_order_and_the_plugin_shows_them(tmp_path):
    """Airflow for real (api-server, scheduler, dag-processor, LocalExecutor): an
    authenticated ``POST /api/v2/backfills`` over two days; every run succeeds, the days run
    one after another, each is published and the last serves the naive feeds; the feedpipe
    plugin's pages, fetched from the API server, show each day's figures."""

    import time

    import naive

    from jobs.dev.local_airflow import LocalAirflow
    from jobs.serving.reader import FeedReader

    # two days, both allowed to run at once: the second must still wait for the first
    start, days, k = dt.date(2026, 1, 1), 2, 20
    end = start + dt.timedelta(days=days - 1)
    landing, warehouse = tmp_path / "landing", tmp_path / "warehouse"
    generate(Storage.at(str(landing)), start, days, scaled(PROFILES["ff2010"], 0.002), seed=3)
    # no scheduled runs: only what the test asks for (the DAG is unpaused below)
    extra = {"AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False"}
    # the Feeding Frenzy strategies only: the shared-view planners are tested elsewhere and
    # would add minutes of Spark time per day here
    extra["FEEDPIPE_STRATEGIES"] = "push-all,pull-all,ff-per-pair,ff-consumer"
    env = airflow_env(tmp_path / "airflow", str(landing), str(warehouse), extra)
    migrate(env)
    with LocalAirflow(env) as af:
        status, _ = af.request("GET", "/api/v2/dags/feeds_daily", auth=False)
        assert status == 401  # the API wants a token
        deadline = time.monotonic() + 120
        while af.request("GET", "/api/v2/dags/feeds_daily")[0] != 200:
            assert time.monotonic() < deadline, af.log_tail()
            time.sleep(2)
        af.api("PATCH", "/api/v2/dags/feeds_daily", {"is_paused": False})
        backfill = af.api(
            "POST",
            "/api/v2/backfills",
            {
                "dag_id": "feeds_daily",
                "from_date": f"{start}T00:00:00Z",
                "to_date": f"{end}T00:00:00Z",
                # more than one: the DAG itself (depends_on_past) must keep the days in order
                "max_active_runs": 2,
                "reprocess_behavior": "failed",  # required with depends_on_past
            },
        )
        deadline = time.monotonic() + 1800
        while True:
            runs = af.api("GET", "/api/v2/dags/feeds_daily/dagRuns?limit=50")["dag_runs"]
            runs = [r for r in runs if r["run_type"] == "backfill"]
            states = sorted(r["state"] for r in runs)
            if len(runs) == days and set(states) <= {"success", "failed"}:
                break
            assert time.monotonic() < deadline, f"backfill still {states}\n{af.log_tail()}"
            time.sleep(5)
        assert states == ["success"] * days, af.log_tail()
        done = af.api("GET", f"/api/v2/backfills/{backfill['id']}")
        assert (done["from_date"][:10], done["to_date"][:10]) == (str(start), str(end))
        check_plugin_pages(af, warehouse, [start + dt.timedelta(days=i) for i in range(days)])
        tasks = {
            r["logical_date"][:10]: {
                t["task_id"]: t
                for t in af.api(
                    "GET", f"/api/v2/dags/feeds_daily/dagRuns/{r['dag_run_id']}/taskInstances"
                )["task_instances"]
            }
            for r in runs
        }

    runs.sort(key=lambda r: r["logical_date"])
    assert [r["logical_date"][:10] for r in runs] == [
        str(start + dt.timedelta(days=i)) for i in range(days)
    ]

    for before, after in itertools.pairwise(sorted(tasks)):  # depends_on_past: in day order
        for task_id, ti in tasks[after].items():
            assert tasks[before][task_id]["end_date"] <= ti["start_date"], task_id

    for i in range(days):
        assert (
            warehouse / "manifests" / f"ds={start + dt.timedelta(days=i)}" / "_SUCCESS"
        ).exists()
    assert (warehouse / "manifests" / "latest").read_text() == end.isoformat()
    expected = naive.feeds(landing, end, start, k)
    got = FeedReader(str(warehouse), end).feeds(sorted(expected), k)
    assert {c: [i.event_id for i in f] for c, f in got.items()} == expected


def check_plugin_pages(af, warehouse: Path, days: list[dt.date]) -> None:
    """The plugin's pages as the API server serves them, against the warehouse's tables."""
    import re

    import pyarrow.parquet as pq

    plugins = af.api("GET", "/api/v2/plugins")["plugins"]
    mine = next(p for p in plugins if p["name"] == "feedpipe_reports")
    assert [v["href"] for v in mine["external_views"]] == ["feedpipe/"]
    assert af.request("GET", "/feedpipe/", auth=False)[0] == 401
    status, index = af.request("GET", "/feedpipe/")
    assert status == 200, index
    listed = re.findall(r"href='days/(\d{4}-\d\d-\d\d)'", index)
    assert listed == [str(d) for d in sorted(days, reverse=True)]
    assert index.count("not published") == 0
    for ds in days:
        status, page = af.request("GET", f"/feedpipe/days/{ds}")
        assert status == 200, page
        assert "id='status' class='ok'>published" in page
        assert "id='quality' class='ok'>all suites passed" in page
        cost = pq.read_table(warehouse / "plan" / "plan_cost" / f"ds={ds}").to_pylist()
        for r in cost:
            row = re.search(rf"<tr class='\w*' data-strategy='{r['strategy']}'>(.*?)</tr>", page)
            assert row, r["strategy"]
            cells = re.findall(r"<td[^>]*>([^<]*)", row.group(1))
            assert float(cells[1]) == pytest.approx(r["total_cost"], abs=0.05)
            assert (int(cells[5]), int(cells[6])) == (r["push_edges"], r["pull_edges"])
            assert ("(served)" in cells[0]) == r["chosen"]
    assert af.request("GET", "/feedpipe/days/2025-13-01")[0] == 400
    assert af.request("GET", "/feedpipe/days/2020-01-01")[0] == 404
