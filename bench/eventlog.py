"""Where a Spark application's time goes, from its event log.

    python -m bench.eventlog DIR [--stages] [--top 5]

``DIR`` holds event logs (``spark.eventLog.dir``; ``bench/day.py --event-logs`` writes them
under the scale's ``logs/events``). For each application: its wall time, how long Spark jobs
were running (the rest is the driver: session start, query planning, Python, file listing),
the number of jobs, tasks and SQL executions, and the call sites (a job's description where the
stage names it: ``validate clean.events``, ``plan certificate``, ``write feeds/consumer_feed ...``)
whose jobs ran longest, jobs running side by side counted once.
With ``--stages``, every stage with its start offset, duration and task count.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def events(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".zstd":
        text = subprocess.run(
            ["zstd", "-dc", str(path)], capture_output=True, text=True, check=True
        ).stdout
    else:
        text = path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def busy(intervals: list[tuple[int, int]]) -> float:
    """Seconds during which at least one of the (start, end) intervals (ms) was running:
    jobs that run side by side count once."""
    total, end = 0, None
    for b, e in sorted(intervals):
        if end is None or b > end:
            total += e - b
            end = e
        elif e > end:
            total += e - end
            end = e
    return total / 1000


def summarize(evs: list[dict[str, Any]], top: int = 5) -> dict[str, Any]:
    start = next(e for e in evs if e["Event"] == "SparkListenerApplicationStart")
    ends = [e["Timestamp"] for e in evs if e["Event"] == "SparkListenerApplicationEnd"]
    jobs: dict[int, list[Any]] = {}
    for e in evs:
        if e["Event"] == "SparkListenerJobStart":
            props = e.get("Properties") or {}
            site = props.get("spark.job.description") or props.get("callSite.short") or "?"
            jobs[e["Job ID"]] = [e["Submission Time"], None, site]
        elif e["Event"] == "SparkListenerJobEnd" and e["Job ID"] in jobs:
            jobs[e["Job ID"]][1] = e["Completion Time"]
    by_site: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for begin, end, site in jobs.values():
        if end is not None:
            by_site[site].append((begin, end))
    seconds = {site: busy(iv) for site, iv in by_site.items()}
    last = ends[0] if ends else max((j[1] or j[0]) for j in jobs.values())
    first = min((j[0] for j in jobs.values()), default=last)
    return {
        "app": start["App Name"],
        "wall_s": round((last - start["Timestamp"]) / 1000, 2),
        # the session's start, before the first job
        "first_job_s": round((first - start["Timestamp"]) / 1000, 2),
        # while at least one job ran (jobs side by side count once); the rest is the driver
        "jobs_busy_s": round(busy([iv for ivs in by_site.values() for iv in ivs]), 2),
        "jobs": len(jobs),
        "tasks": sum(1 for e in evs if e["Event"] == "SparkListenerTaskEnd"),
        "sql_executions": sum(1 for e in evs if e["Event"].endswith("SQLExecutionStart")),
        "top_call_sites": [
            [site, round(s, 2), len(by_site[site])]
            for site, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:top]
        ],
        "start": start["Timestamp"],
    }


def stages(evs: list[dict[str, Any]], start: int) -> list[str]:
    lines = []
    for e in evs:
        if e["Event"] == "SparkListenerStageCompleted":
            s = e["Stage Info"]
            lines.append(
                f"{(s['Submission Time'] - start) / 1000:8.2f} "
                f"{(s['Completion Time'] - s['Submission Time']) / 1000:7.2f} s "
                f"{s['Number of Tasks']:4d} tasks  {s['Stage Name'][:70]}"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--stages", action="store_true")
    ap.add_argument("--top", type=int, default=5, help="call sites shown per application")
    args = ap.parse_args(argv)
    root = Path(args.dir)  # a folder of event logs, or one application's (v2: a folder)
    files = sorted(
        {p for p in root.glob("**/events_*")}
        | {p for p in root.glob("*") if p.is_file() and not p.name.startswith((".", "appstatus"))}
    )

    if not files:
        print(f"no event logs under {args.dir}", file=sys.stderr)
        return 1
    for path in files:
        evs = events(path)
        s = summarize(evs, args.top)
        print(
            f"{s['app']}: {s['wall_s']} s, first job at {s['first_job_s']} s, jobs running "
            f"{s['jobs_busy_s']} s; {s['jobs']} jobs, {s['tasks']} tasks, "
            f"{s['sql_executions']} SQL executions"
        )
        for site, seconds, n in s["top_call_sites"]:
            print(f"    {seconds:7.2f} s {n:4d} jobs  {site}")
        if args.stages:
            print("\n".join("    " + line for line in stages(evs, s["start"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
