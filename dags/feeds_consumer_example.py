"""An example downstream DAG: runs each time ``feeds_daily`` publishes a day.

It is scheduled on the ``feedpipe_published_feeds`` Asset, which the ``publish_day`` task
updates only when a day has passed validation and its new version is switched in, so it never
sees a refused, gated or half-built day. Its one task reads the newest published day the way
any consumer should (through the day's manifest, ``jobs.common.versions``) and returns a
summary: the day, the served strategy and each feed table's rows. Copy it as the start of an
export to a serving store or a downstream report.
"""

from __future__ import annotations

import os

import pendulum
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Asset

from jobs.common.config import DEFAULT_WAREHOUSE
from jobs.common.pipeline import PUBLISHED_ASSET, published_asset_uri

PUBLISHED_FEEDS = Asset(
    name=PUBLISHED_ASSET,
    uri=published_asset_uri(os.environ.get("FEEDPIPE_WAREHOUSE") or DEFAULT_WAREHOUSE),
)


def summarize() -> dict:
    """The newest published day, read through its manifest: its date, served strategy and
    the rows of its feed tables."""
    from jobs.common import ledger, versions
    from jobs.common.config import load_settings
    from jobs.common.storage import Storage

    wh = Storage.at(load_settings().warehouse)
    ds = ledger.latest(wh)
    day = versions.published(wh, ds) if ds is not None else None
    if day is None or day.manifest is None:
        raise FileNotFoundError(f"no day has been published in {wh.uri()}")
    tables = day.manifest.tables
    summary = {
        "ds": day.ds.isoformat(),
        "served": day.manifest.plan.served,
        "rows": {k: v.rows for k, v in sorted(tables.items()) if k.startswith("feeds/")},
    }
    print(f"feedpipe published {summary['ds']}: served {summary['served']}, {summary['rows']}")
    return summary


with DAG(
    dag_id="feeds_consumer_example",
    doc_md=__doc__,
    schedule=[PUBLISHED_FEEDS],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["feedpipe", "example"],
) as dag:
    PythonOperator(task_id="summarize_published_day", python_callable=summarize)
