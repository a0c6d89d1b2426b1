"""Diagnoses in the store: each trajectory's ranked diagnoses, the top kind indexed for filters and counts.

Computing a diagnosis is `evalrx.diagnosis`'s job (the worker and imports call it before
writing); recomputing stored ones is `evalrx.runner.rediagnose`. This module only reads and writes.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from sqlalchemy import case, delete, func, insert, select, update
from sqlalchemy.orm import Session

from evalrx.core.failures import Diagnosis
from evalrx.store import convert
from evalrx.store import schema as t
from evalrx.store.engine import Store, resolve


def save_diagnoses(session: Session, trajectory_id: int, diagnoses: Sequence[Diagnosis], *, version: int = 1) -> None:
    """Replace a trajectory's diagnoses with `diagnoses` (best first), in the caller's transaction. To replace one
    source's candidates only, read the others with `diagnoses_in` in the same transaction and pass them too."""
    session.execute(delete(t.DiagnosisRow).where(t.DiagnosisRow.trajectory_id == trajectory_id))
    rows = [
        {
            "trajectory_id": trajectory_id,
            "rank": i,
            "kind": d.kind,
            "first_wrong_step": d.first_wrong_step,
            "evidence": convert.jsonable(d.evidence),
            "confidence": float(d.confidence),
            "source": d.source,
            "agent": convert.clean(d.agent),
            "version": version,
            "created_at": t.utcnow(),
        }
        for i, d in enumerate(diagnoses)
    ]
    if rows:
        session.execute(insert(t.DiagnosisRow.__table__), rows)
    top = diagnoses[0].kind if diagnoses else None
    blamed = convert.clean(diagnoses[0].agent) if diagnoses else None
    # A passing trajectory is never counted under a failure kind: a judge asked about it (`--all`) may still
    # name one, which is kept as its candidate (a false alarm to count), not as the trajectory's kind.
    T = t.Trajectory
    indexed = case((T.outcome == "pass", None), else_=top)
    agent = case((T.outcome == "pass", None), else_=blamed)
    session.execute(update(T).where(T.id == trajectory_id).values(diagnosis_kind=indexed, diagnosis_agent=agent))


def _from_row(r: t.DiagnosisRow) -> Diagnosis:
    return Diagnosis(
        kind=r.kind,
        first_wrong_step=r.first_wrong_step,
        evidence=dict(r.evidence or {}),
        confidence=float(r.confidence),
        source=r.source,
        agent=r.agent,
    )


def diagnoses_in(session: Session, trajectory_id: int) -> "list[Diagnosis]":
    rows = (
        session.execute(
            select(t.DiagnosisRow).where(t.DiagnosisRow.trajectory_id == trajectory_id).order_by(t.DiagnosisRow.rank)
        )
        .scalars()
        .all()
    )
    return [_from_row(r) for r in rows]


def update_diagnoses(
    trajectory_id: int,
    merge: "Callable[[list[Diagnosis]], Sequence[Diagnosis]]",
    *,
    version: int = 1,
    store: "Store | str | None" = None,
) -> None:
    """Replace a trajectory's diagnoses with `merge(stored)` in one write transaction (one source's candidates
    replaced, the others' kept: the caller's `merge` says which)."""
    with resolve(store).write() as s:
        save_diagnoses(s, trajectory_id, merge(diagnoses_in(s, trajectory_id)), version=version)


def get_diagnoses(trajectory_id: int, *, store: "Store | str | None" = None) -> "list[Diagnosis]":
    """A trajectory's stored diagnoses, best first ([] for a passing or not yet diagnosed one)."""
    with resolve(store).read() as s:
        return diagnoses_in(s, trajectory_id)


def failure_kind_counts(run_id: Optional[int] = None, *, store: "Store | str | None" = None) -> "dict[str, int]":
    """Trajectories by their top diagnosis's kind (one run, or all), most frequent first."""
    T = t.Trajectory
    with resolve(store).read() as s:
        q = select(T.diagnosis_kind, func.count()).where(T.diagnosis_kind.is_not(None)).group_by(T.diagnosis_kind)
        if run_id is not None:
            q = q.where(T.run_id == run_id)
        counts = {str(kind): n for kind, n in s.execute(q).all()}
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def undiagnosed(run_id: Optional[int] = None, *, store: "Store | str | None" = None) -> "list[int]":
    """Ids of graded trajectories (not passing) that have no stored diagnosis."""
    T = t.Trajectory
    with resolve(store).read() as s:
        q = select(T.id).where(T.outcome != "pass", T.diagnosis_kind.is_(None)).order_by(T.id)
        if run_id is not None:
            q = q.where(T.run_id == run_id)
        return list(s.execute(q).scalars())


__all__ = [
    "diagnoses_in",
    "failure_kind_counts",
    "get_diagnoses",
    "save_diagnoses",
    "undiagnosed",
    "update_diagnoses",
]
