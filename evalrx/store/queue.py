"""The one job queue on the store, for every kind of background work (`JobKind`): enqueue, claim, heartbeat,
finish, release, requeue of dead claims, cancel; and the workers' own rows.

A job's queue state (status, worker, claims, heartbeat, progress, cancel flag, error, times) lives only in
`jobs`; what a job does lives with its kind (a run, `judge_jobs`, `analysis_requests`). A run job also mirrors
its status on its run (the Runs page reads the run).

Claims are atomic: on SQLite the claiming transaction holds the write lock from its
`BEGIN IMMEDIATE`; on PostgreSQL `SELECT ... FOR UPDATE SKIP LOCKED` lets many workers
claim different jobs at once without waiting on each other.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence

from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session

from evalrx.store import schema as t
from evalrx.store.engine import Store, changed_rows, resolve
from evalrx.store.records import JobInfo, from_row
from evalrx.store.status import FINAL_STATUSES, JobKind, JobStatus

DEFAULT_MAX_ATTEMPTS = 10


class LeaseLost(RuntimeError):
    """This worker no longer owns the job (it was requeued and maybe claimed by another)."""


def host_key() -> str:
    """This machine and PID namespace: a worker with the same key and a dead pid is dead."""
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    return f"{socket.gethostname()}|{ns}"[:200]


def pid_alive(pid: int) -> bool:
    """Whether a local process runs (a zombie, killed but not yet reaped, counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def job_info(job: t.Job) -> JobInfo:
    return from_row(JobInfo, job, claims=job.attempts)


# ---------------------------------------------------------------- workers


def register_worker(store: Store, worker_id: str, *, pid: Optional[int] = None) -> None:
    """Record a worker process (its heartbeat tells the UI a worker is alive)."""
    now = t.utcnow()
    with store.write() as s:
        row = s.get(t.Worker, worker_id)
        if row is None:
            add_worker(s, worker_id, pid or os.getpid())
        else:
            row.status, row.heartbeat_at, row.pid, row.hostname = "idle", now, pid or os.getpid(), host_key()


def add_worker(session: Session, worker_id: str, pid: int) -> None:
    """A new worker's row, idle and heartbeating now (inside the caller's transaction)."""
    now = t.utcnow()
    session.add(t.Worker(id=worker_id, hostname=host_key(), pid=pid, status="idle", started_at=now, heartbeat_at=now))


def start_worker_unless_alive(
    store: "Store | str | None", within_s: float, start: Callable[[], "tuple[str, int]"]
) -> Optional[int]:
    """Call `start` (it starts a worker process, returning its id and pid) unless a live worker heartbeats
    on the store, and record the new worker; returns its pid, or None when one was alive.

    The check and the new row are one serialised transaction, so concurrent callers start one worker."""
    st = resolve(store)
    with st.write() as s:
        if st.dialect == "postgresql":  # serialise callers the way BEGIN IMMEDIATE does on SQLite
            s.execute(text("SELECT pg_advisory_xact_lock(7264001)"))
        if alive_in(s, within_s):
            return None
        worker_id, pid = start()
        add_worker(s, worker_id, pid)
        return pid


def stop_worker(store: Store, worker_id: str) -> None:
    with store.write() as s:
        s.execute(update(t.Worker).where(t.Worker.id == worker_id).values(status="stopped", job_id=None))


def alive_in(session: Session, within_s: float) -> list[dict]:
    """Workers that heartbeated in the last `within_s` seconds, have not stopped and,
    when they run on this machine, still have a process."""
    since = t.utcnow() - timedelta(seconds=within_s)
    here = host_key()
    rows = session.execute(
        select(t.Worker).where(t.Worker.heartbeat_at >= since, t.Worker.status != "stopped")
    ).scalars()
    return [
        {
            "id": w.id,
            "pid": w.pid,
            "host": w.hostname,
            "status": w.status,
            "job_id": w.job_id,
            "heartbeat_at": w.heartbeat_at,
        }
        for w in rows
        if w.hostname != here or pid_alive(w.pid)
    ]


def alive_workers(*, within_s: float = 30.0, store: "Store | str | None" = None) -> list[dict]:
    """Live workers (see `alive_in`): the UI shows them and starts one when there is none."""
    with resolve(store).read() as s:
        return alive_in(s, within_s)


# ---------------------------------------------------------------- the queue


def enqueue_job(session: Session, kind: JobKind, *, run_id: Optional[int] = None, progress_total: int = 0) -> int:
    """Queue a job of `kind` (inside the caller's transaction, beside what it does); return its id."""
    if kind == JobKind.RUN:
        run = session.get(t.Run, run_id)
        progress_total = run.n_cases if run else 0
    job = t.Job(kind=kind, run_id=run_id, status=JobStatus.QUEUED, progress_total=progress_total)
    session.add(job)
    session.flush()
    return job.id


def _claimable(kind: JobKind, backends: Optional[Sequence[str]], run_id: Optional[int]) -> Any:
    """The oldest queued job of `kind` a worker with these `backends` (and pinned `run_id`) may take."""
    J = t.Job
    q = select(J).where(J.kind == kind, J.status == JobStatus.QUEUED).order_by(J.id).limit(1)
    if kind == JobKind.RUN:
        # A worker pinned to a run (it holds that run's own key) takes only that run's job; any other never
        # takes a run whose key was bound to it (`runs.key_bound`).
        q = q.join(t.Run, t.Run.id == J.run_id)
        q = q.where(t.Run.id == run_id) if run_id is not None else q.where(t.Run.key_bound.is_(False))
        if backends:
            q = q.where(t.Run.backend.in_(list(backends)))
    elif kind == JobKind.JUDGE:
        q = q.join(t.JudgeJob, t.JudgeJob.job_id == J.id)
        if backends:
            q = q.where(t.JudgeJob.backend.in_(list(backends)))
    else:
        q = q.join(t.AnalysisRequest, t.AnalysisRequest.job_id == J.id)
    return q.with_for_update(skip_locked=True, of=J)


def claim_job(
    store: Store,
    worker_id: str,
    kind: JobKind = JobKind.RUN,
    *,
    backends: Optional[Sequence[str]] = None,
    run_id: Optional[int] = None,
) -> Optional[JobInfo]:
    """Atomically take the oldest queued job of `kind` (optionally only on some backends).

    A job cancelled while queued ends here instead. A run job's progress is counted afresh from its stored
    trajectories and its run marked running.

    Returns:
        The claimed job, now `running` and owned by `worker_id`, or None when there is none.
    """
    now = t.utcnow()
    with store.write() as s:
        while True:
            job = s.execute(_claimable(kind, backends, run_id)).scalar_one_or_none()
            if job is None:
                return None
            run = s.get_one(t.Run, job.run_id) if job.run_id is not None else None
            if job.cancel_requested:
                job.status, job.finished_at = JobStatus.CANCELLED, now
                if run is not None:
                    run.status, run.finished_at = JobStatus.CANCELLED, now
                continue
            job.status, job.worker_id, job.attempts = JobStatus.RUNNING, worker_id, job.attempts + 1
            job.idle_claims = (job.idle_claims or 0) + 1
            job.claimed_at = job.heartbeat_at = now
            if run is None:  # a judge or analysis job starts afresh; a run job keeps its last requeue's note
                job.error = None
            else:
                done = s.execute(
                    select(func.count()).select_from(t.Trajectory).where(t.Trajectory.run_id == job.run_id)
                ).scalar_one()
                job.progress_done, job.progress_total = done, run.n_cases
                run.status = JobStatus.RUNNING
                run.started_at = run.started_at or now
            s.execute(update(t.Worker).where(t.Worker.id == worker_id).values(status="busy", job_id=job.id))
            s.flush()
            return job_info(job)


def heartbeat(store: Store, worker_id: str, job_id: Optional[int] = None) -> bool:
    """Refresh the worker's (and its job's) heartbeat. False when the job is no longer its own."""
    now = t.utcnow()
    owned = True
    with store.write() as s:
        # Rows are always locked in the order job, run, worker (here as in claim and finish),
        # or two transactions of one worker can deadlock on PostgreSQL.
        if job_id is not None:
            res: Any = s.execute(
                update(t.Job)
                .where(t.Job.id == job_id, t.Job.worker_id == worker_id, t.Job.status == JobStatus.RUNNING)
                .values(heartbeat_at=now)
            )
            owned = bool(changed_rows(res))
        s.execute(update(t.Worker).where(t.Worker.id == worker_id).values(heartbeat_at=now))
    return owned


def lock_owned_job(session: Session, job_id: int, worker_id: str) -> t.Job:
    """Lock the job row inside a write transaction and check this worker still owns it.

    Raises:
        LeaseLost: the job was requeued, cancelled or taken by another worker.
    """
    job = session.execute(select(t.Job).where(t.Job.id == job_id).with_for_update()).scalar_one_or_none()
    if job is None or job.worker_id != worker_id or job.status != JobStatus.RUNNING:
        raise LeaseLost(f"job {job_id} is no longer owned by worker {worker_id}")
    return job


def cancel_requested(store: Store, job_id: int) -> bool:
    with store.read() as s:
        return bool(s.execute(select(t.Job.cancel_requested).where(t.Job.id == job_id)).scalar())


def finish_job(
    store: Store,
    job_id: int,
    worker_id: str,
    status: JobStatus,
    *,
    error: Optional[str] = None,
    session: Optional[Session] = None,
) -> bool:
    """Mark an owned job done, failed or cancelled (a run job's run too). False if the lease was lost.

    With `session`, inside the caller's write transaction (what the job produced is stored with its end)."""
    assert status in FINAL_STATUSES
    if session is None:
        with store.write() as s:
            return finish_job(store, job_id, worker_id, status, error=error, session=s)
    now = t.utcnow()
    try:
        job = lock_owned_job(session, job_id, worker_id)
    except LeaseLost:
        return False
    job.status, job.finished_at, job.error = status, now, error
    if job.run_id is not None:
        run = session.get_one(t.Run, job.run_id)
        if status == JobStatus.DONE and run.n_done and run.n_error == run.n_done:
            # Nothing the model did was judged: the server or the harness failed on every case.
            status, error = (
                JobStatus.FAILED,
                error or f"all {run.n_done} cases errored (see their trajectories' errors)",
            )
        run.status, run.finished_at = status, now
        if error:
            run.error = error
    session.execute(update(t.Worker).where(t.Worker.id == worker_id).values(status="idle", job_id=None))
    return True


def release_job(store: Store, job_id: int, worker_id: str) -> None:
    """Hand an owned, unfinished job back to the queue (its worker is stopping).

    Raises:
        LeaseLost: the job is no longer this worker's.
    """
    with store.write() as s:
        owned = lock_owned_job(s, job_id, worker_id)
        owned.status, owned.worker_id, owned.heartbeat_at = JobStatus.QUEUED, None, None
        if owned.run_id is not None:
            s.execute(update(t.Run).where(t.Run.id == owned.run_id).values(status=JobStatus.QUEUED))


def cancel_job(session: Session, job: t.Job) -> str:
    """Ask a locked job to stop (inside the caller's transaction): a queued one is cancelled at once, a running
    one between its pieces of work. Returns its status after the request."""
    if job.status == JobStatus.QUEUED:
        job.status, job.finished_at, job.cancel_requested = JobStatus.CANCELLED, t.utcnow(), True
    elif job.status == JobStatus.RUNNING:
        job.cancel_requested = True
    return job.status


def lock_job(session: Session, job_id: int) -> Optional[t.Job]:
    return session.execute(select(t.Job).where(t.Job.id == job_id).with_for_update()).scalar_one_or_none()


def request_cancel(run_id: int, *, store: "Store | str | None" = None) -> str:
    """Ask a run to stop: a queued job is cancelled at once, a running one between cases.

    Returns:
        The job's status after the request ("cancelled", "running" (will stop) or a final status).
    """
    with resolve(store).write() as s:
        jobs = s.execute(select(t.Job).where(t.Job.run_id == run_id).with_for_update()).scalars().all()
        if not jobs:
            raise ValueError(f"run {run_id} has no job")
        status = jobs[-1].status
        for job in jobs:
            was = job.status
            if cancel_job(s, job) == JobStatus.CANCELLED and was == JobStatus.QUEUED:
                status = JobStatus.CANCELLED
        run = s.get_one(t.Run, run_id)
        if status == JobStatus.CANCELLED and run.status == JobStatus.QUEUED:
            run.status, run.finished_at = JobStatus.CANCELLED, t.utcnow()
        return status


def requeue_stale(store: Store, *, stale_after_s: float = 60.0, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> list[int]:
    """Put back in the queue the running jobs (of every kind) whose worker died.

    A worker is dead when its job's heartbeat is older than `stale_after_s`, or at once when it
    ran on this machine (same host and PID namespace) and its process is gone. A job whose
    claims stored nothing `max_attempts` times in a row fails instead of looping forever;
    one asked to stop ends cancelled.

    Returns:
        The ids of the jobs requeued.
    """
    now = t.utcnow()
    cutoff = now - timedelta(seconds=stale_after_s)
    here = host_key()
    requeued: list[int] = []
    with store.write() as s:
        rows = s.execute(
            select(t.Job, t.Worker)
            .outerjoin(t.Worker, t.Worker.id == t.Job.worker_id)
            .where(t.Job.status == JobStatus.RUNNING)
            .with_for_update(skip_locked=True, of=t.Job)
        ).all()
        for job, worker in rows:
            stale = job.heartbeat_at is None or job.heartbeat_at < cutoff
            dead_here = worker is not None and worker.hostname == here and not pid_alive(worker.pid)
            if not (stale or dead_here):
                continue
            who = job.worker_id
            # A worker still heartbeating lost only this job (a store outage mid-work): it stays alive.
            if worker is not None and (dead_here or worker.heartbeat_at is None or worker.heartbeat_at < cutoff):
                worker.status, worker.job_id = "stopped", None
            elif worker is not None and worker.job_id == job.id:
                worker.job_id = None
            run = s.get_one(t.Run, job.run_id) if job.run_id is not None else None
            if job.cancel_requested:  # it was asked to stop anyway
                job.status, job.finished_at, job.worker_id = JobStatus.CANCELLED, now, None
                if run is not None:
                    run.status, run.finished_at = JobStatus.CANCELLED, now
                continue
            if (job.idle_claims or 0) >= max_attempts:  # deaths on one piece of work end that piece, not the job
                job.status, job.finished_at = JobStatus.FAILED, now
                job.error = (
                    f"worker {who} stopped {job.idle_claims} times in a row before storing "
                    f"{'any case' if run is not None else 'anything'} "
                    "(while loading the model?); giving up"
                )
                if run is not None:
                    run.status, run.finished_at, run.error = JobStatus.FAILED, now, job.error
                continue
            job.status, job.worker_id, job.heartbeat_at = JobStatus.QUEUED, None, None
            job.error = f"requeued: worker {who} stopped heartbeating"
            if run is not None:
                run.status = JobStatus.QUEUED
            requeued.append(job.id)
    return requeued


def get_job(job_id: int, *, store: "Store | str | None" = None) -> Optional[JobInfo]:
    with resolve(store).read() as s:
        job = s.get(t.Job, job_id)
        return job_info(job) if job else None


def jobs_of_run(run_id: int, *, store: "Store | str | None" = None) -> list[JobInfo]:
    with resolve(store).read() as s:
        return [
            job_info(j) for j in s.execute(select(t.Job).where(t.Job.run_id == run_id).order_by(t.Job.id)).scalars()
        ]
