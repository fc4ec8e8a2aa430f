"""The Airflow DAG: it parses, it is wired as documented, and it runs a day for real.

The run goes through ``airflow dags test`` against a real (SQLite) metadata database; every
stage is submitted with spark-submit to ``local[*]``.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import itertools
import json
from pathlib import Path

import pytest

from jobs.common.storage import Storage
from jobs.generate import PROFILES, generate, scaled
from jobs.local_airflow import REPO, airflow, airflow_env, dags_test, migrate


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
    assert Path(ingest.application).name == "__main__.py"


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
