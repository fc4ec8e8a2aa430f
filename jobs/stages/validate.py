"""Stage ``validate``: Great Expectations suites over the day's tables, each judged from one
Spark query of its table (``jobs.stages.one_pass``), or on the driver with Great
Expectations' pandas engine on a small day (:data:`DRIVER_ROWS`).

Suites live in ``schemas/expectations/<name>.json``; each runs on a *check frame*
(``jobs.stages.checks``): the table itself, or the table with derived columns that turn a
relational property into a column expectation (feed order, edge coverage, row accounting, the
cost gate); the gates (``jobs.stages.gates``) are judged first and checked as one more suite. Writes
``quality/ds=D/results.json`` and Data Docs (``quality/ds=D/docs/index.html``). Any failed
expectation fails the stage, and ``publish`` refuses a day without passing results.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.common import ledger
from jobs.common.config import Settings
from jobs.common.errors import FeedpipeError
from jobs.common.records import (
    Check,
    Failure,
    IngestRecord,
    SuiteOutcome,
    ValidateRecord,
    ValidationResults,
)
from jobs.common.spark import job_description
from jobs.common.storage import Storage
from jobs.common.tables import contract_of, schemas_root
from jobs.stages import one_pass
from jobs.stages.checks import accounting_check, check_frames, gates_frame, input_rows
from jobs.stages.gates import failed_gates, gate_line, gates

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


KEPT_FRAMES = frozenset(
    {
        "rates.producer_rates",
        "rates.consumer_rates",
        "plan.edge_plan",
        "feeds.producer_feed",
        "feeds.consumer_feed",
        "feeds.view_feed",
    }
)
"""Check frames built with a join, kept (memory, else local disk) while their suite runs:
each of Great Expectations' metric queries would join again. The others, table scans and
feeds with one window, are read again by each query, which then reads only the columns it
checks and computes the window only where an expectation needs it (on a scale-1 day,
``clean.views``' suite took 12.2 s kept and 1.9 s not)."""


class ValidationFailed(FeedpipeError, RuntimeError):
    """At least one expectation failed; the message summarises which."""


FIRST_PASS: dict[str, Any] = {"result_format": "BOOLEAN_ONLY"}
"""How every suite runs first: Great Expectations computes only what judges each
expectation (a map expectation's unexpected and null counts, the table's row count), which
its Spark engine bundles into one aggregate query of the check frame per graph level; a
uniqueness expectation adds its window's count. Richer formats (``SUMMARY``, ``BASIC``)
fetch each expectation's unexpected values in a query of its own, even when it has none."""

SAMPLED: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": 20}
"""How a suite that failed runs again: with counts, observed values and up to 20 sample
unexpected values per expectation, for ``results.json`` and Data Docs."""


DRIVER_ROWS = 200_000
"""A day whose tables that ``validate`` reads hold at most this many rows in all (their Parquet
footers say, before any query) has its check frames validated on the driver: each frame
collected (at most this many rows, a few MB) and checked by Great Expectations' pandas engine.
The same suites and verdicts as inside Spark, without the hundred-odd small Spark queries the
Spark engine runs for a day's 67 expectations (docs/operations.md, "Validation on the
driver")."""


def driver_frame(frame: DataFrame, limit: int) -> pd.DataFrame | None:
    """``frame`` on the driver as pandas, or None when it has more than ``limit`` rows (the
    collect is bounded: at most ``limit + 1`` rows reach the driver)."""
    rows = frame.limit(limit + 1).toPandas()
    return None if len(rows) > limit else rows


def load_suite(name: str) -> dict[str, Any]:
    """The suite ``schemas/expectations/<name>.json``. A suite with ``not_null_from_contract``
    (``layer/table``) starts with a not-null expectation for each column the table's contract
    requires: one home for what a column may not lack."""
    path = schemas_root() / "expectations" / f"{name}.json"
    spec: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    table = spec.pop("not_null_from_contract", None)
    if table is not None:
        required = [
            {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": column}}
            for column in contract_of(table).required
        ]
        spec["expectations"] = [*required, *spec["expectations"]]
    return spec


def validate_frames(
    frames: dict[str, DataFrame],
    parameters: dict[str, Any],
    docs_dir: Path | None = None,
    keep: frozenset[str] = KEPT_FRAMES,
    driver_rows: int = 0,
    run_name: str | None = None,
    single_pass: bool = True,
) -> ValidationResults:
    """Run each frame's suite; returns each one's outcome and where it ran. Pure of storage
    (Data Docs go to ``docs_dir`` when given, their runs named ``run_name``: the day).

    A Spark frame's suite is judged from one aggregate query of the frame
    (:mod:`jobs.stages.one_pass`, ``single_pass``; engine ``one-pass``), by Great
    Expectations' own rules. A suite with an expectation that module does not count runs on
    Great Expectations' Spark engine (``spark``), first with ``FIRST_PASS``; there, frames
    named in ``keep`` are persisted while it runs, and Great Expectations' own persisting of
    every batch is turned off. A small day's frames run on its pandas engine on the driver
    (``driver_rows``; ``driver``). A suite that fails, however it was judged, runs again on
    Great Expectations' engine with samples (``SAMPLED``), so its results and Data Docs show
    its own counts and examples of the rows that broke it."""
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier
    from pyspark import StorageLevel

    started = dt.datetime.now(dt.UTC)
    ctx = _context(docs_dir)
    source = ctx.data_sources.add_spark("feedpipe", persist=False)
    on_driver = ctx.data_sources.add_pandas("feedpipe-driver")
    suites: dict[str, SuiteOutcome] = {}
    engines: dict[str, str] = {}
    for name, frame in sorted(frames.items()):
        spec = load_suite(name)
        suite = ctx.suites.add(
            gx.ExpectationSuite(name=name, expectations=spec["expectations"], meta=spec.get("meta"))
        )
        session = frame.sparkSession
        run_id = RunIdentifier(run_name=run_name, run_time=started) if run_name else None
        small = driver_frame(frame, driver_rows) if driver_rows else None
        formats = [FIRST_PASS, SAMPLED]  # the second only for a failed suite
        vr: Any = None
        if small is None and single_pass:
            configs = one_pass.configurations(spec["expectations"], parameters)
            with job_description(session, f"validate {name}"):
                counted = one_pass.suite_results(frame, configs, FIRST_PASS)
            if counted is not None:
                vr = _suite_result(name, counted, run_id)
                formats = [] if vr.success else [SAMPLED]
        if formats:
            where = source if small is None else on_driver
            batch_def = where.add_dataframe_asset(name).add_batch_definition_whole_dataframe("ds")
            vd = ctx.validation_definitions.add(
                gx.ValidationDefinition(name=name, data=batch_def, suite=suite)
            )
            if small is not None:
                frame = small
            elif name in keep and len(formats) > 1:
                frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
            for result_format in formats:
                checkpoint = ctx.checkpoints.add(
                    gx.Checkpoint(
                        name=f"check_{name}_{result_format['result_format']}",
                        validation_definitions=[vd],
                        result_format=result_format,
                    )
                )
                with job_description(session, f"validate {name}"):
                    result = checkpoint.run(
                        batch_parameters={"dataframe": frame},
                        expectation_parameters=parameters,
                        run_id=run_id,
                    )
                (vr,) = result.run_results.values()
                if vr.success:
                    break
            if small is None and name in keep and len(formats) > 1:
                frame.unpersist()
            engines[name] = "spark" if small is None else "driver"
        else:
            assert vr is not None
            _store(ctx, name, vr, run_id)
            engines[name] = "one-pass"
        suites[name] = suite_outcome(vr)
        log.info("suite %s: %s", name, "passed" if vr.success else f"FAILED {suites[name].failed}")
    if docs_dir is not None:
        # one build of the whole site from the stored results; an UpdateDataDocsAction per
        # checkpoint rebuilt the index after every suite (33 page renders instead of 23)
        ctx.build_data_docs(site_names=["feedpipe"])
    return ValidationResults(
        success=all(s.success for s in suites.values()), suites=suites, engines=engines
    )


def _suite_result(name: str, results: list[Any], run_id: Any) -> Any:
    """A suite's validation result, as a checkpoint makes it, from its expectations'
    results judged from :mod:`jobs.stages.one_pass`'s counts."""
    from great_expectations import __version__
    from great_expectations.core.expectation_validation_result import (
        ExpectationSuiteValidationResult,
    )
    from great_expectations.validator.validation_statistics import calc_validation_statistics

    stats = calc_validation_statistics(results)
    meta: dict[str, Any] = {"great_expectations_version": __version__, "engine": "one-pass"}
    if run_id is not None:
        meta |= {"run_id": run_id, "validation_time": run_id.run_time}
    return ExpectationSuiteValidationResult(
        results=results,
        success=stats.success,
        suite_name=name,
        statistics={
            "evaluated_expectations": stats.evaluated_expectations,
            "successful_expectations": stats.successful_expectations,
            "unsuccessful_expectations": stats.unsuccessful_expectations,
            "success_percent": stats.success_percent,
        },
        meta=meta,
        batch_id=f"feedpipe-{name}",
    )


def _store(ctx: Any, name: str, vr: Any, run_id: Any) -> None:
    """``vr`` among the context's validation results, for Data Docs."""
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    suite_key = ExpectationSuiteIdentifier(name=name)
    key = ValidationResultIdentifier(
        expectation_suite_identifier=suite_key,
        run_id=run_id or RunIdentifier(run_time=dt.datetime.now(dt.UTC)),
        batch_identifier=f"feedpipe-{name}",
    )
    ctx.validation_results_store.store_validation_results(
        suite_validation_result=vr,
        suite_validation_result_identifier=key,
        expectation_suite_identifier=suite_key,
    )


def _context(docs_dir: Path | None) -> Any:
    """An ephemeral Great Expectations context, quiet, with a Data Docs site in ``docs_dir``
    when given."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    if docs_dir is not None:
        ctx.add_data_docs_site(
            site_name="feedpipe",
            site_config={
                "class_name": "SiteBuilder",
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": str(docs_dir),
                },
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
    return ctx


def _plain(value: Any) -> Any:
    """A value of Great Expectations' results as JSON holds it (numbers of numpy, dates and
    other objects as their text)."""
    return json.loads(json.dumps(value, default=str))


def suite_outcome(vr: Any) -> SuiteOutcome:
    """One suite's validation result as ``results.json`` keeps it: the outcome, how many
    expectations, each check (expectation, arguments, success) and each failure with its
    unexpected count, observed value and sample rows."""
    failed, checks = [], []
    for r in vr.results:
        cfg = r.expectation_config
        if cfg is None:
            continue
        kwargs = _plain({k: v for k, v in cfg.kwargs.items() if k != "batch_id"})
        checks.append(Check(expectation=cfg.type, kwargs=kwargs, success=bool(r.success)))
        if r.success:
            continue
        result = r.result or {}
        failed.append(
            Failure(
                expectation=cfg.type,
                kwargs=kwargs,
                unexpected_count=result.get("unexpected_count"),
                observed_value=_plain(result.get("observed_value")),
                sample=_plain(result.get("partial_unexpected_list")),
            )
        )
    return SuiteOutcome(
        success=bool(vr.success), expectations=len(vr.results), failed=failed, checks=checks
    )


def _copy_tree(local: Path, wh: Storage, *dest: str) -> None:
    """The files below ``local`` into the warehouse at ``dest`` (local disk or S3)."""
    from pyarrow import fs as pafs

    if any(p.is_file() for p in local.rglob("*")):
        pafs.copy_files(
            str(local),
            wh.path(*dest),
            source_filesystem=pafs.LocalFileSystem(),
            destination_filesystem=wh.fs,
        )


SUMMARY_PAGE = "summary.html"
"""A self-contained page of the day's suites and gates in ``quality/ds=D/``: every
expectation with its outcome, readable without network access (Data Docs' pages load their
styles and scripts from CDNs)."""


def quality_summary(results: ValidationResults) -> str:
    """The day's :data:`SUMMARY_PAGE`, from its validation results."""
    from jobs.common.pages import gate_verdict, render

    def key(c: Check | Failure) -> tuple[str, str]:
        return c.expectation, json.dumps(c.kwargs, sort_keys=True)

    suites = []
    for name, r in sorted(results.suites.items()):
        failed = {key(f): f for f in r.failed}
        rows = []
        for c in r.checks:
            f = failed.get(key(c))
            rows.append(
                {
                    "expectation": c.expectation,
                    "kwargs": json.dumps(c.kwargs, sort_keys=True, default=str),
                    "success": c.success,
                    "unexpected": ""
                    if f is None or f.unexpected_count is None
                    else f.unexpected_count,
                    "sample": json.dumps(f.sample, default=str) if f and f.sample else "",
                }
            )
        suites.append((name, {"success": r.success, "rows": rows}))
    return render(
        "quality_summary.html",
        ds=results.ds or "",
        success=results.success,
        suites=suites,
        expectations=sum(r.expectations for r in results.suites.values()),
        failed=sum(len(r.failed) for r in results.suites.values()),
        gates=[{**g.as_dict(), "verdict": gate_verdict(g)} for g in results.gates],
    )


def summary(results: ValidationResults) -> str:
    """What failed, on one line: the failed gates in words and figures, then every other
    failed expectation."""
    ds = results.ds or "the day"
    lines = [gate_line(g, ds) for g in failed_gates(results.gates)]
    for name, r in results.suites.items():
        if r.success or name == "ingest.gates":
            continue
        for f in r.failed:
            detail = (
                f"{f.unexpected_count} unexpected"
                if f.unexpected_count is not None
                else f"observed {f.observed_value}"
            )
            lines.append(f"{name}: {f.expectation} {f.kwargs} ({detail})")
    return "; ".join(lines)


def run(spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage) -> ValidateRecord:
    from jobs.common.spark import UNCOMPRESSED_CACHE, scoped_conf

    with scoped_conf(spark, UNCOMPRESSED_CACHE, settings):  # the kept check frames
        return _run(spark, settings, ds, wh)


def _run(spark: SparkSession, settings: Settings, ds: dt.date, wh: Storage) -> ValidateRecord:
    ingested = ledger.read_record(wh, ds, "ingest")
    day_gates = gates(settings, ds, wh, ingested) if isinstance(ingested, IngestRecord) else []
    if failed_gates(day_gates):
        # the day's volume is already known to be wrong: its gates (and the row accounting)
        # are checked, not the tables built from it
        assert isinstance(ingested, IngestRecord)
        frames = {
            "ingest.accounting": accounting_check(spark, wh, ds, ingested),
            "ingest.gates": gates_frame(spark, day_gates),
        }
    else:
        frames = check_frames(spark, settings, ds, wh, day_gates)
    quality = ledger.quality_parts(ds)
    with tempfile.TemporaryDirectory(prefix="feedpipe-docs-") as tmp:
        small = input_rows(wh, ds) <= DRIVER_ROWS
        results = validate_frames(
            frames,
            {"feed_k": settings.feed_k},
            Path(tmp),
            driver_rows=DRIVER_ROWS if small else 0,
            run_name=ds.isoformat(),
        )
        wh.delete(*quality, "docs")
        # the site's static/ (fonts, images, styles: 4 MB) is not copied: its pages load their
        # styles and scripts from CDNs and refer to static/ for a favicon only
        shutil.rmtree(Path(tmp) / "static", ignore_errors=True)
        _copy_tree(Path(tmp), wh, *quality, "docs")
    results = results.model_copy(update={"ds": ds, "gates": day_gates})
    wh.write_text(results.to_json(), *ledger.results_parts(ds))
    wh.write_text(quality_summary(results), *quality, SUMMARY_PAGE)
    if not results.success:
        raise ValidationFailed(
            f"validation failed for {ds}: {summary(results)} "
            f"(details: {wh.uri(*ledger.results_parts(ds))})"
        )
    return ValidateRecord(
        success=True, suites=len(results.suites), docs=wh.uri(*quality, "docs", "index.html")
    )
