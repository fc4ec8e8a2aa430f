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


def report_days(wh: Storage) -> list[dt.date]:
    """Days with a plan, newest first."""
    return sorted(wh.list_partitions("plan", "plan_cost"), reverse=True)


_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0 1.5em}"
    "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}"
    "th{background:#f3f3f3}td.l,th.l{text-align:left}tr.served{font-weight:bold}"
    ".bar{display:inline-block;height:.8em;background:#4a7fb5}"
    ".bar.pull{background:#e39b3a}.ok{color:#2a7d2a}.bad{color:#b22}"
)


def html_report(wh: Storage, ds: dt.date, links: dict[str, str] | None = None) -> str:
    """One day as an HTML page: plan cost by strategy, the push/pull split, input accounting
    and the data-quality outcome. ``links`` maps labels to URLs shown at the top."""
    from html import escape

    if not wh.is_dir("plan", "plan_cost", ds_dir(ds)):
        raise FileNotFoundError(f"no plan for {ds} in {wh.uri()}")
    rows = plan_cost_rows(wh, ds)
    pure = min(
        (r["total_cost"] for r in rows if r["strategy"] in ("push-all", "pull-all")), default=None
    )
    published = is_published(wh, ds)
    nav = " · ".join(f'<a href="{escape(u)}">{escape(t)}</a>' for t, u in (links or {}).items())
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>feedpipe {ds}</title><style>{_STYLE}</style></head><body>",
        f"<p>{nav}</p>" if nav else "",
        f"<h1>feedpipe, {ds}</h1>",
        f"<p id='status' class='{'ok' if published else 'bad'}'>"
        f"{'published' if published else 'not published'}</p>",
        "<h2>Plan cost by strategy</h2>",
        "<p>Modeled cost per hour: H per event pushed into a view, L per source read at view "
        "time (docs/cost-model.md).</p>",
        "<table id='plan-cost'><tr><th class='l'>strategy</th><th>total</th><th>maintenance"
        "</th><th>evaluation</th><th>vs best pure</th><th>push edges</th><th>pull edges</th>"
        "<th class='l'>push / pull</th><th>views</th><th>sources p95</th></tr>",
    ]
    for r in rows:
        rel = f"{100 * (r['total_cost'] / pure - 1):+.1f}%" if pure else "n/a"
        edges = (r["push_edges"] or 0) + (r["pull_edges"] or 0)
        push_w = round(120 * (r["push_edges"] or 0) / edges) if edges else 0
        bars = (
            f"<span class='bar' style='width:{push_w}px'></span>"
            f"<span class='bar pull' style='width:{120 - push_w if edges else 0}px'></span>"
        )
        p95 = r.get("sources_p95")
        served = "served" if r["chosen"] else ""
        out.append(
            f"<tr class='{served}' data-strategy='{escape(r['strategy'])}'>"
            f"<td class='l'>{escape(r['strategy'])}{' (served)' if r['chosen'] else ''}</td>"
            f"<td>{r['total_cost']:.1f}</td><td>{r['maintenance_cost']:.1f}</td>"
            f"<td>{r['evaluation_cost']:.1f}</td><td>{rel}</td>"
            f"<td>{r['push_edges']}</td><td>{r['pull_edges']}</td><td class='l'>{bars}</td>"
            f"<td>{r['views']}</td><td>{'' if p95 is None else f'{p95:g}'}</td></tr>"
        )
    out.append("</table>")

    manifest = ("manifests", ds_dir(ds), "manifest.json")
    if wh.exists(*manifest):
        m = json.loads(wh.read_text(*manifest))
        out.append("<h2>Input</h2><table id='input'><tr><th class='l'>table</th><th>rows in</th>")
        out.append("<th>clean</th><th>duplicates</th><th>quarantined</th></tr>")
        for table, c in m.get("input", {}).items():
            out.append(
                f"<tr><td class='l'>{escape(table)}</td><td>{c['rows_in']}</td>"
                f"<td>{c['clean']}</td><td>{c['duplicates']}</td><td>{c['quarantined']}</td></tr>"
            )
        out.append("</table>")

    out.append("<h2>Data quality</h2>")
    quality = ("quality", ds_dir(ds), "results.json")
    if not wh.exists(*quality):
        out.append("<p id='quality'>not validated</p>")
    else:
        q = json.loads(wh.read_text(*quality))
        ok = bool(q.get("success"))
        out.append(
            f"<p id='quality' class='{'ok' if ok else 'bad'}'>"
            f"{'all suites passed' if ok else 'validation FAILED'}</p>"
            "<table><tr><th class='l'>suite</th><th>expectations</th><th>failed</th></tr>"
        )
        for name, s in sorted(q.get("suites", {}).items()):
            failed = ", ".join(escape(f["expectation"]) for f in s.get("failed", []))
            out.append(
                f"<tr><td class='l'>{escape(name)}</td><td>{s.get('expectations')}</td>"
                f"<td class='l'>{failed or '0'}</td></tr>"
            )
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(x for x in out if x)
