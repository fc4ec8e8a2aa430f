"""A table's write with and without its contract's plain-encoded ids, alternated in one session.

    python -m bench.encoding plan/edge_plan --warehouse var/bench/ff2010-4/warehouse
                             --ds 2026-01-02 [--reps 4]

Reads the table's partition ``--ds`` from the warehouse, keeps it in memory partitioned by its
first sort key, then writes it as ``write_partition`` does (range-partitioned into 4 files,
sorted on the contract's sort key) ``--reps`` times each way, alternated: with Parquet's
dictionary on every column, and with the contract's ``"dictionary": false`` columns plain.
Prints one JSON line per write (seconds, MB on disk). The writes go to a hidden scratch
folder in the warehouse, removed at the end. docs/tuning.md, "Plain encoding of ids".
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from jobs.common import versions
from jobs.common.config import load_settings
from jobs.common.spark import build_session
from jobs.common.storage import Storage
from jobs.common.tables import contract, plain_encoding

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", help="layer/name of a contract, e.g. plan/edge_plan")
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--ds", required=True, type=dt.date.fromisoformat)
    ap.add_argument("--reps", type=int, default=4)
    args = ap.parse_args(argv)
    c = contract(*args.table.split("/"))
    if not plain_encoding(c):
        raise SystemExit(f"{args.table}: no column of its contract is marked plain")
    spark = build_session(load_settings(None), f"feedpipe-bench-encoding-{c.name}")
    from pyspark.sql import functions as F

    found = versions.locate(Storage.at(args.warehouse), c.ref(), args.ds)
    if found is None:
        raise SystemExit(f"{args.table} has no version on {args.ds} in {args.warehouse}")
    src = Path(args.warehouse).joinpath(*found)
    kept = spark.read.parquet(str(src)).repartition(8, c.sort_by[0]).persist()
    rows = kept.count()
    out = kept.repartitionByRange(4, F.col(c.sort_by[0])).sortWithinPartitions(*c.sort_by)
    scratch = Path(tempfile.mkdtemp(prefix=".bench-encoding-", dir=args.warehouse))
    try:
        for rep in range(args.reps):
            for variant in ("dictionary", "ids plain"):
                writer = out.write.mode("overwrite")
                if variant == "ids plain":
                    writer = writer.options(**plain_encoding(c))
                target = scratch / variant.replace(" ", "_")
                started = time.monotonic()
                writer.parquet(str(target))
                seconds = time.monotonic() - started
                size = sum(p.stat().st_size for p in target.glob("*.parquet"))
                line = {"table": args.table, "rows": rows, "rep": rep, "variant": variant}
                line |= {"seconds": round(seconds, 2), "mb": round(size / 1e6, 1)}
                print(json.dumps(line), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
