"""The store's tables as typed SQLAlchemy 2 models.

One module holds every table so Alembic and the tests compare one metadata. Column
types work on SQLite 3.40 (JSON1, no JSONB) and PostgreSQL 15 (JSONB there).
Denormalised columns on `trajectories` (terminated, latency, tokens, current label,
lower-cased search text) exist so the pages' filters hit an index, not a JSON path.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, ClassVar, Optional

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import BYTEA, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from evalrx.store.status import JobKind, JobStatus

# The Alembic revision this code expects; `evalrx/store/migrations/versions` head must equal it (a test checks).
SCHEMA_VERSION = "0016"

# Named constraints let Alembic's batch mode on SQLite find and alter them later.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JSONType = JSON().with_variant(JSONB(), "postgresql")
BlobType = LargeBinary().with_variant(BYTEA(), "postgresql")


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (what every timestamp column stores)."""
    return datetime.now(timezone.utc)


class UTCDateTime(TypeDecorator):
    """A timestamp stored as UTC; always read back timezone-aware (SQLite keeps no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Optional[datetime], dialect: Any) -> Optional[datetime]:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        value = value.astimezone(timezone.utc)
        # SQLite compares timestamps as text: a fixed naive UTC form keeps the order right.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Optional[datetime], dialect: Any) -> Optional[datetime]:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


class Base(DeclarativeBase):
    __table__: ClassVar[Table]  # every model here is mapped to a Table (declarative types it as any FromClause)
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict: JSONType, list: JSONType, datetime: UTCDateTime}


class Run(Base):
    """One run: a model on a set of cases. `config` is the RunConfig as a dict, never an API key."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED)
    source: Mapped[str] = mapped_column(String(16), default="queue")  # queue | import
    spec_key: Mapped[Optional[str]] = mapped_column(String(200))
    backend: Mapped[Optional[str]] = mapped_column(String(32))
    config: Mapped[dict] = mapped_column(default=dict)
    meta: Mapped[dict] = mapped_column(default=dict)
    n_cases: Mapped[int] = mapped_column(default=0)
    n_done: Mapped[int] = mapped_column(default=0)
    n_pass: Mapped[int] = mapped_column(default=0)
    n_fail: Mapped[int] = mapped_column(default=0)
    n_error: Mapped[int] = mapped_column(default=0)
    error: Mapped[Optional[str]] = mapped_column(Text)
    # The run's API key was given for it alone: only a worker started for this run (`--run ID`) claims it.
    key_bound: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    # An imported file's content hash: importing the same file again is refused (unless asked).
    source_sha256: Mapped[Optional[str]] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[Optional[datetime]]
    finished_at: Mapped[Optional[datetime]]

    __table_args__ = (Index(None, "status"),)


class Job(Base):
    """A unit of queued work and where it stands, for every kind (`JobKind`): a run's cases that have no
    trajectory yet (`run_id`), a judge job (`judge_jobs.job_id`) or an analysis request
    (`analysis_requests.job_id`). Only this table holds queue state; the others hold what to do."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), default=JobKind.RUN, server_default=JobKind.RUN.value)
    run_id: Mapped[Optional[int]] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))  # a run job's run
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED)
    worker_id: Mapped[Optional[str]] = mapped_column(String(120))
    attempts: Mapped[int] = mapped_column(default=0)
    # Claims in a row that stored no case (a model that kills its worker while loading): the job fails at a limit.
    idle_claims: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    progress_done: Mapped[int] = mapped_column(default=0)
    progress_total: Mapped[int] = mapped_column(default=0)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[Optional[str]] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    claimed_at: Mapped[Optional[datetime]]
    heartbeat_at: Mapped[Optional[datetime]]
    finished_at: Mapped[Optional[datetime]]

    __table_args__ = (Index(None, "kind", "status", "id"), Index(None, "run_id"))


class Worker(Base):
    """A worker process, so the UI can tell whether one is alive (by heartbeat)."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(120), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int]
    status: Mapped[str] = mapped_column(String(16), default="idle")  # idle | busy | stopped
    job_id: Mapped[Optional[int]]
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index(None, "heartbeat_at"),)


class Blob(Base):
    """Binary content stored once, keyed by its SHA-256 (case and tool images)."""

    __tablename__ = "blobs"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    mime: Mapped[str] = mapped_column(String(100), default="application/octet-stream")
    size: Mapped[int]
    data: Mapped[bytes] = mapped_column(BlobType)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Case(Base):
    """A case's content, shared by every run that uses the same content (`digest`)."""

    __tablename__ = "cases"

    id: Mapped[int] = mapped_column(primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    sample_id: Mapped[str] = mapped_column(String(300))  # FailureCase.id, Trajectory.sample_id
    prompt: Mapped[str] = mapped_column(Text, default="")
    expected: Mapped[Optional[Any]] = mapped_column(JSONType)
    grader: Mapped[Optional[dict]]
    meta: Mapped[dict] = mapped_column(default=dict)
    image_sha256: Mapped[Optional[str]] = mapped_column(ForeignKey("blobs.sha256"))

    __table_args__ = (Index(None, "sample_id"),)


class RunCase(Base):
    """The ordered work list of a run (fixed when the run is enqueued): each case once per attempt (1..repeats)."""

    __tablename__ = "run_cases"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    case_row_id: Mapped[int] = mapped_column(ForeignKey("cases.id"), primary_key=True)
    attempt: Mapped[int] = mapped_column(primary_key=True, default=1, server_default=text("1"))
    position: Mapped[int]
    # Times a worker started this attempt; one that died on it leaves the count up (crash loops end per attempt).
    starts: Mapped[int] = mapped_column(default=0, server_default=text("0"))

    __table_args__ = (UniqueConstraint("run_id", "position", "attempt"), Index(None, "case_row_id"))


class Trajectory(Base):
    """One attempt at a case. Unique per (run, case, attempt): an attempt is never stored twice."""

    __tablename__ = "trajectories"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    case_row_id: Mapped[int] = mapped_column(ForeignKey("cases.id"))
    sample_id: Mapped[str] = mapped_column(String(300))
    attempt: Mapped[int] = mapped_column(default=1, server_default=text("1"))  # 1..the run's repeats
    goal: Mapped[str] = mapped_column(Text, default="")
    final_answer: Mapped[Optional[str]] = mapped_column(Text)
    ground_truth: Mapped[Optional[Any]] = mapped_column(JSONType)
    outcome: Mapped[str] = mapped_column(String(16), default="unknown")  # the grader's verdict
    terminated: Mapped[str] = mapped_column(String(32), default="")
    metrics: Mapped[dict] = mapped_column(default=dict)
    error: Mapped[Optional[str]] = mapped_column(Text)
    n_steps: Mapped[int] = mapped_column(default=0)
    n_turns: Mapped[int] = mapped_column(default=0)
    n_tool_calls: Mapped[int] = mapped_column(default=0)
    n_parse_errors: Mapped[int] = mapped_column(default=0)
    latency_ms: Mapped[float] = mapped_column(Float, default=0.0)
    tool_latency_ms: Mapped[float] = mapped_column(Float, default=0.0)
    prompt_tokens: Mapped[int] = mapped_column(default=0)
    completion_tokens: Mapped[int] = mapped_column(default=0)
    # The current human label (its outcome and failure kind), copied here from `labels` so list filters use an index.
    label: Mapped[Optional[str]] = mapped_column(String(16))
    label_kind: Mapped[Optional[str]] = mapped_column(String(100))
    labelled_at: Mapped[Optional[datetime]]
    # The top diagnosis's failure kind, copied from `diagnoses` so the list filters and counts by it.
    diagnosis_kind: Mapped[Optional[str]] = mapped_column(String(100))
    # The agent the top diagnosis blames, in a team (the list filters and sorts by it).
    diagnosis_agent: Mapped[Optional[str]] = mapped_column(String(200))
    # A team's agents (`evalrx.core.roster_of`: name, description or system prompt); None for one agent.
    roster: Mapped[Optional[list]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        UniqueConstraint("run_id", "case_row_id", "attempt"),
        Index(None, "run_id", "diagnosis_kind"),
        Index(None, "run_id", "diagnosis_agent"),
        Index(None, "run_id", "id"),
        Index(None, "run_id", "sample_id"),
        Index(None, "run_id", "outcome"),
        Index(None, "run_id", "terminated"),
        Index(None, "run_id", "label"),
        Index(None, "run_id", "latency_ms"),
        Index(None, "case_row_id"),
        Index(None, "label"),
    )


class TrajectoryText(Base):
    """A trajectory's lower-cased searchable text (goal, answer, turns, calls, observations).

    Kept out of `trajectories` so scans for aggregates read small rows; indexed for
    substring search by migration 0002 (FTS5 trigram on SQLite, pg_trgm on PostgreSQL).
    """

    __tablename__ = "trajectory_texts"

    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"), primary_key=True)
    search_text: Mapped[str] = mapped_column(Text, default="")


class TrajectoryTool(Base):
    """Which tools a trajectory called (for the "used tool X" filter)."""

    __tablename__ = "trajectory_tools"

    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"), primary_key=True)
    tool: Mapped[str] = mapped_column(String(100), primary_key=True)

    __table_args__ = (Index(None, "tool", "trajectory_id"),)


class TrajectoryAgent(Base):
    """The agents that took a trajectory's steps, with how many each took and their model time (the
    "agent took part" filter and the per-agent figures); none for a single-agent run."""

    __tablename__ = "trajectory_agents"

    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"), primary_key=True)
    agent: Mapped[str] = mapped_column(String(200), primary_key=True)
    n_steps: Mapped[int] = mapped_column(default=0)
    latency_ms: Mapped[float] = mapped_column(Float, default=0.0)

    __table_args__ = (Index(None, "agent", "trajectory_id"),)


class ToolSpec(Base):
    """A tool as it was offered (`Tool.describe()`: name, description, schema, source), stored once by digest."""

    __tablename__ = "tool_specs"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(300))
    source: Mapped[str] = mapped_column(String(16), default="builtin")
    origin: Mapped[str] = mapped_column(String(500), default="")
    spec: Mapped[dict] = mapped_column(default=dict)


class McpServer(Base):
    """A saved MCP server (the New run page's list): its `mcpServers` entry; secrets only as `${VAR}` names."""

    __tablename__ = "mcp_servers"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    config: Mapped[dict] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class OfferedTool(Base):
    """The tools a trajectory was offered, in the order the model saw them (`trajectory_tools` holds those it called)."""

    __tablename__ = "trajectory_offered_tools"

    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    tool_digest: Mapped[str] = mapped_column(ForeignKey("tool_specs.digest"))

    __table_args__ = (Index(None, "tool_digest"),)


class Step(Base):
    """One step. `span` keeps the step's full span so export reproduces it exactly."""

    __tablename__ = "steps"

    id: Mapped[int] = mapped_column(primary_key=True)
    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"))
    idx: Mapped[int]
    role: Mapped[str] = mapped_column(String(8))
    content: Mapped[str] = mapped_column(Text, default="")
    tool_calls: Mapped[list] = mapped_column(default=list)
    tool_name: Mapped[Optional[str]] = mapped_column(String(100))
    observation: Mapped[Optional[Any]] = mapped_column(JSONType)
    parse_error: Mapped[Optional[str]] = mapped_column(Text)
    latency_ms: Mapped[Optional[float]] = mapped_column(Float)
    prompt_tokens: Mapped[Optional[int]]
    completion_tokens: Mapped[Optional[int]]
    flags: Mapped[Optional[str]] = mapped_column(String(200))  # comma-separated loop-policy flags
    span: Mapped[dict] = mapped_column(default=dict)
    agent: Mapped[Optional[str]] = mapped_column(String(200))  # who took the step in a team (None: one agent)
    addressee: Mapped[Optional[str]] = mapped_column(String(200))  # whom it spoke to, where the log says

    __table_args__ = (UniqueConstraint("trajectory_id", "idx"),)


class StepPicture(Base):
    """Pictures attached to a step (a tool's output), by blob hash (the table keeps its first name, step_media)."""

    __tablename__ = "step_media"

    step_id: Mapped[int] = mapped_column(ForeignKey("steps.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    blob_sha256: Mapped[str] = mapped_column(ForeignKey("blobs.sha256"))


class Analysis(Base):
    """One analyzer's result for a trajectory (or one of its steps); arrays live in `analysis_arrays`."""

    __tablename__ = "analyses"

    id: Mapped[int] = mapped_column(primary_key=True)
    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"))
    step_idx: Mapped[Optional[int]]
    analyzer: Mapped[str] = mapped_column(String(100))
    meta: Mapped[dict] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index(None, "trajectory_id", "analyzer"),)


class AnalysisArray(Base):
    """A compact numpy array: raw little-endian bytes plus dtype and shape (never JSON floats)."""

    __tablename__ = "analysis_arrays"

    analysis_id: Mapped[int] = mapped_column(ForeignKey("analyses.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    dtype: Mapped[str] = mapped_column(String(16))
    shape: Mapped[list] = mapped_column(default=list)
    data: Mapped[bytes] = mapped_column(BlobType)


class AnalysisRequest(Base):
    """Analyses asked for a stored trajectory (from the Trajectory page); a worker runs them."""

    __tablename__ = "analysis_requests"

    id: Mapped[int] = mapped_column(primary_key=True)
    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"))
    analyzers: Mapped[list] = mapped_column(default=list)
    model: Mapped[Optional[str]] = mapped_column(String(200))  # local spec to score on; None: the run's own
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))  # its place in the queue
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index(None, "job_id", unique=True), Index(None, "trajectory_id"))


class TrajectoryScore(Base):
    """A number derived from an analysis (e.g. the smallest tool-decision margin), indexed for filters."""

    __tablename__ = "trajectory_scores"

    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(60), primary_key=True)
    value: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index(None, "name", "value", "trajectory_id"),)


class LabelRow(Base):
    """A human label. Append-only: an edit inserts a new row and marks the old one superseded."""

    __tablename__ = "labels"

    id: Mapped[int] = mapped_column(primary_key=True)
    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"))
    step_idx: Mapped[Optional[int]]  # None: the label is about the whole trajectory
    outcome: Mapped[Optional[str]] = mapped_column(String(16))
    failure_kind: Mapped[Optional[str]] = mapped_column(String(100))  # a key of the taxonomy (`failure_kinds`)
    first_wrong_step: Mapped[Optional[int]]
    note: Mapped[Optional[str]] = mapped_column(Text)
    annotator: Mapped[Optional[str]] = mapped_column(String(100))
    agent: Mapped[Optional[str]] = mapped_column(String(200))  # the team's agent the person blames
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    is_current: Mapped[bool] = mapped_column(Boolean, default=True)
    superseded_by: Mapped[Optional[int]] = mapped_column(ForeignKey("labels.id"))

    __table_args__ = (
        Index(None, "trajectory_id", "step_idx"),
        # At most one current label per trajectory and per step: enforced by the database.
        Index(
            "uq_labels_current_trajectory",
            "trajectory_id",
            unique=True,
            sqlite_where=text("is_current AND step_idx IS NULL"),
            postgresql_where=text("is_current AND step_idx IS NULL"),
        ),
        Index(
            "uq_labels_current_step",
            "trajectory_id",
            "step_idx",
            unique=True,
            sqlite_where=text("is_current AND step_idx IS NOT NULL"),
            postgresql_where=text("is_current AND step_idx IS NOT NULL"),
        ),
    )


class DiagnosisRow(Base):
    """One ranked diagnosis of a trajectory (rank 0 is the one shown and indexed on `trajectories`)."""

    __tablename__ = "diagnoses"

    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"), primary_key=True)
    rank: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[Optional[str]] = mapped_column(String(100))
    first_wrong_step: Mapped[Optional[int]]
    evidence: Mapped[dict] = mapped_column(default=dict)
    confidence: Mapped[float] = mapped_column(Float, default=0.0)
    source: Mapped[str] = mapped_column(String(16))
    agent: Mapped[Optional[str]] = mapped_column(String(200))  # the team's agent it blames
    version: Mapped[int] = mapped_column(default=1)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index(None, "kind"),)


class JudgeVerdictRow(Base):
    """A judge's answer about one trajectory, by the digest of what it was asked (the trajectory's content, the
    prompt, the judge and the prompt version): asking the same judge the same again reads it here, at no cost.
    Either a checked diagnosis or the one-line reason the answer was refused; a failed call is not kept."""

    __tablename__ = "judge_verdicts"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    spec: Mapped[str] = mapped_column(String(200))
    backend: Mapped[str] = mapped_column(String(32))
    prompt_version: Mapped[int]
    diagnosis: Mapped[Optional[dict]]
    refusal: Mapped[Optional[str]] = mapped_column(Text)
    answer: Mapped[str] = mapped_column(Text, default="")
    meta: Mapped[dict] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class JudgeJob(Base):
    """Queued judging (`evalrx diagnose RUN --judge SPEC --queue`, the app's "Diagnose with a judge"): which
    trajectories, which judge, and its progress. The judge's key is never here: only the NAME of the environment
    variable a worker reads it from (`api_key_env`)."""

    __tablename__ = "judge_jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[Optional[int]] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    scope: Mapped[str] = mapped_column(String(300), default="")  # what was asked for, in words
    trajectory_ids: Mapped[list] = mapped_column(default=list)
    spec: Mapped[str] = mapped_column(String(200))
    backend: Mapped[str] = mapped_column(String(32))
    base_url: Mapped[Optional[str]] = mapped_column(Text)
    api_key_env: Mapped[Optional[str]] = mapped_column(String(200))
    with_findings: Mapped[bool] = mapped_column(Boolean, default=False)
    concurrency: Mapped[int] = mapped_column(default=1)
    options: Mapped[dict] = mapped_column(default=dict)  # timeout, max_retries
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))  # its place in the queue
    n_verdicts: Mapped[int] = mapped_column(default=0)
    n_refused: Mapped[int] = mapped_column(default=0)
    n_failed: Mapped[int] = mapped_column(default=0)
    n_cached: Mapped[int] = mapped_column(default=0)
    notes: Mapped[list] = mapped_column(default=list)  # per refusal or failed call: its line, trajectory, answer
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index(None, "job_id", unique=True), Index(None, "run_id"))


class FailureKindRow(Base):
    """The failure taxonomy: built-in kinds and users' own, with the label form's key for each."""

    __tablename__ = "failure_kinds"

    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    definition: Mapped[str] = mapped_column(Text, default="")
    hotkey: Mapped[Optional[str]] = mapped_column(String(1), unique=True)
    builtin: Mapped[bool] = mapped_column(Boolean, default=False)
    position: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ToolMark(Base):
    """A person's word on what a tool does (`read` or `write`), by tool name: the diagnosis reads it before the
    verb of the name (`evalrx.core.effects`)."""

    __tablename__ = "tool_marks"

    name: Mapped[str] = mapped_column(String(300), primary_key=True)
    effect: Mapped[str] = mapped_column(String(8))
    annotator: Mapped[str] = mapped_column(String(100), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Tag(Base):
    __tablename__ = "tags"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)


class TrajectoryTag(Base):
    __tablename__ = "trajectory_tags"

    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"), primary_key=True)
    tag_id: Mapped[int] = mapped_column(ForeignKey("tags.id", ondelete="CASCADE"), primary_key=True)

    __table_args__ = (Index(None, "tag_id", "trajectory_id"),)


metadata = Base.metadata

# Objects the migrations create outside the models (text search indexes, see migrations/versions/0002).
UNMODELLED = ("trajectory_fts", "ix_trajectory_texts_search_trgm")


def include_object(obj: Any, name: Optional[str], type_: str, reflected: bool, compare_to: Any) -> bool:
    """Alembic filter: leave the text search index (and FTS5's shadow tables) out of autogenerate."""
    return not (name or "").startswith(UNMODELLED)
