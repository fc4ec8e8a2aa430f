"""Real servers the tests start on 127.0.0.1: a free port, an S3-compatible endpoint."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def s3_server() -> Iterator[dict[str, str]]:
    """moto's S3 server in its own process, accepting multipart parts from 1 KiB (AWS: 5 MiB)
    so small test files can go up in several parts. Yields the environment that points boto3,
    pyarrow and S3A at it."""
    port = free_port()
    env = {**os.environ, "S3_UPLOAD_PART_MIN_SIZE": "1024"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
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
