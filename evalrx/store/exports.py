"""Trajectories as export rows: plain dicts of a trajectory with its case, grade, labels, tags, diagnosis (the
top one, and `diagnoses`: every source's candidate) and run, the one shape every export format (`evalrx.interop`)
is written from and `evalrx run --out` writes (`export_row`). Pictures go with them by hash, with their bytes:
the case's as `case.image`, the ones a tool returned as `images` on their step."""

from __future__ import annotations

import base64
from typing import Any, Iterator, Optional, Sequence

from sqlalchemy import select

from evalrx.core.case import FailureCase, Trajectory
from evalrx.core.content import sniff_mime
from evalrx.store import convert
from evalrx.store import schema as t
from evalrx.store.diagnoses import diagnoses_in
from evalrx.store.engine import Store, resolve
from evalrx.store.labels import history_in, tags_in

EXPORT_BATCH = 500


def export_picture(data: Any, mime: Optional[str] = None, sha: Optional[str] = None) -> dict:
    """A picture as an export carries it: its hash, its type (sniffed as the store does when not given) and its
    bytes (`data`: bytes, a path or a PIL image, as a tool returns one; stored as the store stores it)."""
    data = convert.image_bytes(data) or b""
    return {
        "sha256": sha or convert.sha256(data),
        "mime": mime or sniff_mime(data, "application/octet-stream"),
        "base64": base64.b64encode(data).decode(),
    }


def export_case(case: FailureCase) -> dict:
    """A case as an export row carries it (`case`): what the store keeps of it, and its picture."""
    data = convert.image_bytes(case.inputs.image)
    fields = convert.case_fields(case, None)
    out = {k: fields[k] for k in ("prompt", "expected", "grader", "meta")}
    return {"id": case.id, **out, **({"image": export_picture(data)} if data else {})}


def export_row(
    traj: Trajectory,
    case: dict,
    *,
    run: dict,
    diagnoses: Sequence[Any],
    labels: Sequence[dict] = (),
    tags: Sequence[str] = (),
    pictures: Optional[dict] = None,
) -> dict:
    """The one exported record of a trajectory: `evalrx export` writes it for stored ones, `evalrx run --out`
    for the ones it runs.

    Args:
        traj: the trajectory.
        case: its case as `export_case` gives it (`{"id", "prompt", "expected", "grader", "meta"}`, `image`).
        run: `{"name", "config"}` of its run.
        diagnoses: its diagnoses, best first (`evalrx.core.Diagnosis`).
        labels: its label history, as `LabelInfo.to_dict` gives each.
        tags: its tags.
        pictures: step idx -> the pictures (`export_picture`) its tool returned.
    """
    body = traj.to_dict()
    for step in body["steps"]:
        if pictures and step["idx"] in pictures:
            step["images"] = pictures[step["idx"]]
    return {
        "case_id": case["id"],
        "meta": case["meta"] or {},
        **body,
        "case": case,
        "labels": list(labels),
        "tags": list(tags),
        "run": run,
        "diagnosis": export_diagnosis(diagnoses),
        "diagnoses": [d.to_dict() for d in diagnoses],  # every source's candidate, best first
    }


def iter_export_rows(
    run_id: Optional[int],
    *,
    store: "Store | str | None" = None,
    with_ids: bool = False,
    trajectory_ids: Optional[Sequence[int]] = None,
) -> Iterator[dict]:
    """Export rows of a run, in the run's case order (attempts of a case together), or of chosen trajectories
    (any runs; `run_id` then narrows them to one);
    `with_ids` adds `_trajectory_id`, `_run_id` and `_created_at` (for the OTLP export's ids and times)."""
    st = resolve(store)
    with st.read() as s:
        if run_id is not None and s.get(t.Run, run_id) is None:
            raise ValueError(f"no run with id {run_id}")
        q = (
            select(t.Trajectory.id)
            .outerjoin(
                t.RunCase,
                (t.RunCase.run_id == t.Trajectory.run_id)
                & (t.RunCase.case_row_id == t.Trajectory.case_row_id)
                & (t.RunCase.attempt == t.Trajectory.attempt),
            )
            .order_by(t.Trajectory.run_id, t.RunCase.position, t.Trajectory.attempt, t.Trajectory.id)
        )
        if run_id is not None:
            q = q.where(t.Trajectory.run_id == run_id)
        if trajectory_ids is not None:
            q = q.where(t.Trajectory.id.in_(list(trajectory_ids)))
        ids = s.execute(q).scalars().all()
        runs_info: dict = {}
        for start in range(0, len(ids), EXPORT_BATCH):
            chunk = ids[start : start + EXPORT_BATCH]
            trajs = {r.id: r for r in s.execute(select(t.Trajectory).where(t.Trajectory.id.in_(chunk))).scalars()}
            steps: dict = {i: [] for i in chunk}
            for st_row in s.execute(
                select(t.Step).where(t.Step.trajectory_id.in_(chunk)).order_by(t.Step.trajectory_id, t.Step.idx)
            ).scalars():
                steps[st_row.trajectory_id].append(st_row)
            pictures: dict = {i: {} for i in chunk}  # trajectory -> step idx -> the pictures its tool returned
            for tid_, idx, sha, mime, data in s.execute(
                select(t.Step.trajectory_id, t.Step.idx, t.Blob.sha256, t.Blob.mime, t.Blob.data)
                .join(t.StepPicture, t.StepPicture.step_id == t.Step.id)
                .join(t.Blob, t.Blob.sha256 == t.StepPicture.blob_sha256)
                .where(t.Step.trajectory_id.in_(chunk))
                .order_by(t.Step.trajectory_id, t.Step.idx, t.StepPicture.position)
            ):
                pictures[tid_].setdefault(idx, []).append(export_picture(data, mime, sha))
            case_rows = {
                c.id: c
                for c in s.execute(select(t.Case).where(t.Case.id.in_({trajs[i].case_row_id for i in chunk}))).scalars()
            }
            offered: dict = {i: [] for i in chunk}
            for tid_, spec in s.execute(
                select(t.OfferedTool.trajectory_id, t.ToolSpec.spec)
                .join(t.ToolSpec, t.ToolSpec.digest == t.OfferedTool.tool_digest)
                .where(t.OfferedTool.trajectory_id.in_(chunk))
                .order_by(t.OfferedTool.trajectory_id, t.OfferedTool.position)
            ):
                offered[tid_].append(dict(spec))
            for tid in chunk:
                row = trajs[tid]
                if row.run_id not in runs_info:
                    run = s.get_one(t.Run, row.run_id)
                    runs_info[row.run_id] = {"name": run.name, "config": run.config or {}}
                case = case_rows[row.case_row_id]
                traj = convert.trajectory_from_rows(row, steps[tid])
                traj.offered_tools = offered[tid]
                case_out = convert.case_dict(case)
                sha = case_out.pop("image_sha256")
                if sha:
                    blob = s.get_one(t.Blob, sha)
                    case_out["image"] = export_picture(blob.data, blob.mime, sha)
                out = export_row(
                    traj,
                    case_out,
                    run=runs_info[row.run_id],
                    diagnoses=diagnoses_in(s, tid),
                    labels=[lab.to_dict() for lab in history_in(s, tid)],
                    tags=tags_in(s, tid),
                    pictures=pictures[tid],
                )
                if with_ids:
                    out["_trajectory_id"], out["_run_id"], out["_created_at"] = tid, row.run_id, row.created_at
                yield out
            s.expunge_all()  # rows of finished chunks need not stay in the session's identity map


def export_diagnosis(diagnoses: Sequence[Any]) -> dict:
    """The exported `diagnosis` object: the top diagnosis (`kind` None for a passing trajectory)."""
    if not diagnoses:
        return {"kind": None, "first_wrong_step": None, "evidence": {}, "confidence": 0.0, "source": None}
    return diagnoses[0].to_dict()


def current_label_rows(
    *, run_id: Optional[int] = None, trajectory_ids: Optional[Sequence[int]] = None, store: "Store | str | None" = None
) -> list:
    """The current labels (of a run, or of chosen trajectories) as tuples in `LABEL_COLUMNS` order."""
    L, T = t.LabelRow, t.Trajectory
    q = (
        select(
            L.trajectory_id,
            T.run_id,
            T.sample_id,
            T.attempt,
            L.outcome,
            L.failure_kind,
            L.first_wrong_step,
            L.step_idx,
            L.annotator,
            L.note,
            L.created_at,
            L.agent,
        )
        .join(T, T.id == L.trajectory_id)
        .where(L.is_current)
        .order_by(L.trajectory_id, L.step_idx)
    )
    if run_id is not None:
        q = q.where(T.run_id == run_id)
    if trajectory_ids is not None:
        q = q.where(L.trajectory_id.in_(list(trajectory_ids)))
    with resolve(store).read() as s:
        rows = s.execute(q).all()
    return list(rows)


LABEL_COLUMNS = (
    "trajectory_id",
    "run_id",
    "case_id",
    "attempt",
    "outcome",
    "failure_kind",
    "first_wrong_step",
    "step_idx",
    "annotator",
    "note",
    "created_at",
    "agent",
)
