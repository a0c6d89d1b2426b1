"""Human labels (append-only history) and tags.

A label is about a whole trajectory (`step_idx=None`) or one step. Setting a label
inserts a new row and marks the previous current one `superseded_by` it, so every
edit keeps the value it replaced. The trajectory's current whole-trajectory label is
copied onto the trajectory row, in the same transaction, for the list filters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Optional, Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from evalrx.core.case import Label, agent_name
from evalrx.core.failures import canonical_kind
from evalrx.store import convert
from evalrx.store import schema as t
from evalrx.store.engine import Store, changed_rows, insert_ignore, resolve
from evalrx.store.records import LabelInfo, from_row
from evalrx.store.taxonomy import ensure_kind

OUTCOMES = tuple(l.value for l in Label)


def _info(row: t.LabelRow) -> LabelInfo:
    return from_row(LabelInfo, row)


def _slot(q: Any, step_idx: Optional[int]) -> Any:
    return q.where(t.LabelRow.step_idx.is_(None) if step_idx is None else t.LabelRow.step_idx == step_idx)


def _set_in_session(
    session: Session,
    trajectory_id: int,
    *,
    outcome: Optional[str],
    failure_kind: Optional[str],
    first_wrong_step: Optional[int],
    note: Optional[str],
    annotator: Optional[str],
    step_idx: Optional[int],
    created_at: Optional[datetime] = None,
    is_current: bool = True,
    agent: Optional[str] = None,
) -> t.LabelRow:
    # Locks the trajectory on PostgreSQL so two annotators' edits serialise (SQLite: BEGIN IMMEDIATE).
    traj = session.execute(
        select(t.Trajectory).where(t.Trajectory.id == trajectory_id).with_for_update()
    ).scalar_one_or_none()
    if traj is None:
        raise ValueError(f"no trajectory with id {trajectory_id}")
    if isinstance(outcome, Label):
        outcome = outcome.value
    if outcome is not None and outcome not in OUTCOMES:
        raise ValueError(f"label outcome must be one of {OUTCOMES}, got {outcome!r}")
    for name, idx in (("first_wrong_step", first_wrong_step), ("step_idx", step_idx)):
        if idx is not None and not 0 <= int(idx) < max(traj.n_steps, 1):
            raise ValueError(f"{name}={idx} is outside the trajectory's steps 0..{traj.n_steps - 1}")

    previous = None
    if is_current:
        previous = session.execute(
            _slot(select(t.LabelRow).where(t.LabelRow.trajectory_id == trajectory_id), step_idx).where(
                t.LabelRow.is_current
            )
        ).scalar_one_or_none()
        if previous is not None:
            previous.is_current = False
            session.flush()  # the partial unique index allows one current row per slot
    row = t.LabelRow(
        trajectory_id=trajectory_id,
        step_idx=step_idx,
        outcome=outcome,
        failure_kind=canonical_kind(convert.clean(failure_kind)) or None,  # old keys read as current ones
        first_wrong_step=first_wrong_step,
        note=convert.clean(note) or None,
        annotator=convert.clean(annotator) or None,
        agent=convert.clean(agent_name(agent)),
        is_current=is_current,
        created_at=created_at or t.utcnow(),
    )
    session.add(row)
    session.flush()
    if previous is not None:
        previous.superseded_by = row.id
    if step_idx is None and is_current:
        traj.label = outcome
        traj.label_kind = row.failure_kind
        traj.labelled_at = row.created_at
    session.flush()
    return row


def set_label(
    trajectory_id: int,
    outcome: "str | Label | None" = None,
    *,
    failure_kind: Optional[str] = None,
    first_wrong_step: Optional[int] = None,
    note: Optional[str] = None,
    annotator: Optional[str] = None,
    step_idx: Optional[int] = None,
    agent: Optional[str] = None,
    store: "Store | str | None" = None,
) -> LabelInfo:
    """Label a trajectory (or one of its steps); the previous label stays in the history.

    Args:
        trajectory_id: the trajectory.
        outcome: "pass", "fail", "unknown" or None (clears the verdict, keeps history).
        failure_kind: a failure kind from the taxonomy (an old key is stored as its current one), free text allowed.
        first_wrong_step: index of the first step that went wrong.
        note: free text.
        annotator: who labelled.
        step_idx: label one step instead of the whole trajectory.
        agent: in a team, the agent the person blames.
        store: the store (default store when None).

    Returns:
        The new current label.

    Raises:
        ValueError: unknown trajectory, bad outcome, or a step index out of range.
    """
    with resolve(store).write() as s:
        row = _set_in_session(
            s,
            trajectory_id,
            outcome=outcome,
            failure_kind=failure_kind,
            first_wrong_step=first_wrong_step,
            note=note,
            annotator=annotator,
            step_idx=step_idx,
            agent=agent,
        )
        return _info(row)


def label_history(trajectory_id: int, *, step_idx: Any = "all", store: "Store | str | None" = None) -> list[LabelInfo]:
    """Every label row of a trajectory, oldest first (`step_idx`: "all", None or a step index)."""
    with resolve(store).read() as s:
        q = select(t.LabelRow).where(t.LabelRow.trajectory_id == trajectory_id)
        if step_idx != "all":
            q = _slot(q, step_idx)
        return [_info(r) for r in s.execute(q.order_by(t.LabelRow.id)).scalars()]


def current_labels(trajectory_id: int, *, store: "Store | str | None" = None) -> list[LabelInfo]:
    """The current labels of a trajectory: the whole-trajectory one first, then per step."""
    with resolve(store).read() as s:
        return current_labels_in(s, trajectory_id)


def current_labels_in(session: Session, trajectory_id: int) -> list[LabelInfo]:
    rows = session.execute(
        select(t.LabelRow)
        .where(t.LabelRow.trajectory_id == trajectory_id, t.LabelRow.is_current)
        .order_by(t.LabelRow.step_idx.is_not(None), t.LabelRow.step_idx)
    ).scalars()
    return [_info(r) for r in rows]


def history_in(session: Session, trajectory_id: int) -> list[LabelInfo]:
    rows = session.execute(
        select(t.LabelRow).where(t.LabelRow.trajectory_id == trajectory_id).order_by(t.LabelRow.id)
    ).scalars()
    return [_info(r) for r in rows]


def restore_labels(session: Session, trajectory_id: int, labels: Iterable[dict]) -> None:
    """Replay exported label history (oldest first), keeping times and annotators.

    Each row supersedes the previous one of its slot, exactly as the edits did.
    """
    for d in labels:
        created = d.get("created_at")
        if isinstance(created, str):
            created = datetime.fromisoformat(created)
        _set_in_session(
            session,
            trajectory_id,
            outcome=d.get("outcome"),
            failure_kind=d.get("failure_kind"),
            first_wrong_step=d.get("first_wrong_step"),
            note=d.get("note"),
            annotator=d.get("annotator"),
            step_idx=d.get("step_idx"),
            created_at=created,
            agent=d.get("agent"),
        )


@dataclass(frozen=True)
class LabelTarget:
    """A trajectory a label from a file may land on: how it is known (run, case id, attempt), its number
    of steps, and (when asked) which step each source message became: {1-based message index: step idx}."""

    trajectory_id: int
    run_id: int
    sample_id: str
    attempt: int
    n_steps: int
    messages: "dict[int, int]" = field(default_factory=dict)
    agents: "list[str]" = field(default_factory=list)  # the team's agents that took steps (none: one agent)
    spans: "dict[str, int]" = field(default_factory=dict)  # trace span id -> the step it came from or stands for

    def agent_named(self, name: Optional[str]) -> Optional[str]:
        """The team's agent a label's `name` means (its spelling here, case aside); None for a one-agent
        trajectory, where no agent is blamed; an unknown name as given."""
        if name is None or not self.agents:
            return None
        return next((a for a in self.agents if a.lower() == name.lower()), name)


_CHUNK = 500  # ids per IN (...) list


def label_targets(
    *,
    sample_ids: Iterable[str] = (),
    trajectory_ids: Iterable[int] = (),
    run_id: Optional[int] = None,
    messages: bool = False,
    store: "Store | str | None" = None,
) -> list[LabelTarget]:
    """The trajectories of these case ids (every attempt, in every run unless `run_id`) and of these
    trajectory ids, ordered by run and attempt; `messages` also reads each step's source message index
    (`span["message"]`, set by the chat-transcript imports) and the trace spans each step came from or stands
    for (`span["span_id"]`, `span["spans"]`: the trace imports). Raises ValueError for an unknown run."""
    T = t.Trajectory
    cols = (T.id, T.run_id, T.sample_id, T.attempt, T.n_steps)
    with resolve(store).read() as s:
        if run_id is not None and s.get(t.Run, run_id) is None:
            raise ValueError(f"no run with id {run_id}")
        found: dict = {}
        for column, keys in ((T.sample_id, sorted(set(map(str, sample_ids)))), (T.id, sorted(set(trajectory_ids)))):
            for start in range(0, len(keys), _CHUNK):
                q = select(*cols).where(column.in_(keys[start : start + _CHUNK]))
                if run_id is not None:
                    q = q.where(T.run_id == run_id)
                for r in s.execute(q):
                    found[r[0]] = LabelTarget(r[0], r[1], r[2], r[3], r[4])
        if messages:
            ids = sorted(found)
            for start in range(0, len(ids), _CHUNK):
                steps_q = (
                    select(t.Step.trajectory_id, t.Step.idx, t.Step.span)
                    .where(t.Step.trajectory_id.in_(ids[start : start + _CHUNK]))
                    .order_by(t.Step.trajectory_id, t.Step.idx)  # the first step that names a message keeps it
                )
                for tid, idx, span in s.execute(steps_q):
                    msg = (span or {}).get("message")
                    if isinstance(msg, int) and not isinstance(msg, bool):
                        found[tid].messages.setdefault(msg, idx)
                    for sid in [(span or {}).get("span_id"), *((span or {}).get("spans") or [])]:
                        if isinstance(sid, str):
                            found[tid].spans.setdefault(sid, idx)
        ids = sorted(found)
        for start in range(0, len(ids), _CHUNK):
            agents_q = select(t.TrajectoryAgent.trajectory_id, t.TrajectoryAgent.agent).where(
                t.TrajectoryAgent.trajectory_id.in_(ids[start : start + _CHUNK])
            )
            for tid, agent in s.execute(agents_q):
                found[tid].agents.append(agent)
    return sorted(found.values(), key=lambda x: (x.run_id, x.sample_id, x.attempt, x.trajectory_id))


def set_labels(labels: Sequence[dict], *, store: "Store | str | None" = None) -> "tuple[list[bool], list[str]]":
    """Store many labels in one transaction (all or none): each a dict of `set_label`'s fields plus
    `trajectory_id` and an optional `created_at`. A kind the taxonomy lacks is added to it as a custom
    kind; a label equal to its slot's current one (same outcome, kind, step, note and annotator) is
    skipped, so importing the same file again adds no history.

    Returns:
        (for each label, whether it was written; the kinds added to the taxonomy).

    Raises:
        ValueError: an unknown trajectory, a bad outcome, kind or step (nothing is written then).
    """
    written: list = []
    added: list = []
    with resolve(store).write() as s:
        for d in labels:
            kind = canonical_kind(convert.clean(d.get("failure_kind"))) or None
            if kind is not None and s.get(t.FailureKindRow, kind) is None:
                added.append(ensure_kind(s, kind))
            step_idx = d.get("step_idx")
            current = s.execute(
                _slot(select(t.LabelRow).where(t.LabelRow.trajectory_id == d["trajectory_id"]), step_idx).where(
                    t.LabelRow.is_current
                )
            ).scalar_one_or_none()
            new = (
                d.get("outcome"),
                kind,
                d.get("first_wrong_step"),
                convert.clean(d.get("note")) or None,
                convert.clean(d.get("annotator")) or None,
                convert.clean(agent_name(d.get("agent"))),
            )
            if current is not None and new == (
                current.outcome,
                current.failure_kind,
                current.first_wrong_step,
                current.note,
                current.annotator,
                current.agent,
            ):
                written.append(False)
                continue
            _set_in_session(
                s,
                d["trajectory_id"],
                outcome=d.get("outcome"),
                failure_kind=kind,
                first_wrong_step=d.get("first_wrong_step"),
                note=d.get("note"),
                annotator=d.get("annotator"),
                step_idx=step_idx,
                created_at=d.get("created_at"),
                agent=d.get("agent"),
            )
            written.append(True)
    return written, added


# ---------------------------------------------------------------- tags


def tag_in_session(session: Session, trajectory_id: int, name: str) -> None:
    name = convert.clean(name.strip())[:100]
    if not name:
        raise ValueError("a tag needs a name")
    insert_ignore(session, t.Tag, {"name": name}, ["name"])
    tag_id = session.execute(select(t.Tag.id).where(t.Tag.name == name)).scalar_one()
    insert_ignore(
        session, t.TrajectoryTag, {"trajectory_id": trajectory_id, "tag_id": tag_id}, ["trajectory_id", "tag_id"]
    )


def add_tag(trajectory_id: int, name: str, *, store: "Store | str | None" = None) -> None:
    """Tag a trajectory (idempotent)."""
    with resolve(store).write() as s:
        if s.get(t.Trajectory, trajectory_id) is None:
            raise ValueError(f"no trajectory with id {trajectory_id}")
        tag_in_session(s, trajectory_id, name)


def remove_tag(trajectory_id: int, name: str, *, store: "Store | str | None" = None) -> bool:
    """Remove a tag from a trajectory; False when it did not have it."""
    with resolve(store).write() as s:
        tag_id = s.execute(select(t.Tag.id).where(t.Tag.name == name)).scalar()
        if tag_id is None:
            return False
        res = s.execute(
            delete(t.TrajectoryTag).where(
                t.TrajectoryTag.trajectory_id == trajectory_id, t.TrajectoryTag.tag_id == tag_id
            )
        )
        return bool(changed_rows(res))


def tags_in(session: Session, trajectory_id: int) -> list[str]:
    return list(
        session.execute(
            select(t.Tag.name)
            .join(t.TrajectoryTag, t.TrajectoryTag.tag_id == t.Tag.id)
            .where(t.TrajectoryTag.trajectory_id == trajectory_id)
            .order_by(t.Tag.name)
        ).scalars()
    )


def tags_of(trajectory_id: int, *, store: "Store | str | None" = None) -> list[str]:
    """A trajectory's tags, sorted."""
    with resolve(store).read() as s:
        return tags_in(s, trajectory_id)


def all_tags(*, store: "Store | str | None" = None) -> list[str]:
    """Every tag name in the store, sorted."""
    with resolve(store).read() as s:
        return list(s.execute(select(t.Tag.name).order_by(t.Tag.name)).scalars())


def label_kinds(*, store: "Store | str | None" = None) -> list[str]:
    """Failure kinds used in current labels, most used first (for the label form's choices)."""
    from sqlalchemy import func

    with resolve(store).read() as s:
        rows = s.execute(
            select(t.LabelRow.failure_kind, func.count())
            .where(t.LabelRow.is_current, t.LabelRow.failure_kind.is_not(None))
            .group_by(t.LabelRow.failure_kind)
            .order_by(func.count().desc(), t.LabelRow.failure_kind)
        ).all()
        return [str(r[0]) for r in rows]
