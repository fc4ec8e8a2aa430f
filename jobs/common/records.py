"""The day's records as typed values: each stage's record, the row accounting, the gates, the
validation results and the manifest, each with one JSON round trip (``to_json`` /
``from_json``) and the same keys as the files under ``manifests/`` and ``quality/``
(docs/storage.md, "The day's records").

Every record is a frozen pydantic model. Reading is tolerant of what older releases wrote: a
field added since has a default, and keys no longer written are ignored, so manifests and
stage records written before a field existed still read. The manifest carries its format
(:data:`MANIFEST_FORMAT`); one without it is format 1 (the same keys, before the format was
recorded).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, SerializeAsAny, field_validator

R = TypeVar("R", bound="Record")

MANIFEST_FORMAT = 2
"""The manifest's format: 2 records it (``format``); 1 is a manifest without the field."""


class Record(BaseModel):
    """A record kept as JSON: frozen, compared by value, one round trip."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    def as_dict(self) -> dict[str, Any]:
        """The record as the JSON file holds it (dates as ISO strings)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls: type[R], text: str | bytes) -> R:
        return cls.model_validate_json(text)


class TableAccount(Record):
    """One input table's row accounting: ``rows_in = clean + duplicates + quarantined``
    (``clean`` of ``follows`` is the accepted changes; the graph's own size and change are the
    ``edges*`` fields, on a day with a graph the day before)."""

    rows_in: int = 0
    clean: int | None = None
    duplicates: int = 0
    quarantined: int = 0
    quarantine_reasons: dict[str, int] = {}
    snapshot: bool | None = None
    edges_before: int | None = None
    edges: int | None = None
    edges_added: int | None = None
    edges_removed: int | None = None

    @property
    def added_share(self) -> float | None:
        """The edges the day added over the previous day's edges (follows only)."""
        if not self.edges_before or self.edges_added is None:
            return None
        return self.edges_added / self.edges_before


class TopicAccount(TableAccount):
    """The topic definitions' accounting (``clean``: the definitions in force) and the day's
    matches (docs/topics.md)."""

    snapshot: bool | None = False
    carried: int = 0
    matches: int = 0
    matched_events: int = 0
    matched_topics: int = 0

    @property
    def any(self) -> bool:
        """Whether the day had topic definitions landed, kept or carried."""
        return bool(self.clean or self.rows_in or self.carried)


class StageRecord(Record):
    """What every stage's record holds besides its own result: the tables it read (of its
    day and of earlier days), its run id, the run folder of each table it wrote and its
    duration. The stage returns its result without them; the runner adds them."""

    stage: ClassVar[str] = ""
    inputs: list[str] = []
    earlier_inputs: list[str] = []
    run: str | None = None
    outputs: dict[str, str] = {}
    seconds: float | None = None


class IngestRecord(StageRecord):
    stage: ClassVar[str] = "ingest"
    tables: dict[str, TableAccount] = {}
    topics: TopicAccount = TopicAccount()
    allowed_empty: list[str] = []
    """Landing tables the day ran as empty on purpose (``allow_empty``)."""


class RatesRecord(StageRecord):
    stage: ClassVar[str] = "rates"
    window_start: dt.date | None = None
    window_days: int = 0
    method: str = ""
    flash_producers: int | None = None
    flash_listed: list[str] = []


class LatencyTarget(Record):
    """The latency target a day's plans were judged against. With ``metric = "ms"``, the
    read-latency fit it was mapped with and the ``sources`` it allowed."""

    metric: str
    bound: int | float
    quantile: float
    sources: int | None = None
    ms_base: float | None = None
    ms_per_source: float | None = None


class CertificateRecord(Record):
    """The plan's lower bound, how it was computed, and the served plan's gap above it."""

    lower_bound: float
    bound: str
    max_followers: int | None = None
    pairs: int | None = None
    computed: str | None = None
    gap: float | None = None
    seconds: float | None = None


class SourcesHistogram(Record):
    """Each strategy's share of consumers per bucket of sources read (cost.SOURCE_BUCKETS)."""

    buckets: list[str] = []
    shares: dict[str, list[float] | None] = {}


class PlanRecord(StageRecord):
    stage: ClassVar[str] = "plan"
    strategy: str | None = None
    forced: bool = False
    cheapest: str | None = None
    costs: dict[str, float | None] = {}
    mode_changes: int | None = None
    latency_met: bool | None = None
    latency_share: float | None = None
    latency_target: LatencyTarget | None = None
    """The target the day's plans were judged against (None: written before it was kept)."""
    inactive_consumers: int | None = None
    shared_view_parts: dict[str, dict[str, Any]] = {}
    certificate: CertificateRecord | None = None
    sources_hist: SourcesHistogram | None = None


class MaterializeRecord(StageRecord):
    stage: ClassVar[str] = "materialize"
    mode: str = "full"
    reason: str = ""
    feed_k: int | None = None
    coherency: str | None = None
    feed_k_per_producer: int | None = None
    diversity_hours: float | None = None
    topic_streams: bool = False
    feeds_layout: int | None = None

    @property
    def k_per_producer(self) -> int:
        """k_p of per-producer coherency (3 in records written before it was kept)."""
        return 3 if self.feed_k_per_producer is None else self.feed_k_per_producer

    @property
    def window_hours(self) -> float:
        """The diversity window (24 hours in records written before it was kept)."""
        return 24.0 if self.diversity_hours is None else self.diversity_hours


class ValidateRecord(StageRecord):
    stage: ClassVar[str] = "validate"
    success: bool = False
    suites: int = 0
    docs: str | None = None


class PublishRecord(StageRecord):
    stage: ClassVar[str] = "publish"
    manifest: str = ""
    latest: dt.date | None = None
    published: dict[str, Any] | None = None


class ReadProbe(Record):
    """Feed reads timed on the store right after a load's switch: ``reads`` consumers sampled
    uniformly, each read once, the percentiles weighted by the consumers' feed views per
    hour (the plan's latency percentiles are weighted the same way)."""

    reads: int
    p50_ms: float
    p95_ms: float
    p99_ms: float


class StoreRecord(StageRecord):
    """A load of the day into the feed store: the generation switched in, when, how long the
    load took, and the generations it removed."""

    stage: ClassVar[str] = "store"
    generation: str = ""
    since: str = ""
    load_seconds: float | None = None
    caught_up: int = 0
    """Events added live since the day ended, added to the new generation before the switch."""
    written: dict[str, int] = {}
    """Rows written of each table (``streams``, ``consumer feeds``, ...)."""
    retired: list[str] = []
    skipped: str = ""
    """The newer day the store served instead, when this day was not loaded."""
    probe: ReadProbe | None = None
    """Read latency measured after the switch (``store_probe_reads``)."""


RECORD_TYPES: dict[str, type[StageRecord]] = {
    t.stage: t
    for t in (
        IngestRecord,
        RatesRecord,
        PlanRecord,
        MaterializeRecord,
        ValidateRecord,
        PublishRecord,
        StoreRecord,
    )
}
"""Each stage's record type, by stage name (the registry's names)."""


def stage_record(stage: str, data: dict[str, Any] | StageRecord) -> StageRecord:
    """A stage's record from its JSON object."""
    return data if isinstance(data, StageRecord) else RECORD_TYPES[stage].model_validate(data)


class GateResult(Record):
    """One gate of the day (``jobs.stages.gates``): ``ratio`` within ``[lower, upper]``
    passes; ``passed`` None is a gate that is off (``note`` says why); ``accepted`` is a failed
    gate accepted for the day (``accept_gates``)."""

    gate: str
    table: str
    observed: float | None = None
    reference: float | None = None
    days: int = 0
    ratio: float | None = None
    lower: float = 0.0
    upper: float = 0.0
    passed: bool | None = None
    accepted: bool = False
    note: str = ""

    @property
    def holds(self) -> bool:
        """False for a gate that failed and was not accepted: the day is refused."""
        return not (self.passed is False and not self.accepted)


class Failure(Record):
    """A failed expectation: its unexpected count, observed value and sample rows."""

    expectation: str
    kwargs: dict[str, Any] = {}
    unexpected_count: int | None = None
    observed_value: Any = None
    sample: list[Any] | None = None


class Check(Record):
    expectation: str
    kwargs: dict[str, Any] = {}
    success: bool


class SuiteOutcome(Record):
    success: bool
    expectations: int
    failed: list[Failure] = []
    checks: list[Check] = []


class ValidationResults(Record):
    """``quality/ds=D/results.json``: each suite's outcome, where it ran, and the gates."""

    ds: dt.date | None = None
    success: bool = False
    suites: dict[str, SuiteOutcome] = {}
    engines: dict[str, str] = {}
    gates: list[GateResult] = []


class PublishedTable(Record):
    rows: int
    location: str
    path: str


class PlanSummary(Record):
    served: str | None = None
    strategies: list[dict[str, Any]] = []
    """Every strategy's ``plan/plan_cost`` row, cheapest first."""


class Quality(Record):
    success: bool = False
    suites: int = 0
    gates: list[GateResult] = []
    accepted_gates: list[str] = []
    results: ValidationResults | None = None


class Manifest(Record):
    """``manifests/ds=D/manifest.json`` (docs/storage.md): the published day's tables with
    their rows and run folders, the input accounting, the plan served, the stage records and
    the validation outcome."""

    format: int = 1
    ds: dt.date
    settings: dict[str, Any] = {}
    input: dict[str, TableAccount] = {}
    topics: TopicAccount = TopicAccount()
    allowed_empty: list[str] = []
    quarantine_rows: dict[str, int] = {}
    tables: dict[str, PublishedTable] = {}
    versions: dict[str, str] = {}
    plan: PlanSummary = PlanSummary()
    stages: dict[str, SerializeAsAny[StageRecord]] = {}
    quality: Quality = Quality()
    published: dict[str, Any] | None = None
    """Where ``publish_to`` copied the day (None: not copied)."""

    @field_validator("stages", mode="before")
    @classmethod
    def _typed_stages(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: stage_record(k, v) if k in RECORD_TYPES else v for k, v in value.items()}
        return value
