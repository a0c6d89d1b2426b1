"""Read-only store queries the pages need that `evalrx.store` does not offer yet.

Kept small and in SQLAlchemy Core over `evalrx.store.schema`, so they can move into
`evalrx.store.queries` unchanged (asked for in the issue-5 report).
"""

from __future__ import annotations

from typing import Optional, Sequence

from sqlalchemy import func, select

from evalrx.store import schema as t


def step_media(trajectory_id: int, *, store) -> dict[int, list[str]]:
    """{step index: [blob sha256, ...]} for the images attached to a trajectory's steps."""
    q = (
        select(t.Step.idx, t.StepMedia.blob_sha256)
        .join(t.StepMedia, t.StepMedia.step_id == t.Step.id)
        .where(t.Step.trajectory_id == trajectory_id)
        .order_by(t.Step.idx, t.StepMedia.position)
    )
    out: dict[int, list[str]] = {}
    with store.read() as s:
        for idx, sha in s.execute(q):
            out.setdefault(int(idx), []).append(sha)
    return out


def step_latency_sample(
    *, store, run_ids: Optional[Sequence[int]] = None, limit: int = 20_000
) -> list[dict]:
    """Up to `limit` timed steps (newest trajectories first): role, tool, latency_ms.

    A bounded sample keeps the Dashboard fast on a 100k-trajectory store.
    """
    T, S = t.Trajectory, t.Step
    recent = select(T.id).order_by(T.id.desc())
    if run_ids:
        recent = recent.where(T.run_id.in_(list(run_ids)))
    recent = recent.limit(max(1, limit // 3)).subquery()
    q = (
        select(S.role, S.tool_name, S.latency_ms, S.flags)
        .where(S.trajectory_id.in_(select(recent.c.id)), S.latency_ms.is_not(None))
        .limit(limit)
    )
    with store.read() as s:
        rows = s.execute(q).all()
    out = []
    for role, tool, lat, flags in rows:
        kind = "model" if role == "actor" else "tool"
        out.append({"role": kind, "tool": (tool or "(none)") if role == "tool" else (f"→ {tool}" if tool else "→ answer"),
                    "latency_ms": float(lat), "flags": flags or ""})
    return out


def label_counts_by_annotator(*, store, run_ids: Optional[Sequence[int]] = None) -> list[dict]:
    """Current whole-trajectory labels per annotator (for the Dashboard)."""
    L, T = t.LabelRow, t.Trajectory
    q = (
        select(L.annotator, L.outcome, func.count())
        .where(L.is_current, L.step_idx.is_(None))
        .group_by(L.annotator, L.outcome)
    )
    if run_ids:
        q = q.join(T, T.id == L.trajectory_id).where(T.run_id.in_(list(run_ids)))
    with store.read() as s:
        return [{"annotator": a or "(anonymous)", "outcome": o or "cleared", "n": int(n)} for a, o, n in s.execute(q)]
