"""Plain-text reports over a day's outputs (read with pyarrow, no Spark)."""

from __future__ import annotations

import datetime as dt
import json

from jobs.common.config import Settings
from jobs.common.storage import Storage, ds_dir
from jobs.publish import dataset, is_published


def plan_cost_rows(wh: Storage, ds: dt.date) -> list[dict]:
    return sorted(
        dataset(wh, "plan", "plan_cost", ds_dir(ds)).to_table().to_pylist(),
        key=lambda r: r["total_cost"],
    )


def text_report(settings: Settings, ds: dt.date) -> str:
    wh = Storage.at(settings.warehouse)
    if not wh.is_dir("plan", "plan_cost", ds_dir(ds)):
        return f"no plan for {ds} in {wh.uri()}"
    rows = plan_cost_rows(wh, ds)
    pure = min(
        (r["total_cost"] for r in rows if r["strategy"] in ("push-all", "pull-all")), default=None
    )
    h, el = (
        (rows[0]["push_cost"], rows[0]["pull_cost"])
        if rows
        else (settings.push_cost, settings.pull_cost)
    )
    out = [
        f"feedpipe plan cost for {ds}  (H={h:g}, L={el:g}; cost per hour; "
        f"{'published' if is_published(wh, ds) else 'NOT published'})",
        f"  {'strategy':<20} {'total':>12} {'maint.':>12} {'eval.':>12} {'vs best pure':>12} "
        f"{'push':>9} {'pull':>9} {'views':>7} {'src p50/p95/p99':>16} {'in target':>10}",
    ]
    for r in rows:
        rel = f"{100 * (r['total_cost'] / pure - 1):+.1f}%" if pure else "n/a"
        pct = "/".join(
            f"{r[c]:g}" if r[c] is not None else "-"
            for c in ("sources_p50", "sources_p95", "sources_p99")
        )
        mark = " *" if r["chosen"] else "  "
        share = r.get("latency_share")
        target = (
            f"{100 * share:.1f}%{'' if r.get('latency_met') else '!'}" if share is not None else "-"
        )
        out.append(
            f"{mark}{r['strategy']:<20} {r['total_cost']:>12.1f} {r['maintenance_cost']:>12.1f} "
            f"{r['evaluation_cost']:>12.1f} {rel:>12} {r['push_edges']:>9} {r['pull_edges']:>9} "
            f"{r['views']:>7} {pct:>16} {target:>10}"
        )
    out.append(
        f"  (* = served; in target: share of feed views within {settings.latency_bound} "
        f"{settings.latency_metric}, ! = below {100 * settings.latency_quantile:g}%)"
    )
    inactive = rows[0].get("inactive_consumers") if rows else None
    if inactive:
        out.append(f"  {inactive} inactive consumers: no materialized feed, served by pull")

    manifest = ("manifests", ds_dir(ds), "manifest.json")
    if wh.exists(*manifest):
        m = json.loads(wh.read_text(*manifest))
        for table, c in m.get("input", {}).items():
            out.append(
                f"  input {table:<8} {c['rows_in']:>10} rows = {c['clean']} clean"
                f" + {c['duplicates']} duplicates + {c['quarantined']} quarantined"
            )
    return "\n".join(out)
