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
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from jobs.common.config import STRATEGIES, ConfigError, Settings, driver_memory, load_settings
from jobs.common.errors import FeedpipeError
from jobs.common.pipeline import REGISTRY, in_order

log = logging.getLogger("feedpipe")

SETTING_FLAGS: dict[str, tuple[str, type, str, str]] = {
    "landing": ("--landing", str, "ROOT", "landing root (local path or s3://)"),
    "warehouse": ("--warehouse", str, "ROOT", "warehouse root (local path or s3://)"),
    "publish_to": (
        "--publish-to",
        str,
        "URI",
        "also publish complete days to this s3://bucket/prefix",
    ),
    "store": ("--store", str, "URL", "the feed store, redis://host:port/db (docs/serving.md)"),
    "spark_master": ("--spark-master", str, "MASTER", "Spark master outside spark-submit"),
    "spark_remote": (
        "--spark-remote",
        str,
        "URL",
        "run on this Spark Connect server (sc://host:port)",
    ),
    "allow_empty": (
        "--allow-empty",
        str,
        "TABLES",
        "landing tables to run as empty this day (a known outage), e.g. events,views",
    ),
    "accept_gates": (
        "--accept-gate",
        str,
        "GATES",
        "gates to accept this day although they fail (a known anomaly): volume, follows",
    ),
    "push_cost": ("--push-cost", float, "H", "H, cost of one event pushed into one view"),
    "pull_cost": ("--pull-cost", float, "L", "L, cost of one source read at view time"),
    "feed_k": ("--feed-k", int, "K", "events per feed (k)"),
    "rate_window_days": ("--rate-window-days", int, "DAYS", "days of history behind each rate"),
    "strategy": ("--strategy", str, "NAME", f"auto or one of: {', '.join(STRATEGIES)}"),
    "coherency": ("--coherency", str, "MODE", "global or per_producer"),
    "feed_k_per_producer": (
        "--feed-k-per-producer",
        int,
        "KP",
        "k_p, events per producer under per-producer coherency",
    ),
    "latency_metric": (
        "--latency-metric",
        str,
        "METRIC",
        "latency target bounds: sources, pulls or ms (by the calibrated read-latency fit)",
    ),
    "latency_bound": (
        "--latency-bound",
        float,
        "N",
        "at most this many sources/pulls (a whole number) or milliseconds per view",
    ),
    "latency_quantile": ("--latency-quantile", float, "SHARE", "...for this share of feed views"),
    "inactive_after_days": (
        "--inactive-after-days",
        int,
        "DAYS",
        "no materialized feed after this many days without a view (0: off)",
    ),
}
"""The settings a flag overrides: name -> (flag, type, metavar, help)."""

ALL_SETTINGS = tuple(SETTING_FLAGS)
VERB_SETTINGS: dict[str, tuple[str, ...]] = {
    "generate": (),
    "import": (),
    "feed": ("warehouse", "publish_to", "store"),
    "tables": ("warehouse",),
    "catalog": ("warehouse", "spark_master", "spark_remote"),
    "report": ("warehouse",),
    "store": ("warehouse", "store", "spark_master", "spark_remote"),
    "calibrate": ("store",),
}
"""The settings each verb reads, when not all of them: a verb offers only their flags (none,
and no ``--config``, for the verbs that read no settings)."""

VERB_SETTING_HELP = {
    ("feed", "publish_to"): "the s3://bucket/prefix days are published to (what --published reads)",
    ("feed", "store"): "read the feeds of the day the feed store at URL serves (redis://...) "
    "instead of the warehouse's Parquet",
    ("evaluate", "store"): "with --experiment NAME-store: the empty feed store (redis://...) "
    "the experiment serves its plans from",
    ("catalog", "spark_master"): "Spark master of --register's session",
    ("catalog", "spark_remote"): "run --register's statements on this Spark Connect server",
}
"""A setting's help where a verb uses it differently from the pipeline."""

DAY = "YYYY-MM-DD"


class Parser(argparse.ArgumentParser):
    """A usage error in two lines, what is wrong and where the help is, not the whole usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, usage_error(self.prog, message))


class UsageError(FeedpipeError):
    """Options that parse but do not go together: reported like a parser's usage error."""


def usage_error(prog: str, message: str) -> str:
    return f"{prog}: error: {message}\nsee '{prog} --help'\n"


def _date(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a date ({DAY}): {value!r}") from exc


def _k(value: str) -> int:
    try:
        k = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if k < 1:
        raise argparse.ArgumentTypeError(f"k must be >= 1, not {k}")
    return k


def _stages(value: str) -> tuple[str, ...]:
    try:  # always in pipeline order
        return in_order(tuple(v.strip() for v in value.split(",") if v.strip()))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _options_parent(verb: str) -> argparse.ArgumentParser:
    """The flags of the settings ``verb`` reads (and ``--config`` when it reads any), and
    logging's."""
    names = VERB_SETTINGS.get(verb, ALL_SETTINGS)
    p = argparse.ArgumentParser(add_help=False)
    if names:
        g = p.add_argument_group("settings (override feedpipe.toml and FEEDPIPE_* variables)")
        g.add_argument(
            "--config", metavar="FILE", help="a feedpipe.toml file (default: $FEEDPIPE_CONFIG)"
        )
        for name in names:
            flag, typ, metavar, text = SETTING_FLAGS[name]
            text = VERB_SETTING_HELP.get((verb, name), text)
            g.add_argument(flag, dest=f"set_{name}", type=typ, metavar=metavar, help=text)
    g = p.add_argument_group("logging")
    g.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    g.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    return p


Command = Callable[[argparse.Namespace, Settings], int]
"""A verb's command: its arguments and the settings it reads -> the exit status."""


class Verbs:
    """The subcommands: each added with the options of the settings it reads."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def add(self, verb: str, text: str, command: Command) -> argparse.ArgumentParser:
        """The verb's parser; ``command`` runs it (``args.command``)."""
        p: argparse.ArgumentParser = self.sub.add_parser(
            verb, parents=[_options_parent(verb)], help=text, description=text[0].upper() + text[1:]
        )
        p.set_defaults(command=command)
        return p


def _ds(p: argparse.ArgumentParser, text: str, required: bool = False) -> None:
    p.add_argument("--ds", required=required, type=_date, metavar=DAY, help=text)


def _day_range(p: argparse.ArgumentParser, first: str, last: str, required: bool = True) -> None:
    p.add_argument("--start", required=required, type=_date, metavar=DAY, help=first)
    p.add_argument("--end", required=required, type=_date, metavar=DAY, help=last)


def _full_refresh(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--full-refresh",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="rebuild the feeds from all clean events instead of the previous day's feeds, "
        "and plan every shared-view part afresh instead of keeping the unchanged ones",
    )


def _add_generate(verbs: Verbs) -> None:
    from jobs.workloads.generate import PROFILES
    from jobs.workloads.landing import FORMATS

    g = verbs.add("generate", "write a synthetic workload in the landing layout", cmd_generate)
    g.add_argument("--out", required=True, metavar="ROOT", help="landing root to write")
    g.add_argument("--start", required=True, type=_date, metavar=DAY, help="first day")
    g.add_argument("--days", type=int, default=1, metavar="N", help="number of days (default 1)")
    g.add_argument("--profile", choices=sorted(PROFILES), default="ff2010", help="workload shape")
    g.add_argument(
        "--scale", type=float, default=1.0, metavar="X", help="population multiplier (default 1)"
    )
    g.add_argument("--seed", type=int, default=7, metavar="N", help="random seed (default 7)")
    g.add_argument("--format", choices=FORMATS, help="file format of all three tables")
    g.add_argument("--gzip", action="store_true", help="gzip CSV / JSON Lines files")
    g.add_argument(
        "--trend-share",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="share of ids with a daily trend (default 0)",
    )
    g.add_argument(
        "--trend-per-day",
        type=float,
        default=0.15,
        metavar="RATE",
        help="largest daily growth of a trend (default 0.15)",
    )
    g.add_argument(
        "--flash-producers",
        type=int,
        default=0,
        metavar="N",
        help="producers with a flash event (default 0)",
    )
    g.add_argument("--flash-day", type=_date, metavar=DAY, help="day of the flash event")
    g.add_argument(
        "--flash-factor",
        type=float,
        default=10.0,
        metavar="X",
        help="rate multiplier of a flash (default 10)",
    )
    g.add_argument(
        "--topics",
        type=int,
        default=0,
        metavar="N",
        help="topic producers (default 0): events get attributes, day 1 lands the definitions",
    )
    g.add_argument(
        "--topic-follows",
        type=float,
        default=1.0,
        metavar="N",
        help="topics followed per consumer (default 1)",
    )


def _add_import(verbs: Verbs) -> None:
    from jobs.workloads.generate import PROFILES

    imp = verbs.add("import", "a real data set into the landing layout", cmd_import)
    imp.add_argument("name", choices=("snap-edges", "higgs"), help="importer")
    imp.add_argument(
        "--src", required=True, metavar="PATH", help="the edge list (snap-edges) or folder (higgs)"
    )
    imp.add_argument("--out", required=True, metavar="ROOT", help="landing root to write")
    imp.add_argument(
        "--ds",
        type=_date,
        default=dt.date(2026, 1, 1),
        metavar=DAY,
        help="day of the graph snapshot (snap-edges; default 2026-01-01)",
    )
    imp.add_argument("--reverse", action="store_true", help="edge A B means B follows A")
    imp.add_argument(
        "--activity-profile",
        choices=sorted(PROFILES),
        help="also generate events and views with this profile's rate distributions",
    )
    imp.add_argument(
        "--days", type=int, default=1, metavar="N", help="days of generated activity (default 1)"
    )
    imp.add_argument(
        "--seed",
        type=int,
        default=7,
        metavar="N",
        help="seed of generated activity and of --growth-days' order (default 7)",
    )
    imp.add_argument(
        "--growth-days",
        type=int,
        default=1,
        metavar="N",
        help="land the graph over N days as a growing network (snap-edges): the edges in a "
        "seeded order, the first part as --ds's snapshot, each next one as the next day's "
        "follows (default 1: one snapshot)",
    )


def _add_pipeline(verbs: Verbs) -> None:
    for stage in REGISTRY:
        if stage.command:  # a verb of its own (feedpipe store load)
            continue
        sp = verbs.add(stage.name, stage.description, cmd_stage)
        _ds(sp, "the logical date: the day to run", required=True)
        if "full_refresh" in stage.options:
            _full_refresh(sp)
    r = verbs.add("run", "all stages for one day, in one Spark application", cmd_run)
    _ds(r, "the logical date: the day to run", required=True)
    _full_refresh(r)
    r.add_argument(
        "--stages", type=_stages, metavar="LIST", help="a comma-separated subset, e.g. ingest,rates"
    )
    b = verbs.add(
        "backfill",
        "all stages for each day of a range, in order, one Spark application",
        cmd_backfill,
    )
    _day_range(b, "first day to run", "last day to run (included)")
    _full_refresh(b)
    b.add_argument(
        "--stages", type=_stages, metavar="LIST", help="a comma-separated subset, e.g. ingest"
    )


def _add_feed(verbs: Verbs) -> None:
    f = verbs.add("feed", "print assembled feeds of published days (no Spark)", cmd_feed)
    who = f.add_mutually_exclusive_group(required=True)
    who.add_argument("--consumer", metavar="ID", help="one consumer id")
    who.add_argument("--consumers", metavar="FILE", help="a file with one consumer id per line")
    _ds(f, "the day (default: the latest published day)")
    f.add_argument(
        "--k", type=_k, metavar="N", help="events per feed, at least 1 (default: the day's k)"
    )
    f.add_argument(
        "--format",
        choices=("table", "json"),
        help="table: a heading line per consumer, one line per event (the default with "
        "--consumer); json: a list of events, with --consumers one object per line, "
        '{"consumer_id": ..., "feed": [...]} (the default with --consumers)',
    )
    f.add_argument(
        "--with-payload",
        action="store_true",
        help="add each event's payload and attributes (from the day's event store)",
    )
    which = f.add_mutually_exclusive_group()
    which.add_argument(
        "--published",
        action="store_true",
        help="read the copy published to publish_to (its latest day, or --ds) instead of the "
        "warehouse",
    )
    which.add_argument(
        "--unpublished",
        action="store_true",
        help="debugging: read the day's latest complete run, published or not (by default "
        "only published versions are read)",
    )


def _add_tables(verbs: Verbs) -> None:
    tb = verbs.add(
        "tables", "where each published table of each day is (what queries read)", cmd_tables
    )
    tb.add_argument(
        "table",
        nargs="?",
        metavar="TABLE",
        help="one table, e.g. feeds.consumer_feed or feeds/consumer_feed (default: all)",
    )
    _ds(tb, "one day (default: every published day)")
    tb.add_argument(
        "--format",
        choices=("table", "json", "paths"),
        default="table",
        help="table: day, table and folder per line (default); json: a list with row counts; "
        "paths: the folders alone",
    )
    tb.add_argument(
        "--unpublished",
        action="store_true",
        help="debugging: the latest complete run of --ds instead of its published version",
    )


def _add_catalog(verbs: Verbs) -> None:
    cg = verbs.add(
        "catalog",
        "the published tables by name: print the statements that register them (Spark SQL or "
        "Hive), run them in a Spark catalog, or rewrite the DuckDB database of views",
        cmd_catalog,
    )
    cg.add_argument(
        "--dialect",
        choices=("spark", "hive"),
        default="spark",
        help="the statements' dialect: spark (Spark SQL) or hive (Hive DDL, which Trino's Hive "
        "connector reads); default %(default)s",
    )
    cg.add_argument(
        "--replace",
        action="store_true",
        help="drop each table and create it again (by default the statements only create "
        "missing tables, add the days published since and move republished days to their "
        "new folders)",
    )
    what = cg.add_mutually_exclusive_group()
    what.add_argument(
        "--register",
        action="store_true",
        help="run the Spark SQL statements in a Spark session's catalog (a shared Hive "
        "metastore when spark_conf configures one)",
    )
    what.add_argument(
        "--duckdb",
        action="store_true",
        help="rewrite <warehouse>/catalog/feedpipe.duckdb now (publish does it after every day)",
    )


def _add_report(verbs: Verbs) -> None:
    rep = verbs.add("report", "print a published day's plan cost report", cmd_report)
    _ds(rep, "the day (default: the latest published day)")
    rep.add_argument(
        "--html",
        action="store_true",
        help="(re)write the day's HTML report, reports/ds=D/index.html, and print where it is",
    )
    rep.add_argument(
        "--unpublished",
        action="store_true",
        help="debugging: also a day that is not published (its latest complete run)",
    )


def _add_evaluate(verbs: Verbs) -> None:
    from jobs.evaluation.experiments import EXPERIMENTS
    from jobs.evaluation.store_experiments import STORE_EXPERIMENTS

    rp = verbs.add(
        "evaluate",
        "replay every strategy's plan of each day on the next day: realized against "
        "predicted cost (eval/replay); or, with --experiment, reproduce a paper's experiment",
        cmd_evaluate,
    )
    _day_range(rp, "first day to replay", "last day to replay", required=False)
    rp.add_argument(
        "--experiment",
        metavar="NAME",
        help="instead of a replay: all, or one of "
        + "; ".join(f"{name} ({what})" for name, what in EXPERIMENTS.items())
        + " (ff-*: generated ff2010 workloads, cz-*: cz2015; docs/evaluation.md); measured "
        "on the feed store given with --store (empty: they replace what it holds): all-store, or "
        + "; ".join(f"{name} ({what})" for name, what in STORE_EXPERIMENTS.items()),
    )
    rp.add_argument(
        "--scale",
        type=float,
        default=0.05,
        metavar="X",
        help="experiment workload scale (default 0.05)",
    )
    rp.add_argument(
        "--seed", type=int, default=7, metavar="N", help="experiment workload seed (default 7)"
    )
    rp.add_argument(
        "--out",
        default="var/experiments",
        metavar="FOLDER",
        help="folder for the experiment's NAME.csv, NAME.png and NAME.md (default var/experiments)",
    )
    ev = verbs.add(
        "evaluate-rates",
        "score each rate estimator's forecasts against the next day's events and views "
        "(eval/rates)",
        cmd_evaluate_rates,
    )
    _day_range(ev, "first day whose forecasts are scored", "last day whose forecasts are scored")


def _add_service(verbs: Verbs) -> None:
    cs = verbs.add(
        "connect-server",
        "a long-lived Spark Connect server for the stages (their spark_remote)",
        cmd_connect_server,
    )
    cs.add_argument(
        "--host", default="127.0.0.1", metavar="ADDRESS", help="address to listen on (127.0.0.1)"
    )
    cs.add_argument("--port", type=int, default=15002, metavar="N", help="port (15002)")
    cs.add_argument(
        "--driver-memory",
        default=driver_memory(),
        metavar="SIZE",
        help="the server's JVM heap ($FEEDPIPE_DRIVER_MEMORY, else 3g)",
    )
    verbs.add("config", "print the effective configuration", cmd_config)


def _add_store(verbs: Verbs) -> None:
    st = verbs.add(
        "store", "load published days into the feed store, and say what it serves", cmd_store
    )
    st.add_argument(
        "action",
        choices=("load", "status", "add-event"),
        help="load: load a published day (--ds, default the latest) and switch readers to it; "
        "status: which day is served, since when, its keys and memory; add-event: add events "
        "(JSON Lines with the landing's event columns, from --file or stdin) to the served "
        "feeds",
    )
    _ds(st, "the published day to load (default: the latest published day)")
    st.add_argument(
        "--file",
        metavar="FILE",
        help="add-event: the events, one JSON object a line (default: stdin)",
    )


def _add_calibrate(verbs: Verbs) -> None:
    cal = verbs.add(
        "calibrate",
        "measure the cost model's H and L on the feed store (push-only and pull-only "
        "workloads, linear regression) and print the settings to use",
        cmd_calibrate,
    )
    cal.add_argument(
        "--repetitions", type=int, default=3, metavar="N", help="fits of each (default 3)"
    )
    cal.add_argument(
        "--largest",
        type=int,
        default=20_000,
        metavar="N",
        help="operations of the largest of the ten workload sizes (default 20000)",
    )
    cal.add_argument(
        "--write",
        metavar="FILE",
        help="also set push_cost, pull_cost and the read-latency fit in this TOML file",
    )
    cal.add_argument("--json", action="store_true", help="print the measurements as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="feedpipe",
        description="Decide push vs pull per follow edge every day and materialize the feeds.",
    )
    verbs = Verbs(parser)
    for add in (_add_generate, _add_import, _add_pipeline, _add_feed, _add_tables):
        add(verbs)
    for add in (_add_catalog, _add_evaluate, _add_report, _add_store, _add_calibrate):
        add(verbs)
    for add in (_add_service,):
        add(verbs)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    overrides = {name: getattr(args, f"set_{name}", None) for name in SETTING_FLAGS}
    return load_settings(getattr(args, "config", None), overrides)


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
            Path(args.src),
            out,
            args.ds,
            args.reverse,
            args.activity_profile,
            args.days,
            args.seed,
            args.growth_days,
        )
    print(json.dumps(result, indent=2, default=str))
    return 0


def _consumer_ids(args: argparse.Namespace) -> list[str]:
    """The ids asked for, each stripped of surrounding whitespace, blank lines skipped."""
    from jobs.serving.reader import FeedError

    if args.consumer is not None:
        if not args.consumer.strip():
            raise FeedError("--consumer is blank")
        return [args.consumer.strip()]
    try:
        with open(args.consumers, encoding="utf-8") as fh:
            ids = [line.strip() for line in fh]
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise FeedError(f"cannot read the consumer ids in {args.consumers}: {reason}") from None
    if not any(ids):
        raise FeedError(f"{args.consumers} holds no consumer id")
    return [i for i in ids if i]


def _not_consumers(unknown: list[str], ids: list[str], ds: dt.date) -> str:
    if len(ids) == 1:
        return f"feedpipe: {ids[0]} is not a consumer on {ds}"
    shown = ", ".join(unknown[:10]) + (", ..." if len(unknown) > 10 else "")
    return f"feedpipe: {len(unknown)} of {len(ids)} ids are not consumers on {ds}: {shown}"


def cmd_feed(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.serving import published
    from jobs.serving.reader import FeedReader, feed_json, format_table

    ids = _consumer_ids(args)
    reader: Any
    if getattr(args, "set_store", None) is not None:  # --store given: the store, not Parquet
        from jobs.serving.store_reader import StoreReader

        if args.published or args.unpublished or args.ds is not None:
            raise UsageError(
                "--store reads the day the store serves: no --ds, --published or --unpublished"
            )
        reader = StoreReader(settings.store, settings.warehouse)
    elif args.published:
        if not settings.publish_to:
            raise ConfigError("--published needs publish_to (--publish-to or FEEDPIPE_PUBLISH_TO)")
        reader = FeedReader.published_copy(settings.publish_to, args.ds)
    else:
        ds = args.ds if args.ds is not None else published.latest_day(settings.warehouse)
        reader = FeedReader(settings.warehouse, ds, unpublished=args.unpublished)
    if args.unpublished and not reader.published:
        print(
            f"feedpipe: warning: reading the latest complete run of {reader.ds}, "
            "not its published version",
            file=sys.stderr,
        )
    form = args.format or ("table" if args.consumer is not None else "json")
    unknown: dict[str, None] = {}  # in the order asked, once each
    for i in range(0, len(ids), 2000):
        chunk = ids[i : i + 2000]
        answer = reader.answer(chunk, args.k, args.with_payload)
        unknown.update(dict.fromkeys(answer.unknown))
        for n, c in enumerate(chunk, i):
            feed = answer.feeds[c]
            if form == "table":
                print(("\n" if n else "") + format_table(c, feed))
            elif args.consumer is not None:
                print(json.dumps(feed_json(feed)))
            else:
                print(json.dumps({"consumer_id": c, "feed": feed_json(feed)}))
    if unknown:
        print(_not_consumers(list(unknown), list(dict.fromkeys(ids)), reader.ds), file=sys.stderr)
    return 0


def cmd_store(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.common import store

    if not settings.store:
        raise ConfigError("no feed store configured: pass --store URL or set FEEDPIPE_STORE")
    if args.action == "status":
        print(json.dumps(store.status(store.connect(settings.store)), indent=2))
        return 0
    if args.action == "add-event":
        from dataclasses import asdict

        from jobs.common import live

        if args.file:
            with open(args.file, encoding="utf-8") as fh:
                events = live.parse_events(fh, args.file)
        else:
            events = live.parse_events(sys.stdin, "stdin")
        added = live.add_events(store.connect(settings.store), events)
        print(json.dumps(asdict(added)))
        return 0
    from jobs.serving import published
    from jobs.stages import runner

    ds = args.ds if args.ds is not None else published.latest_day(settings.warehouse)
    print(runner.run_stage("store", settings, ds).to_json())
    return 0


def cmd_calibrate(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from jobs.evaluation import calibrate

    if not settings.store:
        raise ConfigError("no feed store configured: pass --store URL or set FEEDPIPE_STORE")
    if args.repetitions < 2 or args.largest < 100:
        raise UsageError("--repetitions must be at least 2 and --largest at least 100")
    sizes = tuple(max(1, args.largest * i // 10) for i in range(1, 11))
    done = calibrate.calibrate(settings.store, sizes, args.repetitions)
    print(json.dumps(done.as_dict(), indent=2) if args.json else calibrate.report(done))
    if args.write:
        calibrate.write_settings(Path(args.write), done.settings())
        print(f"written to {args.write}", file=sys.stderr)
    return 0


def cmd_tables(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.serving.published import locations

    if args.unpublished and args.ds is None:
        raise UsageError("--unpublished needs --ds")
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
    return 0


def cmd_catalog(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.serving import catalog

    if args.dialect == "hive" and (args.register or args.duckdb):
        raise UsageError("--dialect hive prints statements; --register and --duckdb are Spark's")
    if args.duckdb:
        if args.replace:
            raise UsageError("--replace applies to the statements; --duckdb rewrites the file")
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

        catalog.spark_statements(settings.warehouse)  # refused before a session is started
        spark = build_session(settings, "feedpipe-catalog")
        for name in catalog.register(spark, settings.warehouse, args.replace):
            print(name)
        return 0
    for statement in catalog.spark_statements(settings.warehouse, args.dialect, args.replace):
        print(statement + ";")
    return 0


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.common import versions
    from jobs.common.storage import Storage
    from jobs.serving import published
    from jobs.serving.report import text_report, write_report

    wh = Storage.at(settings.warehouse)
    ds = args.ds if args.ds is not None else published.latest_day(wh)
    if not args.unpublished:  # readers see published versions only
        published.day_version(wh, ds, " (--unpublished reports its latest complete run)")
    else:
        published.require_warehouse(wh)
        day = versions.for_readers(wh, ds)
        if not day.records and not day.has("plan/plan_cost"):
            raise published.NotPublished(f"no stage has run for {ds} in {wh.uri()}")
    if not args.html:
        print(text_report(settings, ds))
        return 0
    written = write_report(wh, ds)
    if written is None:
        raise published.NotPublished(f"no stage has run for {ds} in {wh.uri()}")
    print(written)
    return 0


def cmd_experiment(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from jobs.common.spark import build_session
    from jobs.evaluation import experiments, store_experiments

    measured = args.experiment == "all-store" or args.experiment in (
        store_experiments.STORE_EXPERIMENTS
    )
    if args.experiment != "all" and not measured and args.experiment not in experiments.EXPERIMENTS:
        known = ", ".join(
            [*experiments.EXPERIMENTS, "all-store", *store_experiments.STORE_EXPERIMENTS]
        )
        raise UsageError(f"unknown experiment {args.experiment!r}; one of: all, {known}")
    if measured and not settings.store:
        raise UsageError(
            f"{args.experiment} is measured on a feed store: give an empty one with --store URL"
        )
    if measured:
        store_experiments.check_empty(settings.store)
    spark = build_session(settings, f"feedpipe-experiment-{args.experiment}")
    failed = []
    results = (
        store_experiments.run(
            spark, args.experiment, Path(args.out), settings.store, args.scale, args.seed
        )
        if measured
        else experiments.run(spark, args.experiment, Path(args.out), args.scale, args.seed)
    )
    for r in results:
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


def cmd_evaluate(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.common.spark import build_session
    from jobs.evaluation import replay

    if args.experiment:
        return cmd_experiment(args, settings)
    if args.start is None or args.end is None:
        raise UsageError("--start and --end are required (or --experiment)")
    spark = build_session(settings, "feedpipe-evaluate")
    print(replay.summary(replay.evaluate(spark, settings, args.start, args.end)))
    return 0


def cmd_evaluate_rates(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.common.spark import build_session
    from jobs.evaluation.rates import evaluate, summary

    spark = build_session(settings, "feedpipe-evaluate-rates")
    print(summary(evaluate(spark, settings, args.start, args.end)))
    return 0


def cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    print(json.dumps(settings.as_dict(), indent=2))
    return 0


def cmd_stage(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.stages import runner

    refresh = getattr(args, "full_refresh", False)  # a stage with the option has the flag
    result = runner.run_stage(args.verb, settings, args.ds, full_refresh=refresh)
    print(result.to_json())
    return 0


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.stages import runner

    result = runner.run_day(settings, args.ds, full_refresh=args.full_refresh, only=args.stages)
    print(json.dumps({s: r.as_dict() for s, r in result.items()}, indent=2))
    return 0


def cmd_backfill(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.stages import runner

    result = runner.backfill(settings, args.start, args.end, args.full_refresh, args.stages)
    days = {d: {s: r.as_dict() for s, r in day.items()} for d, day in result.items()}
    print(json.dumps(days, indent=2))
    return 0


def dispatch(args: argparse.Namespace) -> int:
    """Run the verb; a verb that reads no settings is not handed the environment's."""
    names = VERB_SETTINGS.get(args.verb, ALL_SETTINGS)
    settings = settings_from(args) if names else Settings()
    command: Command = args.command
    return command(args, settings)


def one_line(exc: BaseException) -> str:
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


KNOWN_ERRORS: tuple[type[BaseException], ...] = (
    FeedpipeError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)
"""What the command line says in one line (``jobs.common.errors``; and a path that is not
there, or not readable); anything else is a defect and keeps its traceback."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # said by the verb's parser, not the top one (whose help does not list them)
        message = f"unrecognized arguments: {' '.join(extras)}"
        parser.exit(2, usage_error(f"{parser.prog} {args.verb}", message))
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    for noisy in ("py4j", "great_expectations", "urllib3", "botocore"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    try:
        return dispatch(args)
    except UsageError as exc:
        sys.stderr.write(usage_error(f"feedpipe {args.verb}", one_line(exc)))
        return 2
    except KNOWN_ERRORS as exc:
        print(f"feedpipe: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of the output went away (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
