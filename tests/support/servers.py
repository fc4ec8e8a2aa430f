"""Real servers the tests start on 127.0.0.1: a free port, an S3-compatible endpoint."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
