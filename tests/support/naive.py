"""The naive answer, computed from the landing files alone with pandas.

Independent of the pipeline: it re-reads the raw files, replays the follow graph and the
topic definitions, evaluates every topic's predicate on every event of the days it is in
force (``jobs.common.predicates.holds``, the reference checked on hand-worked cases), and
takes, for every consumer, the latest k of all events of the producers and topics it follows
at the end of ds, each event once.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pandas as pd


def _read(path: Path) -> pd.DataFrame:
    name = path.name.lower()
    if ".parquet" in name:
        return pd.read_parquet(path)
    if ".csv" in name:
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    return pd.read_json(path, lines=True, dtype=False)


def read_table(landing: Path, table: str, ds: dt.date) -> pd.DataFrame:
    folder = landing / table / f"ds={ds}"
    frames = [_read(p) for p in sorted(folder.iterdir()) if p.is_file()] if folder.exists() else []
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _utc(values: pd.Series) -> pd.Series:
    return pd.to_datetime(values, utc=True, format="ISO8601")


def graph(landing: Path, ds: dt.date, start: dt.date) -> set[tuple[str, str]]:
    """Edges at the end of ``ds``: a snapshot replaces, a change log applies in ts order
    (an unfollow at the same instant as a follow wins)."""
    edges: set[tuple[str, str]] = set()
    day = start
    while day <= ds:
        df = read_table(landing, "follows", day)
        if not df.empty:
            if "op" not in df.columns:
                edges = set(zip(df["consumer_id"], df["producer_id"], strict=True))
            else:
                df = df.assign(
                    _ts=_utc(df["ts"]), _o=(df["op"].str.lower() == "unfollow").astype(int)
                )
                for r in df.sort_values(["_ts", "_o"], kind="stable").itertuples():
                    (edges.add if r.op.lower() == "follow" else edges.discard)(
                        (r.consumer_id, r.producer_id)
                    )
        day += dt.timedelta(days=1)
    return {(c, p) for c, p in edges if c != p}


def attributes(value: object) -> dict[str, str]:
    """An event's attributes as landed: a Parquet map (pairs), JSON text, or none."""
    if value is None or (isinstance(value, float) and pd.isna(value)) or value == "":
        return {}
    if isinstance(value, str):
        return dict(json.loads(value))
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    return {str(k): str(v) for k, v in list(value)}  # type: ignore[call-overload]


def events(
    landing: Path, ds: dt.date, start: dt.date, payload: bool = False, with_day: bool = False
) -> pd.DataFrame:
    """Every event landed from ``start`` to ``ds``, first arrival of an id kept; ``payload``:
    with its payload (None when it has none; an empty CSV field is none); ``with_day``: with
    ``_day`` (the day it landed) and ``attributes`` (a dict)."""
    frames = []
    day = start
    while day <= ds:
        df = read_table(landing, "events", day)
        if not df.empty:
            cols = ["event_id", "producer_id", "created_at"]
            if payload:
                if "payload" not in df.columns:
                    df = df.assign(payload=None)
                df["payload"] = [None if pd.isna(v) or v == "" else v for v in df["payload"]]
                cols.append("payload")
            if with_day:
                raw = df["attributes"] if "attributes" in df.columns else [None] * len(df)
                df = df.assign(attributes=[attributes(v) for v in raw])
                cols.append("attributes")
            frames.append(df[cols].assign(_day=day))
        day += dt.timedelta(days=1)
    ev = pd.concat(frames, ignore_index=True)
    ev["created_at"] = (
        _utc(ev["created_at"].astype(str)) if ev["created_at"].dtype == object else ev["created_at"]
    )
    ev["created_at"] = pd.to_datetime(ev["created_at"], utc=True)
    ev = ev.sort_values("_day", kind="stable").drop_duplicates("event_id")
    return ev if with_day else ev.drop(columns="_day")


def topics(landing: Path, day: dt.date, start: dt.date) -> dict[str, str]:
    """topic_id -> predicate in force on ``day`` as landed (the last snapshot up to it;
    an empty folder is an empty snapshot), before any quarantine."""
    defs: dict[str, str] = {}
    d = start
    while d <= day:
        if (landing / "topics" / f"ds={d}").is_dir():
            df = read_table(landing, "topics", d)
            rows = [] if df.empty else list(zip(df["topic_id"], df["predicate"], strict=True))
            spellings: dict[str, set[str]] = {}
            for t, pred in rows:
                spellings.setdefault(str(t), set()).add(str(pred))
            # an id defined two ways is ambiguous: dropped
            defs = {t: next(iter(p)) for t, p in spellings.items() if len(p) == 1 and t.strip()}
        d += dt.timedelta(days=1)
    return defs


def valid_topics(landing: Path, day: dt.date, start: dt.date) -> dict[str, list]:
    """topic_id -> parsed terms of the definitions in force on ``day``: malformed ones and
    those whose id is an account (an event's producer up to ``day``, or a consumer of the
    day's graph or views) dropped."""
    from jobs.common.predicates import Malformed, parse

    defined = topics(landing, day, start)
    if not defined:
        return {}
    accounts = set(events(landing, day, start)["producer_id"])
    accounts |= {c for c, _ in graph(landing, day, start)}
    views = read_table(landing, "views", day)
    if not views.empty:
        accounts |= set(views["consumer_id"])
    out = {}
    for t, pred in defined.items():
        if t in accounts:
            continue
        try:
            out[t] = parse(pred)
        except Malformed:
            continue
    return out


def streams(landing: Path, ds: dt.date, start: dt.date, payload: bool = False) -> pd.DataFrame:
    """stream_id, event_id, producer_id (the author), created_at (, payload): every event in
    its author's stream, and in the stream of every topic in force on the day it landed
    whose predicate holds for it, evaluated term by term on every event (brute force)."""
    from jobs.common.predicates import holds

    ev = events(landing, ds, start, payload=payload, with_day=True)
    own = ev.assign(stream_id=ev["producer_id"])
    matched = []
    for day, rows in ev.groupby("_day"):
        defs = valid_topics(landing, day, start)
        if not defs:
            continue
        for t, terms in defs.items():
            hit = [holds(terms, a) for a in rows["attributes"]]
            matched.append(rows[hit].assign(stream_id=t))
    out = pd.concat([own, *matched], ignore_index=True)
    return out.drop(columns=["_day", "attributes"])


def feeds(
    landing: Path, ds: dt.date, start: dt.date, k: int, consumers: set[str] | None = None
) -> dict[str, list[str]]:
    """consumer_id -> event ids of its naive feed, newest first (of ``consumers`` only, when
    given)."""
    edges = graph(landing, ds, start)
    if consumers is not None:
        edges = {(c, p) for c, p in edges if c in consumers}
    g = pd.DataFrame(sorted(edges), columns=["consumer_id", "stream_id"])

    ev = streams(landing, ds, start)
    joined = g.merge(ev, on="stream_id").drop_duplicates(["consumer_id", "event_id"])
    joined = joined.sort_values(
        ["consumer_id", "created_at", "event_id"], ascending=[True, False, False]
    )
    top = joined.groupby("consumer_id", sort=False).head(k)
    out = {c: [] for c in g["consumer_id"].unique()}
    for c, ids in top.groupby("consumer_id", sort=False)["event_id"]:
        out[c] = list(ids)
    return out


def store(landing: Path, ds: dt.date, start: dt.date, k: int) -> dict[str, tuple[str, str | None]]:
    """event_id -> (producer_id, payload) of every event in some producer's latest k at the
    end of ds: what the day's event store must hold."""
    ev = streams(landing, ds, start, payload=True).sort_values(
        ["stream_id", "created_at", "event_id"], ascending=[True, False, False]
    )
    top = ev.groupby("stream_id", sort=False).head(k)
    return {e: (p, v) for e, p, v in zip(top.event_id, top.producer_id, top.payload, strict=True)}


def pools(landing: Path, ds: dt.date, start: dt.date, k_p: int) -> pd.DataFrame:
    """consumer_id, producer_id, event_id, created_at, prank: every followed producer's latest
    k_p events (prank 1 = its newest) at the end of ds."""
    g = pd.DataFrame(sorted(graph(landing, ds, start)), columns=["consumer_id", "producer_id"])
    ev = events(landing, ds, start).sort_values(
        ["producer_id", "created_at", "event_id"], ascending=[True, False, False]
    )
    ev["prank"] = ev.groupby("producer_id").cumcount() + 1
    return g.merge(ev[ev["prank"] <= k_p], on="producer_id")


def feeds_per_producer(
    landing: Path, ds: dt.date, start: dt.date, k: int, k_p: int, hours: float
) -> dict[str, list[str]]:
    """Per-producer coherency with k,t-diversity, from the definition: the pool is each
    followed producer's latest k_p events; the newest event of every producer that posted in
    the last ``hours`` before the end of ds is shown first (newest first, at most k), the
    rest of the k slots go to the newest remaining pool events; shown newest first."""
    now = pd.Timestamp(ds + dt.timedelta(days=1), tz="UTC")
    since = now - pd.Timedelta(hours=hours)
    pool = pools(landing, ds, start, k_p)
    g = graph(landing, ds, start)
    out: dict[str, list[str]] = {c: [] for c, _ in g}
    for c, rows in pool.groupby("consumer_id"):
        rows = rows.sort_values(["created_at", "event_id"], ascending=[False, False])
        first = (rows["prank"] == 1) & (rows["created_at"] >= since)
        chosen = pd.concat([rows[first].head(k), rows[~first]]).head(k)
        chosen = chosen.sort_values(["created_at", "event_id"], ascending=[False, False])
        out[str(c)] = list(chosen["event_id"])
    return out
