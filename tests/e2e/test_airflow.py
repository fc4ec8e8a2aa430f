"""The Airflow DAG run for real on one warehouse.

Day 1 runs through ``airflow dags test`` on a SQLite metadata database (the demo's path),
every stage submitted with spark-submit to ``local[*]``. Then Airflow's api-server,
scheduler and dag-processor run on 127.0.0.1 with the LocalExecutor on a PostgreSQL metadata
database of the test's own, as docker/ deploys it (docs/deploy.md): a backfill requested
through the REST API runs days 2 and 3 in order, forcing a strategy through the run's params,
with the workers' ``FEEDPIPE_SPARK_REMOTE`` naming a long-lived Spark Connect server
(docs/operations.md), the plugin's pages are fetched from the API server, and the days'
publish events trigger a run of the example consumer DAG. Every task must succeed on its
first try. Last, a day whose landing never arrived: the sensor waits, times out and fails
the run before ``ingest``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import re
import sqlite3
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.common import store
from jobs.common.pipeline import DAY_STAGES, STAGES, TASK_IDS, WAIT_TASK_ID
from jobs.common.storage import Storage
from jobs.dev.local_airflow import LocalAirflow, airflow, airflow_env, dags_test, migrate
from jobs.serving.reader import FeedReader
from jobs.serving.store_reader import StoreReader
from jobs.workloads.generate import PROFILES, generate, scaled
from support import naive
from support.paths import version
from support.servers import Database, connect_server, logged, postgres_database

START, DAYS, K = dt.date(2026, 1, 1), 3, 20
BACKFILLED = [START + dt.timedelta(days=i) for i in range(1, DAYS)]
FORCED = "ff-latency-pair"  # not among the four strategies the DAG's param used to offer
# day 1: the pure strategies, Feeding Frenzy's and one shared-view planner, whose Python
# workers must find the worker's packages under spark-submit (the DAG's PYSPARK_PYTHON);
# the backfilled days: the pure ones and FF-PerPair beside the forced strategy
STRATEGIES = "push-all,pull-all,ff-per-pair,cz-hierarchy2"
BACKFILL_STRATEGIES = "push-all,pull-all,ff-per-pair"


@pytest.fixture(scope="module")
def home(tmp_path_factory, redis_server):
    """Landing files for three days, an Airflow home migrated once, the warehouse; a feed
    store configured (the DAG loads each published day into it)."""
    root = tmp_path_factory.mktemp("af")
    landing, warehouse = root / "landing", root / "warehouse"
    generate(Storage.at(str(landing)), START, DAYS, scaled(PROFILES["ff2010"], 0.002), seed=3)
    store.connect(redis_server.url).flushdb()
    # no scheduled runs: only what the tests ask for (the DAG is unpaused below)
    extra = {
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "FEEDPIPE_STRATEGIES": STRATEGIES,
        "FEEDPIPE_STORE": redis_server.url,
    }
    env = airflow_env(root / "airflow", str(landing), str(warehouse), extra)
    migrate(env)
    return env, landing, warehouse


def last_json(stdout: str):
    """The JSON document an Airflow CLI command printed last (after any warnings)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    return json.loads(lines[-1]) if lines else []


def test_dag_folder_has_no_import_errors(home):
    env, _, _ = home
    errors = airflow(env, "dags", "list-import-errors", "--local", "--output", "json", check=False)
    assert errors.returncode == 0, errors.stderr[-2000:]
    assert last_json(errors.stdout) == []
    listed = airflow(env, "dags", "list", "--local", "--output", "json")
    assert {"feeds_daily", CONSUMER} <= {d["dag_id"] for d in last_json(listed.stdout)}


@pytest.fixture(scope="module")
def first_day(home):
    """Day 1 through ``airflow dags test`` (what ``make demo`` runs)."""
    env, _, warehouse = home
    result = dags_test(env, START)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (warehouse / "manifests" / f"ds={START}" / "_SUCCESS").exists(), result.stderr[-4000:]
    return warehouse


def test_the_example_consumer_reads_the_newest_published_day(home, first_day):
    """``dags/feeds_consumer_example.py``'s task, run through ``airflow dags test``: it
    summarises the newest published day from its manifest."""
    env, _, warehouse = home
    result = dags_test(env, START, CONSUMER)
    assert result.returncode == 0, result.stderr[-4000:]
    manifest = json.loads((warehouse / "manifests" / f"ds={START}" / "manifest.json").read_text())
    rows = {k: v["rows"] for k, v in sorted(manifest["tables"].items()) if k.startswith("feeds/")}
    line = f"feedpipe published {START}: served {manifest['plan']['served']}, {rows}"
    assert line in result.stdout + result.stderr


def test_feeds_daily_runs_one_day_through_airflow_dags_test(first_day):
    manifest = json.loads((first_day / "manifests" / f"ds={START}" / "manifest.json").read_text())
    tables = manifest["tables"]
    assert tables["plan/edge_plan"]["rows"] == tables["clean/follows"]["rows"] > 0
    assert set(manifest["stages"]) == set(DAY_STAGES) - {"publish"}
    # then load_store: the day loaded into the feed store, recorded after the manifest
    loaded = json.loads(
        (first_day / "manifests" / f"ds={START}" / "stages" / "store.json").read_text()
    )
    assert loaded["generation"].startswith(f"{START:%Y%m%d}-") and not loaded["skipped"]
    strategies = {r["strategy"] for r in manifest["plan"]["strategies"]}
    assert strategies == set(STRATEGIES.split(","))  # the shared views planned under Airflow


@pytest.fixture
def postgres(home, tmp_path):
    """The module's Airflow settings with an Airflow home of their own on a new PostgreSQL
    database (migrated), which is dropped afterwards; and the database."""
    env, _, _ = home
    with postgres_database("feedpipe_airflow") as db:
        pg = {
            **env,
            "AIRFLOW_HOME": str(tmp_path / "airflow-pg"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db.url,
        }
        migrate(pg)
        yield pg, db


def test_a_rest_api_backfill_publishes_days_in_order_and_the_plugin_shows_them(
    home, first_day, postgres, tmp_path
):
    """Airflow for real (api-server, scheduler, dag-processor, LocalExecutor) on PostgreSQL:
    an authenticated ``POST /api/v2/backfills`` over days 2 and 3 with ``strategy`` forced in
    the run's conf; every run and every task succeeds on its first try (the REST API's and the
    metadata database's ``try_number``), the days run one after another, on the Connect
    server, each is published serving the forced strategy and the last serves the naive
    feeds; the feedpipe plugin's pages, fetched from the API server, show each day's figures;
    the publish events trigger a run of the example consumer DAG, which summarises the newest
    published day."""
    _, landing, warehouse = home
    env, db = postgres
    start, end = BACKFILLED[0], BACKFILLED[-1]
    with (
        connect_server(tmp_path / "connect") as (url, events),
        LocalAirflow(
            {**env, "FEEDPIPE_SPARK_REMOTE": url, "FEEDPIPE_STRATEGIES": BACKFILL_STRATEGIES}
        ) as af,
    ):
        status, _ = af.request("GET", "/api/v2/dags/feeds_daily", auth=False)
        assert status == 401  # the API wants a token
        deadline = time.monotonic() + 120
        for dag_id in ("feeds_daily", CONSUMER):  # parsed, then unpaused
            while af.request("GET", f"/api/v2/dags/{dag_id}")[0] != 200:
                assert time.monotonic() < deadline, af.log_tail()
                time.sleep(2)
            af.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
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
                "dag_run_conf": {"strategy": FORCED},
            },
        )
        deadline = time.monotonic() + 1800
        while True:
            runs = af.api("GET", "/api/v2/dags/feeds_daily/dagRuns?limit=50")["dag_runs"]
            filled = [r for r in runs if r["run_type"] == "backfill"]
            states = sorted(r["state"] for r in filled)
            if len(filled) == len(BACKFILLED) and set(states) <= {"success", "failed"}:
                break
            # every task must succeed on its first try: a failed one ends the wait (rather
            # than its retries), with what Airflow and the Connect server logged
            failed = failed_tasks(af, filled)
            assert not failed, f"{failed}\n{af.log_tail()}\n{server_tail(tmp_path / 'connect')}"
            assert time.monotonic() < deadline, f"backfill still {states}\n{af.log_tail()}"
            time.sleep(5)
        assert states == ["success"] * len(BACKFILLED), af.log_tail()
        done = af.api("GET", f"/api/v2/backfills/{backfill['id']}")
        assert (done["from_date"][:10], done["to_date"][:10]) == (str(start), str(end))
        check_plugin_pages(af, warehouse, [START, *BACKFILLED])
        updates = publish_events(af, len(BACKFILLED))
        assets = af.api("GET", "/api/v2/assets?name_pattern=feedpipe_published_feeds")["assets"]
        (asset,) = assets
        assert asset["uri"] == f"file://{warehouse}/manifests"
        assert {e["asset_id"] for e in updates} == {asset["id"]}
        assert len(updates) == len(BACKFILLED)
        # the backfill's queries ran in the server's JVM, which wrote the days' tables
        assert str(warehouse) in logged(events)
        # every run with its tasks (day 1's, made by dags test, is in the SQLite database)
        tasks = {
            r["logical_date"][:10]: {
                t["task_id"]: t
                for t in af.api(
                    "GET", f"/api/v2/dags/feeds_daily/dagRuns/{r['dag_run_id']}/taskInstances"
                )["task_instances"]
            }
            for r in runs
        }

        # the consumer DAG's run, which the scheduler makes from the publish events once it
        # schedules DAGs (it ran without, so that feeds_daily's own @daily schedule added no
        # run beside the backfill's; feeds_daily is paused first for the same reason)
        af.api("PATCH", "/api/v2/dags/feeds_daily", {"is_paused": True})
        af.restart("scheduler", AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE="True")
        consumed = asset_triggered_runs(af, {e["id"] for e in updates})
        for consumer, events in consumed:
            assert consumer["state"] == "success", af.log_tail()
            # all from publish_day
            assert {(e["source_dag_id"], e["source_task_id"]) for e in events} == {
                ("feeds_daily", "publish_day")
            }
        run = f"/api/v2/dags/{CONSUMER}/dagRuns/{consumed[-1][0]['dag_run_id']}"
        summary = af.api(
            "GET", f"{run}/taskInstances/summarize_published_day/xcomEntries/return_value"
        )["value"]
        assert str(end) in str(summary) and FORCED in str(summary), summary

    assert sorted(tasks) == [str(d) for d in BACKFILLED]
    for day, by_task in tasks.items():
        assert set(by_task) == {WAIT_TASK_ID, *TASK_IDS.values()}, day
        for task_id, ti in by_task.items():
            assert (ti["state"], ti["try_number"]) == ("success", 1), (day, task_id)
    # the metadata database the scheduler wrote, read directly: the same, and nothing else
    every_task = {WAIT_TASK_ID, *TASK_IDS.values()}
    assert postgres_task_instances(db) == {
        (str(d), t): ("success", 1) for d in BACKFILLED for t in every_task
    }
    for before, after in itertools.pairwise(sorted(tasks)):  # depends_on_past: in day order
        for task_id, ti in tasks[after].items():
            assert tasks[before][task_id]["end_date"] <= ti["start_date"], task_id

    for ds in BACKFILLED:
        manifest = json.loads((warehouse / "manifests" / f"ds={ds}" / "manifest.json").read_text())
        assert manifest["plan"]["served"] == FORCED, ds
        assert manifest["stages"]["plan"]["forced"] is True
    assert (warehouse / "manifests" / "latest").read_text() == end.isoformat()
    expected = naive.feeds(landing, end, START, K)
    got = FeedReader(str(warehouse), end).feeds(sorted(expected), K)
    assert {c: [i.event_id for i in f] for c, f in got.items()} == expected
    # load_store ran after each publish_day, on the Connect server: the store serves the last
    # day, the naive feeds
    served = StoreReader(env["FEEDPIPE_STORE"])
    assert served.ds == end
    got = served.feeds(sorted(expected), K)
    assert {c: [i.event_id for i in f] for c, f in got.items()} == expected


CONSUMER = "feeds_consumer_example"


def failed_tasks(af, runs: list[dict]) -> list[tuple[str, str, str]]:
    """(run, task, state) of the runs' tasks that failed or wait for a retry."""
    return [
        (r["dag_run_id"], t["task_id"], t["state"])
        for r in runs
        for t in af.api("GET", f"/api/v2/dags/feeds_daily/dagRuns/{r['dag_run_id']}/taskInstances")[
            "task_instances"
        ]
        if t["state"] in ("failed", "up_for_retry", "upstream_failed")
    ]


def server_tail(root: Path) -> str:
    """The end of the Connect server's log (``support.servers.connect_server``)."""
    log = root / "server.log"
    return "--- connect server\n" + (log.read_text()[-4000:] if log.exists() else "(no log)")


def asset_triggered_runs(af, events: set[int]) -> list[tuple[dict, list[dict]]]:
    """The consumer DAG's finished asset-triggered runs, each with the asset events it
    consumed, oldest first, once they have consumed one of ``events`` at least. (Not all of
    them: a run consumes the events up to the moment it was queued, and an event that arrives
    while a run is queued is left for the run the next event queues.)"""
    deadline = time.monotonic() + 300
    while True:
        runs = af.api("GET", f"/api/v2/dags/{CONSUMER}/dagRuns")["dag_runs"]
        done = sorted(
            (
                r
                for r in runs
                if r["run_type"] == "asset_triggered" and r["state"] in ("success", "failed")
            ),
            key=lambda r: r["run_after"],
        )
        consumed = [
            (
                r,
                af.api(
                    "GET", f"/api/v2/dags/{CONSUMER}/dagRuns/{r['dag_run_id']}/upstreamAssetEvents"
                )["asset_events"],
            )
            for r in done
        ]
        if events & {e["id"] for _, es in consumed for e in es}:
            return consumed
        assert time.monotonic() < deadline, f"events {events} not consumed: {runs}\n{af.log_tail()}"
        time.sleep(3)


def publish_events(af, published: int) -> list[dict]:
    """The asset events the backfill's publish tasks made (one per published day), once they
    are all there."""
    deadline = time.monotonic() + 120
    while True:
        events = af.api(
            "GET", "/api/v2/assets/events?source_dag_id=feeds_daily&source_task_id=publish_day"
        )["asset_events"]
        backfilled = [e for e in events if "backfill" in str(e.get("source_run_id"))]
        if len(backfilled) >= published:
            return backfilled
        assert time.monotonic() < deadline, f"{len(backfilled)} of {published} events: {events}"
        time.sleep(5)


def check_plugin_pages(af, warehouse: Path, days: list[dt.date]) -> None:
    """The plugin's pages as the API server serves them, against the warehouse's tables."""
    plugins = af.api("GET", "/api/v2/plugins")["plugins"]
    mine = next(p for p in plugins if p["name"] == "feedpipe_reports")
    assert [v["href"] for v in mine["external_views"]] == ["feedpipe/"]
    assert af.request("GET", "/feedpipe/", auth=False)[0] == 401
    status, index = af.request("GET", "/feedpipe/")
    assert status == 200, index
    listed = re.findall(r"href=[\"']days/(\d{4}-\d\d-\d\d)[\"']", index)
    assert listed == [str(d) for d in sorted(days, reverse=True)]
    assert index.count("not published") == 0
    for ds in days:
        status, page = af.request("GET", f"/feedpipe/days/{ds}")
        assert status == 200, page
        assert re.search(r"id=[\"']status[\"'] class=[\"']ok[\"']>published<", page)
        assert re.search(r"id=[\"']quality[\"'] class=[\"']ok[\"']>all suites passed<", page)
        cost = pq.read_table(
            version(warehouse, "plan", "plan_cost", ds, published=True)
        ).to_pylist()
        for r in cost:
            row = re.search(
                rf"<tr class=[\"']\w*[\"'] data-strategy=[\"']{r['strategy']}[\"']>(.*?)</tr>",
                page,
                re.S,
            )
            assert row, r["strategy"]
            # numbers as the page shows them, with thousands separators
            cells = [c.replace(",", "") for c in re.findall(r"<td[^>]*>([^<]*)", row.group(1))]
            assert float(cells[1]) == pytest.approx(r["total_cost"], abs=0.05)
            assert (int(cells[5]), int(cells[6])) == (r["push_edges"], r["pull_edges"])
            assert ("(served)" in cells[0]) == r["chosen"]
    assert af.request("GET", "/feedpipe/days/2025-13-01")[0] == 400
    assert af.request("GET", "/feedpipe/days/2020-01-01")[0] == 404


def test_a_day_whose_landing_never_arrives_fails_at_the_sensor(home):
    """``dags test`` of a day without landing files, with a sensor that checks every second
    and gives up after 6 seconds: the run fails at ``wait_for_landing`` (what its check logs:
    tests/unit/test_dag_file.py), no stage runs and nothing of the day is written."""
    env, _, warehouse = home
    day = START + dt.timedelta(days=30)
    fast = {**env, "FEEDPIPE_LANDING_POKE_SECONDS": "1", "FEEDPIPE_LANDING_TIMEOUT_MINUTES": "0.1"}
    result = dags_test(fast, day)
    states = task_states(fast, day)
    assert states[WAIT_TASK_ID] == "failed", result.stderr[-3000:]
    assert {states[TASK_IDS[s]] for s in STAGES} == {"upstream_failed"}
    assert (
        not list(warehouse.glob(f"*/*/ds={day}"))
        and not (warehouse / "manifests" / f"ds={day}").exists()
    )


def postgres_task_instances(db: Database) -> dict[tuple[str, str], tuple[str, int]]:
    """(day, task) -> (state, try_number) of every feeds_daily task instance in the
    PostgreSQL metadata database."""
    import psycopg2

    with contextlib.closing(psycopg2.connect(db.dsn)) as con, con.cursor() as cur:
        cur.execute(
            "SELECT to_char(r.logical_date AT TIME ZONE 'UTC', 'YYYY-MM-DD'), ti.task_id,"
            " ti.state, ti.try_number FROM task_instance ti JOIN dag_run r"
            " ON r.dag_id = ti.dag_id AND r.run_id = ti.run_id WHERE ti.dag_id = 'feeds_daily'"
        )
        return {(day, task): (state, tries) for day, task, state, tries in cur.fetchall()}


def task_states(env: dict[str, str], day: dt.date) -> dict[str, str]:
    """The states of the day's feeds_daily tasks, read from the metadata database (what
    ``airflow tasks states-for-dag-run`` prints, without two more Airflow processes)."""
    db = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(db)) as con:
        rows = con.execute(
            "SELECT ti.task_id, ti.state FROM task_instance ti JOIN dag_run r"
            " ON r.dag_id = ti.dag_id AND r.run_id = ti.run_id"
            " WHERE r.dag_id = 'feeds_daily' AND substr(r.logical_date, 1, 10) = ?",
            (str(day),),
        ).fetchall()
    return dict(rows)
