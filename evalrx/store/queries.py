"""The queries the pages make: runs, filtered trajectory lists, one trajectory, aggregates.

Lists paginate by keyset (`after=` the previous page's `next_cursor`), which stays fast
deep into a 100k-row table; `offset=` is there for page-number widgets.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Optional, Sequence

from sqlalchemy import Select, exists, func, or_, select, tuple_
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Session, aliased

from evalrx.core.failures import canonical_kind
from evalrx.core.scores import MARGIN_SCORE
from evalrx.store import convert
from evalrx.store import schema as t
from evalrx.store.diagnoses import diagnoses_in
from evalrx.store.engine import Store, resolve
from evalrx.store.labels import current_labels_in, tags_in
from evalrx.store.records import AgentShare, Page, RunInfo, RunStats, TrajectoryDetail, TrajectoryRow, from_row

SORTS = {
    "id": t.Trajectory.id,
    "created_at": t.Trajectory.created_at,
    "latency_ms": t.Trajectory.latency_ms,
    "n_steps": t.Trajectory.n_steps,
    "n_tool_calls": t.Trajectory.n_tool_calls,
    "completion_tokens": t.Trajectory.completion_tokens,
    "prompt_tokens": t.Trajectory.prompt_tokens,
    # the agent the diagnosis blames, "" for none (so keyset pages never compare a NULL)
    "diagnosis_agent": func.coalesce(t.Trajectory.diagnosis_agent, ""),
}

_ROW_COLUMNS = (
    t.Trajectory.id,
    t.Trajectory.run_id,
    t.Trajectory.case_row_id,
    t.Trajectory.sample_id,
    t.Trajectory.goal,
    t.Trajectory.final_answer,
    t.Trajectory.outcome,
    t.Trajectory.terminated,
    t.Trajectory.n_steps,
    t.Trajectory.n_tool_calls,
    t.Trajectory.n_parse_errors,
    t.Trajectory.latency_ms,
    t.Trajectory.prompt_tokens,
    t.Trajectory.completion_tokens,
    t.Trajectory.label,
    t.Trajectory.label_kind,
    t.Trajectory.created_at,
    t.Trajectory.diagnosis_kind,
    t.Trajectory.attempt,
    t.Trajectory.diagnosis_agent,
)
# Where a conversation failed its grade (`metrics["grade_turn"]`): read from the JSON for the rows of one page only.
_GRADE_TURN = t.Trajectory.metrics["grade_turn"].as_integer()


def _row(r: Any) -> TrajectoryRow:
    return TrajectoryRow(*r)


def _turn(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _as_list(v: Any) -> Optional[list]:
    if v is None:
        return None
    if isinstance(v, (list, tuple, set, frozenset)):
        return list(v)
    return [v]


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


FTS_PROBE = 1000  # above this many matches a term is common: LIKE finds a page sooner than the index
_FTS: dict = {}


def _has_fts(session: Any) -> bool:
    bind = session.get_bind()
    key = str(bind.engine.url)
    if key not in _FTS:
        _FTS[key] = (
            bind.dialect.name == "sqlite"
            and session.execute(sql_text("SELECT 1 FROM sqlite_master WHERE name = 'trajectory_fts'")).first()
            is not None
        )
    return _FTS[key]


def _text_condition(session: Any, needle: str) -> Any:
    """The search condition: the FTS5 trigram index for rare terms on SQLite, else LIKE.

    The trigram index answers a rare term at once but must list every match of a common
    one; LIKE over the rows in page order stops as soon as a page is full. A capped probe
    of the index tells which case this is.
    """
    T, X = t.Trajectory, t.TrajectoryText
    like = exists().where(X.trajectory_id == T.id, X.search_text.like(f"%{_escape_like(needle)}%", escape="\\"))
    if session is None or len(needle) < 3 or not _has_fts(session):
        return like
    phrase = '"' + needle.replace('"', '""') + '"'
    ids = (
        session.execute(
            sql_text("SELECT rowid FROM trajectory_fts WHERE trajectory_fts MATCH :p LIMIT :n"),
            {"p": phrase, "n": FTS_PROBE},
        )
        .scalars()
        .all()
    )
    return T.id.in_(ids) if len(ids) < FTS_PROBE else like


def filter_trajectories(
    q: Select,
    *,
    session: Any = None,
    run_id: "int | Sequence[int] | None" = None,
    outcome: "str | Sequence[str] | None" = None,
    label: "str | Sequence[str] | None" = None,
    label_kind: Optional[str] = None,
    terminated: "str | Sequence[str] | None" = None,
    tool: Optional[str] = None,
    agent: Optional[str] = None,
    tag: Optional[str] = None,
    text: Optional[str] = None,
    has_parse_error: Optional[bool] = None,
    sample_id: Optional[str] = None,
    diagnosis_kind: "str | Sequence[str] | None" = None,
    diagnosis_agent: Optional[str] = None,
    max_margin: Optional[float] = None,
    sources_disagree: Optional[bool] = None,
) -> Select:
    """Apply the Trajectories page's filters to a select over `trajectories`.

    `label` accepts "pass"/"fail"/"unknown", "none" (not labelled yet) or "any" (labelled).
    `text` is a case-insensitive substring of the goal, answer, model turns, calls and observations.
    `session` lets the SQLite text search use its index.
    `label_kind` keeps trajectories whose current human label names that failure kind;
    `diagnosis_kind` keeps trajectories whose top diagnosis is of that kind (e.g. "bad_arguments");
    `max_margin` keeps those whose smallest tool-decision margin (natural-log units) is below it;
    `sources_disagree` keeps those whose sources' best candidates differ in kind or first wrong step
    (False: those where they agree, or only one source spoke);
    `agent` keeps a team's trajectories in which that agent took a step; `diagnosis_agent` those whose top
    diagnosis blames that agent.
    """
    T = t.Trajectory
    runs = _as_list(run_id)
    if runs is not None:
        q = q.where(T.run_id == runs[0]) if len(runs) == 1 else q.where(T.run_id.in_(runs))
    outcomes = _as_list(outcome)
    if outcomes:
        q = q.where(T.outcome == outcomes[0]) if len(outcomes) == 1 else q.where(T.outcome.in_(outcomes))
    labels = _as_list(label)
    if labels:
        conds = []
        values = [v for v in labels if v not in ("none", "any")]
        if "none" in labels:
            conds.append(T.label.is_(None))
        if "any" in labels:
            conds.append(T.label.is_not(None))
        if values:
            conds.append(T.label.in_(values))
        q = q.where(or_(*conds))
    if label_kind:
        q = q.where(T.label_kind == canonical_kind(label_kind))  # an old key finds labels stored under its new one
    terms = _as_list(terminated)
    if terms:
        q = q.where(T.terminated == terms[0]) if len(terms) == 1 else q.where(T.terminated.in_(terms))
    if tool:
        q = q.where(exists().where(t.TrajectoryTool.trajectory_id == T.id, t.TrajectoryTool.tool == tool))
    if agent:
        q = q.where(exists().where(t.TrajectoryAgent.trajectory_id == T.id, t.TrajectoryAgent.agent == agent))
    if tag:
        q = q.where(
            exists()
            .where(t.TrajectoryTag.trajectory_id == T.id)
            .where(t.TrajectoryTag.tag_id == select(t.Tag.id).where(t.Tag.name == tag).scalar_subquery())
        )
    if text:
        q = q.where(_text_condition(session, text.lower()))
    if has_parse_error is not None:
        q = q.where(T.n_parse_errors > 0 if has_parse_error else T.n_parse_errors == 0)
    if sample_id is not None:
        q = q.where(T.sample_id == sample_id)
    kinds = _as_list(diagnosis_kind)
    if kinds:
        q = q.where(T.diagnosis_kind == kinds[0]) if len(kinds) == 1 else q.where(T.diagnosis_kind.in_(kinds))
    if diagnosis_agent:
        q = q.where(T.diagnosis_agent == diagnosis_agent)
    if max_margin is not None:
        S = t.TrajectoryScore
        q = q.where(exists().where(S.trajectory_id == T.id, S.name == MARGIN_SCORE, S.value < float(max_margin)))
    if sources_disagree is not None:
        cond = _sources_disagree()
        q = q.where(cond if sources_disagree else ~cond)
    return q


def _sources_disagree() -> Any:
    """Two sources of the trajectory whose best candidates (each source's first-ranked row in `diagnoses`)
    name another kind or another first wrong step; a null (nothing wrong, no step) differs from a value."""
    T, D = t.Trajectory, t.DiagnosisRow
    a, b, lower = aliased(D), aliased(D), aliased(D)

    def best(d: Any) -> Any:
        return ~exists().where(lower.trajectory_id == d.trajectory_id, lower.source == d.source, lower.rank < d.rank)

    return exists().where(
        a.trajectory_id == T.id,
        b.trajectory_id == T.id,
        a.source < b.source,
        or_(a.kind.is_distinct_from(b.kind), a.first_wrong_step.is_distinct_from(b.first_wrong_step)),
        best(a),
        best(b),
    )


def encode_cursor(value: Any, ident: int) -> str:
    if hasattr(value, "isoformat"):
        value = {"dt": value.isoformat()}
    return base64.urlsafe_b64encode(json.dumps([value, ident]).encode()).decode()


def _decode_cursor(cursor: str) -> tuple:
    try:
        value, ident = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except Exception:
        raise ValueError(f"bad page cursor {cursor!r}") from None
    if isinstance(value, dict) and "dt" in value:
        from datetime import datetime

        value = datetime.fromisoformat(value["dt"])
    return value, int(ident)


def list_trajectories(
    *,
    sort: str = "id",
    descending: bool = True,
    limit: int = 50,
    after: Optional[str] = None,
    offset: Optional[int] = None,
    with_total: bool = False,
    store: "Store | str | None" = None,
    **filters: Any,
) -> Page:
    """A filtered, sorted page of trajectory rows.

    Args:
        sort: one of `SORTS` ("id", "created_at", "latency_ms", "n_steps", ...); ties break by id.
        descending: newest / largest first.
        limit: rows per page.
        after: the `next_cursor` of the previous page (keyset pagination).
        offset: skip this many rows instead (page numbers; slower deep in a big table).
        with_total: also count every matching row (one more query).
        store: the store (default when None).
        **filters: see `filter_trajectories` (run_id, outcome, label, label_kind,
            terminated, tool, agent, tag, text, has_parse_error, sample_id, diagnosis_kind, diagnosis_agent, max_margin,
            sources_disagree).

    Returns:
        A `Page` of `TrajectoryRow`s with `next_cursor` set when more rows follow.
    """
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}; choose one of {sorted(SORTS)}")
    col, ident = SORTS[sort], t.Trajectory.id
    with resolve(store).read() as s:
        return _list(s, col, ident, sort, descending, limit, after, offset, with_total, filters)


def _list(
    s: Any,
    col: Any,
    ident: Any,
    sort: str,
    descending: bool,
    limit: int,
    after: Optional[str],
    offset: Optional[int],
    with_total: bool,
    filters: dict,
) -> Page:
    q = filter_trajectories(select(*_ROW_COLUMNS, _GRADE_TURN), session=s, **filters)
    if after:
        value, last_id = _decode_cursor(after)
        if sort == "id":
            q = q.where(ident < last_id if descending else ident > last_id)
        else:
            key = tuple_(col, ident)
            q = q.where(key < tuple_(value, last_id) if descending else key > tuple_(value, last_id))
    if sort == "id":
        order = [ident.desc() if descending else ident.asc()]
    else:
        order = [col.desc(), ident.desc()] if descending else [col.asc(), ident.asc()]
    q = q.order_by(*order).limit(limit + 1)
    if offset:
        q = q.offset(offset)
    found = s.execute(q).all()
    total = None
    if with_total:
        total = s.execute(
            filter_trajectories(select(func.count()).select_from(t.Trajectory), session=s, **filters)
        ).scalar_one()
    rows = [_row(r) for r in found[:limit]]
    cursor = None
    if len(found) > limit:
        last = rows[-1]
        value = getattr(last, sort) if sort != "id" else last.id
        cursor = encode_cursor("" if value is None else value, last.id)
    return Page(rows=rows, next_cursor=cursor, total=total)


def count_trajectories(*, store: "Store | str | None" = None, **filters: Any) -> int:
    """How many trajectories match the filters (see `filter_trajectories`)."""
    with resolve(store).read() as s:
        return s.execute(
            filter_trajectories(select(func.count()).select_from(t.Trajectory), session=s, **filters)
        ).scalar_one()


def offered_tools_in(session: Session, trajectory_id: int) -> list[dict]:
    """The tools a trajectory was offered (`Tool.describe()` dicts), in order."""
    return [
        dict(spec)
        for spec in session.execute(
            select(t.ToolSpec.spec)
            .join(t.OfferedTool, t.OfferedTool.tool_digest == t.ToolSpec.digest)
            .where(t.OfferedTool.trajectory_id == trajectory_id)
            .order_by(t.OfferedTool.position)
        ).scalars()
    ]


def trajectory_agents(trajectory_id: int, *, store: "Store | str | None" = None) -> "list[AgentShare]":
    """The agents that took a trajectory's steps, in order of appearance, with their steps and latency."""
    with resolve(store).read() as s:
        rows = s.execute(
            select(t.TrajectoryAgent.agent, t.TrajectoryAgent.n_steps, t.TrajectoryAgent.latency_ms, t.Step.idx)
            .join(
                t.Step,
                (t.Step.trajectory_id == t.TrajectoryAgent.trajectory_id) & (t.Step.agent == t.TrajectoryAgent.agent),
            )
            .where(t.TrajectoryAgent.trajectory_id == trajectory_id)
        ).all()
    first: dict = {}
    for agent, n, ms, idx in rows:
        if agent not in first or idx < first[agent][0]:
            first[agent] = (idx, AgentShare(agent, n, ms))
    return [share for _, share in sorted(first.values(), key=lambda x: x[0])]


def run_agents(
    run_id: "int | Sequence[int] | None" = None, *, store: "Store | str | None" = None
) -> "list[AgentShare]":
    """The agents that took part in a run's trajectories (or every run's), most steps first, with their steps and
    latency summed over the trajectories (the filter's choices and the per-agent figures)."""
    A, T = t.TrajectoryAgent, t.Trajectory
    q = select(A.agent, func.sum(A.n_steps), func.sum(A.latency_ms), func.count()).group_by(A.agent)
    runs = _as_list(run_id)
    if runs is not None:
        q = q.join(T, T.id == A.trajectory_id).where(T.run_id.in_(runs))
    with resolve(store).read() as s:
        rows = s.execute(q).all()
    shares = [AgentShare(a, int(n or 0), float(ms or 0.0), int(k)) for a, n, ms, k in rows]
    return sorted(shares, key=lambda x: (-x.n_steps, x.agent))


def blamed_agents(run_id: "int | Sequence[int] | None" = None, *, store: "Store | str | None" = None) -> "list[str]":
    """The agents the top diagnoses of a run's trajectories (or every run's) blame, most blamed first (the
    list's "Blamed agent" choices); none for single-agent runs."""
    T = t.Trajectory
    n = func.count()
    q = select(T.diagnosis_agent, n).where(T.diagnosis_agent.is_not(None)).group_by(T.diagnosis_agent)
    runs = _as_list(run_id)
    if runs is not None:
        q = q.where(T.run_id.in_(runs))
    with resolve(store).read() as s:
        rows = s.execute(q).all()
    return [str(a) for a, _ in sorted(rows, key=lambda r: (-r[1], r[0]))]


def get_trajectory(trajectory_id: int, *, store: "Store | str | None" = None) -> Optional[TrajectoryDetail]:
    """One trajectory with its steps, case, current labels, tags and analyses (None if absent)."""
    with resolve(store).read() as s:
        row = s.get(t.Trajectory, trajectory_id)
        if row is None:
            return None
        steps = (
            s.execute(select(t.Step).where(t.Step.trajectory_id == trajectory_id).order_by(t.Step.idx)).scalars().all()
        )
        case = s.get(t.Case, row.case_row_id)
        analyses = s.execute(
            select(t.Analysis.analyzer, t.Analysis.step_idx, t.Analysis.id)
            .where(t.Analysis.trajectory_id == trajectory_id)
            .order_by(t.Analysis.id)
        ).all()
        trajectory = convert.trajectory_from_rows(row, steps)
        trajectory.offered_tools = offered_tools_in(s, trajectory_id)
        return TrajectoryDetail(
            row=_row((*(getattr(row, c.key) for c in _ROW_COLUMNS), _turn((row.metrics or {}).get("grade_turn")))),
            trajectory=trajectory,
            case=convert.case_dict(case) if case else {},
            labels=current_labels_in(s, trajectory_id),
            tags=tags_in(s, trajectory_id),
            analyses=[tuple(a) for a in analyses],
            diagnoses=diagnoses_in(s, trajectory_id),
            step_ids=[st.id for st in steps],
        )


def find_trajectory(run_id: int, sample_id: str, *, store: "Store | str | None" = None) -> Optional[int]:
    """The id of a run's trajectory for a case's `sample_id` (the Compare page's link), or None."""
    with resolve(store).read() as s:
        return s.execute(
            select(t.Trajectory.id)
            .where(t.Trajectory.run_id == run_id, t.Trajectory.sample_id == sample_id)
            .order_by(t.Trajectory.id)
            .limit(1)
        ).scalar()


def _run_info(run: t.Run, job: Optional[t.Job]) -> RunInfo:
    return from_row(
        RunInfo,
        run,
        config=run.config or {},
        job_id=job.id if job else None,
        job_status=job.status if job else None,
        worker_id=job.worker_id if job else None,
        heartbeat_at=job.heartbeat_at if job else None,
        cancel_requested=bool(job.cancel_requested) if job else False,
        job_claims=job.attempts if job else 0,
    )


def list_runs(
    *, status: "str | Sequence[str] | None" = None, limit: int = 200, store: "Store | str | None" = None
) -> list[RunInfo]:
    """Runs, newest first, with their job's status, worker and heartbeat."""
    latest_job = select(func.max(t.Job.id).label("job_id"), t.Job.run_id).group_by(t.Job.run_id).subquery()
    q = (
        select(t.Run, t.Job)
        .outerjoin(latest_job, latest_job.c.run_id == t.Run.id)
        .outerjoin(t.Job, t.Job.id == latest_job.c.job_id)
        .order_by(t.Run.id.desc())
        .limit(limit)
    )
    statuses = _as_list(status)
    if statuses:
        q = q.where(t.Run.status.in_(statuses))
    with resolve(store).read() as s:
        return [_run_info(run, job) for run, job in s.execute(q).all()]


def get_run(run_id: int, *, store: "Store | str | None" = None) -> Optional[RunInfo]:
    """One run with its latest job, or None."""
    with resolve(store).read() as s:
        run = s.get(t.Run, run_id)
        if run is None:
            return None
        job = s.execute(
            select(t.Job).where(t.Job.run_id == run_id).order_by(t.Job.id.desc()).limit(1)
        ).scalar_one_or_none()
        return _run_info(run, job)


def _percentile(s: Any, run_id: int, n: int, p: float) -> Optional[float]:
    """Linear-interpolated percentile of a run's latencies, read off the (run_id, latency_ms) index."""
    if n == 0:
        return None
    pos = p * (n - 1)
    lo = int(pos)
    vals = (
        s.execute(
            select(t.Trajectory.latency_ms)
            .where(t.Trajectory.run_id == run_id)
            .order_by(t.Trajectory.latency_ms)
            .limit(2)
            .offset(lo)
        )
        .scalars()
        .all()
    )
    if len(vals) == 1 or pos == lo:
        return float(vals[0])
    return float(vals[0] + (vals[1] - vals[0]) * (pos - lo))


def run_stats(run_id: int, *, store: "Store | str | None" = None) -> RunStats:
    """Aggregates of one run: outcome, termination, label, label-kind and diagnosis-kind counts, success
    rate over graded cases, latency p50/p95, token totals, mean steps, tool usage."""
    T = t.Trajectory

    def counts(s: Any, col: Any) -> dict:
        rows = s.execute(select(col, func.count()).where(T.run_id == run_id).group_by(col)).all()
        return {(k if k is not None else "none"): int(v) for k, v in rows}

    with resolve(store).read() as s:
        outcomes = counts(s, T.outcome)
        n = sum(outcomes.values())
        sums = s.execute(
            select(
                func.coalesce(func.sum(T.prompt_tokens), 0),
                func.coalesce(func.sum(T.completion_tokens), 0),
                func.avg(T.n_steps),
                func.coalesce(func.sum(T.n_parse_errors), 0),
            ).where(T.run_id == run_id)
        ).one()
        tools = s.execute(
            select(t.TrajectoryTool.tool, func.count())
            .join(T, T.id == t.TrajectoryTool.trajectory_id)
            .where(T.run_id == run_id)
            .group_by(t.TrajectoryTool.tool)
        ).all()
        graded = outcomes.get("pass", 0) + outcomes.get("fail", 0)
        return RunStats(
            run_id=run_id,
            n=n,
            outcomes=outcomes,
            terminated=counts(s, T.terminated),
            labels=counts(s, T.label),
            label_kinds={k: v for k, v in counts(s, T.label_kind).items() if k != "none"},
            diagnosis_kinds={k: v for k, v in counts(s, T.diagnosis_kind).items() if k != "none"},
            success_rate=outcomes.get("pass", 0) / graded if graded else None,
            latency_p50_ms=_percentile(s, run_id, n, 0.5),
            latency_p95_ms=_percentile(s, run_id, n, 0.95),
            prompt_tokens=int(sums[0]),
            completion_tokens=int(sums[1]),
            mean_steps=float(sums[2]) if sums[2] is not None else None,
            tool_calls={k: int(v) for k, v in tools},
            n_parse_errors=int(sums[3]),
        )


def matching_ids(*, store: "Store | str | None" = None, limit: Optional[int] = None, **filters: Any) -> list[int]:
    """Ids of every trajectory a list filter matches (what the Trajectories page exports), oldest first."""
    with resolve(store).read() as s:
        q = filter_trajectories(select(t.Trajectory.id), session=s, **filters).order_by(t.Trajectory.id)
        return list(s.execute(q.limit(limit) if limit else q).scalars())


def pending_cases(session: Any, run_id: int) -> list[tuple[int, int, int]]:
    """(position, case row id, attempt) of a run's attempts that have no trajectory yet: every case's first
    attempt in order, then every second attempt, ..."""
    T, R = t.Trajectory, t.RunCase
    return [
        tuple(r)
        for r in session.execute(
            select(R.position, R.case_row_id, R.attempt)
            .where(R.run_id == run_id)
            .where(~exists().where(T.run_id == run_id, T.case_row_id == R.case_row_id, T.attempt == R.attempt))
            .order_by(R.attempt, R.position)
        ).all()
    ]


def step_pictures(trajectory_id: int, *, store: "Store | str | None" = None) -> dict[int, list[str]]:
    """{step index: [blob sha256, ...]} for the images attached to a trajectory's steps."""
    q = (
        select(t.Step.idx, t.StepPicture.blob_sha256)
        .join(t.StepPicture, t.StepPicture.step_id == t.Step.id)
        .where(t.Step.trajectory_id == trajectory_id)
        .order_by(t.Step.idx, t.StepPicture.position)
    )
    out: dict[int, list[str]] = {}
    with resolve(store).read() as s:
        for idx, sha in s.execute(q):
            out.setdefault(int(idx), []).append(sha)
    return out


def shown_pictures(trajectory_id: int, *, store: "Store | str | None" = None) -> dict[int, list[bytes]]:
    """{step index: [image bytes, ...]} every picture a stored trajectory's conversation showed: the case image
    on its first user step, the images a tool returned on that tool's step (what a VLM's analyses read)."""
    with resolve(store).read() as s:
        row = s.get(t.Trajectory, trajectory_id)
        if row is None:
            return {}
        case = s.get(t.Case, row.case_row_id)
        prompt = s.execute(
            select(t.Step.idx)
            .where(t.Step.trajectory_id == trajectory_id, t.Step.role == "user")
            .order_by(t.Step.idx)
            .limit(1)
        ).scalar()
        rows = s.execute(
            select(t.Step.idx, t.Blob.data)
            .join(t.StepPicture, t.StepPicture.step_id == t.Step.id)
            .join(t.Blob, t.Blob.sha256 == t.StepPicture.blob_sha256)
            .where(t.Step.trajectory_id == trajectory_id)
            .order_by(t.Step.idx, t.StepPicture.position)
        ).all()
        out: dict[int, list[bytes]] = {}
        for idx, data in rows:
            out.setdefault(int(idx), []).append(bytes(data))
        if case is not None and case.image_sha256 and prompt is not None:
            blob = s.get(t.Blob, case.image_sha256)
            if blob is not None:  # the case's picture first, then any other the first user turn showed
                out[int(prompt)] = [bytes(blob.data), *out.get(int(prompt), [])]
    return out


def step_latency_sample(
    *, store: "Store | str | None" = None, run_ids: Optional[Sequence[int]] = None, limit: int = 20_000
) -> list[dict]:
    """Up to `limit` timed steps of the newest trajectories: role, tool_name, latency_ms, flags.

    A bounded sample keeps the Dashboard fast on a 100k-trajectory store.
    """
    T, S = t.Trajectory, t.Step
    recent = select(T.id).order_by(T.id.desc())
    if run_ids:
        recent = recent.where(T.run_id.in_(list(run_ids)))
    newest = recent.limit(max(1, limit // 3)).subquery()
    q = (
        select(S.role, S.tool_name, S.latency_ms, S.flags)
        .where(S.trajectory_id.in_(select(newest.c.id)), S.latency_ms.is_not(None))
        .limit(limit)
    )
    with resolve(store).read() as s:
        return [
            {"role": role, "tool_name": tool, "latency_ms": float(lat or 0.0), "flags": flags or ""}
            for role, tool, lat, flags in s.execute(q)
        ]


def runs_with_label_kinds(*, store: "Store | str | None" = None) -> dict[int, int]:
    """{run id: trajectories whose current label names a failure kind}, for every run that has one, newest first
    (the Dashboard adds them to its newest runs: a labelled run is never hidden for being old)."""
    T = t.Trajectory
    q = (
        select(T.run_id, func.count())
        .where(T.label_kind.is_not(None), T.label_kind != "none")
        .group_by(T.run_id)
        .order_by(T.run_id.desc())
    )
    with resolve(store).read() as s:
        return {int(r): int(n) for r, n in s.execute(q)}


def label_counts_by_annotator(
    *, store: "Store | str | None" = None, run_ids: Optional[Sequence[int]] = None
) -> list[dict]:
    """Current whole-trajectory labels per annotator and outcome."""
    L, T = t.LabelRow, t.Trajectory
    q = (
        select(L.annotator, L.outcome, func.count())
        .where(L.is_current, L.step_idx.is_(None))
        .group_by(L.annotator, L.outcome)
    )
    if run_ids:
        q = q.join(T, T.id == L.trajectory_id).where(T.run_id.in_(list(run_ids)))
    with resolve(store).read() as s:
        return [{"annotator": a or "(anonymous)", "outcome": o or "cleared", "n": int(n)} for a, o, n in s.execute(q)]
