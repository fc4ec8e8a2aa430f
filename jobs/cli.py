"""The ``feedpipe`` command line (also ``python -m jobs``, and the spark-submit entry point).

Verbs: generate, import, run, backfill, ingest, rates, plan, materialize, validate, publish,
feed, tables, catalog, report, evaluate, evaluate-rates, connect-server, config. Settings come
from ``--config``/``FEEDPIPE_CONFIG``, then ``FEEDPIPE_*`` variables, then the flags below,
later ones winning.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from jobs.common.config import STRATEGIES, ConfigError, Settings, load_settings
from jobs.common.pipeline import DESCRIPTIONS, STAGES, in_order

log = logging.getLogger("feedpipe")

SETTING_FLAGS: dict[str, tuple[str, type, str]] = {
    "landing": ("--landing", str, "landing root (local path or s3://)"),
    "warehouse": ("--warehouse", str, "warehouse root (local path or s3://)"),
    "publish_to": ("--publish-to", str, "also publish complete days to this s3://bucket/prefix"),
    "spark_master": ("--spark-master", str, "Spark master when not launched by spark-submit"),
    "spark_remote": ("--spark-remote", str, "run on this Spark Connect server (sc://host:port)"),
    "allow_empty": (
        "--allow-empty",
        str,
        "landing tables to run as empty this day (a known outage), e.g. events,views",
    ),
    "push_cost": ("--push-cost", float, "H, cost of one event pushed into one view"),
    "pull_cost": ("--pull-cost", float, "L, cost of one source read at view time"),
    "feed_k": ("--feed-k", int, "events per feed (k)"),
    "rate_window_days": ("--rate-window-days", int, "days of history behind each rate"),
    "strategy": ("--strategy", str, f"auto or one of: {', '.join(STRATEGIES)}"),
    "coherency": ("--coherency", str, "global or per_producer"),
    "feed_k_per_producer": ("--feed-k-per-producer", int, "k_p under per-producer coherency"),
    "latency_metric": ("--latency-metric", str, "latency target bounds: sources or pulls"),
    "latency_bound": ("--latency-bound", int, "at most this many sources/pulls per view"),
    "latency_quantile": ("--latency-quantile", float, "...for this share of feed views"),
    "inactive_after_days": (
        "--inactive-after-days",
        int,
        "no materialized feed after this many days without a view (0: off)",
    ),
}


def _date(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {value!r}") from exc


def _flag(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {value!r}")


def _stages(value: str) -> tuple[str, ...]:
    try:  # always in pipeline order
        return in_order(tuple(v.strip() for v in value.split(",") if v.strip()))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _settings_parent() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("settings (override feedpipe.toml and FEEDPIPE_* variables)")
    g.add_argument("--config", help="a feedpipe.toml file (default: $FEEDPIPE_CONFIG)")
    for name, (flag, typ, text) in SETTING_FLAGS.items():
        g.add_argument(flag, dest=f"set_{name}", type=typ, help=text)
    g.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    g.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    return p


def build_parser() -> argparse.ArgumentParser:
    from jobs.workloads.generate import FORMATS, PROFILES

    common = _settings_parent()
    parser = argparse.ArgumentParser(
        prog="feedpipe",
        description="Decide push vs pull per follow edge every day and materialize the feeds.",
    )
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    g = sub.add_parser(
        "generate", parents=[common], help="write a synthetic workload in the landing layout"
    )
    g.add_argument("--out", required=True, help="landing root to write (local path or s3://)")
    g.add_argument("--start", required=True, type=_date, help="first day (YYYY-MM-DD)")
    g.add_argument("--days", type=int, default=1, help="number of days (default 1)")
    g.add_argument("--profile", choices=sorted(PROFILES), default="ff2010", help="workload shape")
    g.add_argument("--scale", type=float, default=1.0, help="population multiplier (default 1)")
    g.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    g.add_argument("--format", choices=FORMATS, help="file format for all three tables")
    g.add_argument("--gzip", action="store_true", help="gzip CSV / JSON Lines files")
    g.add_argument("--trend-share", type=float, default=0.0, help="share of ids with a daily trend")
    g.add_argument("--trend-per-day", type=float, default=0.15, help="max daily growth of a trend")
    g.add_argument("--flash-producers", type=int, default=0, help="producers with a flash event")
    g.add_argument("--flash-day", type=_date, help="day of the flash event")
    g.add_argument("--flash-factor", type=float, default=10.0, help="rate multiplier of a flash")
    g.add_argument(
        "--topics",
        type=int,
        default=0,
        help="topic producers (default 0): events get attributes, day 1 lands the definitions",
    )
    g.add_argument(
        "--topic-follows", type=float, default=1.0, help="topics followed per consumer (default 1)"
    )

    imp = sub.add_parser("import", parents=[common], help="a real data set into the landing layout")
    imp.add_argument("name", choices=("snap-edges", "higgs"), help="importer")
    imp.add_argument(
        "--src", required=True, help="the edge list file (snap-edges) or folder (higgs)"
    )
    imp.add_argument("--out", required=True, help="landing root to write")
    imp.add_argument(
        "--ds", type=_date, default=dt.date(2026, 1, 1), help="day of the graph snapshot"
    )
    imp.add_argument("--reverse", action="store_true", help="edge A B means B follows A")
    imp.add_argument(
        "--activity-profile",
        choices=sorted(PROFILES),
        help="also generate events and views with this profile's rate distributions",
    )
    imp.add_argument("--days", type=int, default=1, help="days of generated activity")
    imp.add_argument("--seed", type=int, default=7)

    for stage in STAGES:
        sp = sub.add_parser(stage, parents=[common], help=DESCRIPTIONS[stage])
        sp.add_argument("--ds", required=True, type=_date, help="logical date (YYYY-MM-DD)")
        if stage == "materialize":
            sp.add_argument(
                "--full-refresh",
                nargs="?",
                const=True,
                default=False,
                type=_flag,
                help="rebuild from all clean events (also --full-refresh=true|false)",
            )

    r = sub.add_parser("run", parents=[common], help="all stages for one day")
    r.add_argument("--ds", required=True, type=_date)
    r.add_argument(
        "--full-refresh", action="store_true", help="rebuild feeds from all clean events"
    )
    r.add_argument("--stages", type=_stages, help="comma-separated subset, e.g. ingest,rates")

    b = sub.add_parser(
        "backfill", parents=[common], help="all stages for each day of a range, in order"
    )
    b.add_argument("--start", required=True, type=_date)
    b.add_argument("--end", required=True, type=_date)
    b.add_argument("--full-refresh", action="store_true")
    b.add_argument("--stages", type=_stages, help="comma-separated subset, e.g. ingest")

    f = sub.add_parser("feed", parents=[common], help="print assembled feeds (no Spark)")
    who = f.add_mutually_exclusive_group(required=True)
    who.add_argument("--consumer", help="one consumer id")
    who.add_argument("--consumers", help="a file with one consumer id per line (JSON Lines out)")
    f.add_argument("--ds", type=_date, help="day (default: the latest published day)")
    f.add_argument("--k", type=int, help="events per feed (default: the materialized k)")
    f.add_argument("--format", choices=("table", "json"), default="table")
    f.add_argument(
        "--with-payload",
        action="store_true",
        help="add each event's payload and attributes (from the day's event store)",
    )
    f.add_argument(
        "--published",
        action="store_true",
        help="read the copy published to publish_to (its latest day, or --ds) instead of the "
        "warehouse",
    )
    f.add_argument(
        "--unpublished",
        action="store_true",
        help="debugging: read the day's latest complete run, published or not (by default "
        "only published versions are read)",
    )

    tb = sub.add_parser(
        "tables",
        parents=[common],
        help="where each published table of each day is (what queries should read)",
    )
    tb.add_argument("table", nargs="?", help="one table, e.g. feeds/consumer_feed (default: all)")
    tb.add_argument("--ds", type=_date, help="one day (default: every published day)")
    tb.add_argument("--format", choices=("table", "json", "paths"), default="table")
    tb.add_argument(
        "--unpublished", action="store_true", help="the day's latest complete run instead"
    )

    cg = sub.add_parser(
        "catalog",
        parents=[common],
        help="the published tables by name: print CREATE TABLE statements (Spark SQL or Hive), "
        "register them in a Spark catalog, or rewrite the DuckDB database of views",
    )
    cg.add_argument("--dialect", choices=("spark", "hive"), default="spark")
    what = cg.add_mutually_exclusive_group()
    what.add_argument(
        "--register",
        action="store_true",
        help="run the Spark statements in a Spark session's catalog (a shared Hive metastore "
        "when spark_conf configures one)",
    )
    what.add_argument(
        "--duckdb",
        action="store_true",
        help="rewrite <warehouse>/catalog/feedpipe.duckdb now (publish does it after every day)",
    )

    rp = sub.add_parser(
        "evaluate",
        parents=[common],
        help="replay every strategy's plan of each day on the next day: realized against "
        "predicted cost (eval/replay); or, with --experiment, reproduce a paper's experiment",
    )
    rp.add_argument("--start", type=_date, help="first day to replay")
    rp.add_argument("--end", type=_date, help="last day to replay")
    rp.add_argument(
        "--experiment",
        help="instead of a replay: all, or one of ff-fig4 (cost vs query:event ratio), "
        "ff-fig5 (skew), ff-fig6 (push threshold vs latency), ff-fig9 (fan-out), "
        "ff-fig10 (flash event) on generated ff2010 workloads; cz-fig4b (data size), "
        "cz-fig6a..d (follow-set skew, feed skew, query/update ratio, following size) on "
        "cz2015 workloads (docs/evaluation.md)",
    )
    rp.add_argument(
        "--scale", type=float, default=0.05, help="experiment workload scale (default 0.05)"
    )
    rp.add_argument("--seed", type=int, default=7, help="experiment workload seed")
    rp.add_argument(
        "--out",
        default="var/experiments",
        help="folder for the experiment's NAME.csv, NAME.png and NAME.md (default var/experiments)",
    )

    ev = sub.add_parser(
        "evaluate-rates", parents=[common], help="score rate forecasts on the next day"
    )
    ev.add_argument("--start", required=True, type=_date)
    ev.add_argument("--end", required=True, type=_date)

    rep = sub.add_parser("report", parents=[common], help="print a day's plan cost report")
    rep.add_argument("--ds", type=_date, help="day (default: the latest published day)")
    rep.add_argument(
        "--html",
        action="store_true",
        help="(re)write the day's HTML report, reports/ds=D/index.html, and print where it is",
    )

    cs = sub.add_parser(
        "connect-server",
        parents=[common],
        help="a long-lived Spark Connect server for the stages (their spark_remote)",
    )
    cs.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    cs.add_argument("--port", type=int, default=15002, help="port to listen on (15002)")
    cs.add_argument(
        "--driver-memory",
        default=os.environ.get("FEEDPIPE_DRIVER_MEMORY", "3g"),
        help="the server's JVM heap ($FEEDPIPE_DRIVER_MEMORY, else 3g)",
    )

    sub.add_parser("config", parents=[common], help="print the effective configuration")
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    overrides = {name: getattr(args, f"set_{name}", None) for name in SETTING_FLAGS}
    return load_settings(args.config, overrides)


def _latest_or(ds: dt.date | None, settings: Settings) -> dt.date:
    if ds is not None:
        return ds
    from jobs.common.ledger import latest
    from jobs.common.storage import Storage

    found = latest(Storage.at(settings.warehouse))
    if found is None:
        raise ConfigError(f"no published day in {settings.warehouse}; pass --ds")
    return found


def cmd_generate(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import replace

    from jobs.common.storage import Storage
    from jobs.workloads.generate import PROFILES, generate, scaled

    profile = replace(
        scaled(PROFILES[args.profile], args.scale),
        trend_share=args.trend_share,
        trend_per_day=args.trend_per_day,
        flash_producers=args.flash_producers,
        flash_day=(args.flash_day - args.start).days if args.flash_day else -1,
        flash_factor=args.flash_factor,
        topics=args.topics,
        topic_follows=args.topic_follows,
    )
    formats = dict.fromkeys(("follows", "events", "views"), args.format) if args.format else None
    stats = generate(
        Storage.at(args.out), args.start, args.days, profile, args.seed, formats, args.gzip
    )
    for s in stats:
        print(
            f"{s.ds}  edges={s.edges}  follow_rows={s.follow_rows}  "
            f"events={s.events}  views={s.views}"
        )
    print(f"landing written to {Storage.at(args.out).uri()}")
    return 0


def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from jobs.common.storage import Storage
    from jobs.workloads.importers import import_higgs, import_snap_edges

    out = Storage.at(args.out)
    if args.name == "higgs":
        result = import_higgs(Path(args.src), out)
    else:
        result = import_snap_edges(
            Path(args.src), out, args.ds, args.reverse, args.activity_profile, args.days, args.seed
        )
    print(json.dumps(result, indent=2, default=str))
    return 0


def cmd_feed(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.serving.reader import FeedReader, feed_json, format_table

    if args.published:
        if not settings.publish_to:
            raise ConfigError("--published needs publish_to (--publish-to or FEEDPIPE_PUBLISH_TO)")
        reader = FeedReader.published_copy(settings.publish_to, args.ds)
    else:
        reader = FeedReader(
            settings.warehouse, _latest_or(args.ds, settings), unpublished=args.unpublished
        )
    ds = reader.ds

    if args.unpublished:
        print(
            f"feedpipe: warning: reading the latest complete run of {ds}, "
            f"{'its published version' if reader.published else 'not a published version'}",
            file=sys.stderr,
        )
    if args.consumer is not None:
        feed = reader.feeds([args.consumer], args.k, args.with_payload)[args.consumer]
        print(
            json.dumps(feed_json(feed))
            if args.format == "json"
            else format_table(args.consumer, feed)
        )
        return 0
    with open(args.consumers, encoding="utf-8") as fh:
        ids = [line.rstrip("\r\n") for line in fh if line.strip()]
    for i in range(0, len(ids), 2000):
        chunk = ids[i : i + 2000]
        feeds = reader.feeds(chunk, args.k, args.with_payload)
        for c in chunk:
            print(json.dumps({"consumer_id": c, "feed": feed_json(feeds[c])}))
    return 0


def cmd_tables(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.serving.published import locations

    if args.unpublished and args.ds is None:
        raise ConfigError("--unpublished needs --ds")
    found = locations(settings.warehouse, args.table, args.ds, args.unpublished)
    if args.format == "json":
        rows = [
            {"ds": x.ds.isoformat(), "table": x.table, "location": x.uri, "rows": x.rows}
            for x in found
        ]
        print(json.dumps(rows, indent=2))
    elif args.format == "paths":
        for x in found:
            print(x.uri)
    else:
        for x in found:
            print(f"{x.ds}  {x.table:<26} {x.uri}")
    if not found:
        what = f"{args.table or 'any table'} on {args.ds or 'any day'}"
        print(f"feedpipe: nothing published for {what} in {settings.warehouse}", file=sys.stderr)
        return 1
    return 0


def cmd_catalog(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.serving import catalog

    if args.duckdb:
        written = catalog.write_duckdb(settings.warehouse)
        if written is None:
            raise ConfigError(
                "the DuckDB database is written for local warehouses only (DuckDB reads S3 "
                "through its httpfs extension: see docs/operations.md, 'Tables by name')"
            )
        print(written)
        return 0
    if args.register:
        from jobs.common.spark import build_session

        spark = build_session(settings, "feedpipe-catalog")
        for name in catalog.register(spark, settings.warehouse):
            print(name)
        return 0
    for statement in catalog.spark_statements(settings.warehouse, args.dialect):
        print(statement + ";")
    return 0


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.common.storage import Storage
    from jobs.serving.report import text_report, write_report

    ds = _latest_or(args.ds, settings)
    if not args.html:
        print(text_report(settings, ds))
        return 0
    written = write_report(Storage.at(settings.warehouse), ds)
    if written is None:
        print(f"no plan for {ds} in {settings.warehouse}", file=sys.stderr)
        return 1
    print(written)
    return 0


def cmd_experiment(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from jobs.common.spark import build_session
    from jobs.evaluation import experiments

    if args.experiment != "all" and args.experiment not in experiments.EXPERIMENTS:
        known = ", ".join(experiments.EXPERIMENTS)
        print(
            f"feedpipe evaluate: unknown experiment {args.experiment!r}; one of: all, {known}",
            file=sys.stderr,
        )
        return 2
    spark = build_session(settings, f"feedpipe-experiment-{args.experiment}")
    failed = []
    for r in experiments.run(spark, args.experiment, Path(args.out), args.scale, args.seed):
        print(r.markdown(), f"\nwritten: {r.files['md']}, {r.files['png']}\n", sep="")
        if not r.holds:
            failed.append(r.name)
    if failed:
        print(f"the paper's finding does not hold here for: {', '.join(failed)}")
    return 0


def cmd_connect_server(args: argparse.Namespace, settings: Settings) -> int:
    """Replaces this process with the server's ``spark-submit`` (signals reach it directly,
    as a service manager expects); it runs until stopped."""
    from jobs.common.spark import connect_server_command

    cmd = connect_server_command(settings, args.host, args.port, args.driver_memory)
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)  # its Python workers get our packages
    print(
        f"feedpipe: Spark Connect server on sc://{args.host}:{args.port} "
        f'(stages use it with spark_remote = "sc://{args.host}:{args.port}")',
        file=sys.stderr,
        flush=True,
    )
    os.execve(cmd[0], cmd, env)
    return 0  # not reached


def dispatch(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    verb = args.verb
    if verb == "connect-server":
        return cmd_connect_server(args, settings)
    if verb == "config":
        print(json.dumps(settings.as_dict(), indent=2))
        return 0
    if verb == "generate":
        return cmd_generate(args, settings)
    if verb == "feed":
        return cmd_feed(args, settings)
    if verb == "import":
        return cmd_import(args, settings)
    if verb == "tables":
        return cmd_tables(args, settings)
    if verb == "catalog":
        return cmd_catalog(args, settings)
    if verb == "report":
        return cmd_report(args, settings)
    if verb == "evaluate":
        from jobs.common.spark import build_session
        from jobs.evaluation import replay

        if args.experiment:
            return cmd_experiment(args, settings)
        if args.start is None or args.end is None:
            print(
                "feedpipe evaluate: --start and --end are required (or --experiment)",
                file=sys.stderr,
            )
            return 2
        spark = build_session(settings, "feedpipe-evaluate")
        print(replay.summary(replay.evaluate(spark, settings, args.start, args.end)))
        return 0
    if verb == "evaluate-rates":
        from jobs.common.spark import build_session
        from jobs.evaluation.rates import evaluate, summary

        spark = build_session(settings, "feedpipe-evaluate-rates")
        print(summary(evaluate(spark, settings, args.start, args.end)))
        return 0
    from jobs.stages import runner

    result: Any
    if verb == "run":
        result = runner.run_day(settings, args.ds, full_refresh=args.full_refresh, only=args.stages)
    elif verb == "backfill":
        result = runner.backfill(settings, args.start, args.end, args.full_refresh, args.stages)
    else:
        result = runner.run_stage(
            verb, settings, args.ds, full_refresh=getattr(args, "full_refresh", False)
        )
    print(json.dumps(result, indent=2, default=str))
    return 0


def known_errors() -> tuple[type[BaseException], ...]:
    from jobs.common.pointers import PublishFailed
    from jobs.common.readiness import LandingNotReady
    from jobs.common.storage import StorageError
    from jobs.common.tables import ContractError
    from jobs.common.versions import LegacyLayout
    from jobs.serving.reader import FeedError
    from jobs.stages.publish import PublishRefused
    from jobs.stages.validate import ValidationFailed
    from jobs.workloads.importers import SourceError

    return (
        ConfigError,
        ContractError,
        LandingNotReady,
        LegacyLayout,
        StorageError,
        SourceError,
        PublishRefused,
        PublishFailed,
        FeedError,
        ValidationFailed,
        FileNotFoundError,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    for noisy in ("py4j", "great_expectations", "urllib3", "botocore"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    try:
        return dispatch(args)
    except known_errors() as exc:
        print(f"feedpipe: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
