"""The gates of a day (``validate``'s policy, before its suites): volume and follow gates
against the day's own history, and which of them fail.

Each verdict (:func:`volume_gate`, :func:`follow_removed_gate`, :func:`follow_added_gate`) is
a pure function of the day's counts and those of earlier published days, which :func:`gates`
gathers from the ledger (docs/data-contracts.md, "Volume gates"). A gate is a dict with
:class:`jobs.common.records.GateResult`: ``gate``, ``table``, ``observed``, ``reference``,
``days``, ``ratio``, ``lower``, ``upper``, ``passed`` (None: off, too little history),
``accepted`` (a failed gate accepted for the day, ``accept_gates``) and ``note``.
"""

from __future__ import annotations

import datetime as dt
import logging

from jobs.common import ledger
from jobs.common.config import Settings
from jobs.common.records import GateResult, IngestRecord, Manifest, TableAccount
from jobs.common.storage import Storage

log = logging.getLogger(__name__)


VOLUME_TABLES = ("events", "views")
"""Landing tables whose daily row counts the volume gates watch (follows, a change log, is
watched by the share of edges it changed instead)."""


def previous_manifests(wh: Storage, ds: dt.date, limit: int) -> list[Manifest]:
    """The manifests of up to ``limit`` published days before ``ds``, newest first."""
    out: list[Manifest] = []
    for day in reversed(wh.list_partitions(ledger.MANIFESTS)):
        if len(out) == limit:
            break
        manifest = ledger.read_manifest(wh, day) if day < ds else None
        if manifest is not None and ledger.is_published(wh, day):
            out.append(manifest)
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
) -> GateResult:
    """One gate's row: ``ratio`` within ``band`` passes; a null ratio is a gate that is off,
    ``note`` saying why."""
    lower, upper = band
    return GateResult(
        gate=gate,
        table=table,
        observed=observed,
        reference=reference,
        days=days,
        ratio=ratio,
        lower=lower,
        upper=upper,
        passed=None if ratio is None else lower <= ratio <= upper,
        note=note,
    )


def too_little_history(days: int, settings: Settings, which: str = "") -> str:
    """Why a gate judged against the previous published days is off."""
    return (
        f"off: {days} previous published day(s){which}, the gate needs "
        f"{settings.volume_min_days} (volume_min_days)"
    )


def volume_gate(
    table: str, today: int, past: list[int], settings: Settings, allowed: bool = False
) -> GateResult:
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


def follow_removed_gate(follows: TableAccount, settings: Settings) -> GateResult:
    """The share of the previous day's follow edges that the day removed, at most
    ``max_follow_removed`` (a broken export that drops much of the graph); off on a day
    without a previous graph."""
    before = follows.edges_before
    share = (follows.edges_removed or 0) / before if before else None
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


def follow_added_gate(follows: TableAccount, past: list[float], settings: Settings) -> GateResult:
    """The share of edges the day added (over the previous day's edges) against the median
    share of ``past`` days (the graph's own history): at most ``follow_added_high`` times it.
    A young or fast-growing graph adds much every day and passes; a day that adds far more
    than the graph ever did (two exports merged, another graph landed) does not. Off with
    fewer than ``volume_min_days`` past days, a median of 0 or ``follow_added_high`` 0."""
    import statistics

    share = follows.added_share
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


def gates(settings: Settings, ds: dt.date, wh: Storage, ingest: IngestRecord) -> list[GateResult]:
    """The day's gates (docs/data-contracts.md, "Volume gates"), one row each: a
    :func:`volume_gate` per table of ``VOLUME_TABLES`` over up to ``volume_days`` previous
    published days (those that ran the table as empty on purpose left out), and the follow
    gates (:func:`follow_removed_gate`, :func:`follow_added_gate`). Gates of a kind named in
    ``accept_gates`` are kept with ``accepted`` true. Reads a few small JSON files, no Spark."""
    history = previous_manifests(wh, ds, settings.volume_days)
    allowed = set(ingest.allowed_empty)
    out = []
    for table in VOLUME_TABLES:
        past = [
            m.input[table].rows_in
            for m in history
            if table in m.input and table not in m.allowed_empty
        ]
        today = ingest.tables[table].rows_in if table in ingest.tables else 0
        out.append(volume_gate(table, today, past, settings, table in allowed))
    follows = ingest.tables.get("follows", TableAccount())
    added = [
        share
        for share in (m.input["follows"].added_share for m in history if "follows" in m.input)
        if share is not None
    ]
    out.append(follow_removed_gate(follows, settings))
    out.append(follow_added_gate(follows, added, settings))
    return [accepted(g, ds, settings) for g in out]


def accepted(g: GateResult, ds: dt.date, settings: Settings) -> GateResult:
    """The gate, marked ``accepted`` for the day when its kind is in ``accept_gates``."""
    kind = "volume" if g.gate == "volume" else "follows"
    if kind not in settings.accept_gates:
        return g
    note = (g.note + "; " if g.note else "") + f"accepted for {ds} (accept_gates = {kind})"
    return g.model_copy(update={"accepted": True, "note": note})


def gate_line(g: GateResult, ds: dt.date | str) -> str:
    """Why a gate failed, in words and figures."""
    if g.gate == "volume":
        return (
            f"volume gate: {g.table} has {g.observed or 0:,.0f} rows on {ds}, "
            f"{g.ratio or 0:.2f}x the median {g.reference or 0:,.0f} of the {g.days} previous "
            f"published days (allowed {g.lower:g}x to {g.upper:g}x: volume_low, volume_high)"
        )
    if g.gate == "follow_added":
        return (
            f"follow gate: {g.observed or 0:.1%} of the follow edges were added on {ds}, "
            f"{g.ratio or 0:.2f}x the median share {g.reference or 0:.2%} of the {g.days} "
            f"previous published days (allowed up to {g.upper:g}x: follow_added_high)"
        )
    return (
        f"follow gate: {g.observed or 0:.1%} of the {g.reference or 0:,.0f} follow edges were "
        f"removed on {ds} (allowed up to {g.upper:.0%}: max_follow_removed)"
    )


def failed_gates(day_gates: list[GateResult]) -> list[GateResult]:
    """The gates that failed and were not accepted for the day."""
    return [g for g in day_gates if not g.holds]
