"""The naive answer, computed from the landing files alone with pandas.

Independent of the pipeline: it re-reads the raw files, replays the follow graph and takes,
for every consumer, the latest k of all events of the producers it follows at the end of ds.
"""

from __future__ import annotations

import datetime as dt
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


def events(landing: Path, ds: dt.date, start: dt.date, payload: bool = False) -> pd.DataFrame:
    """Every event landed from ``start`` to ``ds``, first arrival of an id kept; ``payload``:
    with its payload (None when it has none; an empty CSV field is none)."""
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
            frames.append(df[cols].assign(_day=day))
        day += dt.timedelta(days=1)
    ev = pd.concat(frames, ignore_index=True)
    ev["created_at"] = (
        _utc(ev["created_at"].astype(str)) if ev["created_at"].dtype == object else ev["created_at"]
    )
    ev["created_at"] = pd.to_datetime(ev["created_at"], utc=True)
    return ev.sort_values("_day", kind="stable").drop_duplicates("event_id").drop(columns="_day")


def feeds(
    landing: Path, ds: dt.date, start: dt.date, k: int, consumers: set[str] | None = None
) -> dict[str, list[str]]:
    """consumer_id -> event ids of its naive feed, newest first (of ``consumers`` only, when
    given)."""
    edges = graph(landing, ds, start)
    if consumers is not None:
        edges = {(c, p) for c, p in edges if c in consumers}
    g = pd.DataFrame(sorted(edges), columns=["consumer_id", "producer_id"])

    ev = events(landing, ds, start)
    joined = g.merge(ev, on="producer_id")
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
    ev = events(landing, ds, start, payload=True).sort_values(
        ["producer_id", "created_at", "event_id"], ascending=[True, False, False]
    )
    top = ev.groupby("producer_id", sort=False).head(k)
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
