"""Reports over a day's outputs, read with pyarrow (no Spark): the text report of
``feedpipe report`` and the HTML page ``reports/ds=D/index.html``.

A report shows one version of the day (:mod:`jobs.common.versions`): the published one, or,
for a day never published, its latest complete run. While a published day is being rebuilt
its report keeps showing the published version, with a line saying which stages of the
rebuild have finished (or that its validation failed)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobs.common import ledger, versions
from jobs.common.config import PURE_STRATEGIES, Settings
from jobs.common.pages import gate_verdict, render
from jobs.common.records import (
    IngestRecord,
    PlanRecord,
    RatesRecord,
    StoreRecord,
    TableAccount,
    TopicAccount,
    ValidationResults,
)
from jobs.common.storage import Storage
from jobs.common.versions import DayVersion
from jobs.serving import charts


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


def plan_record(day: DayVersion) -> PlanRecord | None:
    plan = day.records.get("plan")
    return plan if isinstance(plan, PlanRecord) else None


def served_why(plan: PlanRecord | None, rows: list[dict]) -> str:
    """Why the served plan was served, from the day's plan record: the cheapest of the
    strategies computed (``auto``), or forced by configuration (and what that cost)."""
    if not plan or not rows:
        return ""
    served = plan.strategy
    if not plan.forced:
        return f"auto: the cheapest of {len(rows)} strategies computed"
    costs, cheapest = plan.costs, plan.cheapest
    if served and cheapest and cheapest != served:
        mine, best = costs.get(served), costs.get(cheapest)
        if mine is not None and best is not None:
            return (
                f"forced by configuration (strategy = {served}); {cheapest} would cost "
                f"{mine - best:,.1f} per hour less"
            )
    return f"forced by configuration (strategy = {served}), also the cheapest"


def target_text(
    plan: PlanRecord | None,
    load: StoreRecord | None = None,
    served: Mapping[str, Any] | None = None,
) -> str:
    """The latency target the day's plans were judged against (the plan record's, not the
    settings of whoever reads the report); for a target in milliseconds, the sources it was
    planned as and the served plan's percentiles by the fit; and the read latency measured on
    the store when the day was loaded (``load``'s probe), beside it."""
    t = plan.latency_target if plan else None
    if t is None:
        return "latency target: not recorded for this day"
    text = (
        f"latency target: at most {t.bound:g} {t.metric} per feed view for "
        f"{100 * t.quantile:g}% of feed views"
    )
    if t.metric == "ms" and t.sources is not None:
        base, per = t.ms_base or 0.0, t.ms_per_source or 0.0
        text += (
            f" (planned as at most {t.sources} sources by the read-latency fit "
            f"{base:.3f} ms + {per:.4f} ms a source"
        )
        if served and served.get("sources_p95") is not None:
            modeled = " / ".join(
                f"{base + per * served[f'sources_p{q}']:.2f}" for q in (50, 95, 99)
            )
            text += f"; the served plan's p50 / p95 / p99 by the fit: {modeled} ms"
        text += ")"
    probe = load.probe if load else None
    if probe is not None:
        text += (
            f"; measured on the feed store after the load: p50 {probe.p50_ms:.2f}, "
            f"p95 {probe.p95_ms:.2f}, p99 {probe.p99_ms:.2f} ms ({probe.reads:,} reads, "
            "weighted by feed views)"
        )
    return text


def load_record(wh: Storage, ds: dt.date) -> StoreRecord | None:
    """The day's load into the feed store, when it was loaded (not skipped)."""
    record = ledger.read_record(wh, ds, "store")
    return record if isinstance(record, StoreRecord) and not record.skipped else None


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
    plan = plan_record(day)
    out.append(
        "  (* = served; in target: share of feed views within the latency target, ! = below it)"
    )
    why = served_why(plan, rows)
    if why:
        out.append(f"  served: {why}")
    chosen = next((r for r in rows if r["chosen"]), None)
    out.append(f"  {target_text(plan, load_record(wh, ds), chosen)}")
    if rows and rows[0].get("lower_bound") is not None:
        out.append(f"  {bound_text(rows[0])}")
    inactive = rows[0].get("inactive_consumers") if rows else None
    if inactive:
        out.append(f"  {inactive} inactive consumers: no materialized feed, served by pull")

    for g in day.results.gates if day.results else []:
        ratio = (
            "" if g.ratio is None else f" ratio {g.ratio:.3f} (allowed {g.lower:g} to {g.upper:g})"
        )
        verdict = gate_verdict(g)
        # a gate that is off says why in its note, which starts with "off: " itself
        why = g.note.removeprefix(f"{verdict}: ") if g.note else ""
        note = f": {why}" if why else ""
        out.append(f"  gate {g.gate:<14} {g.table:<8} {verdict}{ratio}{note}")
    if day.manifest is not None:
        for table, c in day.manifest.input.items():
            out.append(
                f"  input {table:<8} {c.rows_in:>10,} rows = {c.clean or 0:,} clean"
                f" + {c.duplicates:,} duplicates + {c.quarantined:,} quarantined"
            )
    return "\n".join(out)


def report_days(wh: Storage) -> list[dt.date]:
    """Days with a plan (published, or planned by a complete run), newest first."""
    found = wh.list_partitions("plan", "plan_cost")
    return sorted(
        (d for d in found if versions.for_readers(wh, d).has("plan/plan_cost")), reverse=True
    )


TREND_DAYS = 14
"""Days of history in a report's trend (the day itself and the ones before it)."""
FLASH_SHOWN = 20


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


@dataclass(frozen=True)
class StrategyRow:
    """One strategy's line of the day's plan cost, as the page shows it."""

    strategy: str
    chosen: bool
    total: float
    maintenance: float | None
    evaluation: float | None
    vs_pure: str
    push_edges: int | None
    pull_edges: int | None
    view_edges: int | None
    views: int | None
    mode_changes: int | None
    vs_bound: str
    sources: tuple[float | None, float | None, float | None]
    """p50, p95, p99 of the sources read per feed view."""
    latency_share: float | None
    latency_met: bool
    pull_view_share: float | None

    @classmethod
    def of(cls, r: dict, pure: float | None) -> StrategyRow:
        return cls(
            strategy=r["strategy"],
            chosen=bool(r["chosen"]),
            total=r["total_cost"],
            maintenance=r["maintenance_cost"],
            evaluation=r["evaluation_cost"],
            vs_pure=f"{100 * (r['total_cost'] / pure - 1):+.1f}%" if pure else "n/a",
            push_edges=r["push_edges"],
            pull_edges=r["pull_edges"],
            view_edges=r["view_edges"],
            views=r["views"],
            mode_changes=r["mode_changes"],
            vs_bound=gap_text(r),
            sources=(r["sources_p50"], r["sources_p95"], r["sources_p99"]),
            latency_share=r.get("latency_share"),
            latency_met=bool(r.get("latency_met")),
            pull_view_share=r.get("pull_view_share"),
        )


@dataclass(frozen=True)
class TrendRow:
    ds: dt.date
    strategy: str | None
    served: float | None
    best_pure: float | None
    realized: float | None
    published: bool

    @property
    def vs_pure(self) -> str:
        if self.served is None or not self.best_pure:
            return ""
        return f"{100 * (self.served / self.best_pure - 1):+.1f}%"


@dataclass(frozen=True)
class Quality:
    """The day's validation: the outcome, each suite's expectations and failures, the gates
    (each with its verdict in a word)."""

    success: bool
    suites: tuple[tuple[str, int | None, str], ...]
    """(suite, expectations, the failed expectations' names or "0")."""
    gates: tuple[dict, ...]


@dataclass(frozen=True)
class DayReport:
    """Everything the day's page shows, computed from one version of the day; drawn by
    ``jobs/templates/report.html``."""

    ds: dt.date
    published: bool
    links: tuple[tuple[str, str], ...]
    rebuild: tuple[str, bool] | None
    """For a published day being rebuilt: what of the rebuild has finished, and whether its
    validation failed."""
    served: str | None
    costs: tuple[float, float] | None
    """H and L of the day's plans."""
    served_why: str
    rows: tuple[StrategyRow, ...]
    bound: str | None
    cost_chart: charts.Chart
    split_chart: charts.Chart
    latency_chart: charts.Chart | None
    latency_target: str
    flash_count: int
    flash_top: tuple[dict, ...]
    flash_mismatch: bool
    """The rates stage recorded a different number of flash producers."""
    trend: tuple[TrendRow, ...]
    trend_series: tuple[str, ...]
    trend_chart: charts.Chart
    accounting: tuple[tuple[str, TableAccount], ...]
    topics: TopicAccount | None
    quality: Quality | None


def day_report(wh: Storage, ds: dt.date, links: dict[str, str] | None = None) -> DayReport:
    """The day's page as data: plan cost by strategy, the push/pull split, the latency
    distribution, flash producers, input accounting, topics, the data-quality outcome and the
    trend over the previous days."""
    day = versions.for_readers(wh, ds)
    if not day.has("plan/plan_cost") and not day.records:
        raise FileNotFoundError(f"no plan for {ds} in {wh.uri()}")
    raw = plan_cost_rows(wh, day)  # none for a day refused before it was planned
    pure = _pure(raw)
    rows = tuple(StrategyRow.of(r, pure) for r in raw)
    served = next((r for r in rows if r.chosen), None)
    records = day.records
    plan = plan_record(day)
    hist = plan.sources_hist if plan else None
    shares = hist.shares.get(served.strategy) if hist and served else None
    n_flash, top = flash_producers(wh, day)
    rates = records.get("rates")
    recorded_flash = rates.flash_producers if isinstance(rates, RatesRecord) else None
    trend = tuple(TrendRow(**t) for t in trend_rows(wh, ds))
    series: dict[str, list[float | None]] = {
        "served": [t.served for t in trend],
        "best pure": [t.best_pure for t in trend],
    }
    if any(t.realized is not None for t in trend):
        series["realized"] = [t.realized for t in trend]
    ingest = records.get("ingest")
    ingest = ingest if isinstance(ingest, IngestRecord) else IngestRecord()
    accounting = day.manifest.input if day.manifest is not None else ingest.tables
    topics = day.manifest.topics if day.manifest is not None else ingest.topics
    return DayReport(
        ds=ds,
        published=day.published,
        links=tuple((links or {}).items()),
        rebuild=_rebuild(wh, day),
        served=served.strategy if served else None,
        costs=(raw[0]["push_cost"], raw[0]["pull_cost"]) if raw else None,
        served_why=served_why(plan, raw),
        rows=rows,
        bound=bound_text(raw[0]) if raw and raw[0].get("lower_bound") is not None else None,
        cost_chart=charts.bars(
            "chart-cost",
            [
                (
                    r.strategy,
                    [("maintenance", r.maintenance or 0.0), ("evaluation", r.evaluation or 0.0)],
                )
                for r in rows
            ],
        ),
        split_chart=charts.bars(
            "chart-split",
            [
                (
                    r.strategy,
                    [
                        ("push", float(r.push_edges or 0)),
                        ("pull", float(r.pull_edges or 0)),
                        ("view", float(r.view_edges or 0)),
                    ],
                )
                for r in rows
            ],
            digits=0,
        ),
        latency_chart=(
            charts.columns("chart-latency", hist.buckets, shares, "latency")
            if hist and shares
            else None
        ),
        latency_target=target_text(
            plan, load_record(wh, ds), next((r for r in raw if r["chosen"]), None)
        ),
        flash_count=n_flash,
        flash_top=tuple(top),
        flash_mismatch=recorded_flash not in (None, n_flash),
        trend=trend,
        trend_series=tuple(series),
        trend_chart=charts.lines("chart-trend", [t.ds.isoformat()[5:] for t in trend], series),
        accounting=tuple(accounting.items()),
        topics=topics if topics.any else None,
        quality=_quality(day.results),
    )


def _quality(results: ValidationResults | None) -> Quality | None:
    if results is None:
        return None
    suites = tuple(
        (name, s.expectations, ", ".join(f.expectation for f in s.failed) or "0")
        for name, s in sorted(results.suites.items())
    )
    gates = tuple({**g.as_dict(), "verdict": gate_verdict(g)} for g in results.gates)
    return Quality(results.success, suites, gates)


def html_report(wh: Storage, ds: dt.date, links: dict[str, str] | None = None) -> str:
    """One day as a self-contained HTML page (inline SVG charts, no scripts), rendered from
    ``jobs/templates/report.html``; ``links`` maps labels to URLs shown at the top."""
    return render(
        "report.html", r=day_report(wh, ds, links), num=charts.num, colours=charts.COLOURS
    )


def _rebuild(wh: Storage, day: DayVersion) -> tuple[str, bool] | None:
    """For a published day being rebuilt: which stages of the rebuild have finished."""
    if not day.published:
        return None
    work = versions.working(wh, day.ds)
    if work.folders == day.folders and work.records.keys() >= day.records.keys():
        return None
    done = ", ".join(s for s in work.records) or "no stage"
    failed = work.results is not None and not work.results.success
    return ("its validation FAILED" if failed else f"finished so far: {done}"), failed


def write_report(wh: Storage, ds: dt.date) -> str | None:
    """Write ``reports/ds=D/index.html`` (replacing it whole); None when nothing of ``ds`` has
    run."""
    day = versions.for_readers(wh, ds)
    if not day.has("plan/plan_cost") and not day.records:
        return None
    wh.write_text(html_report(wh, ds), *ledger.report_parts(ds))
    return wh.uri(*ledger.report_parts(ds))
