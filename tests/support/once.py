"""Folders the test processes of one run share, each built once by whichever asks first.

``pytest -n 2`` runs test files in two processes; a fixture that builds, say, five days of
a warehouse would build them in both. :func:`shared_folder` builds under a lock in the
run's common temporary folder and lets the other process wait for it. What it returns is
read-only by convention: a test that writes works on a copy (:func:`private_copy`), so no
test sees another's leftovers.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def run_root(factory: pytest.TempPathFactory) -> Path:
    """The temporary folder of the whole run (shared by its worker processes)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_folder(
    factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Path:
    """``<run root>/name``, built by ``build(folder)`` the first time any process asks."""
    root = run_root(factory)
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not done.exists():
                shutil.rmtree(folder, ignore_errors=True)  # a build that failed half-way
                folder.mkdir(parents=True)
                build(folder)
                done.write_text("built\n")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return folder


def private_copy(src: Path | str, dst: Path) -> Path:
    """A test's own copy of a shared folder, to write in."""
    shutil.copytree(src, dst)
    return dst
