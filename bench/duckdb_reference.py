"""A reference implementation in DuckDB SQL of what a single-machine user would write instead
of feedpipe: the ``rates`` stage (``eb_trend``), the FF-PerPair plan (Feeding Frenzy, Lemma 1,
with hysteresis and the inactive-consumer rule) with the tables a user of the plan needs (its
consumer sources and its cost row, priced as ``jobs.selection.cost`` prices it) and latest-k
materialization (global coherency), read from the same clean Parquet tables of the warehouse.

It is a benchmark baseline, not part of the product: ``bench/day.py`` times it against the
Spark stages and checks that both give the same rates, plan and feeds. It keeps its own
outputs (``OUT/<table>/ds=D/data.parquet``) and reads its own previous day from there
(yesterday's forecast for the flash rule, yesterday's plan for hysteresis), exactly as the
Spark stages read theirs from the warehouse. Feeds are computed as a full refresh from all
clean events up to D, which the Spark stage's incremental path must equal.

Usage: ``python -m bench.duckdb_reference STAGE --warehouse WH --out OUT --ds D``
(STAGE: rates | plan | materialize); prints the stage's row counts and seconds as JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

import duckdb

from jobs.common import versions
from jobs.common.config import Settings, load_settings
from jobs.common.exact import FRACTION_BITS, HALF_BITS, HALF_MASK
from jobs.common.storage import Storage
from jobs.common.tables import contract, partition_days
from jobs.estimators import Window
from jobs.stages.rates import Z90, window_days

ROOT = Path(__file__).resolve().parents[1]

INTERVAL90 = (
    f"greatest(rate - {Z90!r} * rate_sd, 0.0) AS rate_lo, rate + {Z90!r} * rate_sd AS rate_hi"
)


def exact_sum_sql(expr: str) -> str:
    """The product's ``exact_sum`` (``jobs/common/exact.py``) in DuckDB SQL: each term cut
    to 60 binary fraction digits, held as three integers, summed exactly and carried into
    one double the same way, so both give the same bits."""
    x = f"({expr})"
    frac = f"floor(({x} - floor({x})) * {float(1 << FRACTION_BITS)!r})::BIGINT"
    hi, mid, lo = (
        f"sum(floor({x})::BIGINT)",
        f"sum({frac} >> {HALF_BITS})",
        f"sum({frac} & {HALF_MASK})",
    )
    m = f"({mid} + ({lo} >> {HALF_BITS}))"
    whole = f"({hi} + ({m} >> {HALF_BITS}))"
    fraction = f"((({m} & {HALF_MASK}) << {HALF_BITS}) | ({lo} & {HALF_MASK}))"
    return f"({whole}::BIGINT::DOUBLE + {fraction}::BIGINT::DOUBLE * {2.0**-FRACTION_BITS!r})"


def _version(wh: Path, layer: str, table: str, ds: dt.date) -> Path | None:
    """The folder of the day's version of a warehouse table the stages read, or None."""
    parts = versions.locate(Storage.at(str(wh)), f"{layer}/{table}", ds)
    return wh.joinpath(*parts) if parts else None


def _days_present(wh: Path, table: str) -> list[dt.date]:
    c = contract("clean", table)
    return [d for d in partition_days(Storage.at(str(wh)), c) if _version(wh, "clean", table, d)]


def _must(wh: Path, layer: str, table: str, ds: dt.date) -> Path:
    folder = _version(wh, layer, table, ds)
    if folder is None:
        raise FileNotFoundError(f"{layer}/{table} has no version on {ds} in {wh}")
    return folder


def _files(folder: Path) -> str:
    return str(folder / "*.parquet")


def _out(out: Path, table: str, ds: dt.date) -> Path:
    return out / table / f"ds={ds}" / "data.parquet"


def _read_days(wh: Path, table: str, days: list[dt.date]) -> str:
    """SQL for the clean table's rows of ``days`` with a ``ds`` column."""
    folders = [(d, _version(wh, "clean", table, d)) for d in days]
    parts = [
        f"SELECT *, DATE '{d}' AS ds FROM read_parquet('{_files(f)}')"
        for d, f in folders
        if f is not None
    ]
    return " UNION ALL ".join(parts)


def _write(con: duckdb.DuckDBPyConnection, sql: str, path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    con.execute(f"COPY ({sql}) TO '{path}' (FORMAT parquet, COMPRESSION zstd)")
    return int(con.execute(f"SELECT count(*) FROM read_parquet('{path}')").fetchone()[0])


def _estimate_sql(daily: str, ids: str, id_col: str, offsets: list[int], s: Settings) -> str:
    """``jobs.estimators.estimate`` (method ``eb_trend``) in SQL: one row per id."""
    win = Window(tuple(sorted(set(offsets))), s.rate_half_life_days)
    tb, q, w_sum = win.t_bar, win.t_var_sum, win.w_sum
    exposure = 24.0 * w_sum
    noise = win.w2_sum / (24.0 * w_sum**2)
    fit_dof = w_sum - win.w2_sum / w_sum - (win.t_var_sum_w2 / q if q > 0 else 0.0)
    floor = s.rate_floor
    w = f"pow(2.0, t / {s.rate_half_life_days!r})"
    slope = f"s1 / {q!r}" if q > 0 else "0.0"
    rss = f"s2n - s0 * s0 / {w_sum!r}" + (f" - s1 * s1 / {q!r}" if q > 0 else "")
    level = f"(alpha + s0) / (beta + {exposure!r})"
    slope_var = f"({level}) * {24.0 * win.t_var_sum_w2 / q**2!r} * dispersion" if q > 0 else "0.0"
    dispersion = "greatest(coalesce(disp, 1.0), 1.0)" if fit_dof > 1e-9 else "1.0"
    return f"""
    WITH agg AS (
        SELECT {id_col}, sum(n)::BIGINT AS n,
               sum(CASE WHEN t = 0 THEN n ELSE 0 END)::BIGINT AS n_today,
               {exact_sum_sql(f"{w} * n")} AS s0,
               {exact_sum_sql(f"{w} * (t - {tb!r}) * n")} AS s1,
               {exact_sum_sql(f"{w} * n * n")} AS s2n
        FROM ({daily}) GROUP BY {id_col}
    ),
    ids AS (SELECT {id_col} FROM ({ids}) UNION SELECT {id_col} FROM agg),
    per_id AS (
        SELECT {id_col}, coalesce(n, 0) AS n, coalesce(n_today, 0) AS n_today,
               coalesce(s0, 0) AS s0, coalesce(s1, 0) AS s1, coalesce(s2n, 0) AS s2n
        FROM ids LEFT JOIN agg USING ({id_col})
    ),
    moments AS (
        SELECT {exact_sum_sql(f"s0 / {exposure!r}")} / count(*) AS mean,
               {exact_sum_sql(f"(s0 / {exposure!r}) * (s0 / {exposure!r})")}
                   / count(*) AS mean_sq,
               {exact_sum_sql(f"greatest({rss}, 0.0)")}
                   / nullif({exact_sum_sql(f"s0 / {w_sum!r} * {fit_dof!r}")}, 0)
                   AS disp
        FROM per_id
    ),
    pop AS (
        SELECT greatest(coalesce(mean, 0.0), {floor!r}) AS m,
               greatest(coalesce(mean_sq - mean * mean, 0.0), 0.0) AS v,
               {dispersion} AS dispersion
        FROM moments
    ),
    prior AS (
        SELECT m AS prior_rate, m * m / s2 AS alpha, m / s2 AS beta, dispersion
        FROM (SELECT *, greatest(v - m * {noise!r}, pow(m / 20.0, 2)) AS s2 FROM pop)
    ),
    est AS (
        SELECT per_id.*, prior.*,
               {level} AS level,
               sqrt(alpha + s0) / (beta + {exposure!r}) AS level_sd,
               s0 / (s0 + alpha) AS reliability,
               {slope} AS slope,
               {slope_var} AS slope_var
        FROM per_id CROSS JOIN prior
    ),
    trended AS (
        SELECT *, {s.rate_trend_damping * (1.0 - tb) / 24.0!r} * reliability
                  * coalesce(slope * slope / nullif(slope * slope + slope_var, 0), 0.0)
                  AS per_slope
        FROM est
    )
    SELECT {id_col}, greatest(level + per_slope * slope, {floor!r}) AS rate,
           sqrt(level_sd * level_sd + (per_slope * sqrt(slope_var)) ** 2) AS rate_sd,
           prior_rate, slope AS trend_per_day, n, n_today
    FROM trended
    """


def rates(con: duckdb.DuckDBPyConnection, wh: Path, out: Path, ds: dt.date, s: Settings) -> dict:
    days = window_days(_days_present(wh, "events"), ds, s.rate_window_days)
    offsets = [(d - ds).days for d in days]
    follows = f"read_parquet('{_files(_must(wh, 'clean', 'follows', ds))}')"
    prev = ds - dt.timedelta(days=1)

    def daily(table: str, id_col: str) -> str:
        rows = _read_days(wh, table, days)
        if not rows:
            return f"SELECT NULL::VARCHAR AS {id_col}, 0 AS t, 0 AS n WHERE false"
        return (
            f"SELECT {id_col}, (ds - DATE '{ds}')::INTEGER AS t, count(*) AS n "
            f"FROM ({rows}) GROUP BY {id_col}, ds"
        )

    producers = _estimate_sql(
        daily("events", "producer_id"),
        f"SELECT producer_id FROM {follows}",
        "producer_id",
        offsets,
        s,
    )
    prev_pr = _out(out, "producer_rates", prev)
    if prev_pr.exists():
        previous = (
            f"SELECT producer_id, events_per_hour AS forecast_prev, "
            f"coalesce(rate_hi, events_per_hour) AS bound FROM read_parquet('{prev_pr}')"
        )
    else:
        previous = (
            "SELECT NULL::VARCHAR AS producer_id, NULL::DOUBLE AS forecast_prev, "
            "NULL::DOUBLE AS bound WHERE false"
        )
    flash = (
        f"(bound IS NOT NULL AND n_today >= {s.flash_min_events} "
        f"AND n_today / 24.0 > {s.flash_factor!r} * bound)"
    )
    flagged = f"""
        SELECT e.*, p.forecast_prev, coalesce({flash}, false) AS flash
        FROM ({producers}) e LEFT JOIN ({previous}) p USING (producer_id)
    """
    n_days = len(days)
    shaped_pr = f"""
        SELECT producer_id, rate AS events_per_hour, n AS n_events, {n_days} AS window_days,
               {24.0 * n_days!r} AS window_hours, prior_rate, 'eb_trend' AS method, rate_sd,
               {INTERVAL90},
               trend_per_day, n_today, forecast_prev, flash
        FROM (SELECT * REPLACE (CASE WHEN flash THEN greatest(rate, n_today / 24.0) ELSE rate END
                                AS rate) FROM ({flagged}))
    """
    n_pr = _write(con, shaped_pr, _out(out, "producer_rates", ds))

    view_counts = daily("views", "consumer_id")
    consumers = _estimate_sql(
        view_counts, f"SELECT consumer_id FROM {follows}", "consumer_id", offsets, s
    )
    seen = (
        f"SELECT consumer_id, DATE '{ds}' + max(t)::INTEGER AS window_last "
        f"FROM ({view_counts}) WHERE n > 0 GROUP BY consumer_id"
    )
    prev_cr = _out(out, "consumer_rates", prev)
    if prev_cr.exists():
        last = f"""SELECT consumer_id,
                   CASE WHEN window_last IS NULL THEN prev_last WHEN prev_last IS NULL
                        THEN window_last ELSE greatest(window_last, prev_last) END AS last_view_ds
            FROM ({seen}) FULL OUTER JOIN
                 (SELECT consumer_id, last_view_ds AS prev_last FROM read_parquet('{prev_cr}'))
            USING (consumer_id)"""
    else:
        last = f"SELECT consumer_id, window_last AS last_view_ds FROM ({seen})"
    shaped_cr = f"""
        SELECT consumer_id, rate AS views_per_hour, n AS n_views, {n_days} AS window_days,
               {24.0 * n_days!r} AS window_hours, prior_rate, 'eb_trend' AS method, rate_sd,
               {INTERVAL90},
               trend_per_day, n_today, NULL::DOUBLE AS forecast_prev, false AS flash, last_view_ds
        FROM ({consumers}) LEFT JOIN ({last}) USING (consumer_id)
    """
    n_cr = _write(con, shaped_cr, _out(out, "consumer_rates", ds))
    return {"producer_rates": n_pr, "consumer_rates": n_cr}


def plan(con: duckdb.DuckDBPyConnection, wh: Path, out: Path, ds: dt.date, s: Settings) -> dict:
    follows = f"read_parquet('{_files(_must(wh, 'clean', 'follows', ds))}')"
    prev_plan = _out(out, "edge_plan", ds - dt.timedelta(days=1))
    current = (
        f"SELECT consumer_id, producer_id, mode AS current_mode FROM read_parquet('{prev_plan}')"
        if prev_plan.exists()
        else "SELECT NULL::VARCHAR AS consumer_id, NULL::VARCHAR AS producer_id, "
        "NULL::VARCHAR AS current_mode WHERE false"
    )
    h = s.threshold
    up, down = h * (1 + s.mode_change_margin), h / (1 + s.mode_change_margin)
    if s.inactive_after_days > 0:
        active = (
            f"coalesce(last_view_ds >= DATE '{ds}' - INTERVAL {s.inactive_after_days - 1} DAY, "
            "false)"
        )
    else:
        active = "true"
    edges = f"""
        SELECT f.consumer_id, f.producer_id, p.events_per_hour AS phi, c.views_per_hour AS theta,
               cur.current_mode, {active} AS active
        FROM {follows} f
        LEFT JOIN read_parquet('{_out(out, "producer_rates", ds)}') p USING (producer_id)
        LEFT JOIN read_parquet('{_out(out, "consumer_rates", ds)}') c USING (consumer_id)
        LEFT JOIN ({current}) cur USING (consumer_id, producer_id)
    """
    push = f"""CASE WHEN current_mode = 'push' THEN theta >= {down!r} * phi
                    WHEN current_mode = 'pull' THEN theta >= {up!r} * phi
                    ELSE theta >= {h!r} * phi END"""
    planned = f"""
        SELECT consumer_id, producer_id,
               CASE WHEN active AND {push} THEN 'push' ELSE 'pull' END AS mode,
               theta / nullif(phi, 0) AS ratio, phi, theta, current_mode, active
        FROM ({edges})
    """
    con.execute(f"""CREATE TEMP TABLE served AS
        SELECT consumer_id, producer_id, mode,
               CASE WHEN mode = 'push' THEN consumer_id ELSE producer_id END AS source_id,
               ratio, phi, theta, current_mode, active
        FROM ({planned})""")
    rows = {
        "edge_plan": _write(
            con,
            "SELECT consumer_id, producer_id, mode, source_id, ratio, phi, theta FROM served "
            "ORDER BY consumer_id, producer_id",
            _out(out, "edge_plan", ds),
        ),
        "consumer_sources": _write(
            con,
            "SELECT DISTINCT consumer_id, CASE WHEN mode = 'push' THEN 'consumer_feed' "
            "ELSE 'producer' END AS source_type, source_id FROM served "
            "ORDER BY consumer_id, source_type, source_id",
            _out(out, "consumer_sources", ds),
        ),
    }
    rows["plan_cost"] = _write(con, _cost_sql(s), _out(out, "plan_cost", ds))
    return rows


def _cost_sql(s: Settings) -> str:
    """The served plan's row of ``plan/plan_cost`` (Chen & Zhou's Eq. 3-5, as
    ``jobs.selection.cost`` prices it): maintenance H * sum of pushed phi, evaluation
    theta * L * |V_c| for a consumer reading more than one source, edge and consumer counts,
    and the theta-weighted percentiles of the sources read."""
    H, L = float(s.push_cost), float(s.pull_cost)
    metric = "n_pull" if s.latency_metric == "pulls" else "n_sources"
    pct = ", ".join(
        f"min(n_sources) FILTER (WHERE cum >= {q - 1e-12!r})::DOUBLE AS sources_p{round(q * 100)}"
        for q in (0.50, 0.95, 0.99)
    )
    ev = f"CASE WHEN n_sources > 1 THEN theta * {L!r} * n_sources ELSE 0.0 END"
    ok = f"CASE WHEN {metric} <= {s.latency_bound_sources} THEN theta ELSE 0.0 END"
    return f"""
        WITH per_c AS (
            SELECT consumer_id, any_value(theta) AS theta,
                   count(*) FILTER (WHERE mode = 'pull') AS n_pull,
                   count(*) FILTER (WHERE mode = 'push') AS n_push,
                   {exact_sum_sql("CASE WHEN mode = 'push' THEN phi ELSE 0.0 END")} AS push_phi,
                   count(*) FILTER (WHERE current_mode IS NOT NULL AND mode <> current_mode)
                       AS mode_changes,
                   min(coalesce(active, true)::INTEGER) AS active
            FROM served GROUP BY consumer_id),
        c AS (SELECT *, n_pull + (n_push > 0)::INTEGER AS n_sources FROM per_c),
        hist AS (SELECT n_sources, {exact_sum_sql("theta")} AS w FROM c GROUP BY n_sources),
        cdf AS (SELECT n_sources, sum(w) OVER (ORDER BY n_sources) / sum(w) OVER () AS cum
                FROM hist),
        totals AS (
            SELECT round({exact_sum_sql(f"push_phi * {H!r}")}, 6) AS maintenance_cost,
                   round({exact_sum_sql(ev)}, 6) AS evaluation_cost,
                   sum(n_push) AS push_edges, sum(n_pull) AS pull_edges,
                   count(*) AS consumers, sum(mode_changes) AS mode_changes,
                   sum(1 - active) AS inactive_consumers,
                   round({exact_sum_sql(ok)} / {exact_sum_sql("theta")}, 6)
                       AS latency_share
            FROM c)
        SELECT 'ff-per-pair' AS strategy, *,
               round(maintenance_cost + evaluation_cost, 6) AS total_cost
        FROM totals, (SELECT {pct} FROM cdf)"""


def materialize(
    con: duckdb.DuckDBPyConnection, wh: Path, out: Path, ds: dt.date, s: Settings
) -> dict:
    days = [d for d in _days_present(wh, "events") if d <= ds]
    k = s.feed_k
    events = _read_days(wh, "events", days)
    # a re-sent event id keeps its first arrival (the incremental path keeps the older copy)
    unique = f"""
        SELECT producer_id, event_id, created_at FROM ({events})
        QUALIFY row_number() OVER (PARTITION BY producer_id, event_id
                                   ORDER BY ds, created_at DESC) = 1
    """
    producer_feed = f"""
        SELECT producer_id, rank, event_id, created_at FROM (
            SELECT *, row_number() OVER (PARTITION BY producer_id
                                         ORDER BY created_at DESC, event_id DESC)::INTEGER AS rank
            FROM ({unique})) WHERE rank <= {k}
    """
    pf_path = _out(out, "producer_feed", ds)
    n_pf = _write(con, producer_feed + " ORDER BY producer_id, rank", pf_path)
    pushed = (
        f"SELECT consumer_id, producer_id FROM read_parquet('{_out(out, 'edge_plan', ds)}') "
        "WHERE mode = 'push'"
    )
    consumer_feed = f"""
        SELECT consumer_id, rank, event_id, producer_id, created_at FROM (
            SELECT p.consumer_id, f.event_id, f.producer_id, f.created_at,
                   row_number() OVER (PARTITION BY p.consumer_id
                                      ORDER BY f.created_at DESC, f.event_id DESC)::INTEGER
                       AS rank
            FROM ({pushed}) p JOIN read_parquet('{pf_path}') f USING (producer_id))
        WHERE rank <= {k} ORDER BY consumer_id, rank
    """
    n_cf = _write(con, consumer_feed, _out(out, "consumer_feed", ds))
    # the content of every producer-feed event, first arrival of an id kept
    event_store = f"""
        SELECT event_id, producer_id, created_at, payload, attributes FROM ({events})
        SEMI JOIN read_parquet('{pf_path}') f USING (event_id, producer_id, created_at)
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY ds) = 1
        ORDER BY event_id
    """
    n_es = _write(con, event_store, _out(out, "event_store", ds))
    return {"producer_feed": n_pf, "consumer_feed": n_cf, "event_store": n_es}


STAGES = {"rates": rates, "plan": plan, "materialize": materialize}


def compare(warehouse: str, out: Path, ds: dt.date) -> dict[str, Any]:
    """Differences between the warehouse's tables of day ``ds`` (written by the Spark stages,
    with FF-PerPair served) and this reference's: row counts, the largest relative rate
    difference, and the rows found on one side only."""
    wh = Path(warehouse)
    con = duckdb.connect()

    def spark(layer: str, table: str) -> str:
        return f"read_parquet('{_files(_must(wh, layer, table, ds))}')"

    def ref(table: str) -> str:
        return f"read_parquet('{_out(out, table, ds)}')"

    def one(sql: str) -> Any:
        return con.execute(sql).fetchone()[0]  # type: ignore[index]

    result: dict[str, Any] = {}
    for table, key, rate, extra in (
        ("producer_rates", "producer_id", "events_per_hour", "flash"),
        ("consumer_rates", "consumer_id", "views_per_hour", "last_view_ds"),
    ):
        a, b = spark("rates", table), ref(table)
        result[table] = {
            "rows": [one(f"SELECT count(*) FROM {a}"), one(f"SELECT count(*) FROM {b}")],
            "max_rel_diff": one(
                f"SELECT coalesce(max(greatest(abs(a.{rate} - b.{rate}) / b.{rate}, "
                f"abs(a.rate_sd - b.rate_sd) / nullif(b.rate_sd, 0))), 0) "
                f"FROM {a} a JOIN {b} b USING ({key})"
            ),
            "unmatched_ids": one(
                f"SELECT count(*) FROM {a} a FULL JOIN {b} b USING ({key}) "
                f"WHERE a.{key} IS NULL OR b.{key} IS NULL"
            ),
            f"{extra}_differs": one(
                f"SELECT count(*) FROM {a} a JOIN {b} b USING ({key}) "
                f"WHERE a.{extra} IS DISTINCT FROM b.{extra}"
            ),
        }
    a, b = spark("plan", "edge_plan"), ref("edge_plan")
    result["edge_plan"] = {
        "rows": [one(f"SELECT count(*) FROM {a}"), one(f"SELECT count(*) FROM {b}")],
        "strategies": [r[0] for r in con.execute(f"SELECT DISTINCT strategy FROM {a}").fetchall()],
        "differs": one(
            f"SELECT count(*) FROM {a} a FULL JOIN {b} b USING (consumer_id, producer_id) "
            "WHERE a.mode IS DISTINCT FROM b.mode OR a.source_id IS DISTINCT FROM b.source_id"
        ),
    }
    a, b = spark("plan", "plan_cost"), ref("plan_cost")
    costs = ("maintenance_cost", "evaluation_cost", "total_cost", "latency_share")
    exact = ("push_edges", "pull_edges", "consumers", "mode_changes", "inactive_consumers")
    exact += ("sources_p50", "sources_p95", "sources_p99")
    rel = ", ".join(f"abs(a.{c} - b.{c}) / greatest(abs(b.{c}), 1e-300)" for c in costs)
    result["plan_cost"] = {
        "rows": [
            one(f"SELECT count(*) FROM {a} WHERE strategy = 'ff-per-pair'"),
            one(f"SELECT count(*) FROM {b}"),
        ],
        "max_rel_diff": one(f"SELECT greatest({rel}) FROM {a} a JOIN {b} b USING (strategy)"),
        "columns_differs": one(
            "SELECT "
            + " + ".join(f"(a.{c} IS DISTINCT FROM b.{c})::INTEGER" for c in exact)
            + f" FROM {a} a JOIN {b} b USING (strategy)"
        ),
    }
    for layer, table, cols in (
        ("plan", "consumer_sources", "consumer_id, source_type, source_id"),
        ("feeds", "producer_feed", "producer_id, rank, event_id, created_at"),
        ("feeds", "consumer_feed", "consumer_id, rank, event_id, producer_id, created_at"),
        ("feeds", "event_store", "event_id, producer_id, created_at, payload, attributes"),
    ):
        a, b = spark(layer, table), ref(table)
        result[table] = {
            "rows": [one(f"SELECT count(*) FROM {a}"), one(f"SELECT count(*) FROM {b}")],
            "only_spark": one(
                f"SELECT count(*) FROM (SELECT {cols} FROM {a} EXCEPT ALL SELECT {cols} FROM {b})"
            ),
            "only_reference": one(
                f"SELECT count(*) FROM (SELECT {cols} FROM {b} EXCEPT ALL SELECT {cols} FROM {a})"
            ),
        }
    con.close()
    return result


def agrees(diff: dict[str, Any], rel_tol: float = 1e-9) -> list[str]:
    """What ``compare`` found wrong (empty when the two implementations agree)."""
    wrong = []
    for name, d in diff.items():
        if d["rows"][0] != d["rows"][1]:
            wrong.append(f"{name}: {d['rows'][0]} rows against {d['rows'][1]}")
        if d.get("max_rel_diff", 0) > rel_tol:
            wrong.append(f"{name}: values differ by {d['max_rel_diff']:.3g} (relative)")
        for k, v in d.items():
            if k in ("unmatched_ids", "differs", "only_spark", "only_reference") or k.endswith(
                "_differs"
            ):
                if v:
                    wrong.append(f"{name}: {k} = {v}")
        if name == "edge_plan" and d["strategies"] != ["ff-per-pair"]:
            wrong.append(f"edge_plan: the warehouse serves {d['strategies']}, not ff-per-pair")
    return wrong


def run(stage: str, settings: Settings, out: Path, ds: dt.date, threads: int = 0) -> dict[str, Any]:
    started = time.monotonic()
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {threads}")
    rows = STAGES[stage](con, Path(settings.warehouse), out, ds, settings)
    con.close()
    return {"stage": stage, "rows": rows, "seconds": round(time.monotonic() - started, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stage", choices=sorted(STAGES))
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ds", required=True, type=dt.date.fromisoformat)
    ap.add_argument("--config", default=None)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    settings = load_settings(args.config, {"warehouse": args.warehouse})
    print(json.dumps(run(args.stage, settings, Path(args.out), args.ds, args.threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
