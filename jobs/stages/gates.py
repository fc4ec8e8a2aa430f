"""The gates of a day (``validate``'s policy, before its suites): volume and follow gates
against the day's own history, and which of them fail.

Each verdict (:func:`volume_gate`, :func:`follow_removed_gate`, :func:`follow_added_gate`) is
a pure function of the day's counts and those of earlier published days, which :func:`gates`
gathers from the ledger (docs/data-contracts.md, "Volume gates"). A gate is a dict with
``gate``, ``table``, ``observed``, ``reference``, ``days``, ``ratio``, ``lower``, ``upper``,
``passed`` (None: off, too little history), ``accepted`` (a failed gate accepted for the day,
``accept_gates``) and ``note``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import TYPE_CHECKING, Any

from jobs.common import ledger
from jobs.common.config import Settings
from jobs.common.storage import Storage

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


VOLUME_TABLES = ("events", "views")
"""Landing tables whose daily row counts the volume gates watch (follows, a change log, is
watched by the share of edges it changed instead)."""


def previous_manifests(wh: Storage, ds: dt.date, limit: int) -> list[dict[str, Any]]:
    """The manifests of up to ``limit`` published days before ``ds``, newest first."""
    out: list[dict[str, Any]] = []
    for day in reversed(wh.list_partitions(ledger.MANIFESTS)):
        if len(out) == limit:
            break
        if day < ds and ledger.is_published(wh, day) and wh.exists(*ledger.manifest_parts(day)):
            out.append(json.loads(wh.read_text(*ledger.manifest_parts(day))))
    return out


def _gate(
    gate: str,
    table: str,
    observed: float | None,
    reference: float | None,
    days: int,
    ratio: float | None,
    band: tuple[float, float],
    note: str = "",
) -> dict[str, Any]:
    """One gate's row: ``ratio`` within ``band`` passes; a null ratio is a gate that is off,
    ``note`` saying why."""
    lower, upper = band
    return {
        "gate": gate,
        "table": table,
        "observed": observed,
        "reference": reference,
        "days": days,
        "ratio": ratio,
        "lower": lower,
        "upper": upper,
        "passed": None if ratio is None else lower <= ratio <= upper,
        "accepted": False,
        "note": note,
    }


def too_little_history(days: int, settings: Settings, which: str = "") -> str:
    """Why a gate judged against the previous published days is off."""
    return (
        f"off: {days} previous published day(s){which}, the gate needs "
        f"{settings.volume_min_days} (volume_min_days)"
    )


def volume_gate(
    table: str, today: int, past: list[int], settings: Settings, allowed: bool = False
) -> dict[str, Any]:
    """A table's rows read today (a header-only file counts 0) against the median of ``past``
    (the previous published days', newest first): within ``[volume_low, volume_high]`` times
    it. Off (``passed`` null) with fewer than ``volume_min_days`` days, a median of 0, or a
    table run as empty on purpose (``allowed``)."""
    import statistics

    median = statistics.median(past) if past else None
    note = ""
    if allowed:
        note = "off: the table ran as empty on purpose (allow_empty)"
    elif len(past) < settings.volume_min_days:
        note = too_little_history(len(past), settings)
    elif not median:
        note = "off: the previous published days' median is 0"
    ratio = today / median if not note and median else None
    return _gate(
        "volume",
        table,
        float(today),
        float(median) if median is not None else None,
        len(past),
        ratio,
        (settings.volume_low, settings.volume_high),
        note,
    )


def follow_removed_gate(follows: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The share of the previous day's follow edges that the day removed, at most
    ``max_follow_removed`` (a broken export that drops much of the graph); off on a day
    without a previous graph."""
    before = follows.get("edges_before")
    share = follows["edges_removed"] / before if before else None
    return _gate(
        "follow_removed",
        "follows",
        share,
        float(before) if before is not None else None,
        1 if before is not None else 0,
        share,
        (0.0, settings.max_follow_removed),
        "" if share is not None else "off: no follow graph the day before",
    )


def follow_added_gate(
    follows: dict[str, Any], past: list[float], settings: Settings
) -> dict[str, Any]:
    """The share of edges the day added (over the previous day's edges) against the median
    share of ``past`` days (the graph's own history): at most ``follow_added_high`` times it.
    A young or fast-growing graph adds much every day and passes; a day that adds far more
    than the graph ever did (two exports merged, another graph landed) does not. Off with
    fewer than ``volume_min_days`` past days, a median of 0 or ``follow_added_high`` 0."""
    import statistics

    before = follows.get("edges_before")
    share = follows["edges_added"] / before if before else None
    median = statistics.median(past) if past else None
    note = ""
    if share is None:
        note = "off: no follow graph the day before"
    elif not settings.follow_added_high:
        note = "off: follow_added_high is 0"
    elif len(past) < settings.volume_min_days:
        note = too_little_history(len(past), settings, " with a graph the day before")
    elif not median:
        note = "off: the previous published days added no edges"
    ratio = share / median if not note and share is not None and median else None
    return _gate(
        "follow_added",
        "follows",
        share,
        median,
        len(past),
        ratio,
        (0.0, settings.follow_added_high),
        note,
    )


def gates(
    settings: Settings, ds: dt.date, wh: Storage, ingest: dict[str, Any]
) -> list[dict[str, Any]]:
    """The day's gates (docs/data-contracts.md, "Volume gates"), one row each: a
    :func:`volume_gate` per table of ``VOLUME_TABLES`` over up to ``volume_days`` previous
    published days (those that ran the table as empty on purpose left out), and the follow
    gates (:func:`follow_removed_gate`, :func:`follow_added_gate`). Gates of a kind named in
    ``accept_gates`` are kept with ``accepted`` true. Reads a few small JSON files, no Spark."""
    history = previous_manifests(wh, ds, settings.volume_days)
    allowed = set(ingest.get("allowed_empty", []))
    out = []
    for table in VOLUME_TABLES:
        past = [
            int(m["input"][table]["rows_in"])
            for m in history
            if table in m.get("input", {}) and table not in m.get("allowed_empty", [])
        ]
        today = int(ingest["tables"].get(table, {}).get("rows_in", 0))
        out.append(volume_gate(table, today, past, settings, table in allowed))
    follows = ingest["tables"].get("follows", {})
    added = [
        f["edges_added"] / f["edges_before"]
        for f in (m.get("input", {}).get("follows", {}) for m in history)
        if f.get("edges_before")
    ]
    out.append(follow_removed_gate(follows, settings))
    out.append(follow_added_gate(follows, added, settings))
    for g in out:
        kind = "volume" if g["gate"] == "volume" else "follows"
        if kind in settings.accept_gates:
            g["accepted"] = True
            g["note"] = (g["note"] + "; " if g["note"] else "") + (
                f"accepted for {ds} (accept_gates = {kind})"
            )
    return out


def gate_line(g: dict[str, Any], ds: dt.date | str) -> str:
    """Why a gate failed, in words and figures."""
    if g["gate"] == "volume":
        return (
            f"volume gate: {g['table']} has {g['observed']:,.0f} rows on {ds}, "
            f"{g['ratio']:.2f}x the median {g['reference']:,.0f} of the {g['days']} previous "
            f"published days (allowed {g['lower']:g}x to {g['upper']:g}x: volume_low, volume_high)"
        )
    if g["gate"] == "follow_added":
        return (
            f"follow gate: {g['observed']:.1%} of the follow edges were added on {ds}, "
            f"{g['ratio']:.2f}x the median share {g['reference']:.2%} of the {g['days']} previous "
            f"published days (allowed up to {g['upper']:g}x: follow_added_high)"
        )
    return (
        f"follow gate: {g['observed']:.1%} of the {g['reference']:,.0f} follow edges were "
        f"removed on {ds} (allowed up to {g['upper']:.0%}: max_follow_removed)"
    )


def failed_gates(day_gates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The gates that failed and were not accepted for the day."""
    return [g for g in day_gates if g["passed"] is False and not g.get("accepted")]
