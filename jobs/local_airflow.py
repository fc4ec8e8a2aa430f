"""Run the ``feeds_daily`` DAG with a local Airflow (SQLite metadata database).

Used by ``make demo`` and the DAG tests: ``airflow db migrate`` once, then
``airflow dags test feeds_daily <ds>`` per day, with the stages submitted by
``SparkSubmitOperator`` to ``local[*]``.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[1]


def airflow_env(
    home: Path, landing: str, warehouse: str, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """Environment for Airflow CLI calls: its own home and database, our DAG folder, and the
    feedpipe settings the stages read."""
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AIRFLOW_CONN_FEEDPIPE_SPARK": '{"conn_type": "spark", "host": "local[*]"}',
            "FEEDPIPE_LANDING": landing,
            "FEEDPIPE_WAREHOUSE": warehouse,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
            "GX_ANALYTICS_ENABLED": "False",
            "PYTHONWARNINGS": "ignore::UserWarning",
            "PYTHONDONTWRITEBYTECODE": "",
        }
    )
    env.update(extra or {})
    return env


def airflow(
    env: dict[str, str], *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).parent / "airflow")
    log.info("airflow %s", " ".join(args))
    return subprocess.run([exe, *args], env=env, text=True, capture_output=True, check=check)


def migrate(env: dict[str, str]) -> None:
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    airflow(env, "db", "migrate")


def dags_test(
    env: dict[str, str], ds: dt.date, dag_id: str = "feeds_daily"
) -> subprocess.CompletedProcess[str]:
    """One DAG run for ``ds`` through ``airflow dags test`` (tasks run in this process tree)."""
    return airflow(env, "dags", "test", dag_id, ds.isoformat(), check=False)
