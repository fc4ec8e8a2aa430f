"""Real servers the tests use on 127.0.0.1: a free port, an S3-compatible endpoint, a Spark
Connect server, a database of a test's own on the machine's PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

from support.requires import missing


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def s3_server() -> Iterator[dict[str, str]]:
    """moto's S3 server in its own process (``support.moto_main``), accepting multipart parts
    from 1 KiB (AWS: 5 MiB) so small test files can go up in several parts. Yields the
    environment that points boto3, pyarrow and S3A at it."""
    port = free_port()
    env = {**os.environ, "S3_UPLOAD_PART_MIN_SIZE": "1024"}
    server = [sys.executable, str(Path(__file__).with_name("moto_main.py"))]
    proc = subprocess.Popen(
        [*server, "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the S3 server on port {port} did not start") from None
                time.sleep(0.2)
        yield {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "FEEDPIPE_S3_ENDPOINT": endpoint,
        }
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def connect_server(root: Path) -> Iterator[tuple[str, Path]]:
    """``feedpipe connect-server`` on a free port with a 1 GB heap and its event log in
    ``root/events``; yields its URL and that folder, whose log is complete once the server
    has stopped (after the block)."""
    import signal
    import socket

    events = root / "events"
    events.mkdir(parents=True)
    port = free_port()
    env = {**os.environ, "FEEDPIPE_DRIVER_MEMORY": "1g"}
    env["FEEDPIPE_SPARK_CONF"] = (
        f"spark.eventLog.enabled=true,spark.eventLog.compress=false,spark.eventLog.dir={events}"
    )
    with (root / "server.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobs", "connect-server", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError((root / "server.log").read_text()[-4000:]) from None
                    time.sleep(0.5)
            yield f"sc://127.0.0.1:{port}", events
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def logged(events: Path) -> str:
    """Everything a Spark event log folder holds, as text."""
    return "\n".join(p.read_text(errors="replace") for p in events.rglob("*") if p.is_file())


POSTGRES = os.environ.get("FEEDPIPE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
"""The PostgreSQL server (a libpq URI) the tests create their databases on: the machine's own,
as CI's, with trust authentication."""


class Database(NamedTuple):
    name: str
    dsn: str
    """libpq's URI (psycopg2, psql)."""
    url: str
    """SQLAlchemy's URL with the psycopg2 driver (Airflow's ``sql_alchemy_conn``)."""


@contextmanager
def postgres_database(prefix: str) -> Iterator[Database]:
    """A new database ``<prefix>_<random>`` on :data:`POSTGRES`, dropped afterwards (with
    whatever connections are left to it). Without the server or the psycopg2 driver the
    calling test is skipped, and fails under ``CI=true``."""
    try:
        import psycopg2
        from psycopg2.extensions import make_dsn, parse_dsn
    except ImportError:
        missing("psycopg2", "the dev extras of pyproject.toml install psycopg2-binary")
    try:
        admin = psycopg2.connect(POSTGRES, connect_timeout=10)
    except psycopg2.OperationalError as exc:
        where = POSTGRES.rsplit("@", 1)[-1]  # no password in a message
        missing(
            f"PostgreSQL at {where} ({' '.join(str(exc).split())})",
            "start the machine's PostgreSQL service, or name a server in FEEDPIPE_TEST_POSTGRES",
        )
    admin.autocommit = True
    name = f"{prefix}_{os.urandom(4).hex()}"
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        params = {**parse_dsn(POSTGRES), "dbname": name}
        user, password = params.get("user", ""), params.get("password")
        host, port = params.get("host", "127.0.0.1"), params.get("port", "5432")
        auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "")
        url = f"postgresql+psycopg2://{auth}@{host}:{port}/{name}"
        yield Database(name, make_dsn(**params), url)
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
