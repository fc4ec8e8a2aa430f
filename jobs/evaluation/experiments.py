"""The Feeding Frenzy experiments (Silberstein et al., SIGMOD 2010, Section 5), reproduced on
generated workloads with feedpipe's own planner: ``feedpipe evaluate --experiment NAME``.

Each experiment draws an ``ff2010``-shaped population (``jobs.workloads.generate.Population``: the
follow graph and every producer's and consumer's true rate), plans it with the plan stage's
strategies (``jobs.stages.plan.plans_of``) and prices the plans with the cost model
(``jobs.selection.cost``, docs/cost-model.md) at H = 3, L = 1 unless said otherwise. The paper
measured CPU on a PNUTS cluster; here the measure is the modeled cost per hour, so the
shapes compare, not the absolute numbers. Each experiment writes ``NAME.csv`` (the table),
``NAME.png`` (the chart) and ``NAME.md`` (table, chart and the paper's finding with whether it
holds here), and returns the same.

* ``ff-fig4``: cost against the global query:event ratio for PushAll, PullAll and the hybrid
  (FF-PerPair): Section 5.2, Figure 4.
* ``ff-fig5``: cost against the Zipf skew of the producers' and consumers' rates, at a
  16:1 ratio: Section 5.2.1, Figure 5.
* ``ff-fig6``: the push threshold (push iff θ/φ >= t, Lemma 1 with t in place of H/L)
  against latency (sources read per feed view, p50 and p95) and cost: Section 5.3, Figure 6.
* ``ff-fig9``: cost against fan-out on a uniform synthetic graph at a 4:1 ratio:
  Section 5.4, Figure 9.
* ``ff-fig10``: a flash event (Section 5.5, Figure 10): 0.1% of the least active producers
  post ``FLASH_FACTOR`` times faster and gain followers (fan-out 100); cost before, during
  (the old plan, new edges planned at the old rates) and after re-planning at the new rates.

Chen & Zhou (ICDE 2015, Section V.C) on ``cz2015`` workloads, every strategy including
Greedy, Hierarchy-1 and Hierarchy-2 as the plan stage runs them (in parts, with the
FF-PerPair guard; docs/shared-views.md):

* ``cz-fig4b``: cost against data size (half, once and twice ``--scale``);
* ``cz-fig6a`` / ``cz-fig6b``: against the skew of follow-set sizes / feed popularity;
* ``cz-fig6c``: against the query/update ratio (update rates varied, as in the paper);
* ``cz-fig6d``: against the average following size.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from jobs.common.config import Settings
from jobs.workloads.generate import (
    PROFILES,
    Population,
    Profile,
    scaled,
    stochastic_round,
    user_ids,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

H, L = 3.0, 1.0
FLASH_SHARE = 0.001
FLASH_FACTOR = 50.0
FLASH_FAN_OUT = 100


@dataclass(frozen=True)
class Workload:
    """A drawn population: edges (consumer index, producer index) and true rates."""

    consumers: np.ndarray
    producers: np.ndarray
    phi: np.ndarray  # events per hour, per producer index
    theta: np.ndarray  # views per hour, per consumer index

    @classmethod
    def draw(cls, profile: Profile, seed: int) -> Workload:
        """The graph and rates ``generate`` would write for day 1 (without Poisson noise)."""
        pop = Population.draw(profile, seed)
        P = profile.producers
        rng = np.random.default_rng([seed, 0, 1])
        keys = pop.draw_edges(
            np.arange(profile.consumers),
            np.clip(stochastic_round(pop.fan_in, rng), 1, P - 1),
            rng,
            fill=profile.fill_degrees,
        )
        return cls(keys // P, keys % P, pop.event_rate, pop.view_rate)

    def ratio(self) -> float:
        """The global query:event ratio: views per hour over events per hour."""
        return float(self.theta.sum() / self.phi.sum())

    def with_ratio(self, ratio: float) -> Workload:
        """The same workload with every view rate scaled to the given global ratio (the
        skew of the view rates kept, as the paper varies it)."""
        return dataclasses.replace(self, theta=self.theta * (ratio / self.ratio()))


def edge_frame(spark: SparkSession, w: Workload) -> DataFrame:
    """``feeding_frenzy.edge_inputs`` of a workload: every consumer active, no current plan."""
    import pandas as pd

    from jobs.selection import feeding_frenzy

    follows = spark.createDataFrame(
        pd.DataFrame({"consumer_id": user_ids(w.consumers), "producer_id": user_ids(w.producers)})
    )
    pr = spark.createDataFrame(
        pd.DataFrame({"producer_id": user_ids(np.arange(w.phi.size)), "events_per_hour": w.phi})
    )
    cr = spark.createDataFrame(
        pd.DataFrame({"consumer_id": user_ids(np.arange(w.theta.size)), "views_per_hour": w.theta})
    )
    return feeding_frenzy.edge_inputs(follows, pr, cr)


def settings_for(strategies: tuple[str, ...], parts: int = 4) -> Settings:
    return Settings(
        push_cost=H,
        pull_cost=L,
        strategy=strategies[0],
        strategies=strategies,
        inactive_after_days=0,
        shuffle_partitions=parts,
    )


def price(spark: SparkSession, w: Workload, strategies: tuple[str, ...]) -> dict[str, dict]:
    """The plan stage's cost rows (``cost.plan_costs``) of each strategy on a workload."""
    from jobs.stages import plan

    plans = plan.plans_of(edge_frame(spark, w), settings_for(strategies))
    try:
        return {r["strategy"]: r.asDict() for r in plans.costs.collect()}
    finally:
        plans.release()


def price_plan(spark: SparkSession, planned: Workload, priced: Workload, threshold: float) -> dict:
    """FF-PerPair's rule with threshold ``threshold`` (push iff θ/φ >= t) applied to the
    rates of ``planned``, priced at the rates of ``priced`` (same edges)."""
    from pyspark.sql import functions as F

    from jobs.selection import cost, feeding_frenzy

    edges = edge_frame(spark, planned)
    modes = feeding_frenzy.ff_per_pair(edges, threshold).select(
        "consumer_id", "producer_id", "mode", "source_id", "strategy"
    )
    now = edge_frame(spark, priced).select(
        "consumer_id",
        "producer_id",
        "phi",
        "theta",
        F.lit(None).cast("string").alias("current_mode"),
    )
    assigned = modes.join(now, ["consumer_id", "producer_id"])
    members = spark.createDataFrame(
        [], "strategy string, view_id string, producer_id string, phi double"
    )
    (row,) = cost.plan_costs(assigned, members, cost.CostModel(H, L), ["ff-per-pair"]).collect()
    return row.asDict()


@dataclass
class Result:
    name: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    finding: str
    holds: bool
    files: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(
        cls, name: str, title: str, rows: list[dict[str, Any]], finding: str, holds: bool
    ) -> Result:
        """A result whose columns are its rows' keys."""
        return cls(name, title, list(rows[0]), rows, finding, holds)

    def markdown(self) -> str:
        head = "| " + " | ".join(self.columns) + " |"
        sep = "|" + "---|" * len(self.columns)
        body = ["| " + " | ".join(_fmt(r[c]) for c in self.columns) + " |" for r in self.rows]
        verdict = "holds" if self.holds else "does NOT hold"
        return "\n".join(
            [f"## {self.title}", "", head, sep, *body, "", f"Finding ({verdict}): {self.finding}"]
        )


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:,.1f}" if abs(x) >= 100 else f"{x:.3g}"
    return str(x)


def _gain(hybrid: float, best_pure: float) -> float:
    """How much cheaper than the best pure strategy, in percent."""
    return 100.0 * (1.0 - hybrid / best_pure)


def pure_and_hybrid(spark: SparkSession, w: Workload) -> tuple[dict[str, float], dict]:
    """PushAll's, PullAll's and the hybrid's (FF-PerPair) cost, and the hybrid's gain over
    the better pure strategy; with the cost rows of all three."""
    c = price(spark, w, ("push-all", "pull-all", "ff-per-pair"))
    push, pull, hyb = (c[s]["total_cost"] for s in ("push-all", "pull-all", "ff-per-pair"))
    row = {"push-all": push, "pull-all": pull, "hybrid": hyb, "gain %": _gain(hyb, min(push, pull))}
    return row, c


def fig4(spark: SparkSession, base: Workload) -> Result:
    rows = []
    for ratio in (1, 2, 4, 8, 16, 24, 32):
        row, c = pure_and_hybrid(spark, base.with_ratio(ratio))
        edges = len(base.consumers)
        pushed = 100.0 * c["ff-per-pair"]["push_edges"] / edges
        rows.append({"ratio": ratio, **row, "pushed edges %": pushed})
    holds = all(r["hybrid"] <= min(r["push-all"], r["pull-all"]) + 1e-6 for r in rows)
    flips = (
        rows[0]["push-all"] > rows[0]["pull-all"] and rows[-1]["push-all"] < rows[-1]["pull-all"]
    )
    finding = (
        f"the hybrid costs no more than min(PushAll, PullAll) at every ratio "
        f"(gain {min(r['gain %'] for r in rows):.1f}% to {max(r['gain %'] for r in rows):.1f}%); "
        f"PushAll is the dearer pure strategy at 1:1 "
        f"({_pct(rows[0]['push-all'], rows[0]['pull-all'])} of PullAll) and PullAll at 32:1 "
        f"({_pct(rows[-1]['pull-all'], rows[-1]['push-all'])} of PushAll), so neither pure "
        "strategy wins everywhere; the hybrid pushes more edges as views grow "
        f"({rows[0]['pushed edges %']:.0f}% to {rows[-1]['pushed edges %']:.0f}%)"
    )
    return Result.of(
        "ff-fig4",
        "Feeding Frenzy Figure 4: cost against the query:event ratio",
        rows,
        finding,
        holds and flips,
    )


def _pct(a: float, b: float) -> str:
    return f"{100 * a / b:.0f}%"


def fig5(spark: SparkSession, profile: Profile, seed: int) -> Result:
    rows = []
    for skew in (0.0, 0.5, 1.0, 1.5, 2.0):
        p = dataclasses.replace(profile, event_zipf=skew, view_zipf=skew)
        w = Workload.draw(p, seed).with_ratio(16)
        rows.append({"zipf": skew, **pure_and_hybrid(spark, w)[0]})
    best = all(r["hybrid"] <= min(r["push-all"], r["pull-all"]) + 1e-6 for r in rows)
    gains = [r["gain %"] for r in rows]
    grows = gains[-1] > gains[0] and all(b >= a - 1.0 for a, b in itertools.pairwise(gains))
    finding = (
        "the hybrid is the cheapest at every skew, and its gain over the best pure strategy "
        f"grows with skew: {gains[0]:.1f}% at Zipf 0 (uniform rates), "
        + ", ".join(f"{g:.1f}% at {r['zipf']:g}" for g, r in zip(gains[1:], rows[1:], strict=True))
        + " (the paper: from 14% at moderate to 30% at high skew)"
    )
    return Result.of(
        "ff-fig5",
        "Feeding Frenzy Figure 5: cost against rate skew (16:1)",
        rows,
        finding,
        best and grows,
    )


def fig6(spark: SparkSession, base: Workload) -> Result:
    w = base.with_ratio(16)
    rows = []
    for t in (0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 8.0, 16.0, 64.0):
        r = price_plan(spark, w, w, t)
        rows.append(
            {
                "threshold": t,
                "cost": r["total_cost"],
                "sources p50": r["sources_p50"],
                "sources p95": r["sources_p95"],
                "pushed edges": r["push_edges"],
            }
        )
    at_hl = next(r for r in rows if r["threshold"] == H / L)
    cheapest = min(rows, key=lambda r: r["cost"])
    p95 = [r["sources p95"] for r in rows]
    monotone = all(b >= a for a, b in itertools.pairwise(p95))
    finding = (
        f"latency falls as the threshold falls (p95 sources {p95[-1]:g} at t = "
        f"{rows[-1]['threshold']:g}, {p95[0]:g} at t = {rows[0]['threshold']:g}); cost is lowest "
        f"at t = {cheapest['threshold']:g} (H/L = {H / L:g}: "
        f"{_pct(at_hl['cost'], cheapest['cost'])} of the minimum) and rises on both sides "
        f"({_pct(rows[0]['cost'], cheapest['cost'])} at t = {rows[0]['threshold']:g}, "
        f"{_pct(rows[-1]['cost'], cheapest['cost'])} at t = {rows[-1]['threshold']:g}): "
        "a lower threshold buys latency with cost"
    )
    holds = monotone and cheapest["cost"] < rows[0]["cost"] and cheapest["cost"] < rows[-1]["cost"]
    return Result.of(
        "ff-fig6",
        "Feeding Frenzy Figure 6: push threshold against latency and cost (16:1)",
        rows,
        finding,
        holds,
    )


def fig9(spark: SparkSession, profile: Profile, seed: int) -> Result:
    rows = []
    for fan in (2.5, 5.0, 10.0, 20.0, 40.0):
        # a uniform synthetic graph as in Section 5.4: consumers and producers fixed, more
        # followers per producer means more producers per consumer
        p = dataclasses.replace(
            profile,
            producers_per_consumer=fan * profile.producers / profile.consumers,
            fan_in_zipf=0.0,
            fan_out_zipf=0.0,
        )
        w = Workload.draw(p, seed).with_ratio(4)
        c = price(spark, w, ("push-all", "pull-all", "ff-per-pair"))["ff-per-pair"]
        edges = len(w.consumers)
        rows.append(
            {
                "fan-out": round(edges / profile.producers, 1),
                "edges": edges,
                "hybrid": c["total_cost"],
                "cost per edge": c["total_cost"] / edges,
                "pushed edges %": 100.0 * c["push_edges"] / edges,
            }
        )
    costs = [r["hybrid"] for r in rows]
    per_edge = [r["cost per edge"] for r in rows]
    share = [r["pushed edges %"] for r in rows]
    holds = all(b > a for a, b in itertools.pairwise(costs))
    finding = (
        f"cost grows with fan-out ({_fmt(costs[0])} to {_fmt(costs[-1])} per hour for "
        f"{rows[0]['fan-out']:g} to {rows[-1]['fan-out']:g} followers per producer), "
        f"{per_edge[0]:.3g} to {per_edge[-1]:.3g} per edge; the share of pushed edges stays "
        f"within {min(share):.1f}% to {max(share):.1f}%: the per-pair decisions do not change, "
        "there are more pairs to serve"
    )
    return Result.of(
        "ff-fig9",
        "Feeding Frenzy Figure 9: cost against fan-out (uniform graph, 4:1)",
        rows,
        finding,
        holds,
    )


def flash_workloads(base: Workload, seed: int) -> tuple[Workload, Workload, Workload, np.ndarray]:
    """(before, during at old rates, during at new rates, flash producers): ``FLASH_SHARE`` of
    the producers, drawn from the least active half, post ``FLASH_FACTOR`` times faster and
    gain followers up to a fan-out of ``FLASH_FAN_OUT``."""
    rng = np.random.default_rng([seed, 10])
    P, C = base.phi.size, base.theta.size
    quiet = np.argsort(base.phi, kind="stable")[: P // 2]
    flash = np.sort(rng.choice(quiet, size=max(1, round(FLASH_SHARE * P)), replace=False))
    keys = base.consumers * P + base.producers
    new: list[int] = []
    for p in flash:
        followers = set(base.consumers[base.producers == p].tolist()) | {int(p)}
        joining = [c for c in rng.permutation(C).tolist() if c not in followers]
        new.extend(c * P + int(p) for c in joining[: max(0, FLASH_FAN_OUT - len(followers) + 1)])
    arr = np.sort(np.concatenate([keys, np.array(new, dtype=np.int64)]))
    grown = dataclasses.replace(base, consumers=arr // P, producers=arr % P)
    phi = base.phi.copy()
    phi[flash] *= FLASH_FACTOR
    return base, grown, dataclasses.replace(grown, phi=phi), flash


def fig10(spark: SparkSession, base: Workload, seed: int) -> Result:
    w = base.with_ratio(16)
    before, grown_old, grown_new, flash = flash_workloads(w, seed)
    t = H / L
    phases = [
        ("before", price_plan(spark, before, before, t)),
        ("during", price_plan(spark, grown_old, grown_new, t)),
        ("after", price_plan(spark, grown_new, grown_new, t)),
    ]
    rows = [
        {
            "phase": name,
            "cost": r["total_cost"],
            "vs before %": 100.0 * (r["total_cost"] / phases[0][1]["total_cost"] - 1),
            "pushed edges": r["push_edges"],
            "edges": r["push_edges"] + r["pull_edges"],
        }
        for name, r in phases
    ]
    during, after = rows[1]["vs before %"], rows[2]["vs before %"]
    holds = during > after >= -1e-9 and after < during / 2
    finding = (
        f"{flash.size} flash producer(s) ({FLASH_SHARE:.1%} of {w.phi.size}) at {FLASH_FACTOR:g}x "
        f"their rate with fan-out {FLASH_FAN_OUT}: serving the old plan costs {during:+.1f}% "
        f"over the baseline; re-planned at the new rates it is {after:+.1f}%, the flash "
        "producers' pairs moved to pull (the paper: nearly back to the pre-flash level)"
    )
    return Result.of(
        "ff-fig10",
        "Feeding Frenzy Figure 10: a flash event, before, during and after adapting (16:1)",
        rows,
        finding,
        holds,
    )


CZ_STRATEGIES = (
    "push-all",
    "pull-all",
    "ff-consumer",
    "ff-per-pair",
    "cz-greedy",
    "cz-hierarchy1",
    "cz-hierarchy2",
)


def cz_sweep(
    spark: SparkSession,
    name: str,
    title: str,
    param: str,
    values: tuple[float, ...],
    make: Callable[[float], Workload],
) -> Result:
    """Chen & Zhou's Section V.C: every strategy's cost at each value of one workload
    parameter, and Hierarchy-2 against FF-PerPair and Hierarchy-1. The paper's finding in
    each of these figures is that Hierarchy-2 is the cheapest everywhere (docs/evaluation.md
    has what the model says instead)."""
    rows = []
    for v in values:
        w = make(v)
        c = price(spark, w, CZ_STRATEGIES)
        cost = {s: c[s]["total_cost"] for s in CZ_STRATEGIES}
        rows.append(
            {
                param: v,
                "edges": len(w.consumers),
                **cost,
                "H2 vs FF-PerPair %": 100.0 * (cost["cz-hierarchy2"] / cost["ff-per-pair"] - 1),
                "H2 vs H1 %": 100.0 * (cost["cz-hierarchy2"] / cost["cz-hierarchy1"] - 1),
            }
        )
    cheapest = [min(CZ_STRATEGIES, key=lambda s: r[s]) for r in rows]
    h2_wins = sum(r["cz-hierarchy2"] <= min(r[s] for s in CZ_STRATEGIES) + 1e-6 for r in rows)
    vs_ff = [r["H2 vs FF-PerPair %"] for r in rows]
    finding = (
        f"Hierarchy-2 is the cheapest at {h2_wins} of {len(rows)} points (cheapest: "
        + ", ".join(f"{c} at {r[param]:g}" for c, r in zip(cheapest, rows, strict=True))
        + f"); against FF-PerPair it is {min(vs_ff):+.1f}% to {max(vs_ff):+.1f}% "
        f"(mean {sum(vs_ff) / len(vs_ff):+.1f}%; the paper: about -16% to -18% on average)"
    )
    return Result.of(name, title, rows, finding, h2_wins == len(rows))


def _cz(profile: Profile, seed: int, **changes: float) -> Workload:
    return Workload.draw(dataclasses.replace(profile, **changes), seed)  # type: ignore[arg-type]


CZ_SWEEPS: dict[str, tuple[str, str, tuple[float, ...]]] = {
    "cz-fig4b": ("4b: cost against data size", "size", (0.5, 1.0, 2.0)),
    "cz-fig6a": ("6a: cost against the skew of follow-set sizes", "zipf", (0.2, 0.62, 1.0, 1.4)),
    "cz-fig6b": ("6b: cost against the skew of feed popularity", "zipf", (0.39, 0.8, 1.2, 1.43)),
    "cz-fig6c": ("6c: cost against the query/update ratio", "ratio", (1.0, 5.0, 15.0, 30.0)),
    "cz-fig6d": ("6d: cost against following size", "feeds per user", (3.0, 6.5, 13.0, 26.0)),
}
"""Chen & Zhou's sweeps: figure and title, the parameter varied and its values."""


def cz_experiments(
    spark: SparkSession, profile: Profile, base: Workload, seed: int, scale: float
) -> dict[str, Callable[[], Result]]:
    """Chen & Zhou's Figure 4b (data size) and Figure 6a-d on ``cz2015`` workloads
    (``base``: ``profile``'s workload)."""
    makers: dict[str, Callable[[float], Workload]] = {
        "cz-fig4b": lambda x: Workload.draw(scaled(PROFILES["cz2015"], scale * x), seed),
        "cz-fig6a": lambda x: _cz(profile, seed, fan_in_zipf=x),
        "cz-fig6b": lambda x: _cz(profile, seed, fan_out_zipf=x),
        # the paper keeps the query rates and varies the update rates
        "cz-fig6c": lambda x: dataclasses.replace(base, phi=base.phi * (base.ratio() / x)),
        "cz-fig6d": lambda x: _cz(profile, seed, producers_per_consumer=x),
    }
    return {
        name: functools.partial(
            cz_sweep, spark, name, f"Chen & Zhou Figure {title}", param, values, makers[name]
        )
        for name, (title, param, values) in CZ_SWEEPS.items()
    }


EXPERIMENTS: dict[str, str] = {
    "ff-fig4": "cost vs query:event ratio (PushAll, PullAll, hybrid)",
    "ff-fig5": "cost vs rate skew",
    "ff-fig6": "push threshold vs latency and cost",
    "ff-fig9": "cost vs fan-out",
    "ff-fig10": "flash event: before, during, after",
    "cz-fig4b": "shared views: cost vs data size",
    "cz-fig6a": "shared views: cost vs follow-set size skew",
    "cz-fig6b": "shared views: cost vs feed popularity skew",
    "cz-fig6c": "shared views: cost vs query/update ratio",
    "cz-fig6d": "shared views: cost vs following size",
}


def run(
    spark: SparkSession, name: str, out: Path, scale: float = 0.05, seed: int = 7
) -> list[Result]:
    """Run one experiment (or ``all``) at ``scale`` of its profile (``ff2010`` for Feeding
    Frenzy's, ``cz2015`` for Chen & Zhou's); write its files to ``out``."""
    names = list(EXPERIMENTS) if name == "all" else [name]
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        raise ValueError(
            f"unknown experiment {unknown[0]!r}; one of: all, {', '.join(EXPERIMENTS)}"
        )
    profile = scaled(PROFILES["ff2010"], scale)
    cz_profile = scaled(PROFILES["cz2015"], scale)
    base = Workload.draw(profile, seed)
    cz_base = Workload.draw(cz_profile, seed)
    runners: dict[str, Callable[[], Result]] = {
        "ff-fig4": lambda: fig4(spark, base),
        "ff-fig5": lambda: fig5(spark, profile, seed),
        "ff-fig6": lambda: fig6(spark, base),
        "ff-fig9": lambda: fig9(spark, profile, seed),
        "ff-fig10": lambda: fig10(spark, base, seed),
        **cz_experiments(spark, cz_profile, cz_base, seed, scale),
    }
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for n in names:
        p, w = (cz_profile, cz_base) if n.startswith("cz-") else (profile, base)
        log.info("experiment %s on %s at scale %g", n, p.name, scale)
        r = runners[n]()
        r.files = write(
            r,
            out,
            f"{p.name} at scale {scale:g} ({p.consumers} users, "
            f"{len(w.consumers)} follow edges), seed {seed}, "
            f"H = {H:g}, L = {L:g}",
        )
        results.append(r)
    return results


def write(r: Result, out: Path, workload: str) -> dict[str, str]:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=r.columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(r.rows)
    files = {"csv": out / f"{r.name}.csv", "png": out / f"{r.name}.png", "md": out / f"{r.name}.md"}
    files["csv"].write_text(buf.getvalue())
    chart(r, files["png"])
    files["md"].write_text(
        f"{r.markdown()}\n\nWorkload: {workload}.\n\n![{r.title}]({r.name}.png)\n"
    )
    return {k: str(v) for k, v in files.items()}


def chart(r: Result, path: Path) -> None:
    """The experiment's chart as a PNG (matplotlib, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    x_col = r.columns[0]
    xs = [row[x_col] for row in r.rows]
    if r.name.endswith("-store"):
        _store_chart(r, ax, xs)
    elif r.name in ("ff-fig4", "ff-fig5"):
        for s, style in (("push-all", "s-"), ("pull-all", "^-"), ("hybrid", "o-")):
            ax.plot(xs, [row[s] for row in r.rows], style, label=s)
        ax.set_ylabel("modeled cost per hour")
        ax.legend()
    elif r.name == "ff-fig6":
        ax.plot(xs, [row["sources p95"] for row in r.rows], "o-", label="p95 sources per view")
        ax.plot(xs, [row["sources p50"] for row in r.rows], "s--", label="p50 sources per view")
        ax.set_xscale("log", base=2)
        ax.set_ylabel("sources read per feed view")
        ax2 = ax.twinx()
        ax2.plot(xs, [row["cost"] for row in r.rows], "^-", color="tab:red", label="cost")
        ax2.set_ylabel("modeled cost per hour", color="tab:red")
        ax.legend(loc="upper left")
    elif r.name.startswith("cz-"):
        for s in CZ_STRATEGIES:
            ax.plot(xs, [row[s] for row in r.rows], "o-", label=s)
        ax.set_ylabel("modeled cost per hour")
        ax.legend(fontsize=8)
    elif r.name == "ff-fig9":
        ax.plot(xs, [row["hybrid"] for row in r.rows], "o-", label="hybrid")
        ax.set_ylabel("modeled cost per hour")
        ax.legend()
    else:
        ax.bar(xs, [row["cost"] for row in r.rows], color=["#4a7fb5", "#c0392b", "#5aa469"])
        ax.set_ylabel("modeled cost per hour")
    ax.set_xlabel(x_col)
    ax.set_title(r.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _store_chart(r: Result, ax: Any, xs: list[Any]) -> None:
    """The measured experiments' charts (``jobs.evaluation.store_experiments``)."""
    if r.name == "ff-fig7-store":
        for col, style in (
            ("users half pushed %", "s-"),
            ("users all pushed %", "o-"),
            ("views from materialized %", "^-"),
        ):
            ax.plot(xs, [row[col] for row in r.rows], style, label=col)
        ax.set_xscale("log", base=2)
        ax.set_ylabel("percent")
        ax2 = ax.twinx()
        for col, style in (("read p95 ms", "v--"), ("read mean ms", "d--")):
            ax2.plot(xs, [row[col] for row in r.rows], style, color="tab:red", label=col)
        ax2.set_ylabel("measured read latency, ms", color="tab:red")
        ax2.legend(loc="center right", fontsize=8)
        ax.legend(loc="center left", fontsize=8)
        return
    if r.name == "ff-fig8-store":
        for col, style in (
            ("per-pair mean ms", "o-"),
            ("per-consumer mean ms", "s-"),
            ("per-pair p95 ms", "o--"),
            ("per-consumer p95 ms", "s--"),
        ):
            ax.plot(xs, [row[col] for row in r.rows], style, label=col)
        ax.set_ylabel("measured read latency, ms")
        ax.legend(fontsize=8)
        return
    series = (
        ("push-all", "pull-all", "hybrid")
        if r.name == "ff-fig4-store"
        else tuple(c for c in r.columns[1:] if "%" not in c)
    )
    for s in series:
        ax.plot(xs, [row[s] for row in r.rows], "o-", label=s)
    ax.set_ylabel("measured store CPU, s per workload hour")
    ax.legend(fontsize=8)
