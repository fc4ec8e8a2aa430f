"""feedpipe's page in the Airflow 3 UI: the per-day report read from the warehouse.

A FastAPI app mounted by the API server at ``/feedpipe`` (``fastapi_apps``) and a "Feed plans"
entry in the Browse menu that shows it in the UI (``external_views``). Every route needs an
authenticated Airflow user: the UI's session cookie or an API token (``POST /auth/token``).

* ``/feedpipe/``: the days that have a plan, newest first, published or not (``jobs/templates/
  days.html``);
* ``/feedpipe/days/YYYY-MM-DD``: plan cost by strategy, the push/pull split, input accounting
  and the data-quality outcome of that day (``jobs.serving.report.html_report``, drawn by
  ``jobs/templates/report.html``).

The warehouse is the one the stages use (``FEEDPIPE_WAREHOUSE`` or ``FEEDPIPE_CONFIG`` in the
API server's environment). Nothing is imported from feedpipe until a page is requested.
"""

from __future__ import annotations

import datetime as dt

from airflow.api_fastapi.core_api.security import requires_authenticated
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse

app = FastAPI(title="feedpipe reports", dependencies=[Depends(requires_authenticated())])


def _warehouse():  # type: ignore[no-untyped-def]
    from jobs.common.config import load_settings
    from jobs.common.storage import Storage

    return Storage.at(load_settings().warehouse)


@app.get("/", response_class=HTMLResponse)
def days() -> str:
    from jobs.common.ledger import is_published
    from jobs.common.pages import render
    from jobs.serving.report import report_days

    wh = _warehouse()
    found = [(d, is_published(wh, d)) for d in report_days(wh)]
    return render("days.html", warehouse=wh.uri(), days=found)


@app.get("/days/{ds}", response_class=HTMLResponse)
def day(ds: str) -> str:
    from jobs.serving.report import html_report

    try:
        date = dt.date.fromisoformat(ds)
    except ValueError:
        raise HTTPException(status_code=400, detail=f"not a date (YYYY-MM-DD): {ds!r}") from None
    try:
        return html_report(_warehouse(), date, links={"all days": "../"})
    except FileNotFoundError as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None


class FeedpipeReports(AirflowPlugin):
    name = "feedpipe_reports"
    # the plugin API's class attributes
    fastapi_apps = [  # noqa: RUF012
        {"app": app, "url_prefix": "/feedpipe", "name": "feedpipe reports"}
    ]
    external_views = [  # noqa: RUF012
        {
            "name": "Feed plans",
            "href": "feedpipe/",
            "destination": "nav",
            "category": "browse",
            "url_route": "feedpipe_reports",
        }
    ]
