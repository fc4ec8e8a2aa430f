"""Dependencies a test needs from the machine: absent, the test is skipped, or under
``CI=true`` fails, so that CI never passes by skipping what it should prove."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[3] / "shared"
"""``../shared`` beside the checkout: the papers and the SNAP data sets."""


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(what: str, how: str) -> None:
    """Skip the calling test (fail it under CI) because ``what`` is absent; ``how`` says how
    to get it."""
    message = f"{what} is missing ({how})"
    if in_ci():
        pytest.fail(message + ": CI must provide it", pytrace=False)
    pytest.skip(message)


def shared_data(name: str) -> Path:
    """``../shared/data/NAME``, or skip (fail under CI)."""
    path = SHARED / "data" / name
    if not path.exists():
        missing(f"../shared/data/{name}", "the SNAP data sets beside the checkout")
    return path
