"""Import and export of trajectories.

Export writes a run as JSONL (one JSON object per trajectory: the core `Trajectory.to_dict()`
fields plus the case, the grade, the label history, tags, the diagnosis and the run's name and
config), Parquet (needs pyarrow), ATIF (one ATIF document a line, `evalrx.store.atif`) or
OpenTelemetry GenAI traces (OTLP JSON lines, optionally sent to a collector, `evalrx.store.otel`).

Import tells the format from the content, not the name: an Inspect AI `.eval` log (a zip),
an Inspect `.json` log, ATIF (a document, or JSONL of them), our JSONL (exports and the rows
`evalrx run --out` writes) or OpenAI chat-messages JSONL. Records are read one at a time within
`ImportLimits` and written as they come, all in one transaction: a bad record anywhere names
the file, the place and the problem, and the store is left as it was. The file's sha256 is kept
on the run, so importing the same bytes again is refused unless asked for.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from sqlalchemy import insert, select

from evalrx.core.case import FailureCase, Inputs, Label, Step, Trajectory
from evalrx.core.failures import Diagnosis
from evalrx.store import atif, convert, formats
from evalrx.store import schema as t
from evalrx.store.diagnoses import diagnoses_in
from evalrx.store.engine import Store, resolve
from evalrx.store.import_errors import (
    EncodingError,
    ImportFormatError,
    NestingTooDeepError,
    RecordTooLargeError,
    UnknownFormatError,
)
from evalrx.store.labels import history_in, tags_in
from evalrx.store.limits import UTF8_BOM, ImportLimits, check_size, parse_json, read_lines
from evalrx.store.runs import create_run, save_trajectory, upsert_case

EXPORT_BATCH = 500
EXPORT_FORMATS = ("jsonl", "parquet", "atif", "otel")
# How each import format is named to people (`ImportResult.format` holds the keys).
FORMAT_NAMES = {
    "evalrx": "evalrx JSONL",
    "openai": "OpenAI chat JSONL",
    "atif": "ATIF",
    "inspect": "Inspect .json log",
    "inspect-eval": "Inspect .eval log",
}

__all__ = [
    "EXPORT_FORMATS",
    "ImportFormatError",
    "ImportResult",
    "export_format",
    "export_run",
    "import_file",
    "iter_export_rows",
    "read_file",
]


@dataclass
class ImportResult:
    """What an import did.

    Attributes:
        run_ids: the new runs (or, when `already_imported`, the runs the same bytes made before).
        n_trajectories: trajectories written (0 when nothing was).
        format: the format read ("evalrx", "openai", "atif", "inspect", "inspect-eval"; "+"-joined for a mix).
        already_imported: the file's bytes were imported before and nothing was written.
        notes: things to tell the user (e.g. a log Inspect had not finished writing).
    """

    run_ids: list
    n_trajectories: int
    format: str
    already_imported: bool = False
    notes: list = field(default_factory=list)


@dataclass
class _Item:
    case: FailureCase
    traj: Trajectory
    where: Any
    labels: list = field(default_factory=list)
    tags: list = field(default_factory=list)
    run_name: Optional[str] = None
    run_config: Optional[dict] = None
    run_meta: Optional[dict] = None
    diagnoses: Optional[list] = None  # None: diagnose on import (model-free rules)


@dataclass
class _Reading:
    """What reading a file found besides its items: the formats seen and notes for the user."""

    kinds: set = field(default_factory=set)
    notes: list = field(default_factory=list)

    @property
    def format(self) -> str:
        return "+".join(sorted(self.kinds))


# ---------------------------------------------------------------- reading


def _our_row(row: dict) -> _Item:
    """An evalrx export row, or a row of `evalrx run --out`."""
    if "sample_id" not in row and "case_id" not in row:
        raise ValueError("the row has neither `sample_id` nor `case_id`")
    if not isinstance(row.get("steps"), list):
        raise ValueError("`steps` must be a list")
    data = dict(row)
    data.setdefault("sample_id", data.get("case_id"))
    for i, s in enumerate(data["steps"]):
        if not isinstance(s, dict):
            raise ValueError(f"step {i} is not an object")
        try:
            Step.from_dict(s)
        except KeyError as exc:
            raise ValueError(f"step {i} has no {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"step {i}: {exc}") from None
        if s.get("idx") != i:
            raise ValueError(f"step {i} has idx {s.get('idx')!r}; steps must be numbered 0, 1, 2, ... in order")
    if data.get("outcome") not in (None, *Label._value2member_map_):
        raise ValueError(f"outcome {data['outcome']!r} is not one of {', '.join(Label._value2member_map_)}")
    if data.get("metrics") is not None and not isinstance(data["metrics"], dict):
        raise ValueError("`metrics` must be an object")
    attempt = data.get("attempt")
    if attempt is not None and (isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1):
        raise ValueError(f"`attempt` must be a whole number from 1, not {attempt!r}")
    traj = Trajectory.from_dict(data)
    traj.sample_id = str(traj.sample_id)
    c = row.get("case")
    if c is not None and not isinstance(c, dict):
        raise ValueError("`case` must be an object")
    if c:
        image = None
        if isinstance(c.get("image"), dict) and c["image"].get("base64"):
            try:
                image = base64.b64decode(c["image"]["base64"], validate=True)
            except ValueError:
                raise ValueError("the case image is not valid base64") from None
        case = FailureCase(
            inputs=Inputs(prompt=str(c.get("prompt") or traj.goal), image=image),
            id=str(c.get("id") or row.get("case_id") or traj.sample_id),
            expected=c.get("expected"),
            grader=c.get("grader"),
            meta=dict(c.get("meta") or {}),
        )
    else:
        meta = row.get("meta")
        case = FailureCase(
            inputs=Inputs(prompt=traj.goal),
            id=str(row.get("case_id") or traj.sample_id),
            expected=traj.ground_truth,
            meta=dict(meta) if isinstance(meta, dict) else {},
        )
    labels = row.get("labels") or []
    if not isinstance(labels, list) or not all(isinstance(x, dict) for x in labels):
        raise ValueError("`labels` must be a list of objects")
    for i, lab in enumerate(labels):
        if lab.get("outcome") not in (None, *Label._value2member_map_):
            raise ValueError(f"label {i} has outcome {lab.get('outcome')!r}")
        for key in ("step_idx", "first_wrong_step"):
            v = lab.get(key)
            if v is not None and not (isinstance(v, int) and 0 <= v < max(len(traj.steps), 1)):
                raise ValueError(f"label {i}: {key}={v!r} is not a step of this trajectory")
    tags = row.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(x, str) and x.strip() for x in tags):
        raise ValueError("`tags` must be a list of non-empty strings")
    run = row.get("run") if isinstance(row.get("run"), dict) else {}
    diagnoses = None
    if row.get("diagnosis") is not None:
        diagnosis = Diagnosis.from_dict(row["diagnosis"])
        if diagnosis.first_wrong_step is not None and not 0 <= diagnosis.first_wrong_step < max(len(traj.steps), 1):
            raise ValueError(
                f"diagnosis first_wrong_step={diagnosis.first_wrong_step} is not a step of this trajectory"
            )
        diagnoses = [diagnosis] if diagnosis.kind else []
    return _Item(
        case=case,
        traj=traj,
        where=None,
        labels=labels,
        tags=tags,
        run_name=run.get("name"),
        run_config=run.get("config"),
        diagnoses=diagnoses,
    )


def _items(path: Path, limits: ImportLimits, reading: _Reading) -> Iterator[_Item]:
    """A file's trajectories one at a time, the format told from its first bytes and records."""
    from evalrx.store.inspect_eval import is_eval_zip

    with path.open("rb") as fh:
        magic = fh.read(4)
    if is_eval_zip(magic):
        yield from _read_eval(path, limits, reading)
        return
    with path.open("rb") as fh:
        lines = read_lines(fh, path, limits)
        first = next(((n, raw) for n, raw in lines if raw.strip()), None)
        if first is None:
            raise ImportFormatError(path, 1, "the file holds no trajectories")
        start = first[1].lstrip()
        if start.startswith(b"{") or start.startswith(UTF8_BOM + b"{"):
            try:
                obj = parse_json(first[1], path, first[0], limits, first=first[0] == 1, what="line")
            except (RecordTooLargeError, EncodingError, NestingTooDeepError):
                raise
            except ImportFormatError:  # not a whole JSON value: a document over many lines, or a broken JSONL line
                second = next((raw for _, raw in lines if raw.strip()), None)
                if second is not None and _is_object(second):
                    raise
            else:
                yield from _read_jsonl(path, chain([(first[0], first[1], obj)], lines), limits, reading)
                return
    yield from _read_document(path, limits, reading)


def _is_object(raw: bytes) -> bool:
    """Whether one line alone is a JSON object (then the file is JSONL, not one document over many lines)."""
    try:
        return isinstance(json.loads(raw), dict)
    except (ValueError, RecursionError):
        return False


def _read_jsonl(path: Path, lines: Iterable, limits: ImportLimits, reading: _Reading) -> Iterator[_Item]:
    """JSONL whose lines may be evalrx rows, OpenAI chat records, ATIF documents or one-line Inspect logs."""
    found = False
    repeats: dict = {}  # OpenAI records' case id -> attempts numbered so far (a repeated id is a next attempt)
    for entry in lines:
        lineno, raw, obj = entry if len(entry) == 3 else (*entry, None)
        if obj is None:
            if not raw.strip():
                continue
            obj = parse_json(raw, path, lineno, limits, first=lineno == 1, what="line")
        if not isinstance(obj, dict):
            raise ImportFormatError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
        if "eval" in obj and "samples" in obj:  # an Inspect .json log written on one line
            yield from _read_inspect_log(path, obj, reading)
            found = True
            continue
        try:
            if atif.is_atif(obj):
                item, kind = _our_row(atif.from_atif(obj)), "atif"
            elif "steps" in obj:
                item, kind = _our_row(obj), "evalrx"
            elif "messages" in obj:
                case, traj = formats.from_openai_row(obj, lineno)
                traj.attempt = traj.attempt or repeats.get(case.id, 0) + 1
                repeats[case.id] = max(repeats.get(case.id, 0), traj.attempt)
                item, kind = _Item(case=case, traj=traj, where=None), "openai"
            else:
                raise ValueError(
                    "neither an evalrx trajectory (no `steps`), OpenAI chat messages (no `messages`) nor an ATIF "
                    "document (no `schema_version`)"
                )
        except ImportFormatError:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            raise ImportFormatError(path, lineno, str(exc)) from None
        item.where = lineno
        reading.kinds.add(kind)
        found = True
        yield item
    if not found:
        raise ImportFormatError(path, 1, "the file holds no trajectories")


def _read_document(path: Path, limits: ImportLimits, reading: _Reading) -> Iterator[_Item]:
    """A file that is one JSON document: an Inspect .json log, an ATIF document (or a list of them)."""
    check_size(path.stat().st_size, path, 1, limits, what="file (one JSON document)")
    doc = parse_json(path.read_bytes(), path, None, limits, first=True, what="file")
    if isinstance(doc, dict) and "eval" in doc:
        yield from _read_inspect_log(path, doc, reading)
    elif atif.is_atif(doc) or (isinstance(doc, list) and doc and all(atif.is_atif(d) for d in doc)):
        for i, d in enumerate(doc if isinstance(doc, list) else [doc]):
            where = f"document {i}" if isinstance(doc, list) else 1
            try:
                item = _our_row(atif.from_atif(d))
            except (ValueError, TypeError, KeyError) as exc:
                raise ImportFormatError(path, where, str(exc)) from None
            item.where = where
            reading.kinds.add("atif")
            yield item
    elif isinstance(doc, dict) and ("steps" in doc or "messages" in doc):  # one record, pretty-printed
        yield from _read_jsonl(path, [(1, b"", doc)], limits, reading)
    else:
        raise UnknownFormatError(
            path,
            1,
            "not a format evalrx reads: expected evalrx or OpenAI chat JSONL, ATIF (JSON or JSONL), or an "
            "Inspect AI log (.json or .eval)",
        )


def _read_inspect_log(path: Path, log: dict, reading: _Reading) -> Iterator[_Item]:
    """The samples of an Inspect `.json` log (parsed whole: the format has no sample boundaries to stream by)."""
    if not isinstance(log.get("eval"), dict):
        raise ImportFormatError(path, 1, "not an Inspect AI eval log (no top-level `eval` object)")
    samples = log.get("samples")
    if not isinstance(samples, list) or not samples:
        raise ImportFormatError(path, 1, "the log has no samples (was it written with log_samples=False?)")
    name, config = formats.inspect_run_info(log)
    meta = {"inspect_status": log.get("status")}
    reading.kinds.add("inspect")
    for i, sample in enumerate(samples):
        where = f"sample {i}" + (f" (id {sample.get('id')!r})" if isinstance(sample, dict) else "")
        try:
            case, traj = formats.from_inspect_sample(sample)
        except (ValueError, TypeError, KeyError) as exc:
            raise ImportFormatError(path, where, str(exc)) from None
        samples[i] = None  # each sample's memory goes once it is stored
        yield _Item(case=case, traj=traj, where=where, run_name=name, run_config=config, run_meta=meta)


def _read_eval(path: Path, limits: ImportLimits, reading: _Reading) -> Iterator[_Item]:
    """The samples of an Inspect `.eval` log, one decompressed and parsed at a time."""
    from evalrx.store.inspect_eval import EvalLogReader

    log = EvalLogReader(path, limits)
    if not log.samples:
        raise ImportFormatError(
            path,
            "samples/",
            "the log has no samples (it was written with log_samples=False, "
            "or no sample had finished when it was copied)",
        )
    reading.kinds.add("inspect-eval")
    if not log.complete:
        reading.notes.append(
            f"{path.name} is an unfinished Inspect log (no header.json: Inspect was still writing it, or stopped); "
            f"imported the {len(log.samples)} sample(s) it holds"
        )
    name, config = formats.inspect_run_info(log.header)
    meta = {
        "inspect_status": log.header.get("status") or "started",
        "incomplete": not log.complete,
        "compression": log.compressions,
    }
    for entry, sample in log.iter_samples():
        try:
            case, traj = formats.from_inspect_sample(sample)
        except (ValueError, TypeError, KeyError) as exc:
            raise ImportFormatError(path, entry.name, str(exc)) from None
        yield _Item(case=case, traj=traj, where=entry.name, run_name=name, run_config=config, run_meta=meta)


def read_file(path: "str | Path", *, limits: Optional[ImportLimits] = None) -> tuple[str, list]:
    """Parse and check a whole file without writing it; returns (format, items). Raises ImportFormatError.

    Holds every item in memory: `import_file` streams instead.
    """
    path = _existing(path)
    reading = _Reading()
    items = list(_items(path, limits or ImportLimits(), reading))
    return reading.format, items


@dataclass
class ImportPreview:
    """What a file holds, read without writing: its format, how many trajectories, cases, attempts
    (epochs) and models, notes, and the first few trajectories."""

    format: str
    n_trajectories: int
    n_cases: int
    max_attempt: int
    models: list
    notes: list
    first: list  # [(FailureCase, Trajectory)]
    already_imported_as: list = field(default_factory=list)  # runs the same bytes made before


def preview_file(
    path: "str | Path", *, n_first: int = 5, limits: Optional[ImportLimits] = None, store: "Store | str | None" = None
) -> ImportPreview:
    """Read a whole file as `import_file` would (streaming, every record checked) and say what it holds.

    Raises:
        ImportFormatError: as `import_file` would, naming the file and the record.
    """
    path = _existing(path)
    reading = _Reading()
    first: list = []
    cases: set = set()
    models: set = set()
    n = top = 0
    for item in _items(path, limits or ImportLimits(), reading):
        n += 1
        cases.add(item.case.id)
        top = max(top, int(item.traj.attempt or 1))
        model = (item.run_config or {}).get("model")
        name = model.get("name") if isinstance(model, dict) else model
        if name:
            models.add(str(name))
        if len(first) < n_first:
            first.append((item.case, item.traj))
    with resolve(store).read() as s:
        before = list(s.execute(select(t.Run.id).where(t.Run.source_sha256 == file_sha256(path))).scalars())
    return ImportPreview(
        format=reading.format,
        n_trajectories=n,
        n_cases=len(cases),
        max_attempt=top,
        models=sorted(models),
        notes=list(reading.notes),
        first=first,
        already_imported_as=before,
    )


def _existing(path: "str | Path") -> Path:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return path


def file_sha256(path: "str | Path") -> str:
    """The sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class _RunWriter:
    """One new run filled trajectory by trajectory inside the import's transaction."""

    def __init__(self, session: Any, path: Path, *, name: str, config: dict, meta: dict, sha: str) -> None:
        self.s, self.path = session, path
        self.run_id = create_run(session, name=name, config=config, cases=[], source="import", status="done", meta=meta)
        self.s.get(t.Run, self.run_id).source_sha256 = sha
        self.positions: dict = {}  # case row id -> position: a case keeps one place whatever its attempts
        self.seen: dict = {}  # (case key, attempt) -> where it was
        self.counts = {"pass": 0, "fail": 0, "error": 0}
        self.n = 0

    def add(self, item: _Item) -> None:
        from evalrx.diagnosis import diagnose

        attempt = max(1, int(item.traj.attempt or 1))
        key = (item.case.id, attempt)
        if key in self.seen:
            which = f" attempt {attempt}" if attempt > 1 else ""
            before = self.seen[key]
            raise ImportFormatError(
                self.path,
                item.where,
                f"case {item.case.id!r}{which} appears twice in one run "
                f"(also at {f'line {before}' if isinstance(before, int) else before})",
            )
        self.seen[key] = item.where
        case_id = upsert_case(self.s, item.case)
        position = self.positions.setdefault(case_id, len(self.positions))
        self.s.execute(
            insert(t.RunCase), [{"run_id": self.run_id, "case_id": case_id, "attempt": attempt, "position": position}]
        )
        found = item.diagnoses if item.diagnoses is not None else diagnose(item.traj, case=item.case)
        try:
            save_trajectory(
                self.s, self.run_id, case_id, item.traj, labels=item.labels, tags=item.tags, diagnoses=found
            )
        except ValueError as exc:
            raise ImportFormatError(self.path, item.where, str(exc)) from None
        if item.traj.outcome is Label.ERROR or item.traj.terminated == "error":
            self.counts["error"] += 1
        elif item.traj.outcome.value in self.counts:
            self.counts[item.traj.outcome.value] += 1
        self.n += 1

    def finish(self, fmt: str) -> None:
        run = self.s.get(t.Run, self.run_id)
        run.meta = convert.jsonable({**(run.meta or {}), "format": fmt})
        run.n_cases = run.n_done = self.n
        run.n_pass, run.n_fail, run.n_error = self.counts["pass"], self.counts["fail"], self.counts["error"]
        run.started_at = run.finished_at = t.utcnow()


def import_file(
    path: "str | Path",
    *,
    run_name: Optional[str] = None,
    store: "Store | str | None" = None,
    again: bool = False,
    limits: Optional[ImportLimits] = None,
    on_progress: Optional[Callable[[int], None]] = None,
) -> ImportResult:
    """Import trajectories from a file into new run(s), streaming, all in one transaction.

    Rows that name a run (our exports) go into one new run per distinct run; other records go
    into one run named `run_name`, after the log's task and model, or after the file.

    Args:
        path: an Inspect `.eval` or `.json` log, ATIF (JSON or JSONL), evalrx or OpenAI chat JSONL.
        run_name: name for the new run(s) (default: the exported run's name, the log's task, or the file name).
        store: the store (default when None).
        again: import even if a run already came from a file with these exact bytes.
        limits: size and nesting limits of one record (default `ImportLimits()`).
        on_progress: called with the number of trajectories read so far, after each one.

    Returns:
        The new run ids, the number of trajectories and the detected format; with nothing written
        and `already_imported` set when the same bytes were imported before (and not `again`).

    Raises:
        ImportFormatError: naming the file, the line (or sample) and the problem; nothing is written.
    """
    path = _existing(path)
    limits = limits or ImportLimits()
    sha = file_sha256(path)
    reading = _Reading()
    writers: dict = {}
    with resolve(store).write() as s:
        if not again:
            before = s.execute(select(t.Run.id, t.Run.meta).where(t.Run.source_sha256 == sha).order_by(t.Run.id)).all()
            if before:
                return ImportResult(
                    run_ids=[r.id for r in before],
                    n_trajectories=0,
                    already_imported=True,
                    format=str((before[0].meta or {}).get("format") or ""),
                )
        for item in _items(path, limits, reading):
            name = run_name or item.run_name or path.stem
            key = (name, convert.canonical_json(item.run_config or {}))
            writer = writers.get(key)
            if writer is None:
                meta = {"format": None, "file": path.name, **(item.run_meta or {})}
                writer = writers[key] = _RunWriter(
                    s, path, name=name, config=item.run_config or {"source_file": path.name}, meta=meta, sha=sha
                )
            try:
                writer.add(item)
                if on_progress is not None:
                    on_progress(sum(w.n for w in writers.values()))
            except RecursionError:  # only past a raised --max-depth: Python's own limit, as one line
                raise NestingTooDeepError(
                    path, item.where, "JSON nested too deeply to store; flatten the record or lower --max-depth"
                ) from None
        for writer in writers.values():
            writer.finish(reading.format)
    return ImportResult(
        run_ids=[w.run_id for w in writers.values()],
        n_trajectories=sum(w.n for w in writers.values()),
        format=reading.format,
        notes=list(reading.notes),
    )


# ---------------------------------------------------------------- writing


def iter_export_rows(run_id: int, *, store: "Store | str | None" = None) -> Iterator[dict]:
    """Yield a run's trajectories as export rows, in the run's case order (attempts of a case together)."""
    return _export_rows(run_id, store=store)


def _export_rows(
    run_id: Optional[int],
    *,
    store: "Store | str | None" = None,
    with_ids: bool = False,
    trajectory_ids: Optional[Sequence[int]] = None,
) -> Iterator[dict]:
    """Export rows of a run, or of chosen trajectories (any runs; `run_id` then narrows them to one);
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
                & (t.RunCase.case_id == t.Trajectory.case_id)
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
            case_rows = {
                c.id: c
                for c in s.execute(select(t.Case).where(t.Case.id.in_({trajs[i].case_id for i in chunk}))).scalars()
            }
            for tid in chunk:
                row = trajs[tid]
                if row.run_id not in runs_info:
                    run = s.get(t.Run, row.run_id)
                    runs_info[row.run_id] = {"name": run.name, "config": run.config or {}}
                run_info = runs_info[row.run_id]
                case = case_rows[row.case_id]
                traj = convert.trajectory_from_rows(row, steps[tid])
                case_out = convert.case_dict(case)
                sha = case_out.pop("image_sha256")
                if sha:
                    blob = s.get(t.Blob, sha)
                    case_out["image"] = {
                        "sha256": sha,
                        "mime": blob.mime,
                        "base64": base64.b64encode(bytes(blob.data)).decode(),
                    }
                out = {
                    "case_id": case.case_key,
                    "meta": case.meta or {},
                    **traj.to_dict(),
                    "case": case_out,
                    "labels": [lab.to_dict() for lab in history_in(s, tid)],
                    "tags": tags_in(s, tid),
                    "run": run_info,
                    "diagnosis": export_diagnosis(diagnoses_in(s, tid)),
                }
                if with_ids:
                    out["_trajectory_id"], out["_run_id"], out["_created_at"] = tid, row.run_id, row.created_at
                yield out
            s.expunge_all()  # rows of finished chunks need not stay in the session's identity map


def export_diagnosis(diagnoses: list) -> dict:
    """The exported `diagnosis` object: the top diagnosis (`kind` None for a passing trajectory)."""
    if not diagnoses:
        return {"kind": None, "first_wrong_step": None, "evidence": {}, "confidence": 0.0, "source": None}
    return diagnoses[0].to_dict()


def export_format(path: "str | Path") -> str:
    """The export format a file name implies, or a ValueError asking for --format."""
    name = Path(path).name.lower()
    for suffixes, fmt in (
        ((".parquet",), "parquet"),
        ((".otlp.json", ".otlp.jsonl"), "otel"),
        ((".atif.jsonl", ".atif.json"), "atif"),
        ((".jsonl",), "jsonl"),
    ):
        if name.endswith(suffixes):
            return fmt
    raise ValueError(
        f"{path}: cannot tell the export format from the name; add --format "
        f"{'|'.join(EXPORT_FORMATS)}, or name it .jsonl, .parquet, .atif.jsonl or .otlp.json"
    )


def export_run(
    run_id: int,
    path: "str | Path | None",
    *,
    fmt: Optional[str] = None,
    store: "Store | str | None" = None,
    otel_content: bool = False,
    otel_endpoint: Optional[str] = None,
) -> int:
    """Write a run's trajectories, grades, labels and tags to a file (or, for OTLP, a collector).

    Args:
        run_id: the run.
        path: output file; its name implies the format (`export_format`) unless `fmt` is given.
            May be None for `otel` with an `otel_endpoint`.
        fmt: "jsonl", "parquet" (needs pyarrow), "atif" (ATIF documents, one a line) or "otel"
            (OTLP JSON lines of GenAI spans; needs opentelemetry-proto).
        store: the store (default when None).
        otel_content: put tool arguments and results (and model output) on the OTLP spans.
        otel_endpoint: also POST the traces to this OTLP/HTTP URL (e.g. http://localhost:4318/v1/traces).

    Returns:
        The number of trajectories written.
    """
    from evalrx.store.queries import get_run

    if get_run(run_id, store=store) is None:
        raise ValueError(f"no run with id {run_id}")
    return _export(
        lambda ids: _export_rows(run_id, store=store, with_ids=ids),
        path,
        fmt=fmt,
        run_id=run_id,
        otel_content=otel_content,
        otel_endpoint=otel_endpoint,
    )


def export_trajectories(
    trajectory_ids: Sequence[int],
    path: "str | Path",
    *,
    fmt: Optional[str] = None,
    store: "Store | str | None" = None,
    otel_content: bool = False,
) -> int:
    """Write chosen trajectories (a filtered list; any runs) in any export format; returns how many."""
    ids = list(trajectory_ids)
    return _export(
        lambda with_ids: _export_rows(None, store=store, with_ids=with_ids, trajectory_ids=ids),
        path,
        fmt=fmt,
        run_id=None,
        otel_content=otel_content,
        otel_endpoint=None,
    )


def _export(
    rows_of: Callable[[bool], Iterator[dict]],
    path: "str | Path | None",
    *,
    fmt: Optional[str],
    run_id: Optional[int],
    otel_content: bool,
    otel_endpoint: Optional[str],
) -> int:
    if path is None and not (fmt == "otel" and otel_endpoint):
        raise ValueError("give an output file (only --format otel with --otel-endpoint may go without one)")
    path = Path(path) if path is not None else None
    if path is not None and path.is_dir():
        raise ValueError(f"{path} is a directory; give a file path such as {path / f'run{run_id or 1}.jsonl'}")
    fmt = fmt or export_format(path)
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; use one of {', '.join(EXPORT_FORMATS)}")
    if otel_endpoint and fmt != "otel":
        raise ValueError("--otel-endpoint goes with --format otel")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "otel":
        from evalrx.store import otel

        return otel.write_traces(
            otel.trace_requests(rows_of(True), run_id=run_id, content=otel_content), path, endpoint=otel_endpoint
        )
    rows = rows_of(False)
    if fmt == "parquet":
        return _write_parquet(rows, path)
    if fmt == "atif":
        return write_lines(path, (atif.dumps(atif.to_atif(row)) for row in rows))
    return write_lines(path, (json.dumps(row, ensure_ascii=False, sort_keys=True, default=str) for row in rows))


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
)


def export_labels_csv(
    path: "str | Path",
    *,
    run_id: Optional[int] = None,
    trajectory_ids: Optional[Sequence[int]] = None,
    store: "Store | str | None" = None,
) -> int:
    """The current labels alone (of a run, or of chosen trajectories) as CSV; returns the rows written."""
    import csv
    import io as _io

    L, T = t.LabelRow, t.Trajectory
    q = (
        select(
            L.trajectory_id,
            T.run_id,
            T.sample_id,
            T.attempt,
            L.outcome,
            L.failure_mode,
            L.first_wrong_step,
            L.step_idx,
            L.annotator,
            L.note,
            L.created_at,
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
    buf = _io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(LABEL_COLUMNS)
    for r in rows:  # a leading = + - @ would be read as a formula by spreadsheets: quote it inert
        writer.writerow(["'" + v if isinstance(v, str) and v[:1] in "=+-@" else v for v in r])
    write_lines(Path(path), [buf.getvalue().rstrip("\n")])
    return len(rows)


def write_lines(path: Path, lines: Iterable[str]) -> int:
    """Write lines to `path` through a `.part` file renamed at the end; returns how many."""
    n = 0
    tmp = path.with_name(path.name + ".part")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line + "\n")
                n += 1
        tmp.replace(path)  # a crash never leaves a half-written export under the real name
    finally:
        tmp.unlink(missing_ok=True)  # nor a .part beside it
    return n


def _write_parquet(rows: Iterator[dict], path: Path) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError("Parquet export needs pyarrow: pip install 'evalrx[export]'") from None

    def dumps(v: Any) -> str:
        return json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)

    flat = []
    for r in rows:
        current = next((lab for lab in reversed(r["labels"]) if lab["step_idx"] is None and lab["is_current"]), {})
        m = r["metrics"] or {}
        flat.append(
            {
                "run_name": r["run"]["name"],
                "case_id": r["case_id"],
                "sample_id": r["sample_id"],
                "attempt": r.get("attempt", 1),
                "goal": r["goal"],
                "final_answer": r["final_answer"],
                "ground_truth": dumps(r["ground_truth"]),
                "outcome": r["outcome"],
                "terminated": str(m.get("terminated", "")),
                "n_steps": len(r["steps"]),
                "latency_ms": float(m.get("total_latency_ms") or 0.0),
                "label": current.get("outcome"),
                "failure_mode": current.get("failure_mode"),
                "first_wrong_step": current.get("first_wrong_step"),
                "note": current.get("note"),
                "tags": r["tags"],
                "steps_json": dumps(r["steps"]),
                "metrics_json": dumps(m),
                "labels_json": dumps(r["labels"]),
                "case_json": dumps(r["case"]),
                "failure_kind": r["diagnosis"]["kind"],
                "diagnosis_json": dumps(r["diagnosis"]),
            }
        )
    pq.write_table(pa.Table.from_pylist(flat), path)
    return len(flat)
