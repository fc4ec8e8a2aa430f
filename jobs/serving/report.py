"""Reports over a day's outputs, read with pyarrow (no Spark): the text report of
``feedpipe report`` and the HTML page ``reports/ds=D/index.html``.

A report shows one version of the day (:mod:`jobs.common.versions`): the published one, or,
for a day never published, its latest complete run. While a published day is being rebuilt
its report keeps showing the published version, with a line saying which stages of the
rebuild have finished (or that its validation failed)."""

from __future__ import annotations

import datetime as dt

from jobs.common import ledger, versions
from jobs.common.config import PURE_STRATEGIES, Settings
from jobs.common.pages import gate_verdict
from jobs.common.storage import Storage
from jobs.common.versions import DayVersion


def plan_cost_rows(wh: Storage, day: DayVersion) -> list[dict]:
    parts = day.parts("plan/plan_cost")
    if parts is None:
        return []
    return sorted(wh.dataset(*parts).to_table().to_pylist(), key=lambda r: r["total_cost"])


def gap_text(row: dict) -> str:
    """A strategy's distance above the day's certified lower bound, or "-" (no bound)."""
    gap = row.get("gap")
    return f"+{100 * gap:.1f}%" if gap is not None else "-"


def bound_text(row: dict) -> str:
    """What the day's bound is, in one sentence."""
    kind = {
        "overlap": "every overlap of follow sets counted",
        "overlap-capped": "overlaps through the most-followed producers bounded from above",
    }.get(row["bound"], row["bound"])
    return (
        f"certified lower bound {row['lower_bound']:.1f} per hour ({row['bound']}: {kind}):"
        " no plan, whatever its views, costs less; vs bound = how far above it a strategy is"
    )


def served_why(plan: dict | None, rows: list[dict]) -> str:
    """Why the served plan was served, from the day's plan record: the cheapest of the
    strategies computed (``auto``), or forced by configuration (and what that cost)."""
    if not plan or not rows:
        return ""
    served = plan.get("strategy")
    if not plan.get("forced"):
        return f"auto: the cheapest of {len(rows)} strategies computed"
    costs = plan.get("costs", {})
    cheapest = plan.get("cheapest")
    if cheapest and cheapest != served and costs.get(cheapest) is not None:
        return (
            f"forced by configuration (strategy = {served}); {cheapest} would cost "
            f"{costs[served] - costs[cheapest]:,.1f} per hour less"
        )
    return f"forced by configuration (strategy = {served}), also the cheapest"


def target_text(plan: dict | None) -> str:
    """The latency target the day's plans were judged against (the plan record's, not the
    settings of whoever reads the report)."""
    t = (plan or {}).get("latency_target")
    if not t:
        return "latency target: not recorded for this day"
    return (
        f"latency target: at most {t['bound']} {t['metric']} per feed view for "
        f"{100 * t['quantile']:g}% of feed views"
    )


def text_report(settings: Settings, ds: dt.date) -> str:
    wh = Storage.at(settings.warehouse)
    day = versions.for_readers(wh, ds)
    if not day.has("plan/plan_cost"):
        return f"no plan for {ds} in {wh.uri()}"
    rows = plan_cost_rows(wh, day)
    pure = min((r["total_cost"] for r in rows if r["strategy"] in PURE_STRATEGIES), default=None)
    h, el = (
        (rows[0]["push_cost"], rows[0]["pull_cost"])
        if rows
        else (settings.push_cost, settings.pull_cost)
    )
    out = [
        f"feedpipe plan cost for {ds}  (H={h:g}, L={el:g}; cost per hour; "
        f"{'published' if day.published else 'NOT published'})",
        f"  {'strategy':<20} {'total':>12} {'maint.':>12} {'eval.':>12} {'vs best pure':>12} "
        f"{'push':>9} {'pull':>9} {'views':>7} {'src p50/p95/p99':>16} {'in target':>10} "
        f"{'vs bound':>9}",
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
            f"{mark}{r['strategy']:<20} {r['total_cost']:>12,.1f} {r['maintenance_cost']:>12,.1f} "
            f"{r['evaluation_cost']:>12,.1f} {rel:>12} {r['push_edges']:>9,} {r['pull_edges']:>9,} "
            f"{r['views']:>7,} {pct:>16} {target:>10} {gap_text(r):>9}"
        )
    plan = day.records.get("plan")
    out.append(
        "  (* = served; in target: share of feed views within the latency target, ! = below it)"
    )
    why = served_why(plan, rows)
    if why:
        out.append(f"  served: {why}")
    out.append(f"  {target_text(plan)}")
    if rows and rows[0].get("lower_bound") is not None:
        out.append(f"  {bound_text(rows[0])}")
    inactive = rows[0].get("inactive_consumers") if rows else None
    if inactive:
        out.append(f"  {inactive} inactive consumers: no materialized feed, served by pull")

    for g in (day.results or {}).get("gates", []):
        ratio = (
            ""
            if g["ratio"] is None
            else f" ratio {g['ratio']:.3f} (allowed {g['lower']:g} to {g['upper']:g})"
        )
        note = f": {g['note']}" if g.get("note") else ""
        out.append(f"  gate {g['gate']:<14} {g['table']:<8} {gate_verdict(g)}{ratio}{note}")
    if day.manifest is not None:
        for table, c in day.manifest.get("input", {}).items():
            out.append(
                f"  input {table:<8} {c['rows_in']:>10,} rows = {c['clean']:,} clean"
                f" + {c['duplicates']:,} duplicates + {c['quarantined']:,} quarantined"
            )
    return "\n".join(out)


def report_days(wh: Storage) -> list[dt.date]:
    """Days with a plan (published, or planned by a complete run), newest first."""
    found = wh.list_partitions("plan", "plan_cost")
    return sorted(
        (d for d in found if versions.for_readers(wh, d).has("plan/plan_cost")), reverse=True
    )


_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:72em}"
    "table{border-collapse:collapse;margin:.5em 0 1.5em}"
    "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}"
    "th{background:#f3f3f3}td.l,th.l{text-align:left}tr.served{font-weight:bold}"
    ".ok{color:#2a7d2a}.bad{color:#b22}svg.chart{display:block;margin:.3em 0 1em}"
    "svg.chart text{font-size:12px;fill:#333}.key{display:inline-block;width:.8em;height:.8em;"
    "margin:0 .3em 0 1em;vertical-align:middle}"
)
# series colours (fill), shared by the charts and their legends
_COLOURS = {
    "maintenance": "#4a7fb5",
    "evaluation": "#e39b3a",
    "push": "#4a7fb5",
    "pull": "#e39b3a",
    "view": "#5aa469",
    "latency": "#8e6bb8",
    "served": "#4a7fb5",
    "best pure": "#999999",
    "realized": "#c0392b",
}
TREND_DAYS = 14
"""Days of history in a report's trend (the day itself and the ones before it)."""
FLASH_SHOWN = 20


def _num(x: float | None, digits: int = 1) -> str:
    return "" if x is None else f"{x:,.{digits}f}"


def _legend(*names: str) -> str:
    return (
        "<p>"
        + "".join(f"<span class='key' style='background:{_COLOURS[n]}'></span>{n}" for n in names)
        + "</p>"
    )


def _bars(chart_id: str, rows: list[tuple[str, list[tuple[str, float]]]], digits: int = 1) -> str:
    """Horizontal stacked bars as inline SVG: one bar per (label, [(series, value), ...]),
    each segment a ``rect`` with its value in ``data-value`` and a tooltip."""
    from html import escape

    width, label_w, bar_w, row_h = 720, 190, 400, 22
    top = max((sum(v for _, v in segs) for _, segs in rows), default=0.0) or 1.0
    out = [
        f"<svg class='chart' id='{chart_id}' width='{width}' height='{row_h * len(rows) + 6}' "
        f"role='img' xmlns='http://www.w3.org/2000/svg'>"
    ]
    for i, (label, segs) in enumerate(rows):
        y = 3 + i * row_h
        out.append(f"<text x='0' y='{y + 15}'>{escape(label)}</text>")
        x = float(label_w)
        for series, v in segs:
            w = bar_w * v / top
            out.append(
                f"<rect class='{series.replace(' ', '-')}' x='{x:.1f}' y='{y}' width='{w:.1f}' "
                f"height='{row_h - 6}' fill='{_COLOURS[series]}' data-value='{v!r}'>"
                f"<title>{escape(label)}, {series}: {_num(v, digits)}</title></rect>"
            )
            x += w
        total = sum(v for _, v in segs)
        out.append(f"<text x='{x + 6:.1f}' y='{y + 15}'>{_num(total, digits)}</text>")
    out.append("</svg>")
    return "".join(out)


def _columns(chart_id: str, labels: list[str], values: list[float], series: str) -> str:
    """Vertical bars (shares in [0, 1]) as inline SVG, labelled below and valued above."""
    from html import escape

    col_w, h, base = 60, 160, 180
    top = max(values, default=0.0) or 1.0
    out = [
        f"<svg class='chart' id='{chart_id}' width='{col_w * len(labels) + 10}' height='210' "
        f"role='img' xmlns='http://www.w3.org/2000/svg'>"
    ]
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        x, bh = 5 + i * col_w, h * v / top
        out.append(
            f"<rect class='{series}' x='{x + 8}' y='{base - bh:.1f}' width='{col_w - 16}' "
            f"height='{bh:.1f}' fill='{_COLOURS[series]}' data-value='{v!r}'>"
            f"<title>{escape(label)} sources: {100 * v:.1f}% of feed views</title></rect>"
            f"<text x='{x + 8}' y='{base - bh - 4:.1f}'>{100 * v:.1f}%</text>"
            f"<text x='{x + 8}' y='{base + 16}'>{escape(label)}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _lines(chart_id: str, labels: list[str], series: dict[str, list[float | None]]) -> str:
    """Lines over days as inline SVG: one ``polyline`` per series (gaps where a value is
    missing split it), a ``circle`` per point with its value in ``data-value``."""
    from html import escape

    width, left, h, top_y = 720, 80, 170, 10
    values = [v for vs in series.values() for v in vs if v is not None]
    hi = max(values, default=1.0) * 1.05 or 1.0
    step = (width - left - 20) / max(len(labels) - 1, 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return left + i * step, top_y + h * (1 - v / hi)

    out = [
        f"<svg class='chart' id='{chart_id}' width='{width}' height='{h + 50}' role='img' "
        f"xmlns='http://www.w3.org/2000/svg'>",
        f"<line x1='{left}' y1='{top_y + h}' x2='{width - 10}' y2='{top_y + h}' stroke='#999'/>",
        f"<text x='0' y='{top_y + 10}'>{_num(hi, 0)}</text><text x='0' y='{top_y + h}'>0</text>",
    ]
    for i, label in enumerate(labels):
        if len(labels) <= 8 or i % 2 == 0 or i == len(labels) - 1:
            out.append(f"<text x='{left + i * step - 30:.1f}' y='{top_y + h + 18}'>{label}</text>")
    for name, vs in series.items():
        colour = _COLOURS[name]
        runs: list[list[tuple[float, float]]] = [[]]
        for i, v in enumerate(vs):
            if v is None:
                runs.append([])
            else:
                runs[-1].append(xy(i, v))
        for r in (r for r in runs if r):
            pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in r)
            out.append(f"<polyline fill='none' stroke='{colour}' stroke-width='2' points='{pts}'/>")
        for i, v in enumerate(vs):
            if v is not None:
                x, y = xy(i, v)
                out.append(
                    f"<circle class='{name.replace(' ', '-')}' cx='{x:.1f}' cy='{y:.1f}' r='4' "
                    f"fill='{colour}' data-value='{v!r}'><title>{labels[i]}, {escape(name)}: "
                    f"{_num(v)}</title></circle>"
                )
    out.append("</svg>")
    return "".join(out)


def flash_producers(
    wh: Storage, day: DayVersion, limit: int = FLASH_SHOWN
) -> tuple[int, list[dict]]:
    """How many producers ``rates`` flagged as flash on ``ds`` and the ``limit`` busiest of
    them (producer_id, n_today, forecast_prev, events_per_hour): only flagged rows are read."""
    import pyarrow.compute as pc

    parts = day.parts("rates/producer_rates")
    if parts is None:
        return 0, []
    cols = ["producer_id", "n_today", "forecast_prev", "events_per_hour"]
    flagged = wh.dataset(*parts).to_table(columns=cols, filter=pc.field("flash"))
    top = flagged.sort_by([("n_today", "descending"), ("producer_id", "ascending")])
    return flagged.num_rows, top.slice(0, limit).to_pylist()


def _pure(rows: list[dict]) -> float | None:
    return min((r["total_cost"] for r in rows if r["strategy"] in PURE_STRATEGIES), default=None)


def trend_rows(wh: Storage, ds: dt.date, days: int = TREND_DAYS) -> list[dict]:
    """The served and best pure cost per hour of ``ds`` and the days before it that have a
    plan (up to ``days``, oldest first), with what the served plan realized on the next day
    where ``feedpipe evaluate`` has replayed it (per hour, like the plan cost)."""
    out = []
    for d in sorted(x for x in report_days(wh) if x <= ds)[-days:]:
        day = versions.for_readers(wh, d)
        rows = plan_cost_rows(wh, day)
        served = next((r for r in rows if r["chosen"]), None)
        realized = None
        replayed = versions.locate(wh, "eval/replay", d)
        if served is not None and replayed is not None:
            for r in wh.dataset(*replayed).to_table().to_pylist():
                if r["strategy"] == served["strategy"] and r["realized_cost"] is not None:
                    realized = r["realized_cost"] / 24.0
        out.append(
            {
                "ds": d,
                "strategy": served["strategy"] if served else None,
                "served": served["total_cost"] if served else None,
                "best_pure": _pure(rows),
                "realized": realized,
                "published": day.published,
            }
        )
    return out


def html_report(wh: Storage, ds: dt.date, links: dict[str, str] | None = None) -> str:
    """One day as a self-contained HTML page (inline SVG charts, no scripts): plan cost by
    strategy, the push/pull split, the latency distribution, flash producers, input
    accounting, the data-quality outcome and the trend over the previous days. ``links`` maps
    labels to URLs shown at the top."""
    from html import escape

    day = versions.for_readers(wh, ds)
    if not day.has("plan/plan_cost") and not day.records:
        raise FileNotFoundError(f"no plan for {ds} in {wh.uri()}")
    rows = plan_cost_rows(wh, day)  # none for a day refused before it was planned
    pure = _pure(rows)
    served = next((r for r in rows if r["chosen"]), None)
    published = day.published
    records = day.records
    nav = " · ".join(f'<a href="{escape(u)}">{escape(t)}</a>' for t, u in (links or {}).items())
    h, el = (rows[0]["push_cost"], rows[0]["pull_cost"]) if rows else (None, None)
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>feedpipe {ds}</title><style>{_STYLE}</style></head><body>",
        f"<p>{nav}</p>" if nav else "",
        f"<h1>feedpipe, {ds}</h1>",
        f"<p id='status' class='{'ok' if published else 'bad'}'>"
        f"{'published' if published else 'not published'}</p>",
        _rebuild(wh, day),
        f"<p id='served'>served plan: <b>{escape(served['strategy']) if served else 'none'}"
        f"</b>, H = {h:g}, L = {el:g}</p>"
        if h is not None
        else "",
        f"<p id='served-why'>{escape(served_why(records.get('plan'), rows))}</p>" if rows else "",
        "<h2>Plan cost by strategy</h2>",
        "<p>Modeled cost per hour: H per event pushed into a view (maintenance), L per source "
        "read at view time (evaluation); see docs/cost-model.md.</p>",
        _legend("maintenance", "evaluation"),
        _bars(
            "chart-cost",
            [
                (
                    r["strategy"],
                    [
                        ("maintenance", r["maintenance_cost"] or 0.0),
                        ("evaluation", r["evaluation_cost"] or 0.0),
                    ],
                )
                for r in rows
            ],
        ),
        "<table id='plan-cost'><tr><th class='l'>strategy</th><th>total</th><th>maintenance"
        "</th><th>evaluation</th><th>vs best pure</th><th>push edges</th><th>pull edges</th>"
        "<th>view edges</th><th>views</th><th>mode changes</th><th>vs bound</th></tr>",
    ]
    for r in rows:
        rel = f"{100 * (r['total_cost'] / pure - 1):+.1f}%" if pure else "n/a"
        out.append(
            f"<tr class='{'served' if r['chosen'] else ''}' "
            f"data-strategy='{escape(r['strategy'])}'>"
            f"<td class='l'>{escape(r['strategy'])}{' (served)' if r['chosen'] else ''}</td>"
            f"<td>{_num(r['total_cost'])}</td><td>{_num(r['maintenance_cost'])}</td>"
            f"<td>{_num(r['evaluation_cost'])}</td><td>{rel}</td>"
            f"<td>{_num(r['push_edges'], 0)}</td><td>{_num(r['pull_edges'], 0)}</td>"
            f"<td>{_num(r['view_edges'], 0)}</td><td>{_num(r['views'], 0)}</td>"
            f"<td>{_num(r['mode_changes'], 0)}</td><td>{gap_text(r)}</td></tr>"
        )
    out.append("</table>")
    if rows and rows[0].get("lower_bound") is not None:
        out.append(f"<p id='bound'>{escape(bound_text(rows[0]))}.</p>")

    out.append("<h2>Push / pull split</h2><p>Follow edges by how they are delivered.</p>")
    out.append(_legend("push", "pull", "view"))
    out.append(
        _bars(
            "chart-split",
            [
                (
                    r["strategy"],
                    [
                        ("push", float(r["push_edges"] or 0)),
                        ("pull", float(r["pull_edges"] or 0)),
                        ("view", float(r["view_edges"] or 0)),
                    ],
                )
                for r in rows
            ],
            digits=0,
        )
    )

    out.append(_latency(rows, served, records.get("plan", {}).get("sources_hist")))
    out.append(f"<p id='latency-target'>{escape(target_text(records.get('plan')))}.</p>")
    out.append(_flash(wh, day, records.get("rates", {})))
    out.append(_trend(trend_rows(wh, ds)))

    accounting = (
        day.manifest.get("input", {})
        if day.manifest is not None
        else records.get("ingest", {}).get("tables", {})
    )
    if accounting:
        out.append("<h2>Input</h2><table id='input'><tr><th class='l'>table</th><th>rows in</th>")
        out.append("<th>clean</th><th>duplicates</th><th>quarantined</th></tr>")
        for table, c in accounting.items():
            out.append(
                f"<tr><td class='l'>{escape(table)}</td><td>{_num(c['rows_in'], 0)}</td>"
                f"<td>{_num(c['clean'], 0)}</td><td>{_num(c['duplicates'], 0)}</td>"
                f"<td>{_num(c['quarantined'], 0)}</td></tr>"
            )
        out.append("</table>")
    topics = (
        day.manifest.get("topics", {})
        if day.manifest is not None
        else records.get("ingest", {}).get("topics", {})
    )
    out.append(_topics(topics))

    out.append("<h2>Data quality</h2>")
    if day.results is None:
        out.append("<p id='quality'>not validated</p>")
    else:
        q = day.results
        ok = bool(q.get("success"))
        out.append(
            f"<p id='quality' class='{'ok' if ok else 'bad'}'>"
            f"{'all suites passed' if ok else 'validation FAILED'}</p>"
            f"<p>Every expectation and gate of the day, readable offline: "
            f"<a id='quality-summary' href='../../quality/ds={ds}/summary.html'>summary</a>; "
            f"Great Expectations' pages: <a href='../../quality/ds={ds}/docs/index.html'>Data "
            "Docs</a> (they load their styles and scripts from the internet).</p>"
            "<table id='quality-suites'><tr><th class='l'>suite</th><th>expectations</th>"
            "<th>failed</th></tr>"
        )
        for name, s in sorted(q.get("suites", {}).items()):
            failed = ", ".join(escape(f["expectation"]) for f in s.get("failed", []))
            out.append(
                f"<tr><td class='l'>{escape(name)}</td><td>{s.get('expectations')}</td>"
                f"<td class='l'>{failed or '0'}</td></tr>"
            )
        out.append("</table>")
        out.append(_gates(q.get("gates", [])))
    out.append("</body></html>")
    return "\n".join(x for x in out if x)


def _topics(t: dict) -> str:
    """The day's topic producers (docs/topics.md): definitions and matches; nothing on a day
    without any."""
    from html import escape

    if not t or not (t.get("clean") or t.get("rows_in") or t.get("carried")):
        return ""
    reasons = ", ".join(f"{escape(r)} {n}" for r, n in t.get("quarantine_reasons", {}).items())
    landed = "landed" if t.get("snapshot") else "kept from the day before"
    return (
        "<h2>Topics</h2><table id='topics'>"
        f"<tr><td class='l'>definitions in force ({landed})</td><td>{t.get('clean', 0)}</td></tr>"
        f"<tr><td class='l'>quarantined</td><td>{t.get('quarantined', 0)}"
        f"{' (' + reasons + ')' if reasons else ''}</td></tr>"
        f"<tr><td class='l'>topic-event matches</td><td>{t.get('matches', 0)}</td></tr>"
        f"<tr><td class='l'>events matching a topic</td><td>{t.get('matched_events', 0)}</td></tr>"
        f"<tr><td class='l'>topics with a match</td><td>{t.get('matched_topics', 0)}</td></tr>"
        "</table>"
    )


def _gates(gates: list[dict]) -> str:
    """The day's volume and follow gates (docs/data-contracts.md, "Volume gates")."""
    from html import escape

    if not gates:
        return ""

    def num(x: float | None, fmt: str) -> str:
        return "" if x is None else format(x, fmt)

    out = [
        "<table id='quality-gates'><tr><th class='l'>gate</th><th class='l'>table</th>"
        "<th>observed</th><th>reference</th><th>days</th><th>ratio</th><th>allowed</th>"
        "<th class='l'>verdict</th><th class='l'>why</th></tr>"
    ]
    for g in gates:
        verdict = gate_verdict(g)
        share = g["gate"].startswith("follow")
        out.append(
            f"<tr class='{'bad' if verdict == 'FAILED' else ''}'><td class='l'>{g['gate']}</td>"
            f"<td class='l'>{g['table']}</td>"
            f"<td>{num(g['observed'], '.2%' if share else ',.0f')}</td>"
            f"<td>{num(g['reference'], '.2%' if g['gate'] == 'follow_added' else ',.0f')}</td>"
            f"<td>{g['days']}</td><td>{num(g['ratio'], '.3f')}</td>"
            f"<td>{g['lower']:g} to {g['upper']:g}</td>"
            f"<td class='l'>{verdict}</td><td class='l'>{escape(g.get('note') or '')}</td></tr>"
        )
    out.append("</table>")
    return "\n".join(out)


def _latency(rows: list[dict], served: dict | None, hist: dict | None) -> str:
    from html import escape

    out = [
        "<h2>Latency</h2><p>Sources read per feed view (the latency proxy), weighted by how "
        "often each consumer views its feed.</p>"
    ]
    name = served["strategy"] if served else None
    shares = hist["shares"].get(name) if hist and name else None
    if hist and name and shares:
        out.append(f"<p>Distribution under the served plan ({escape(name)}):</p>")
        out.append(_columns("chart-latency", hist["buckets"], shares, "latency"))
    out.append(
        "<table id='latency'><tr><th class='l'>strategy</th><th>p50</th><th>p95</th><th>p99</th>"
        "<th>views within target</th><th>target met</th><th>views reading a pull</th></tr>"
    )
    for r in rows:
        share = r.get("latency_share")
        pulls = r.get("pull_view_share")
        out.append(
            f"<tr class='{'served' if r['chosen'] else ''}'>"
            f"<td class='l'>{escape(r['strategy'])}</td>"
            + "".join(
                f"<td>{'' if r[c] is None else f'{r[c]:g}'}</td>"
                for c in ("sources_p50", "sources_p95", "sources_p99")
            )
            + f"<td>{'' if share is None else f'{100 * share:.1f}%'}</td>"
            f"<td>{'yes' if r.get('latency_met') else 'no'}</td>"
            f"<td>{'' if pulls is None else f'{100 * pulls:.1f}%'}</td></tr>"
        )
    out.append("</table>")
    return "\n".join(out)


def _flash(wh: Storage, day: DayVersion, rates_record: dict) -> str:
    from html import escape

    n, top = flash_producers(wh, day)
    out = [
        "<h2>Flash producers</h2>",
        f"<p id='flash'>{n} producer(s) flagged: more events on the day than the upper end "
        "of the previous day's forecast interval allows; their rate is raised to the day's "
        "(docs/rates.md).</p>",
    ]
    if rates_record and rates_record.get("flash_producers") not in (None, n):
        out.append("<p class='bad'>the rates stage recorded a different count</p>")
    if top:
        out.append(
            "<table id='flash-producers'><tr><th class='l'>producer</th><th>events on the day"
            "</th><th>forecast per hour</th><th>seen per hour</th><th>new rate per hour</th></tr>"
        )
        for r in top:
            out.append(
                f"<tr><td class='l'>{escape(r['producer_id'])}</td><td>{r['n_today']}</td>"
                f"<td>{_num(r['forecast_prev'], 3)}</td><td>{_num(r['n_today'] / 24, 3)}</td>"
                f"<td>{_num(r['events_per_hour'], 3)}</td></tr>"
            )
        out.append("</table>")
        if n > len(top):
            out.append(f"<p>and {n - len(top)} more</p>")
    return "\n".join(out)


def _trend(trend: list[dict]) -> str:
    labels = [t["ds"].isoformat()[5:] for t in trend]
    series: dict[str, list[float | None]] = {
        "served": [t["served"] for t in trend],
        "best pure": [t["best_pure"] for t in trend],
    }
    if any(t["realized"] is not None for t in trend):
        series["realized"] = [t["realized"] for t in trend]
    out = [
        f"<h2>Trend</h2><p>Cost per hour over the last {len(trend)} planned day(s): the "
        "served plan as modeled, the best pure strategy, and (where <code>feedpipe evaluate"
        "</code> has run) what the served plan realized on the next day.</p>",
        _legend(*series),
        _lines("chart-trend", labels, series),
        "<table id='trend'><tr><th class='l'>day</th><th class='l'>served</th><th>modeled</th>"
        "<th>best pure</th><th>vs best pure</th><th>realized</th><th class='l'>published</th>"
        "</tr>",
    ]
    for t in reversed(trend):
        rel = (
            f"{100 * (t['served'] / t['best_pure'] - 1):+.1f}%"
            if t["served"] is not None and t["best_pure"]
            else ""
        )
        out.append(
            f"<tr><td class='l'>{t['ds']}</td><td class='l'>{t['strategy'] or ''}</td>"
            f"<td>{_num(t['served'])}</td><td>{_num(t['best_pure'])}</td><td>{rel}</td>"
            f"<td>{_num(t['realized'])}</td><td class='l'>{'yes' if t['published'] else 'no'}"
            "</td></tr>"
        )
    out.append("</table>")
    return "\n".join(out)


def _rebuild(wh: Storage, day: DayVersion) -> str:
    """For a published day being rebuilt: which stages of the rebuild have finished."""
    if not day.published:
        return ""
    from html import escape

    work = versions.working(wh, day.ds)
    if work.folders == day.folders and work.records.keys() >= day.records.keys():
        return ""
    done = ", ".join(s for s in work.records) or "no stage"
    failed = work.results is not None and not work.results.get("success")
    what = "its validation FAILED" if failed else f"finished so far: {escape(done)}"
    return (
        f"<p id='rebuild' class='{'bad' if failed else ''}'>This day is being rebuilt "
        f"({what}); the published version below stays until the rebuild is published.</p>"
    )


def write_report(wh: Storage, ds: dt.date) -> str | None:
    """Write ``reports/ds=D/index.html`` (replacing it whole); None when nothing of ``ds`` has
    run."""
    day = versions.for_readers(wh, ds)
    if not day.has("plan/plan_cost") and not day.records:
        return None
    wh.write_text(html_report(wh, ds), *ledger.report_parts(ds))
    return wh.uri(*ledger.report_parts(ds))
