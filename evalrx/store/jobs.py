"""The job queue on the store: claim, heartbeat, progress, cancel, requeue of dead workers.

Claims are atomic: on SQLite the claiming transaction holds the write lock from its
`BEGIN IMMEDIATE`; on PostgreSQL `SELECT ... FOR UPDATE SKIP LOCKED` lets many workers
claim different jobs at once without waiting on each other.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any, Optional, Sequence

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from evalrx.core.case import Label, Termination
from evalrx.store import schema as t
from evalrx.store.analyses import save_analyses
from evalrx.store.engine import Store, changed_rows, resolve
from evalrx.store.records import JobInfo
from evalrx.store.runs import save_step_media, save_trajectory
from evalrx.store.status import FINAL_STATUSES, JobStatus

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


def _info(job: t.Job) -> JobInfo:
    return JobInfo(
        id=job.id,
        run_id=job.run_id,
        status=job.status,
        worker_id=job.worker_id,
        claims=job.attempts,
        progress_done=job.progress_done,
        progress_total=job.progress_total,
        cancel_requested=job.cancel_requested,
        heartbeat_at=job.heartbeat_at,
        error=job.error,
    )


def enqueue_job(session: Session, run_id: int) -> int:
    """Queue a job for a run (inside the caller's transaction); return the job id."""
    run = session.get(t.Run, run_id)
    job = t.Job(run_id=run_id, status=JobStatus.QUEUED, progress_total=run.n_cases if run else 0)
    session.add(job)
    session.flush()
    return job.id


def register_worker(store: Store, worker_id: str, *, pid: Optional[int] = None) -> None:
    """Record a worker process (its heartbeat tells the UI a worker is alive)."""
    now = t.utcnow()
    with store.write() as s:
        row = s.get(t.Worker, worker_id)
        if row is None:
            s.add(
                t.Worker(
                    id=worker_id,
                    hostname=host_key(),
                    pid=pid or os.getpid(),
                    status="idle",
                    started_at=now,
                    heartbeat_at=now,
                )
            )
        else:
            row.status, row.heartbeat_at, row.pid, row.hostname = "idle", now, pid or os.getpid(), host_key()


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


def claim_next(
    store: Store, worker_id: str, *, backends: Optional[Sequence[str]] = None, run_id: Optional[int] = None
) -> Optional[JobInfo]:
    """Atomically take the oldest queued job (optionally only for some backends).

    A worker pinned to a run (`run_id`, it holds that run's own key) takes only that run's job;
    any other worker never takes a run whose key was bound to it (`runs.key_bound`).

    Returns:
        The claimed job, now `running` and owned by `worker_id`, or None when the queue is empty.
    """
    now = t.utcnow()
    with store.write() as s:
        while True:
            q = (
                select(t.Job)
                .join(t.Run, t.Run.id == t.Job.run_id)
                .where(t.Job.status == JobStatus.QUEUED)
                .order_by(t.Job.id)
                .limit(1)
            )
            q = q.where(t.Run.id == run_id) if run_id is not None else q.where(t.Run.key_bound.is_(False))
            if backends:
                q = q.where(t.Run.backend.in_(list(backends)))
            job = s.execute(q.with_for_update(skip_locked=True, of=t.Job)).scalar_one_or_none()
            if job is None:
                return None
            run = s.get_one(t.Run, job.run_id)
            if job.cancel_requested:
                job.status, job.finished_at = JobStatus.CANCELLED, now
                run.status, run.finished_at = JobStatus.CANCELLED, now
                continue
            done = s.execute(
                select(func.count()).select_from(t.Trajectory).where(t.Trajectory.run_id == job.run_id)
            ).scalar_one()
            job.status, job.worker_id, job.attempts = JobStatus.RUNNING, worker_id, job.attempts + 1
            job.idle_claims = (job.idle_claims or 0) + 1
            job.claimed_at = job.heartbeat_at = now
            job.progress_done, job.progress_total = done, run.n_cases
            run.status = JobStatus.RUNNING
            run.started_at = run.started_at or now
            s.execute(update(t.Worker).where(t.Worker.id == worker_id).values(status="busy", job_id=job.id))
            s.flush()
            return _info(job)


def heartbeat(store: Store, worker_id: str, job_id: Optional[int] = None) -> bool:
    """Refresh the worker's (and its job's) heartbeat. False when the job is no longer its own."""
    now = t.utcnow()
    owned = True
    with store.write() as s:
        # Rows are always locked in the order job, run, worker (here as in claim_next and
        # finish_job), or two transactions of one worker can deadlock on PostgreSQL.
        if job_id is not None:
            res = s.execute(
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


def finish_job(store: Store, job_id: int, worker_id: str, status: JobStatus, *, error: Optional[str] = None) -> bool:
    """Mark an owned job (and its run) done, failed or cancelled. False if the lease was lost."""
    assert status in FINAL_STATUSES
    now = t.utcnow()
    with store.write() as s:
        try:
            job = lock_owned_job(s, job_id, worker_id)
        except LeaseLost:
            return False
        job.status, job.finished_at, job.error = status, now, error
        run = s.get_one(t.Run, job.run_id)
        if status == JobStatus.DONE and run.n_done and run.n_error == run.n_done:
            # Nothing the model did was judged: the server or the harness failed on every case.
            status, error = (
                JobStatus.FAILED,
                error or f"all {run.n_done} cases errored (see their trajectories' errors)",
            )
        run.status, run.finished_at = status, now
        if error:
            run.error = error
        s.execute(update(t.Worker).where(t.Worker.id == worker_id).values(status="idle", job_id=None))
        return True


def request_cancel(run_id: int, *, store: "Store | str | None" = None) -> str:
    """Ask a run to stop: a queued job is cancelled at once, a running one between cases.

    Returns:
        The job's status after the request ("cancelled", "running" (will stop) or a final status).
    """
    now = t.utcnow()
    with resolve(store).write() as s:
        jobs = s.execute(select(t.Job).where(t.Job.run_id == run_id).with_for_update()).scalars().all()
        if not jobs:
            raise ValueError(f"run {run_id} has no job")
        status = jobs[-1].status
        for job in jobs:
            if job.status == JobStatus.QUEUED:
                job.status, job.finished_at, job.cancel_requested = JobStatus.CANCELLED, now, True
                status = JobStatus.CANCELLED
            elif job.status == JobStatus.RUNNING:
                job.cancel_requested = True
        run = s.get_one(t.Run, run_id)
        if status == JobStatus.CANCELLED and run.status == JobStatus.QUEUED:
            run.status, run.finished_at = JobStatus.CANCELLED, now
        return status


def requeue_stale(store: Store, *, stale_after_s: float = 60.0, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> list[int]:
    """Put back in the queue the running jobs whose worker died.

    A worker is dead when its heartbeat is older than `stale_after_s`, or at once when it
    ran on this machine (same host and PID namespace) and its process is gone. A job that
    has already been attempted `max_attempts` times fails instead of looping forever.

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
            if worker is not None:
                worker.status, worker.job_id = "stopped", None
            run = s.get_one(t.Run, job.run_id)
            if job.cancel_requested:  # it was asked to stop anyway
                job.status, job.finished_at, job.worker_id = JobStatus.CANCELLED, now, None
                run.status, run.finished_at = JobStatus.CANCELLED, now
                continue
            if (job.idle_claims or 0) >= max_attempts:  # deaths on a case end that case, not the job
                job.status, job.finished_at = JobStatus.FAILED, now
                job.error = (
                    f"worker {who} stopped {job.idle_claims} times in a row before storing any case "
                    "(while loading the model?); giving up"
                )
                run.status, run.finished_at, run.error = JobStatus.FAILED, now, job.error
                continue
            job.status, job.worker_id, job.heartbeat_at = JobStatus.QUEUED, None, None
            job.error = f"requeued: worker {who} stopped heartbeating"
            run.status = JobStatus.QUEUED
            requeued.append(job.id)
    return requeued


def record_case(
    store: Store,
    job_id: int,
    worker_id: str,
    run_id: int,
    case_row_id: int,
    traj: Any,
    *,
    diagnoses: Sequence[Any] = (),
    records: Sequence[Any] = (),
    media: Optional[dict] = None,
) -> bool:
    """Write one finished case in one transaction, if this worker still owns the job: the trajectory, its
    images, analyses and diagnoses, the run's counters and the job's progress. Returns the cancel flag.

    Raises:
        LeaseLost: the job is no longer this worker's (nothing is written).
        IntegrityError: the case is already stored (the transaction rolls back).
    """
    outcome = traj.outcome.value
    error = outcome == Label.ERROR or traj.terminated == Termination.ERROR
    with store.write() as s:
        owned = lock_owned_job(s, job_id, worker_id)
        tid = save_trajectory(s, run_id, case_row_id, traj, diagnoses=diagnoses)
        if media:
            save_step_media(s, tid, media)
        save_analyses(s, tid, records)
        s.execute(
            update(t.Run)
            .where(t.Run.id == run_id)
            .values(
                n_done=t.Run.n_done + 1,
                n_pass=t.Run.n_pass + (1 if outcome == "pass" else 0),
                n_fail=t.Run.n_fail + (1 if outcome == "fail" else 0),
                n_error=t.Run.n_error + (1 if error else 0),
            )
        )
        owned.progress_done = owned.progress_done + 1
        owned.idle_claims = 0  # this claim stored a case: deaths so far were the case's, not the job's
        owned.heartbeat_at = t.utcnow()
        return bool(owned.cancel_requested)


def release_job(store: Store, job_id: int, worker_id: str) -> None:
    """Hand an owned, unfinished job back to the queue (its worker is stopping)."""
    with store.write() as s:
        owned = lock_owned_job(s, job_id, worker_id)
        owned.status, owned.worker_id, owned.heartbeat_at = JobStatus.QUEUED, None, None
        s.execute(update(t.Run).where(t.Run.id == owned.run_id).values(status=JobStatus.QUEUED))


def start_case(store: Store, run_id: int, case_row_id: int, attempt: int = 1) -> int:
    """Count one more start of a case's attempt (before it runs); returns its starts, this one included."""
    R = t.RunCase
    key = (R.run_id == run_id, R.case_row_id == case_row_id, R.attempt == attempt)
    with store.write() as s:
        s.execute(update(R).where(*key).values(starts=R.starts + 1))
        return s.execute(select(R.starts).where(*key)).scalar_one()


def get_job(job_id: int, *, store: "Store | str | None" = None) -> Optional[JobInfo]:
    with resolve(store).read() as s:
        job = s.get(t.Job, job_id)
        return _info(job) if job else None


def jobs_of_run(run_id: int, *, store: "Store | str | None" = None) -> list[JobInfo]:
    with resolve(store).read() as s:
        return [_info(j) for j in s.execute(select(t.Job).where(t.Job.run_id == run_id).order_by(t.Job.id)).scalars()]
