"""Judge jobs on the store: a judge model's work queued for the workers, its counts, notes and refusals.

`evalrx diagnose RUN --judge SPEC --queue` and the app's "Diagnose with a judge" queue one
(`enqueue_judge_job`: what to judge here, its job on the one queue, `evalrx.store.queue`); a worker claims the
job, starts it afresh (`start_judge_job`), records each trajectory's outcome as it goes (`record_judged`:
progress, counts, one line per refusal or failed call with what the judge wrote, and the cancel flag back) and
ends it through the queue. A job whose worker died goes back to the queue; the judge's cache makes the
trajectories judged before free the second time. No key is ever stored: only the name of the environment
variable the worker reads it from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from evalrx.core import one_line
from evalrx.store import convert
from evalrx.store import schema as t
from evalrx.store.engine import Store, resolve
from evalrx.store.queue import cancel_job, enqueue_job, lock_job, lock_owned_job
from evalrx.store.status import ACTIVE_STATUSES, JobKind

MAX_NOTES = 200  # one line each: a job over thousands of trajectories keeps its first reasons and the counts
MAX_NOTE_CHARS = 300
MAX_NOTE_ANSWER_CHARS = 2000  # what the judge wrote, kept with its refusal to read it by; a long one is cut


@dataclass
class JudgeNote:
    """One refusal or failed call of a judge job: its one-line reason, the trajectory and what the judge wrote
    (untrusted text: the pages show it inert)."""

    line: str
    trajectory_id: Optional[int] = None
    answer: str = ""

    @classmethod
    def from_json(cls, value: Any) -> "JudgeNote":
        if isinstance(value, dict):  # a note with its trajectory and answer
            tid = value.get("trajectory_id")
            return cls(
                str(value.get("line") or ""), tid if isinstance(tid, int) else None, str(value.get("answer") or "")
            )
        line = str(value)  # a job recorded before notes kept the answer: its line, which names the trajectory
        named = re.match(r"trajectory (\d+) ", line)
        return cls(line, int(named.group(1)) if named else None)


@dataclass
class JudgeJobInfo:
    """A judge job as the pages and the worker read it (never a key: `api_key_env` is a variable's name)."""

    id: int
    run_id: Optional[int]
    scope: str
    trajectory_ids: list
    spec: str
    backend: str
    base_url: Optional[str]
    api_key_env: Optional[str]
    with_findings: bool
    concurrency: int
    options: dict
    status: str
    worker_id: Optional[str]
    progress_done: int
    progress_total: int
    n_verdicts: int
    n_refused: int
    n_failed: int
    n_cached: int
    notes: list = field(default_factory=list)  # the lines of `note_details`
    note_details: list = field(default_factory=list)  # JudgeNote per refusal or failed call
    cancel_requested: bool = False
    error: Optional[str] = None
    created_at: Optional[datetime] = None
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    job_id: int = 0  # its job on the queue (what a worker claims, heartbeats and ends)

    @property
    def progress(self) -> float:
        """Fraction of trajectories judged, 0..1."""
        return self.progress_done / self.progress_total if self.progress_total else 0.0

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES


def _info(row: t.JudgeJob, job: t.Job) -> JudgeJobInfo:
    noted = [JudgeNote.from_json(n) for n in row.notes or []]
    return JudgeJobInfo(
        id=row.id,
        run_id=row.run_id,
        scope=row.scope or "",
        trajectory_ids=[int(i) for i in row.trajectory_ids or []],
        spec=row.spec,
        backend=row.backend,
        base_url=row.base_url,
        api_key_env=row.api_key_env,
        with_findings=bool(row.with_findings),
        concurrency=int(row.concurrency or 1),
        options=dict(row.options or {}),
        status=job.status,
        worker_id=job.worker_id,
        progress_done=job.progress_done or 0,
        progress_total=job.progress_total or 0,
        n_verdicts=row.n_verdicts or 0,
        n_refused=row.n_refused or 0,
        n_failed=row.n_failed or 0,
        n_cached=row.n_cached or 0,
        notes=[n.line for n in noted],
        note_details=noted,
        cancel_requested=bool(job.cancel_requested),
        error=job.error,
        created_at=row.created_at,
        started_at=job.claimed_at,
        finished_at=job.finished_at,
        job_id=job.id,
    )


def _with_job() -> Any:
    return select(t.JudgeJob, t.Job).join(t.Job, t.Job.id == t.JudgeJob.job_id)


def enqueue_judge_job(
    *,
    trajectory_ids: Sequence[int],
    spec: str,
    backend: str,
    run_id: Optional[int] = None,
    scope: str = "",
    base_url: Optional[str] = None,
    api_key_env: Optional[str] = None,
    with_findings: bool = False,
    concurrency: int = 1,
    options: Optional[dict] = None,
    store: "Store | str | None" = None,
) -> int:
    """Queue a judge job over `trajectory_ids` (checked by the caller: `evalrx.runner.queue_judge`); its id."""
    ids = [int(i) for i in trajectory_ids]
    with resolve(store).write() as s:
        job_id = enqueue_job(s, JobKind.JUDGE, progress_total=len(ids))
        row = t.JudgeJob(
            run_id=run_id,
            scope=one_line(scope, 300),
            trajectory_ids=ids,
            spec=spec,
            backend=backend,
            base_url=base_url or None,
            api_key_env=api_key_env or None,
            with_findings=bool(with_findings),
            concurrency=int(concurrency),
            options=convert.jsonable(dict(options or {})),
            job_id=job_id,
            n_verdicts=0,
            n_refused=0,
            n_failed=0,
            n_cached=0,
            notes=[],
        )
        s.add(row)
        s.flush()
        return row.id


def _owned(session: Session, job_id: int, worker_id: str) -> "tuple[t.JudgeJob, t.Job]":
    """The judge job of an owned, locked job.

    Raises:
        LeaseLost: the job is no longer this worker's.
    """
    job = lock_owned_job(session, job_id, worker_id)
    return session.execute(select(t.JudgeJob).where(t.JudgeJob.job_id == job_id)).scalar_one(), job


def start_judge_job(store: Store, job_id: int, worker_id: str) -> JudgeJobInfo:
    """The judge job of a job this worker just claimed, its counts and notes started afresh (a resumed job
    reads what it judged before from the judge's cache).

    Raises:
        LeaseLost: the job is no longer this worker's.
    """
    with store.write() as s:
        row, job = _owned(s, job_id, worker_id)
        row.n_verdicts = row.n_refused = row.n_failed = row.n_cached = 0
        row.notes = []
        job.progress_done = 0
        s.flush()
        return _info(row, job)


def record_judged(
    store: Store,
    job_id: int,
    worker_id: str,
    *,
    verdict: bool = False,
    refused: bool = False,
    failed: bool = False,
    cached: bool = False,
    note: Optional[str] = None,
    trajectory_id: Optional[int] = None,
    answer: str = "",
) -> bool:
    """Count one judged trajectory on an owned job (and keep its one-line `note`, with the trajectory and what the
    judge wrote, cut at `MAX_NOTE_ANSWER_CHARS`); returns the cancel flag.

    Raises:
        LeaseLost: the job is no longer this worker's.
    """
    with store.write() as s:
        row, job = _owned(s, job_id, worker_id)
        job.progress_done = (job.progress_done or 0) + 1
        job.idle_claims = 0  # this claim judged something: deaths so far were not the job's
        job.heartbeat_at = t.utcnow()
        row.n_verdicts = (row.n_verdicts or 0) + int(verdict)
        row.n_refused = (row.n_refused or 0) + int(refused)
        row.n_failed = (row.n_failed or 0) + int(failed)
        row.n_cached = (row.n_cached or 0) + int(cached)
        if note and len(row.notes or []) < MAX_NOTES:
            kept = {
                "line": one_line(note, MAX_NOTE_CHARS),
                "trajectory_id": trajectory_id,
                "answer": str(answer)[:MAX_NOTE_ANSWER_CHARS],
            }
            row.notes = [*(row.notes or []), kept]  # a new list: JSON columns see assignment only
        return bool(job.cancel_requested)


def cancel_judge_job(job_id: int, *, store: "Store | str | None" = None) -> str:
    """Ask a judge job to stop: a queued one is cancelled at once, a running one between trajectories.

    Returns:
        Its status after the request ("cancelled", "running" (will stop) or a final status).

    Raises:
        ValueError: no such job.
    """
    with resolve(store).write() as s:
        found = s.execute(select(t.JudgeJob.job_id).where(t.JudgeJob.id == job_id)).scalar_one_or_none()
        job = lock_job(s, found) if found is not None else None
        if job is None:
            raise ValueError(f"no judge job {job_id}")
        return cancel_job(s, job)


def get_judge_job(job_id: int, *, store: "Store | str | None" = None) -> Optional[JudgeJobInfo]:
    """One judge job (None if absent)."""
    with resolve(store).read() as s:
        found = s.execute(_with_job().where(t.JudgeJob.id == job_id)).first()
        return _info(*found) if found else None


def list_judge_jobs(
    *,
    run_id: Optional[int] = None,
    active: Optional[bool] = None,
    limit: int = 20,
    store: "Store | str | None" = None,
) -> "list[JudgeJobInfo]":
    """Judge jobs, newest first: of one run, and only the queued or running ones (`active`) or the others."""
    J = t.JudgeJob
    q = _with_job().order_by(J.id.desc()).limit(limit)
    if run_id is not None:
        q = q.where(J.run_id == run_id)
    if active is not None:
        q = q.where(t.Job.status.in_(ACTIVE_STATUSES) if active else t.Job.status.not_in(ACTIVE_STATUSES))
    with resolve(store).read() as s:
        return [_info(r, j) for r, j in s.execute(q).all()]


__all__ = [
    "JudgeJobInfo",
    "JudgeNote",
    "cancel_judge_job",
    "enqueue_judge_job",
    "get_judge_job",
    "list_judge_jobs",
    "record_judged",
    "start_judge_job",
]
