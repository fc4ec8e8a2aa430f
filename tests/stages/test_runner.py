"""The stage runner: a rerun of a day gives the same rows; starting a stage withdraws what
depended on its old outputs."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pytest

from jobs import cli
from jobs.common import ledger, readiness, store, versions
from jobs.common.records import PlanRecord, StageRecord
from jobs.common.storage import Storage
from jobs.stages import runner
from jobs.stages.publish import PublishRefused
from support import browser, naive
from support.records import ingested
from support.workloads import LAST, TOPIC_DATES, K, assembled, build, days, table_rows

TABLES = [
    ("clean", "follows"),
    ("clean", "events"),
    ("rates", "producer_rates"),
    ("rates", "consumer_rates"),
    ("plan", "edge_plan"),
    ("plan", "plan_cost"),
    ("plan", "consumer_sources"),
    ("plan", "views"),
    ("plan", "view_members"),
    ("feeds", "producer_feed"),
    ("feeds", "consumer_feed"),
    ("feeds", "view_feed"),
]


def test_rerun_of_a_day_gives_the_same_rows(spark, built_copy):
    """Rates, plan and materialize run again (ingest's rerun: tests/stages/test_ingest.py),
    served by auto among FF-PerPair and the shared views (the default served strategy). The
    first run's rates are the shared build's (the strategies do not change them)."""
    s = dataclasses.replace(
        built_copy, strategy="auto", strategies=("ff-per-pair", "cz-hierarchy2")
    )
    build(spark, s, [LAST], ("plan", "materialize"))
    first = {t: table_rows(spark, s, *t, LAST) for t in TABLES}
    assert first[("plan", "view_members")], "the shared views were not served"
    build(spark, s, [LAST], ("rates", "plan", "materialize"))
    for t in TABLES:
        assert table_rows(spark, s, *t, LAST) == first[t], f"{t} changed on rerun"
    served = [r for r in first[("plan", "plan_cost")] if r[1]]
    assert len(served) == 1


def tree(root: str) -> dict[str, bytes]:
    """Every file below ``root`` with its content."""
    return {str(p.relative_to(root)): p.read_bytes() for p in Path(root).rglob("*") if p.is_file()}


def test_a_rerun_stage_withdraws_the_later_records_not_the_published_version(
    spark, built_copy, tmp_path, capsys
):
    s, wh = built_copy, Storage.at(built_copy.warehouse)
    for stage in ("validate", "publish"):
        runner.run_stage(stage, s, LAST, spark)
    assert ledger.is_published(wh, LAST) and ledger.latest(wh) == LAST

    # a rerun whose landing never arrived (no landing at all, or no folder of the day) is
    # refused in one line naming the day and the paths, and changes nothing
    before = tree(s.warehouse)
    other_day = tmp_path / "partial" / "events" / "ds=2020-01-01"
    other_day.mkdir(parents=True)
    for landing in (tmp_path / "does-not-exist", tmp_path / "partial"):
        for verb in ("run", "ingest"):
            args = [verb, "--ds", str(LAST), "--landing", str(landing), "--warehouse", s.warehouse]
            assert cli.main(args) == 1
            (line,) = capsys.readouterr().err.strip().splitlines()
            assert line == (
                f"feedpipe: error: {LAST}: landing not ready, missing "
                f"{landing}/events/ds={LAST}, {landing}/views/ds={LAST} (after a known upstream "
                "outage, run the day with --allow-empty events,views)"
            )
    assert tree(s.warehouse) == before
    assert ledger.is_published(wh, LAST)
    served = versions.published(wh, LAST)
    expected = naive.feeds(Path(s.landing), LAST, days()[0], K)
    consumers = sorted(expected)[:50]
    feeds = assembled(s.warehouse, LAST, consumers, published=True)
    assert feeds == {c: expected[c] for c in consumers}
    runner.run_stage("plan", s, LAST, spark)
    assert set(ledger.read_records(wh, LAST)) == {"ingest", "rates", "plan"}
    assert not wh.exists(*ledger.results_parts(LAST))  # the validation results went too
    # the published version is untouched, and readers keep reading it
    assert ledger.is_published(wh, LAST) and versions.published(wh, LAST) == served
    assert versions.working(wh, LAST).folders["plan/edge_plan"] != served.folders["plan/edge_plan"]
    assert assembled(s.warehouse, LAST, consumers, published=True) == feeds
    # so does the day's report (rewritten after plan), saying that a rebuild is under way
    page = browser.Page((Path(s.warehouse) / "reports" / f"ds={LAST}" / "index.html").read_text())
    assert page.text["status"] == "published"
    assert page.text["rebuild"] == (
        "This day is being rebuilt (finished so far: ingest, rates, plan); the published "
        "version below stays until the rebuild is published."
    )
    # materialize and validate have not run since plan: the new plan cannot be published
    with pytest.raises(PublishRefused, match="materialize, validate has not run"):
        runner.run_stage("publish", s, LAST, spark)


def test_a_known_outage_runs_as_empty_when_allowed_and_is_recorded(spark, built_copy, tmp_path):
    """The day after the churn days, whose events never came: refused, then run with
    ``allow_empty = events``, which the ingest record (and so the manifest) keeps."""
    day = LAST + dt.timedelta(days=1)
    views = tmp_path / "landing" / "views" / f"ds={day}"
    views.mkdir(parents=True)
    (views / "v.csv").write_text(f"consumer_id,viewed_at\nu1,{day}T08:00:00Z\nu2,{day}T09:00:00Z\n")
    s = dataclasses.replace(built_copy, landing=str(tmp_path / "landing"))
    with pytest.raises(readiness.LandingNotReady, match=f"missing {tmp_path}/landing/events"):
        runner.run_stage("ingest", s, day, spark)
    wh = Storage.at(s.warehouse)
    assert ledger.read_record(wh, day, "ingest") is None
    allowed = dataclasses.replace(s, allow_empty=("events",))
    runner.run_stage("ingest", allowed, day, spark)
    record = ingested(wh, day)
    assert record.allowed_empty == ["events"]
    assert record.tables["events"].rows_in == 0 and record.tables["views"].rows_in == 2
    # no follows folder: the previous day's graph carries over unchanged
    graph = table_rows(spark, s, "clean", "follows", LAST)
    assert table_rows(spark, s, "clean", "follows", day) == graph
    follows = record.tables["follows"]
    assert (follows.edges_before, follows.edges) == (len(graph), len(graph))
    assert follows.edges_added == follows.edges_removed == 0


def test_every_stage_reads_and_writes_exactly_the_tables_it_declares(
    spark, built_copy, topics_copy, redis_server
):
    """The registry is the lineage the docs show (docs/architecture.md, "Lineage"): over the
    churn days (FF-PerPair and the pure strategies, feeds incremental from day 2) and the topic
    days, the last churn day planned again with shared views served, validated and published,
    the last topic day rebuilt in full, validated and published, the last churn day loaded
    into the feed store, and rates run on churn days
    ingested without their daily counts (by an older feedpipe: counted from the clean rows,
    to the same rates), every table a stage declares is one it read or wrote, and the runner
    refuses a stage that touches a table it does not declare (shown on a declaration with one
    read taken away)."""
    from jobs.common.pipeline import REGISTRY

    read: dict[str, set[str]] = {s.name: set() for s in REGISTRY}
    earlier: dict[str, set[str]] = {s.name: set() for s in REGISTRY}
    wrote: dict[str, set[str]] = {s.name: set() for s in REGISTRY}

    def seen(name: str, record: StageRecord) -> None:
        read[name] |= set(record.inputs)
        earlier[name] |= set(record.earlier_inputs)
        wrote[name] |= set(record.outputs)

    for settings, on in ((built_copy, days()), (topics_copy, TOPIC_DATES)):
        for ds in on:
            for name, record in ledger.read_records(Storage.at(settings.warehouse), ds).items():
                seen(name, record)
    s = dataclasses.replace(
        built_copy, strategy="auto", strategies=("ff-per-pair", "cz-hierarchy2")
    )
    for name in ("plan", "materialize", "validate", "publish"):
        seen(name, runner.run_stage(name, s, LAST, spark))
    store.connect(redis_server.url).flushdb()
    served = dataclasses.replace(s, store=redis_server.url)
    seen("store", runner.run_stage("store", served, LAST, spark))
    plan = ledger.read_record(Storage.at(s.warehouse), LAST, "plan")
    assert isinstance(plan, PlanRecord) and plan.strategy == "cz-hierarchy2"
    last_topic_day = TOPIC_DATES[-1]
    seen("materialize", runner.run_stage("materialize", topics_copy, last_topic_day, spark, True))
    for name in ("validate", "publish"):
        seen(name, runner.run_stage(name, topics_copy, last_topic_day, spark))

    wh = Storage.at(s.warehouse)
    before = {
        t: table_rows(spark, s, "rates", t, LAST) for t in ("producer_rates", "consumer_rates")
    }
    for ds in days():  # as an older feedpipe ingested them: no daily counts
        record = ingested(wh, ds)
        outputs = {
            k: v
            for k, v in record.outputs.items()
            if k not in ("clean/event_counts", "clean/view_counts")
        }
        ledger.write_record(wh, ds, record.model_copy(update={"outputs": outputs}))
    seen("rates", runner.run_stage("rates", s, LAST, spark))
    assert {t: table_rows(spark, s, "rates", t, LAST) for t in before} == before

    for stage in REGISTRY:
        declared = {t for t in stage.reads if not t.startswith("landing/")}
        assert (stage.name, sorted(read[stage.name])) == (stage.name, sorted(declared))
        assert (stage.name, sorted(earlier[stage.name])) == (stage.name, sorted(stage.earlier))
        assert (stage.name, sorted(wrote[stage.name])) == (stage.name, sorted(stage.writes))

    # a declaration that leaves out one table the stage reads: the run is refused
    rates = next(st for st in REGISTRY if st.name == "rates")
    short = dataclasses.replace(rates, reads=rates.reads[1:])
    run = versions.Run(LAST, inputs=set(rates.reads), earlier=set(rates.earlier))
    with pytest.raises(
        runner.UndeclaredTable, match=rf"stage rates .* read \['{rates.reads[0]}'\]"
    ):
        runner.undeclared(short, run)
    runner.undeclared(rates, run)
