"""Judge jobs on the store: a judge model's work queued for the workers, its progress, cancel and refusals.

`evalrx diagnose RUN --judge SPEC --queue` and the app's "Diagnose with a judge" queue one
(`enqueue_judge_job`); a worker claims it (`claim_judge_job`), records each trajectory's outcome as it goes
(`record_judged`: progress, counts, one line per refusal or failed call with what the judge wrote, and the cancel
flag back) and ends it
(`finish_judge_job`). A job whose worker died goes back to the queue (`requeue_stale_judge_jobs`); the judge's
cache makes the trajectories judged before free the second time. No key is ever stored: only the name of the
environment variable the worker reads it from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional, Sequence

from sqlalchemy import select, update

from evalrx.store import convert
from evalrx.store import schema as t
from evalrx.store.engine import Store, changed_rows, resolve
from evalrx.store.jobs import LeaseLost
from evalrx.store.status import ACTIVE_STATUSES, FINAL_STATUSES, JobStatus

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

    @property
    def progress(self) -> float:
        """Fraction of trajectories judged, 0..1."""
        return self.progress_done / self.progress_total if self.progress_total else 0.0

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES


def _info(row: t.JudgeJob) -> JudgeJobInfo:
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
        status=row.status,
        worker_id=row.worker_id,
        progress_done=row.progress_done or 0,
        progress_total=row.progress_total or 0,
        n_verdicts=row.n_verdicts or 0,
        n_refused=row.n_refused or 0,
        n_failed=row.n_failed or 0,
        n_cached=row.n_cached or 0,
        notes=[n.line for n in noted],
        note_details=noted,
        cancel_requested=bool(row.cancel_requested),
        error=row.error,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
    )


def one_line(text: object, limit: int = MAX_NOTE_CHARS) -> str:
    """Text as one line (no newline, no control character), cut at `limit`."""
    flat = " ".join(str(text).split())
    flat = "".join(ch if ch.isprintable() else "?" for ch in flat)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


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
            status=JobStatus.QUEUED,
            progress_done=0,
            progress_total=len(ids),
            n_verdicts=0,
            n_refused=0,
            n_failed=0,
            n_cached=0,
            notes=[],
            cancel_requested=False,
        )
        s.add(row)
        s.flush()
        return row.id


def claim_judge_job(
    store: Store, worker_id: str, *, backends: Optional[Sequence[str]] = None
) -> Optional[JudgeJobInfo]:
    """Atomically take the oldest queued judge job (only one on `backends` when given); None when there is none.
    A claimed job starts its count again: a resumed one reads what it judged before from the cache."""
    now = t.utcnow()
    J = t.JudgeJob
    with store.write() as s:
        while True:
            q = select(J).where(J.status == JobStatus.QUEUED).order_by(J.id).limit(1)
            if backends:
                q = q.where(J.backend.in_(list(backends)))
            row = s.execute(q.with_for_update(skip_locked=True)).scalar_one_or_none()
            if row is None:
                return None
            if row.cancel_requested:
                row.status, row.finished_at = JobStatus.CANCELLED, now
                continue
            row.status, row.worker_id, row.started_at, row.finished_at = JobStatus.RUNNING, worker_id, now, None
            row.progress_done = row.n_verdicts = row.n_refused = row.n_failed = row.n_cached = 0
            row.notes, row.error = [], None
            s.flush()
            return _info(row)


def _owned(session, job_id: int, worker_id: str) -> t.JudgeJob:
    row = session.execute(select(t.JudgeJob).where(t.JudgeJob.id == job_id).with_for_update()).scalar_one_or_none()
    if row is None or row.worker_id != worker_id or row.status != JobStatus.RUNNING:
        raise LeaseLost(f"judge job {job_id} is no longer owned by worker {worker_id}")
    return row


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
        row = _owned(s, job_id, worker_id)
        row.progress_done = (row.progress_done or 0) + 1
        row.n_verdicts = (row.n_verdicts or 0) + int(verdict)
        row.n_refused = (row.n_refused or 0) + int(refused)
        row.n_failed = (row.n_failed or 0) + int(failed)
        row.n_cached = (row.n_cached or 0) + int(cached)
        if note and len(row.notes or []) < MAX_NOTES:
            kept = {
                "line": one_line(note),
                "trajectory_id": trajectory_id,
                "answer": str(answer)[:MAX_NOTE_ANSWER_CHARS],
            }
            row.notes = [*(row.notes or []), kept]  # a new list: JSON columns see assignment only
        return bool(row.cancel_requested)


def finish_judge_job(
    store: Store, job_id: int, worker_id: str, status: JobStatus, *, error: Optional[str] = None
) -> bool:
    """Mark an owned judge job done, failed or cancelled (with a one-line `error`). False if the lease was lost."""
    assert status in FINAL_STATUSES
    with store.write() as s:
        try:
            row = _owned(s, job_id, worker_id)
        except LeaseLost:
            return False
        row.status, row.finished_at = status, t.utcnow()
        row.error = one_line(error, 1000) if error else None
        return True


def release_judge_job(store: Store, job_id: int, worker_id: str) -> None:
    """Hand an owned, unfinished judge job back to the queue (its worker is stopping)."""
    with store.write() as s:
        try:
            row = _owned(s, job_id, worker_id)
        except LeaseLost:
            return
        row.status, row.worker_id = JobStatus.QUEUED, None


def requeue_stale_judge_jobs(store: Store, live_workers: Sequence[str]) -> int:
    """Put back running judge jobs whose worker is not among `live_workers` (a cancelled one ends); how many."""
    J = t.JudgeJob
    now = t.utcnow()
    with store.write() as s:
        base = update(J).where(J.status == JobStatus.RUNNING)
        if live_workers:
            base = base.where(J.worker_id.not_in(list(live_workers)))
        s.execute(base.where(J.cancel_requested.is_(True)).values(status=JobStatus.CANCELLED, finished_at=now))
        res: Any = s.execute(
            base.where(J.cancel_requested.is_(False)).values(
                status=JobStatus.QUEUED, worker_id=None, error="requeued: its worker stopped heartbeating"
            )
        )
        return changed_rows(res) or 0


def cancel_judge_job(job_id: int, *, store: "Store | str | None" = None) -> str:
    """Ask a judge job to stop: a queued one is cancelled at once, a running one between trajectories.

    Returns:
        Its status after the request ("cancelled", "running" (will stop) or a final status).

    Raises:
        ValueError: no such job.
    """
    with resolve(store).write() as s:
        row = s.execute(select(t.JudgeJob).where(t.JudgeJob.id == job_id).with_for_update()).scalar_one_or_none()
        if row is None:
            raise ValueError(f"no judge job {job_id}")
        if row.status == JobStatus.QUEUED:
            row.status, row.finished_at, row.cancel_requested = JobStatus.CANCELLED, t.utcnow(), True
        elif row.status == JobStatus.RUNNING:
            row.cancel_requested = True
        return row.status


def get_judge_job(job_id: int, *, store: "Store | str | None" = None) -> Optional[JudgeJobInfo]:
    """One judge job (None if absent)."""
    with resolve(store).read() as s:
        row = s.get(t.JudgeJob, job_id)
        return _info(row) if row else None


def list_judge_jobs(
    *,
    run_id: Optional[int] = None,
    active: Optional[bool] = None,
    limit: int = 20,
    store: "Store | str | None" = None,
) -> "list[JudgeJobInfo]":
    """Judge jobs, newest first: of one run, and only the queued or running ones (`active`) or the others."""
    J = t.JudgeJob
    q = select(J).order_by(J.id.desc()).limit(limit)
    if run_id is not None:
        q = q.where(J.run_id == run_id)
    if active is not None:
        q = q.where(J.status.in_(ACTIVE_STATUSES) if active else J.status.not_in(ACTIVE_STATUSES))
    with resolve(store).read() as s:
        return [_info(r) for r in s.execute(q).scalars()]


__all__ = [
    "JudgeJobInfo",
    "JudgeNote",
    "cancel_judge_job",
    "claim_judge_job",
    "enqueue_judge_job",
    "finish_judge_job",
    "get_judge_job",
    "list_judge_jobs",
    "one_line",
    "record_judged",
    "release_judge_job",
    "requeue_stale_judge_jobs",
]
