"""Typed, frozen configuration.

Sources, later ones winning: built-in defaults, a TOML file (``--config`` or
``FEEDPIPE_CONFIG``), ``FEEDPIPE_<NAME>`` environment variables, command-line flags.
Nothing here reads the clock or touches storage.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.common.errors import FeedpipeError
from jobs.common.pipeline import LANDING_TABLES

STRATEGIES: tuple[str, ...] = (
    "push-all",  # PURE_STRATEGIES, below
    "pull-all",
    "ff-per-pair",
    "ff-consumer",
    "ff-latency-pair",
    "ff-latency-consumer",
    "cz-greedy",
    "cz-hierarchy1",
    "cz-hierarchy2",
    "cz-greedy-union",
    "cz-lp",
)
"""Strategies this release computes; ``auto`` serves the cheapest of the enabled ones."""

PURE_STRATEGIES: tuple[str, ...] = ("push-all", "pull-all")
"""The two pure strategies: every edge pushed, every edge pulled (the cost gate's baselines)."""

SHARED_VIEW_STRATEGIES = (
    "cz-greedy",
    "cz-hierarchy1",
    "cz-hierarchy2",
    "cz-greedy-union",
    "cz-lp",
)
"""Chen & Zhou's global view selection (jobs/selection/views.py)."""

DEFAULT_STRATEGIES: tuple[str, ...] = tuple(
    s
    for s in STRATEGIES
    if s not in ("cz-greedy", "cz-hierarchy1", "cz-hierarchy2", "cz-greedy-union")
)
"""Computed unless ``strategies`` says otherwise: every strategy but the paper's Greedy and
Hierarchy-1 (its baselines; they plan over whole follow sets and are dearer to compute),
Hierarchy-2 alone (``cz-lp`` is Hierarchy-2 improved part by part, never dearer
on any part), and Greedy over both candidate sets (the closest heuristic to the optimum on
small parts, but unfinished after 2,140 s at ``gplus`` scale: docs/benchmarks.md)."""

GLOBAL_ONLY = ("ff-consumer", *SHARED_VIEW_STRATEGIES)
"""Rules for global coherency, not offered under per-producer coherency: Lemma 2's, and the
shared views, whose latest k events over several producers cannot supply each producer's
latest k_p."""


RATE_METHODS: tuple[str, ...] = ("eb_trend", "trailing_mean_prior", "trailing_mean")
"""The rate estimators (``jobs.estimators``); ``feedpipe evaluate-rates`` scores them all."""

SERVED_RATE_METHODS: tuple[str, ...] = RATE_METHODS[:2]
"""Estimators the ``rates`` stage may use (``rate_method``); ``trailing_mean`` is the
evaluation's baseline only (it can forecast a rate of 0)."""

COHERENCY_MODES = ("global", "per_producer")
LANDING_READINESS = ("folders", "marker")
GATE_KINDS = ("volume", "follows")
"""The gates ``accept_gates`` can name: the volume gates of events and views, and the follow
gates (edges removed, edges added)."""
LATENCY_METRICS = ("sources", "pulls", "ms")


class ConfigError(FeedpipeError, ValueError):
    """A setting is missing, malformed or out of range."""


TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})


def parse_bool(value: object, name: str = "value") -> bool:
    """A setting's or a variable's on/off value (``true``/``false``, ``1``/``0``, ``yes``/
    ``no``, ``on``/``off``, any case; empty is off); anything else is a :class:`ConfigError`
    naming ``name``."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise ConfigError(f"{name}: not true or false: {value!r}")


DRIVER_MEMORY = "3g"
"""The driver's heap when ``FEEDPIPE_DRIVER_MEMORY`` does not say (stages, the DAG's
``spark-submit``, the Connect server, the bench)."""


def driver_memory() -> str:
    """``FEEDPIPE_DRIVER_MEMORY``, else :data:`DRIVER_MEMORY`."""
    return os.environ.get("FEEDPIPE_DRIVER_MEMORY") or DRIVER_MEMORY


def redact(url: str) -> str:
    """``url`` with the password of its user part, if any, replaced by ``***``."""
    import re

    return re.sub(r"^([a-z]+://[^:/@]*:)[^@/]*@", r"\1***@", url)


DEFAULT_WAREHOUSE = "var/warehouse"
"""The warehouse when no setting names one (relative to the working directory)."""


@dataclass(frozen=True)
class Settings:
    """Effective configuration of one run. Field names map to ``FEEDPIPE_<NAME>``."""

    landing: str = "var/landing"
    warehouse: str = DEFAULT_WAREHOUSE
    spark_master: str = "local[*]"
    spark_remote: str = ""
    """``sc://host:port`` of a long-lived Spark Connect server (``feedpipe connect-server``):
    each stage runs its queries there as a thin client, in a JVM earlier stages and days have
    already warmed up, instead of starting Spark in its own process. Empty: each stage starts
    its own Spark (``spark_master``, or the ``spark-submit`` that launched it)."""
    push_cost: float = 3.0
    """H: cost of writing one event into one materialized view."""
    pull_cost: float = 1.0
    """L: cost of reading one source (view or producer stream) at view time."""
    feed_k: int = 20
    rate_window_days: int = 7
    strategy: str = "auto"
    coherency: str = "global"
    strategies: tuple[str, ...] = DEFAULT_STRATEGIES

    """Strategies computed and costed each day (``auto`` picks among these)."""
    rate_method: str = "eb_trend"
    """eb_trend | trailing_mean_prior (see jobs/estimators.py)."""
    rate_half_life_days: float = 3.0
    """eb_trend: a day's counts weigh half as much as the next day's after this many days."""
    rate_trend_damping: float = 0.25
    """eb_trend: share of the fitted daily trend carried into tomorrow's forecast."""
    flash_factor: float = 4.0
    """A producer whose events today exceed this many times its forecast is a flash producer."""
    flash_min_events: int = 12
    """...and posted at least this many events today (tiny counts are never a flash)."""
    feed_k_per_producer: int = 3
    """k_p: events per producer in a feed under per-producer coherency (Section 3.1)."""
    diversity_hours: float = 24.0
    """t of k,t-diversity (Section 2.2.1): a producer with an event this recent is always shown
    under per-producer coherency."""
    latency_metric: str = "sources"
    """What the latency target bounds per feed view: ``sources`` read (personal feed, views and
    pulled producers), ``pulls`` (pulled producers only), or ``ms``, a read's milliseconds on
    the feed store, mapped to sources by the read-latency fit (``latency_ms_base`` and
    ``latency_ms_per_source``, from ``feedpipe calibrate --write``)."""
    latency_quantile: float = 0.95
    """Share of feed views that must meet ``latency_bound`` (ff-latency-* strategies)."""
    latency_bound: float = 2.0
    """At most this many sources (or pulls; a whole number) or milliseconds per feed view for
    ``latency_quantile`` of views; ``latency_metric = "pulls"`` with bound 0 and quantile 0.9
    reads "at most 10% of feed views need any pull"."""
    latency_ms_base: float = 0.0
    """The read-latency fit, ms = base + per_source x sources (``feedpipe calibrate``): what
    ``latency_metric = "ms"`` maps its bound with."""
    latency_ms_per_source: float = 0.0
    """See ``latency_ms_base``; 0 means not calibrated."""
    inactive_after_days: int = 7
    """Consumers without a feed view in this many days (ending at ds) get no materialized feed
    and are served by pull until they return; 0 disables the rule."""
    view_part_users: int = 32000
    """Shared views: components of interacting users larger than this are split into parts of
    about this many users, planned independently (docs/shared-views.md)."""
    view_user_views: int = 30
    """Shared views: each user weighs at most this many candidate views, its largest (ties by
    view id); bounds the planning work of users who follow thousands of producers."""
    view_lp_pairs: int = 20_000
    """Shared views: ``cz-lp`` plans a part from the LP relaxation over every view (HiGHS) when
    it has at most this many (user, view) pairs, every subset of two feeds or more of each
    follow set counted; 0 disables (docs/shared-views.md)."""
    bound_pairs: int = 6_000_000
    """The optimality certificate (``plan_cost.lower_bound``): at most this many pairs of
    consumers that share a producer are listed to count overlaps exactly; overlaps through
    producers with more followers are bounded from above, which loosens the bound. 4-6 s
    per million pairs on 2 cores (docs/shared-views.md "The certificate in every plan")."""
    mode_change_margin: float = 0.2
    """Hysteresis: a pushed edge turns pull below H/L/(1+m), a pulled one turns push at
    H/L*(1+m) or above (Feeding Frenzy 4.3: only update when the decision really changes)."""
    prior_hours: float = 24.0
    """trailing_mean_prior: strength of the prior, in hours at the population mean rate."""
    rate_floor: float = 1e-3
    """Lower bound (per hour) of the prior rate, so no id ever has rate 0."""
    max_lateness_days: int = 30
    """Events whose created_at is older than this many days before ds are quarantined."""
    max_attributes_bytes: int = 4096
    """An event whose ``attributes`` JSON text is longer than this (UTF-8 bytes) is quarantined
    (``attributes_too_large``): attributes label events for topics, they do not carry content."""
    landing_ready: str = "folders"
    """When a day's landing counts as arrived (jobs/common/readiness.py): ``folders``, each
    required ``TABLE/ds=D`` folder exists; ``marker``, each holds ``landing_marker`` too (the
    upstream export writes it last)."""
    landing_marker: str = "_SUCCESS"
    """The file an upstream export writes into each folder when it is complete
    (``landing_ready = "marker"``)."""
    allow_empty: tuple[str, ...] = ()
    """Landing tables this run may find missing (a known upstream outage), run as empty:
    ingest records them in the manifest and the volume gates skip them that day."""
    volume_low: float = 0.2
    """Volume gate: ``validate`` fails a day whose events or views rows are below this many
    times the median of the previous published days (docs/data-contracts.md, "Volume gates")."""
    volume_high: float = 5.0
    """...or above this many times it (bursty data such as the Higgs week needs about 30)."""
    volume_days: int = 7
    """The median is over up to this many previous published days..."""
    volume_min_days: int = 3
    """...and the volume gates are off until there are at least this many."""
    max_follow_removed: float = 0.2
    """Follow gate: ``validate`` fails a day that removes more than this share of the previous
    day's follow edges (a broken export that drops much of the graph; docs/data-contracts.md)."""
    follow_added_high: float = 5.0
    """...and a day whose share of edges added is above this many times the median share of
    the previous published days' (off until ``volume_min_days`` of them; 0: never judged)."""
    accept_gates: tuple[str, ...] = ()
    """Gates this run accepts although they fail (``volume``, ``follows``): a known anomaly,
    recorded in the gates' rows, the manifest and the report. Set it for one day only."""
    max_quarantine_share: float = 0.10
    """A table whose quarantined share (duplicates excluded) exceeds this fails ingest."""
    publish_to: str = ""
    """``s3://bucket/prefix``: ``publish`` also copies the complete day there with boto3 (or, when
    the warehouse is on S3, marks it) and moves the target's ``latest`` pointer
    (jobs/stages/publish_s3.py). Empty: the day is marked in the warehouse only."""
    publish_part_mb: float = 64.0
    """Files larger than this go to ``publish_to`` as multipart uploads of parts this large (AWS
    S3 wants at least 5 MiB)."""
    store: str = ""
    """The feed store that serves the published plan: ``redis://[user:password@]host:port/db``
    or ``rediss://...`` (TLS); a password not in the URL comes from ``FEEDPIPE_STORE_PASSWORD``
    (docs/serving.md). Empty: feeds are served from Parquet only."""
    store_grace_seconds: float = 3600.0
    """How long a day's keys stay in the store after the next day is switched in (readers
    that resolved the old day finish on it)."""
    store_probe_reads: int = 1000
    """Feed reads timed after a load switches the day in (``feedpipe store load``): consumers
    sampled uniformly, their latencies weighted by their feed views per hour into p50, p95
    and p99, recorded with the load and shown beside the latency target; 0 disables."""
    shuffle_partitions: int = 8
    """Partitions of each shuffle (``spark.sql.shuffle.partitions``): a multiple of the cores.
    The plan stage keeps exactly this many, where other stages let Spark coalesce small ones."""
    spark_conf: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Every setting checked once, here: a bad value is a :class:`ConfigError` naming it."""
        self._check_costs_and_rates()
        self._check_landing_and_gates()
        self._check_planning()
        self._check_destinations()

    def _check_costs_and_rates(self) -> None:
        if self.push_cost <= 0 or self.pull_cost <= 0:
            raise ConfigError("push_cost (H) and pull_cost (L) must be positive")
        if self.feed_k < 1:
            raise ConfigError("feed_k must be at least 1")
        if self.rate_window_days < 1:
            raise ConfigError("rate_window_days must be at least 1")
        if self.prior_hours < 0 or self.rate_floor <= 0:
            raise ConfigError("prior_hours must be >= 0 and rate_floor > 0")
        if not 0 <= self.max_quarantine_share <= 1:
            raise ConfigError("max_quarantine_share must be between 0 and 1")
        if self.rate_method not in SERVED_RATE_METHODS:
            raise ConfigError(f"rate_method must be one of {', '.join(SERVED_RATE_METHODS)}")
        if self.rate_half_life_days <= 0 or not 0 <= self.rate_trend_damping <= 1:
            raise ConfigError("rate_half_life_days must be > 0 and rate_trend_damping in [0, 1]")
        if self.flash_factor <= 1 or self.flash_min_events < 0 or self.mode_change_margin < 0:
            raise ConfigError(
                "flash_factor must be > 1, flash_min_events and mode_change_margin >= 0"
            )

    def _check_landing_and_gates(self) -> None:
        if self.landing_ready not in LANDING_READINESS:
            raise ConfigError(
                f"landing_ready must be one of {', '.join(LANDING_READINESS)}, "
                f"got {self.landing_ready!r}"
            )
        if not self.landing_marker or "/" in self.landing_marker:
            raise ConfigError(f"landing_marker must be a file name, got {self.landing_marker!r}")
        strange = [t for t in self.allow_empty if t not in LANDING_TABLES]
        if strange:
            raise ConfigError(
                f"allow_empty names unknown tables {strange}; tables: {', '.join(LANDING_TABLES)}"
            )
        if not 0 <= self.volume_low <= 1 <= self.volume_high:
            raise ConfigError("volume_low must be in [0, 1] and volume_high at least 1")
        if self.volume_days < 1 or not 1 <= self.volume_min_days <= self.volume_days:
            raise ConfigError("volume_days must be >= 1 and volume_min_days in [1, volume_days]")
        if not 0 <= self.max_follow_removed <= 1 or self.follow_added_high < 0:
            raise ConfigError("max_follow_removed must be in [0, 1] and follow_added_high >= 0")
        odd = [g for g in self.accept_gates if g not in GATE_KINDS]
        if odd:
            raise ConfigError(
                f"accept_gates names unknown gates {odd}; gates: {', '.join(GATE_KINDS)}"
            )
        if self.max_attributes_bytes < 2:
            raise ConfigError("max_attributes_bytes must be at least 2 (the text {})")
        if self.max_lateness_days < 0:
            raise ConfigError("max_lateness_days must be >= 0")
        if self.shuffle_partitions < 1:
            raise ConfigError("shuffle_partitions must be at least 1")

    def _check_planning(self) -> None:
        unknown = [s for s in self.strategies if s not in STRATEGIES]
        if unknown or not self.strategies:
            raise ConfigError(
                f"unknown strategies {unknown}; known: {', '.join(STRATEGIES)}"
                if unknown
                else "at least one strategy must be enabled"
            )
        if self.strategy != "auto" and self.strategy not in STRATEGIES:
            raise ConfigError(
                f"strategy must be 'auto' or one of {', '.join(STRATEGIES)}, got {self.strategy!r}"
            )
        if self.coherency not in COHERENCY_MODES:
            raise ConfigError(
                f"coherency must be one of {', '.join(COHERENCY_MODES)}, got {self.coherency!r}"
            )
        if self.coherency == "per_producer" and self.strategy in GLOBAL_ONLY:
            raise ConfigError(
                f"strategy {self.strategy} is a global-coherency rule (Lemma 2); "
                "per-producer coherency uses Lemma 1 (ff-per-pair, ff-latency-*)"
            )
        if not self.served_strategies:
            raise ConfigError(
                "no strategy left to compute: per-producer coherency does not offer "
                f"{', '.join(GLOBAL_ONLY)}"
            )
        if self.feed_k_per_producer < 1 or self.diversity_hours < 0:
            raise ConfigError("feed_k_per_producer must be >= 1 and diversity_hours >= 0")
        if self.latency_metric not in LATENCY_METRICS:
            raise ConfigError(
                f"latency_metric must be one of {', '.join(LATENCY_METRICS)}, "
                f"got {self.latency_metric!r}"
            )
        if not 0 < self.latency_quantile <= 1 or self.latency_bound < 0:
            raise ConfigError("latency_quantile must be in (0, 1] and latency_bound >= 0")
        if self.latency_metric != "ms" and not float(self.latency_bound).is_integer():
            raise ConfigError(
                f"latency_bound must be a whole number of {self.latency_metric}, "
                f'got {self.latency_bound:g} (a bound in milliseconds: latency_metric = "ms")'
            )
        if self.latency_metric == "ms":
            _ = self.latency_bound_sources  # refuses a bound the fit cannot meet
        if self.inactive_after_days < 0:
            raise ConfigError("inactive_after_days must be >= 0 (0 disables the rule)")
        if self.view_part_users < 2:
            raise ConfigError("view_part_users must be at least 2")
        if self.view_user_views < 1:
            raise ConfigError("view_user_views must be at least 1")
        if self.view_lp_pairs < 0:
            raise ConfigError("view_lp_pairs must be at least 0 (0 disables the LP)")
        if self.bound_pairs < 0:
            raise ConfigError("bound_pairs must be at least 0")

    def _check_destinations(self) -> None:
        if self.publish_to and not self.publish_to.startswith(("s3://", "s3a://")):
            raise ConfigError(
                f"publish_to must be an s3://bucket/prefix URI, got {self.publish_to!r}"
            )
        if self.spark_remote and not self.spark_remote.startswith("sc://"):
            raise ConfigError(
                f"spark_remote must be a Spark Connect URL (sc://host:port), "
                f"got {self.spark_remote!r}"
            )
        if self.publish_part_mb <= 0:
            raise ConfigError("publish_part_mb must be positive")
        if self.store and not self.store.startswith(("redis://", "rediss://")):
            raise ConfigError(
                f"store must be a redis:// or rediss:// URL, got {redact(self.store)!r}"
            )
        if self.store_grace_seconds < 0:
            raise ConfigError("store_grace_seconds must be at least 0")
        if self.store_probe_reads < 0:
            raise ConfigError("store_probe_reads must be at least 0 (0 disables the probe)")

    @property
    def latency_bound_sources(self) -> int:
        """The latency bound in the planner's unit: ``latency_bound`` itself for ``sources``
        and ``pulls``; for ``ms``, the most sources a read can have within the bound by the
        read-latency fit, ``floor((bound - base) / per_source)`` (at least one source)."""
        if self.latency_metric != "ms":
            return int(self.latency_bound)
        if self.latency_ms_per_source <= 0:
            raise ConfigError(
                'latency_metric = "ms" needs the read-latency fit: run feedpipe calibrate '
                "--store URL --write FILE (it sets latency_ms_base and latency_ms_per_source)"
            )
        sources = math.floor(
            (self.latency_bound - self.latency_ms_base) / self.latency_ms_per_source + 1e-9
        )
        if sources < 1:
            one = self.latency_ms_base + self.latency_ms_per_source
            raise ConfigError(
                f"latency_bound {self.latency_bound:g} ms is below a read of one source by the "
                f"calibration ({one:.3f} ms)"
            )
        return sources

    @property
    def threshold(self) -> float:
        """H/L, the push threshold of Feeding Frenzy's Lemmas 1 and 2."""
        return self.push_cost / self.pull_cost

    @property
    def served_strategies(self) -> tuple[str, ...]:
        """Strategies to compute: the enabled ones plus a forced one if not among them, less
        the global-coherency rules under per-producer coherency."""
        enabled = self.strategies
        if self.strategy != "auto" and self.strategy not in enabled:
            enabled = (*enabled, self.strategy)
        if self.coherency == "per_producer":
            enabled = tuple(s for s in enabled if s not in GLOBAL_ONLY)
        return enabled

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["strategies"] = list(self.strategies)
        out["allow_empty"] = list(self.allow_empty)
        out["accept_gates"] = list(self.accept_gates)
        out["spark_conf"] = dict(self.spark_conf)
        out["store"] = redact(self.store)  # printed and kept in manifests: no password
        return out


_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}

RENAMED = {
    "max_follow_change": "max_follow_removed (the share of edges removed in a day) and"
    " follow_added_high (additions against the graph's own history)",
}
"""Settings that were replaced, with what replaces them: a file that still sets one gets a
one-line error saying so instead of running with a gate it did not ask for."""


def _coerce(name: str, value: Any) -> Any:
    """Turn a TOML/env/flag value into the field's type, with a clear error."""
    default = _FIELDS[name].default
    try:
        if name in ("strategies", "allow_empty", "accept_gates"):
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            return tuple(str(v) for v in value)
        if name == "spark_conf":
            if isinstance(value, str):
                pairs = [p.split("=", 1) for p in value.split(",") if p.strip()]
                return {k.strip(): v.strip() for k, v in pairs}
            return {str(k): str(v) for k, v in dict(value).items()}
        if isinstance(default, bool):
            return parse_bool(value, name)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
        return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"setting {name!r}: cannot use value {value!r} ({exc})") from exc


def load_settings(
    config_path: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Defaults, then the TOML file, then ``FEEDPIPE_*`` variables, then ``overrides``."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    path = config_path or env.get("FEEDPIPE_CONFIG")
    if path:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ConfigError(f"configuration file not found: {path}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"configuration file {path} is not valid TOML: {exc}") from exc
        for key, value in data.items():
            name = key.replace("-", "_")
            if name in RENAMED:
                raise ConfigError(f"{path}: setting {key!r} is now {RENAMED[name]}")
            if name not in _FIELDS:
                raise ConfigError(f"{path}: unknown setting {key!r}")
            values[name] = _coerce(name, value)
    for name, now in RENAMED.items():
        if env.get(f"FEEDPIPE_{name.upper()}"):
            raise ConfigError(f"FEEDPIPE_{name.upper()} is set, but that setting is now {now}")
    for name in _FIELDS:
        env_value = env.get(f"FEEDPIPE_{name.upper()}")
        if env_value is not None and env_value != "":
            values[name] = _coerce(name, env_value)
    for name, value in (overrides or {}).items():
        if value is None:
            continue
        if name not in _FIELDS:
            raise ConfigError(f"unknown setting {name!r}")
        values[name] = _coerce(name, value)
    return Settings(**values)
