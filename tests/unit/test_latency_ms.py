"""Latency targets in milliseconds (docs/cost-model.md, "Latency targets in milliseconds"):
the bound planned as the sources the read-latency fit allows, the report's text beside the
latency measured on the store, and the view-weighted percentile of the load's read probe,
each against hand-worked values."""

from __future__ import annotations

import pytest

from jobs.common.config import load_settings
from jobs.common.records import LatencyTarget, PlanRecord, ReadProbe, StoreRecord
from jobs.selection import cost
from jobs.serving.report import target_text
from jobs.stages.plan import PlanParams, latency_target
from jobs.stages.store_load import weighted_quantile

MS = {
    "FEEDPIPE_LATENCY_METRIC": "ms",
    "FEEDPIPE_LATENCY_BOUND": "1.2",
    "FEEDPIPE_LATENCY_MS_BASE": "0.4",
    "FEEDPIPE_LATENCY_MS_PER_SOURCE": "0.15",
}


def test_the_planner_gets_the_sources_and_the_record_keeps_the_milliseconds():
    s = load_settings(environ=MS)
    # (1.2 - 0.4) / 0.15 = 5.33: five sources
    assert PlanParams.of(s).target == cost.LatencyTarget("sources", 5, 0.95)
    assert latency_target(s) == LatencyTarget(
        metric="ms", bound=1.2, quantile=0.95, sources=5, ms_base=0.4, ms_per_source=0.15
    )
    pulls = load_settings(
        environ={"FEEDPIPE_LATENCY_METRIC": "pulls", "FEEDPIPE_LATENCY_BOUND": "0"}
    )
    assert PlanParams.of(pulls).target == cost.LatencyTarget("pulls", 0, 0.95)
    assert latency_target(pulls).sources is None


def test_the_report_shows_the_target_the_fit_and_the_measured_percentiles():
    plan = PlanRecord(latency_target=latency_target(load_settings(environ=MS)))
    served = {"sources_p50": 1.0, "sources_p95": 4.0, "sources_p99": 6.0}
    probe = ReadProbe(reads=1000, p50_ms=0.42, p95_ms=0.9, p99_ms=1.734)
    text = target_text(plan, StoreRecord(probe=probe), served)
    assert text == (
        "latency target: at most 1.2 ms per feed view for 95% of feed views (planned as at "
        "most 5 sources by the read-latency fit 0.400 ms + 0.1500 ms a source; the served "
        "plan's p50 / p95 / p99 by the fit: 0.55 / 1.00 / 1.30 ms); measured on the feed "
        "store after the load: p50 0.42, p95 0.90, p99 1.73 ms (1,000 reads, weighted by "
        "feed views)"
    )
    sources = PlanRecord(latency_target=LatencyTarget(metric="sources", bound=2, quantile=0.95))
    assert target_text(sources) == (
        "latency target: at most 2 sources per feed view for 95% of feed views"
    )


def test_weighted_quantiles_by_hand():
    # values 1, 2, 3, 10 with weights 1, 1, 1, 7: cumulative shares 0.1, 0.2, 0.3, 1.0
    pairs = [(10.0, 7.0), (2.0, 1.0), (1.0, 1.0), (3.0, 1.0)]
    assert weighted_quantile(pairs, 0.1) == 1.0
    assert weighted_quantile(pairs, 0.25) == 3.0
    assert weighted_quantile(pairs, 0.3) == 3.0
    assert weighted_quantile(pairs, 0.5) == 10.0
    # equal weights: the nearest-rank percentile
    even = [(float(v), 1.0) for v in range(1, 101)]
    assert [weighted_quantile(even, q) for q in (0.5, 0.95, 0.99)] == [50.0, 95.0, 99.0]
    with pytest.raises(ValueError):
        weighted_quantile([], 0.5)
