"""A run's cases on the queue: a run queued with its job, each start of a case counted, each finished case
written once, a run retried.

The job's queue state is `evalrx.store.queue`'s; these write what a run job produces, under its lease.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from evalrx.core.case import Label, Termination
from evalrx.store import schema as t
from evalrx.store.analyses import save_analyses
from evalrx.store.engine import Store, resolve
from evalrx.store.queue import enqueue_job, lock_owned_job
from evalrx.store.runs import create_run, save_step_pictures, save_trajectory
from evalrx.store.status import ACTIVE_STATUSES, JobKind, JobStatus


class AlreadyStored(RuntimeError):
    """A finished case whose trajectory the store already holds (it cannot happen while the job is owned)."""


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
    pictures: Optional[dict] = None,
) -> bool:
    """Write one finished case in one transaction, if this worker still owns the job: the trajectory, its
    images, analyses and diagnoses, the run's counters and the job's progress. Returns the cancel flag.

    Raises:
        LeaseLost: the job is no longer this worker's (nothing is written).
        AlreadyStored: the case is already stored (the transaction rolls back).
    """
    outcome = traj.outcome.value
    error = outcome == Label.ERROR or traj.terminated == Termination.ERROR
    try:
        with store.write() as s:
            owned = lock_owned_job(s, job_id, worker_id)
            tid = save_trajectory(s, run_id, case_row_id, traj, diagnoses=diagnoses)
            if pictures:
                save_step_pictures(s, tid, pictures)
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
    except IntegrityError as exc:  # the unique (run, case, attempt): never twice
        raise AlreadyStored(f"case row {case_row_id} of run {run_id} is already stored") from exc


def start_case(store: Store, run_id: int, case_row_id: int, attempt: int = 1) -> int:
    """Count one more start of a case's attempt (before it runs); returns its starts, this one included."""
    R = t.RunCase
    key = (R.run_id == run_id, R.case_row_id == case_row_id, R.attempt == attempt)
    with store.write() as s:
        s.execute(update(R).where(*key).values(starts=R.starts + 1))
        return s.execute(select(R.starts).where(*key)).scalar_one()


def queue_run(
    *,
    name: str,
    config: dict,
    cases: Sequence[Any],
    key_bound: bool = False,
    repeats: int = 1,
    store: "Store | str | None" = None,
) -> int:
    """Store a run (its fixed case list) and queue its job, in one transaction; returns the run id."""
    with resolve(store).write() as s:
        run_id = create_run(s, name=name, config=config, cases=cases, key_bound=key_bound, repeats=repeats)
        enqueue_job(s, JobKind.RUN, run_id=run_id)
    return run_id


def retry_run(run_id: int, *, errors: bool = True, store: "Store | str | None" = None) -> int:
    """Queue a new job for a run: its cases without a trajectory and, with `errors`, those that errored.

    An errored attempt (server, harness, a worker that died on it) is run again: its error trajectory
    is removed and its error kept in the run's meta (`retried`), its start count reset.

    Returns:
        The new job id.

    Raises:
        ValueError: no such run, or it already has a queued or running job.
    """
    with resolve(store).write() as s:
        run = s.get(t.Run, run_id)
        if run is None:
            raise ValueError(f"no run with id {run_id}")
        active = s.execute(select(t.Job.id).where(t.Job.run_id == run_id, t.Job.status.in_(ACTIVE_STATUSES))).first()
        if active is not None:
            raise ValueError(f"run {run_id} already has a queued or running job")
        if errors:
            T = t.Trajectory
            rows = s.execute(
                select(T.id, T.case_row_id, T.attempt, T.sample_id, T.error).where(
                    T.run_id == run_id, T.outcome == "error"
                )
            ).all()
            if rows:
                ids = [r.id for r in rows]
                # Their analysis requests go with them: no job is left pointing at nothing.
                asked = select(t.AnalysisRequest.job_id).where(t.AnalysisRequest.trajectory_id.in_(ids))
                s.execute(delete(t.Job).where(t.Job.id.in_(asked.scalar_subquery())))
                s.execute(delete(T).where(T.id.in_(ids)))
                for r in rows:
                    s.execute(
                        update(t.RunCase)
                        .where(
                            t.RunCase.run_id == run_id,
                            t.RunCase.case_row_id == r.case_row_id,
                            t.RunCase.attempt == r.attempt,
                        )
                        .values(starts=0)
                    )
                retried = list((run.meta or {}).get("retried") or [])
                retried.append(
                    {"at": t.utcnow().isoformat(), "errors": {r.sample_id: (r.error or "")[:500] for r in rows}}
                )
                run.meta = dict(run.meta or {}, retried=retried)
                run.n_done, run.n_error = run.n_done - len(rows), max(0, run.n_error - len(rows))
        run.status, run.finished_at, run.error = JobStatus.QUEUED, None, None
        return enqueue_job(s, JobKind.RUN, run_id=run_id)
