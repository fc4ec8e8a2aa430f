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
from typing import Any

log = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]


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


class LocalAirflow:
    """Airflow's api-server, scheduler and dag-processor on 127.0.0.1 (LocalExecutor on the
    metadata database of ``env``), each in its own process group, for backfills through the
    REST API and for the plugin page. ``with LocalAirflow(env) as af: af.api("GET", ...)``.

    The simple auth manager's ``admin`` gets ``password``; API calls carry a JWT from
    ``POST /auth/token``."""

    def __init__(self, env: dict[str, str], password: str = "feedpipe-admin") -> None:
        import secrets

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.password = password
        home = Path(env["AIRFLOW_HOME"])
        self.logs = home / "logs" / "services"
        self.env = {
            **env,
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._token: str | None = None

    def __enter__(self) -> LocalAirflow:
        import json

        home = Path(self.env["AIRFLOW_HOME"])
        (home / "passwords.json").write_text(json.dumps({"admin": self.password}))
        self.logs.mkdir(parents=True, exist_ok=True)
        try:
            for name in self.SERVICES:
                self._start(name, self.env)
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    SERVICES = ("api-server", "scheduler", "dag-processor")

    def _start(self, name: str, env: dict[str, str]) -> None:
        exe = str(Path(sys.executable).parent / "airflow")
        cmd = [exe, name]
        if name == "api-server":
            cmd += ["--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        with open(self.logs / f"{name}.log", "ab") as out:
            self.procs[name] = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _wait_healthy(self) -> None:
        import time

        deadline = time.monotonic() + 180
        while not self._healthy():
            if time.monotonic() > deadline or any(
                p.poll() is not None for p in self.procs.values()
            ):
                raise RuntimeError(f"Airflow did not become healthy:\n{self.log_tail()}")
            time.sleep(1)

    def restart(self, name: str, **env: str) -> None:
        """Stop one service (``scheduler``, ...) and start it again with ``env`` on top of
        the others' environment, e.g. another ``AIRFLOW__SCHEDULER__*`` setting."""
        self._stop(self.procs.pop(name))
        self._start(name, {**self.env, **env})
        self._wait_healthy()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _healthy(self) -> bool:
        try:
            status, health = self.request("GET", "/api/v2/monitor/health", auth=False)
        except OSError:
            return False
        parts = ("metadatabase", "scheduler", "dag_processor")
        return status == 200 and all(
            (health.get(p) or {}).get("status") == "healthy" for p in parts
        )

    def log_tail(self, chars: int = 3000) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}"
            for p in sorted(self.logs.glob("*.log"))
        )

    def request(
        self, method: str, path: str, body: object = None, auth: bool = True
    ) -> tuple[int, Any]:
        """One HTTP call; returns (status, decoded JSON or text). Raises OSError if down."""
        import json
        import urllib.error
        import urllib.request

        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        text = raw.decode(errors="replace")
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text

    def token(self) -> str:
        if self._token is None:
            status, body = self.request(
                "POST",
                "/auth/token",
                {"username": "admin", "password": self.password},
                auth=False,
            )
            if status not in (200, 201):
                raise RuntimeError(f"POST /auth/token: {status} {body}")
            self._token = str(body["access_token"])
        return self._token

    def api(self, method: str, path: str, body: object = None, attempts: int = 5) -> Any:
        """An authenticated REST call that must succeed (2xx). A 503 is retried: on SQLite,
        Airflow answers 503 ("Database is locked") when the scheduler holds the database
        while, for example, a backfill is created; the request's transaction was rolled back."""
        import time

        for attempt in range(attempts):
            status, out = self.request(method, path, body)
            if status != 503 or attempt == attempts - 1:
                break
            log.info("%s %s: 503, retrying (%s)", method, path, out)
            time.sleep(3 * (attempt + 1))
        if not 200 <= status < 300:
            raise RuntimeError(f"{method} {path}: {status} {out}")
        return out

    def stop(self) -> None:
        for p in self.procs.values():
            self._signal(p, "SIGTERM")
        for p in self.procs.values():
            self._stop(p)
        self.procs = {}

    @staticmethod
    def _signal(p: subprocess.Popen[bytes], name: str) -> None:
        import signal

        if p.poll() is None:
            try:
                os.killpg(p.pid, getattr(signal, name))
            except ProcessLookupError:
                pass

    def _stop(self, p: subprocess.Popen[bytes]) -> None:
        """Stop one service's process group (SIGTERM, then SIGKILL after 30 s)."""
        self._signal(p, "SIGTERM")
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._signal(p, "SIGKILL")
            p.wait(timeout=10)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
