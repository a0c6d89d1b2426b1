"""Writing runs, cases, trajectories, blobs and analyses.

Functions taking a `session` run inside the caller's transaction (so the worker can write
a whole case atomically); the ones taking `store=` open their own write transaction.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from evalrx.config import MODEL_CONFIG_FIELDS, RUN_CONFIG_FIELDS, RUNTIME_SETTINGS, RunConfig, RuntimeConfig
from evalrx.core.case import FailureCase, Trajectory
from evalrx.core.content import sniff_mime
from evalrx.core.secrets import has_env_reference, is_secret_name
from evalrx.store import convert
from evalrx.store import schema as t
from evalrx.store.diagnoses import save_diagnoses
from evalrx.store.engine import Store, changed_rows, dialect_insert, insert_ignore, resolve
from evalrx.store.labels import restore_labels, tag_in_session
from evalrx.store.queries import pending_cases
from evalrx.store.status import JobStatus


def put_blob(session: Session, data: bytes, mime: Optional[str] = None) -> str:
    """Store bytes once (by SHA-256) and return the hash."""
    digest = convert.sha256(data)
    values = {
        "sha256": digest,
        "mime": mime or sniff_mime(data, "application/octet-stream"),  # other bytes are kept as they are
        "size": len(data),
        "data": data,
        "created_at": t.utcnow(),
    }
    insert_ignore(session, t.Blob, values, ["sha256"])
    return digest


def get_blob(sha256: str, *, store: "Store | str | None" = None) -> Optional[tuple[bytes, str]]:
    """The (bytes, mime) of a stored blob, or None."""
    with resolve(store).read() as s:
        row = s.get(t.Blob, sha256)
        return (bytes(row.data), row.mime) if row else None


def upsert_case(session: Session, case: FailureCase) -> int:
    """Return the id of the `cases` row with this case's content, inserting it if new."""
    return upsert_cases(session, [case])[0]


_IN_CHUNK = 500  # values in one SQL `IN (...)`: well under SQLite's and PostgreSQL's parameter limits


def upsert_cases(session: Session, cases: Sequence[FailureCase]) -> list:
    """The ids of the `cases` rows with these cases' contents, in order, inserting the new ones together
    (a few statements for many cases: an import's batch)."""
    rows: dict = {}  # digest -> fields, first seen first
    digests = []
    for case in cases:
        data = convert.image_bytes(case.inputs.image)
        image_sha = put_blob(session, data) if data is not None else None
        fields = convert.case_fields(case, image_sha)
        rows.setdefault(fields["digest"], fields)
        digests.append(fields["digest"])
    ids = _case_ids(session, list(rows))
    missing = [rows[d] for d in rows if d not in ids]
    if missing:
        dialect = session.get_bind().dialect.name
        if dialect in ("postgresql", "sqlite"):
            insert_for = dialect_insert(dialect)
            stmt = insert_for(t.Case.__table__).on_conflict_do_nothing(index_elements=["digest"])
            session.execute(stmt, missing)
        else:  # pragma: no cover - other databases are not supported targets
            for fields in missing:
                insert_ignore(session, t.Case, fields, ["digest"])
        ids.update(_case_ids(session, [f["digest"] for f in missing]))
    return [ids[d] for d in digests]


def _case_ids(session: Session, digests: Sequence[str]) -> dict:
    found: dict = {}
    for i in range(0, len(digests), _IN_CHUNK):
        q = select(t.Case.digest, t.Case.id).where(t.Case.digest.in_(digests[i : i + _IN_CHUNK]))
        found.update((digest, case_id) for digest, case_id in session.execute(q).all())
    return found


# Query parameters that carry credentials in URLs people paste (`?api-key=`, `?token=`, signed URLs).
_SECRET_PARAM = re.compile(r"(key|token|secret|passw|auth|signature|sig|credential|session|cookie)", re.I)


def clean_url(url: Any) -> Any:
    """A URL without `user:password@` and without query parameters that look like credentials."""
    if not isinstance(url, str) or "://" not in url:
        return url
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = urlencode(
        [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not _SECRET_PARAM.search(k)]
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def config_dict(run_config: Any) -> dict:
    """A RunConfig (or dict) as a JSON dict, with anything that looks like a secret removed (imports' configs)."""
    import dataclasses

    if isinstance(run_config, RunConfig):
        data = run_config.to_dict()
    elif dataclasses.is_dataclass(run_config) and not isinstance(run_config, type):
        data = dataclasses.asdict(run_config)
    else:
        data = dict(run_config or {})
    return convert.jsonable(_strip_secrets(data))


def queued_config(run_config: Any, runtime: Optional[dict] = None) -> dict:
    """What a queued run stores: only the allowed keys of the RunConfig and the runtime, URLs cleaned.

    Raises:
        ValueError: naming a runtime setting that is not stored (an API key goes through the
            environment, never the store).
    """
    # An allow-list (RunConfig's and ModelConfig's fields), so a header, token or key never gets in.
    cfg = {k: v for k, v in config_dict(run_config).items() if k in RUN_CONFIG_FIELDS}
    cfg["model"] = {k: v for k, v in (cfg.get("model") or {}).items() if k in MODEL_CONFIG_FIELDS}
    rt = {**(cfg.get("runtime") or {}), **(runtime or {})}
    RuntimeConfig.from_dict(rt)  # an unknown setting: one line naming the known ones
    rt = {k: v for k, v in rt.items() if k in RUNTIME_SETTINGS}
    if rt:
        cfg["runtime"] = convert.jsonable(_strip_secrets(rt))
    else:
        cfg.pop("runtime", None)
    for holder in (cfg, cfg.get("runtime") or {}):
        if holder.get("base_url"):
            holder["base_url"] = clean_url(holder["base_url"])
    return cfg


def _strip_secrets(value: Any) -> Any:
    if isinstance(value, dict):
        # A secret-named container (an MCP server's `headers`) is searched, not dropped: what it holds that
        # is secret goes, an environment variable's name (`${VAR}`, `Bearer ${VAR}`) stays.
        out = {}
        for k, v in value.items():
            if is_secret_name(k) and not isinstance(v, dict) and not has_env_reference(v):
                continue
            kept = _strip_secrets(v)
            if is_secret_name(k) and isinstance(v, dict) and not kept:
                continue  # nothing but secrets inside: the container goes too
            out[k] = kept
        return out
    if isinstance(value, list):
        return [_strip_secrets(v) for v in value]
    return clean_url(value) if isinstance(value, str) and "://" in value else value


def _short_text(value: Any, limit: int) -> Optional[str]:
    """A short text column's value from a config entry that may be anything (an import's config is its file's)."""
    return (
        None
        if value is None
        else convert.clean(value if isinstance(value, str) else convert.canonical_json(value))[:limit]
    )


def create_run(
    session: Session,
    *,
    name: str = "",
    config: Any = None,
    cases: Sequence[FailureCase] = (),
    source: str = "queue",
    status: JobStatus = JobStatus.QUEUED,
    meta: Optional[dict] = None,
    key_bound: bool = False,
    repeats: int = 1,
) -> int:
    """Insert a run and its ordered work list, each case once per attempt (1..repeats); return the run id.

    `n_cases` counts attempts. (An import adds its cases and attempts as it reads them: `io._RunWriter`.)
    """
    cfg = config_dict(config)
    given = cfg.get("model")
    model: dict = given if isinstance(given, dict) else {}
    run = t.Run(
        name=name,
        status=status,
        source=source,
        spec_key=_short_text(model.get("name") or cfg.get("spec"), 200),
        backend=_short_text(model.get("backend") or cfg.get("backend"), 32),
        config=cfg,
        meta=convert.jsonable(meta or {}),
        n_cases=len(cases) * repeats,
        key_bound=key_bound,
    )
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1 (got {repeats})")
    session.add(run)
    session.flush()
    seen: dict = {}
    rows = []
    for pos, case in enumerate(cases):
        case_row_id = upsert_case(session, case)
        if case_row_id in seen:
            raise ValueError(f"case {case.id!r} appears twice in the run (positions {seen[case_row_id]} and {pos})")
        seen[case_row_id] = pos
        rows += [
            {"run_id": run.id, "case_row_id": case_row_id, "attempt": a, "position": pos} for a in range(1, repeats + 1)
        ]
    if rows:
        session.execute(insert(t.RunCase), rows)
    return run.id


def save_trajectory(
    session: Session,
    run_id: int,
    case_row_id: int,
    traj: Trajectory,
    *,
    labels: Iterable[dict] = (),
    tags: Iterable[str] = (),
    diagnoses: Sequence[Any] = (),
) -> int:
    """Insert one trajectory with its steps, tools used and diagnoses; return its id.

    The (run, case, attempt) triple is unique: a second insert raises `IntegrityError`, which
    rolls the caller's transaction back. `labels` are label dicts (as exported) to
    restore, oldest first; `diagnoses` are `Diagnosis` objects, best first.
    """
    item = NewTrajectory(run_id, case_row_id, traj, labels=list(labels), tags=list(tags), diagnoses=list(diagnoses))
    return save_trajectories(session, [item])[0]


@dataclass
class NewTrajectory:
    """One trajectory to insert (`save_trajectories`): its run, case row, and what goes with it.

    `prepare` converts it to rows; called early (an import calls it as each record arrives), a record
    that cannot be stored fails at that record, not at the batch it is written with.
    """

    run_id: int
    case_row_id: int
    traj: Trajectory
    labels: list = field(default_factory=list)
    tags: list = field(default_factory=list)
    diagnoses: list = field(default_factory=list)
    pictures: dict = field(default_factory=dict)  # step idx -> the picture bytes its tool returned
    rows: Optional[dict] = None

    def prepare(self) -> "NewTrajectory":
        if self.rows is None:
            steps = self.traj.steps
            self.rows = {
                "fields": convert.trajectory_fields(self.traj),
                "text": convert.search_text(self.traj),
                "steps": [convert.step_fields(s) for s in steps],
                "tools": convert.tools_used(steps),
                "agents": convert.agents_of(steps),
            }
        return self


def save_trajectories(session: Session, items: Sequence[NewTrajectory]) -> list:
    """Insert trajectories with their steps, tools used and diagnoses; return their ids, in order.

    Many trajectories take the same few statements as one (an import writes them in batches): the
    trajectories in one INSERT .. RETURNING (ids in parameter order), their texts, steps and tools in
    one executemany each. Core inserts, since the ORM's bulk insert splits rows whose NULL columns
    differ into separate statements.
    """
    if not items:
        return []
    table = t.Trajectory.__table__
    prepared = [i.prepare().rows or {} for i in items]
    rows = [dict(r["fields"], run_id=i.run_id, case_row_id=i.case_row_id) for r, i in zip(prepared, items)]
    ids = list(session.execute(insert(table).returning(table.c.id, sort_by_parameter_order=True), rows).scalars())
    session.execute(
        insert(t.TrajectoryText.__table__),
        [{"trajectory_id": tid, "search_text": r["text"]} for tid, r in zip(ids, prepared)],
    )
    steps = [dict(step, trajectory_id=tid) for tid, r in zip(ids, prepared) for step in r["steps"]]
    if steps:
        session.execute(insert(t.Step.__table__), steps)
    tools = [{"trajectory_id": tid, "tool": n} for tid, r in zip(ids, prepared) for n in r["tools"]]
    if tools:
        session.execute(insert(t.TrajectoryTool.__table__), tools)
    agents = [dict(a, trajectory_id=tid) for tid, r in zip(ids, prepared) for a in r["agents"]]
    if agents:
        session.execute(insert(t.TrajectoryAgent.__table__), agents)
    for tid, i in zip(ids, items):
        if i.traj.offered_tools:
            save_offered_tools(session, tid, i.traj.offered_tools)
        if i.pictures:
            save_step_pictures(session, tid, i.pictures)
        if i.diagnoses:
            save_diagnoses(session, tid, i.diagnoses)
        if i.labels:
            restore_labels(session, tid, i.labels)
        for tag in i.tags:
            tag_in_session(session, tid, tag)
    return ids


def save_offered_tools(session: Session, trajectory_id: int, tools: Sequence[dict]) -> None:
    """Record the tools a trajectory was offered, in order; each description is stored once by digest."""
    rows = []
    for pos, spec in enumerate(tools):
        spec = convert.jsonable(dict(spec))
        digest = hashlib.sha256(convert.canonical_json(spec).encode("utf-8")).hexdigest()
        values = {
            "digest": digest,
            "name": str(spec.get("name") or "")[:300],
            "source": str(spec.get("source") or "builtin")[:16],
            "origin": str(spec.get("origin") or "")[:500],
            "spec": spec,
        }
        insert_ignore(session, t.ToolSpec, values, ["digest"])
        rows.append({"trajectory_id": trajectory_id, "position": pos, "tool_digest": digest})
    session.execute(insert(t.OfferedTool.__table__), rows)


def save_step_pictures(session: Session, trajectory_id: int, images: dict) -> None:
    """Attach images (bytes, by step index) to a trajectory's steps, each stored once by hash."""
    ids = dict(
        session.execute(
            select(t.Step.idx, t.Step.id).where(t.Step.trajectory_id == trajectory_id, t.Step.idx.in_(list(images)))
        ).all()
    )
    rows = []
    for idx, blobs in images.items():
        for pos, data in enumerate(blobs):
            rows.append({"step_id": ids[idx], "position": pos, "blob_sha256": put_blob(session, data)})
    if rows:
        session.execute(insert(t.StepPicture.__table__), rows)


def load_analyses(
    trajectory_id: int,
    analyzer: Optional[str] = None,
    *,
    step_idx: Optional[int] = None,
    store: "Store | str | None" = None,
) -> list[dict]:
    """A trajectory's analyses: dicts with analyzer, step_idx, meta and `arrays` (numpy)."""
    with resolve(store).read() as s:
        q = select(t.Analysis).where(t.Analysis.trajectory_id == trajectory_id)
        if analyzer is not None:
            q = q.where(t.Analysis.analyzer == analyzer)
        if step_idx is not None:
            q = q.where(t.Analysis.step_idx == step_idx)
        found = s.execute(q.order_by(t.Analysis.id)).scalars().all()
        ids = [a.id for a in found]
        arrays: dict = {i: {} for i in ids}
        if ids:
            for arr in s.execute(select(t.AnalysisArray).where(t.AnalysisArray.analysis_id.in_(ids))).scalars():
                arrays[arr.analysis_id][arr.name] = convert.decode_array(arr.dtype, arr.shape, bytes(arr.data))
        return [
            {"id": a.id, "analyzer": a.analyzer, "step_idx": a.step_idx, "meta": a.meta, "arrays": arrays[a.id]}
            for a in found
        ]


def delete_run(run_id: int, *, store: "Store | str | None" = None) -> bool:
    """Delete a run with its jobs (its judge jobs and its trajectories' analysis requests too), trajectories,
    steps, labels and analyses. False if absent."""
    with resolve(store).write() as s:
        judged = select(t.JudgeJob.job_id).where(t.JudgeJob.run_id == run_id)
        analysed = (
            select(t.AnalysisRequest.job_id)
            .join(t.Trajectory, t.Trajectory.id == t.AnalysisRequest.trajectory_id)
            .where(t.Trajectory.run_id == run_id)
        )
        s.execute(delete(t.Job).where(t.Job.id.in_(judged.union(analysed).scalar_subquery())))
        res = s.execute(delete(t.Run).where(t.Run.id == run_id))
        return bool(changed_rows(res))


def rename_run(run_id: int, name: str, *, store: "Store | str | None" = None) -> None:
    with resolve(store).write() as s:
        s.execute(update(t.Run).where(t.Run.id == run_id).values(name=name))


def run_config(run_id: int, *, store: "Store | str | None" = None) -> dict:
    """A run's stored config (raises ValueError for an unknown run)."""
    with resolve(store).read() as s:
        run = s.get(t.Run, run_id)
        if run is None:
            raise ValueError(f"no run with id {run_id}")
        return dict(run.config or {})


def update_run_meta(run_id: int, *, store: "Store | str | None" = None, **meta: Any) -> None:
    """Merge `meta` into a run's meta (e.g. the model's load time)."""
    with resolve(store).write() as s:
        run = s.get_one(t.Run, run_id)
        run.meta = convert.jsonable(dict(run.meta or {}, **meta))


def case_starts(session: Session, run_id: int) -> dict:
    """{(case id, attempt): starts} of a run's work list."""
    R = t.RunCase
    return {
        (c, a): n for c, a, n in session.execute(select(R.case_row_id, R.attempt, R.starts).where(R.run_id == run_id))
    }


def stored_run(run_id: int, *, store: "Store | str | None" = None) -> RunConfig:
    """A run's stored config as the `RunConfig` it was queued as (an imported run's, as far as it says)."""
    return RunConfig.from_dict(run_config(run_id, store=store))


def pending_work(run_id: int, *, store: "Store | str | None" = None) -> "tuple[RunConfig, list, dict]":
    """What a worker needs to run a job: (run config, [(case id, attempt, FailureCase with image bytes)] of the
    attempts without a trajectory, in run order, {(case id, attempt): starts so far})."""
    with resolve(store).read() as s:
        run = RunConfig.from_dict(s.get_one(t.Run, run_id).config, strict=True)  # a run to run: nothing dropped
        todo = pending_cases(s, run_id)
        rows = {c.id: c for c in s.execute(select(t.Case).where(t.Case.id.in_({cid for _, cid, _ in todo}))).scalars()}
        shas = {r.image_sha256 for r in rows.values() if r.image_sha256}
        blobs = (
            {b.sha256: bytes(b.data) for b in s.execute(select(t.Blob).where(t.Blob.sha256.in_(shas))).scalars()}
            if shas
            else {}
        )
        # Each attempt gets its own case object: tools and the worker may change it while it runs.
        cases = [
            (cid, attempt, convert.case_from_row(rows[cid], blobs.get(rows[cid].image_sha256 or "")))
            for _, cid, attempt in todo
        ]
        return run, cases, case_starts(s, run_id)


def trajectory_ids(run_id: Optional[int] = None, *, store: "Store | str | None" = None) -> "list[int]":
    """Ids of every trajectory (of one run), oldest first."""
    with resolve(store).read() as s:
        q = select(t.Trajectory.id).order_by(t.Trajectory.id)
        if run_id is not None:
            q = q.where(t.Trajectory.run_id == run_id)
        return list(s.execute(q).scalars())
