"""The follow gates' defaults against data: how much of its graph each generated workload
removes and adds in a day, and how far a day's added share is from the median of the days
before (what ``follow_added`` compares), per profile; and wiki-Vote landed as a growing
network (``feedpipe import snap-edges --growth-days``).

    python -m bench.gates [--days 8] [--seed 11] [--wiki PATH/wiki-Vote.txt.gz]

The graph of each day is replayed from the landing files with pandas (a snapshot replaces
it, a change log applies in time order, unfollows at the same instant last), independently
of ``ingest``. Writes ``bench/results/gates_follows.json``; docs/data-contracts.md, "Choosing
the settings", quotes the figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from bench import provenance

RESULTS = Path(__file__).parent / "results"
START = dt.date(2026, 1, 1)
SCALES = {"ff2010": 0.02, "cz2015": 0.02, "gplus": 0.002}


def graph_days(landing: Path, days: int) -> list[set[tuple[str, str]]]:
    """The follow graph at the end of each day, from the landing's follows folders."""
    edges: set[tuple[str, str]] = set()
    out = []
    for i in range(days):
        folder = landing / "follows" / f"ds={START + dt.timedelta(days=i)}"
        files = sorted(folder.glob("*")) if folder.is_dir() else []
        frames = [
            pd.read_parquet(f) if f.suffix == ".parquet" else pd.read_csv(f, dtype=str)
            for f in files
        ]
        df = pd.concat(frames) if frames else pd.DataFrame()
        if not df.empty and "op" not in df.columns:
            edges = set(zip(df["consumer_id"], df["producer_id"], strict=True))
        elif not df.empty:
            df = df.assign(
                _ts=pd.to_datetime(df["ts"], utc=True), _o=(df["op"] == "unfollow").astype(int)
            )
            for r in df.sort_values(["_ts", "_o"], kind="stable").itertuples():
                (edges.add if r.op == "follow" else edges.discard)((r.consumer_id, r.producer_id))
        out.append(set(edges))
    return out


def churn(graphs: list[set[tuple[str, str]]]) -> dict[str, Any]:
    """Removed and added shares of each day against the day before, and each added share
    over the median of up to seven earlier ones (from the fourth change on)."""
    removed = [len(a - b) / len(a) for a, b in itertools.pairwise(graphs)]
    added = [len(b - a) / len(a) for a, b in itertools.pairwise(graphs)]
    ratios = [
        a / statistics.median(added[max(0, i - 7) : i])
        for i, a in enumerate(added)
        if i >= 3 and statistics.median(added[max(0, i - 7) : i]) > 0
    ]
    return {
        "edges": len(graphs[-1]),
        "removed_max": max(removed),
        "added_max": max(added),
        "added_ratio_max": max(ratios) if ratios else None,
        "added": added,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=8)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--wiki", help="wiki-Vote.txt.gz, landed over --days days as growth")
    args = ap.parse_args(argv)

    from jobs.common.storage import Storage
    from jobs.workloads.generate import PROFILES, generate, scaled
    from jobs.workloads.importers import import_snap_edges

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-gates-") as tmp:
        for name, scale in SCALES.items():
            root = Path(tmp) / name
            generate(
                Storage.at(str(root)), START, args.days, scaled(PROFILES[name], scale), args.seed
            )
            out[f"{name} x{scale}"] = churn(graph_days(root, args.days))
        if args.wiki:
            root = Path(tmp) / "wiki"
            import_snap_edges(
                Path(args.wiki), Storage.at(str(root)), START, seed=args.seed, growth_days=args.days
            )
            out[f"wiki-Vote over {args.days} days"] = churn(graph_days(root, args.days))
    print("| workload | edges | removed, max share | added, max share | added / median, max |")
    print("|---|---:|---:|---:|---:|")
    for name, c in out.items():
        ratio = "-" if c["added_ratio_max"] is None else f"{c['added_ratio_max']:.2f}"
        print(
            f"| {name} | {c['edges']:,} | {c['removed_max']:.2%} | {c['added_max']:.2%} | {ratio} |"
        )
    RESULTS.mkdir(exist_ok=True)
    record = {**provenance(vars(args)), "workloads": out}
    (RESULTS / "gates_follows.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    main()
