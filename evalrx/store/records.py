"""Plain result types the store's functions return (detached from any session)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Optional, TypeVar

_R = TypeVar("_R")


def from_row(cls: "type[_R]", row: Any, **given: Any) -> _R:
    """A record of `cls` whose fields are `row`'s same-named columns, except those `given`."""
    names = (f.name for f in fields(cls) if f.name not in given)  # type: ignore[arg-type]
    return cls(**{name: getattr(row, name) for name in names}, **given)


@dataclass
class RunInfo:
    """A run with its job's live progress (what the Runs page lists)."""

    id: int
    name: str
    status: str
    source: str
    spec_key: Optional[str]
    backend: Optional[str]
    config: dict
    n_cases: int
    n_done: int
    n_pass: int
    n_fail: int
    n_error: int
    created_at: datetime
    started_at: Optional[datetime]
    finished_at: Optional[datetime]
    error: Optional[str] = None
    job_id: Optional[int] = None
    job_status: Optional[str] = None
    worker_id: Optional[str] = None
    heartbeat_at: Optional[datetime] = None
    cancel_requested: bool = False
    job_claims: int = 0  # times workers claimed the run's job (a resumed job counts again)

    @property
    def progress(self) -> float:
        """Fraction of cases finished, 0..1."""
        return self.n_done / self.n_cases if self.n_cases else 0.0


@dataclass
class TrajectoryRow:
    """One row of the Trajectories page (no steps)."""

    id: int
    run_id: int
    case_row_id: int  # the `cases` row (the case's string id is `sample_id`)
    sample_id: str
    goal: str
    final_answer: Optional[str]
    outcome: str
    terminated: str
    n_steps: int
    n_tool_calls: int
    n_parse_errors: int
    latency_ms: float
    prompt_tokens: int
    completion_tokens: int
    label: Optional[str]
    label_kind: Optional[str]  # the current human label's failure kind
    created_at: datetime
    diagnosis_kind: Optional[str] = None  # the top diagnosis's kind (None: passing or not diagnosed)
    attempt: int = 1  # which of the run's repeated attempts at the case
    diagnosis_agent: Optional[str] = None  # the agent the top diagnosis blames, in a team
    grade_turn: Optional[int] = None  # a conversation's user turn (0-based) whose grade failed it


@dataclass
class AgentShare:
    """One agent's part in a team's trajectory (or, summed, in a run's): steps taken, their latency, and in
    how many trajectories it took part."""

    agent: str
    n_steps: int
    latency_ms: float
    n_trajectories: int = 1


@dataclass
class Page:
    """A page of trajectory rows; pass `next_cursor` as `after=` to get the next page."""

    rows: list
    next_cursor: Optional[str] = None
    total: Optional[int] = None


@dataclass
class LabelInfo:
    id: int
    trajectory_id: int
    step_idx: Optional[int]
    outcome: Optional[str]
    failure_kind: Optional[str]
    first_wrong_step: Optional[int]
    note: Optional[str]
    annotator: Optional[str]
    created_at: datetime
    is_current: bool
    superseded_by: Optional[int]
    agent: Optional[str] = None  # the team's agent the person blames

    def to_dict(self) -> dict:
        """The exported form (no database ids; `agent` only when a person named one)."""
        out = {
            "step_idx": self.step_idx,
            "outcome": self.outcome,
            "failure_kind": self.failure_kind,
            "first_wrong_step": self.first_wrong_step,
            "note": self.note,
            "annotator": self.annotator,
            "created_at": self.created_at.isoformat(),
            "is_current": self.is_current,
        }
        if self.agent is not None:
            out["agent"] = self.agent
        return out


@dataclass
class TrajectoryDetail:
    """One trajectory with everything the Trajectory page shows."""

    row: TrajectoryRow
    trajectory: Any  # evalrx.core.Trajectory, rebuilt exactly as it was stored
    case: dict
    labels: list = field(default_factory=list)  # current LabelInfo rows (trajectory and steps)
    tags: list = field(default_factory=list)
    analyses: list = field(default_factory=list)  # (analyzer, step_idx, analysis id)
    step_ids: list = field(default_factory=list)
    diagnoses: list = field(default_factory=list)  # evalrx.core.Diagnosis, best first


@dataclass
class RunStats:
    """Per-run aggregates for the Runs page and the Dashboard."""

    run_id: int
    n: int
    outcomes: dict
    terminated: dict
    labels: dict
    label_kinds: dict  # current human label's kind -> trajectories
    success_rate: Optional[float]
    latency_p50_ms: Optional[float]
    latency_p95_ms: Optional[float]
    prompt_tokens: int
    completion_tokens: int
    mean_steps: Optional[float]
    tool_calls: dict
    n_parse_errors: int
    diagnosis_kinds: dict = field(default_factory=dict)  # top diagnosis kind -> trajectories


@dataclass
class JobInfo:
    id: int
    run_id: Optional[int]  # a run job's run (None for a judge job or an analysis request)
    status: str
    worker_id: Optional[str]
    claims: int  # times workers claimed this job (the `jobs.attempts` column)
    progress_done: int
    progress_total: int
    cancel_requested: bool
    heartbeat_at: Optional[datetime]
    error: Optional[str] = None
    kind: str = "run"  # JobKind: run, judge or analysis
