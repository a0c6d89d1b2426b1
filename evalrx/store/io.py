"""Import and export of trajectories.

Export writes one JSON object per trajectory (JSONL; or Parquet when pyarrow is there):
the core `Trajectory.to_dict()` fields plus the case, the grade, the label history, tags
and the run's name and config. Import reads that format (and the rows `evalrx run --out`
writes), OpenAI chat-messages JSONL and Inspect AI `.json` eval logs. A file is checked
whole before anything is written, and written in one transaction: a bad file names
itself, the line and the problem, and leaves the store untouched.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from sqlalchemy import select

from evalrx.core.case import FailureCase, Inputs, Label, Step, Trajectory
from evalrx.core.failures import Diagnosis
from evalrx.store import convert, formats
from evalrx.store import schema as t
from evalrx.store.engine import Store, resolve
from evalrx.store.diagnoses import diagnoses_in
from evalrx.store.labels import history_in, tags_in
from evalrx.store.runs import create_run, save_trajectory

EXPORT_BATCH = 500


class ImportFormatError(ValueError):
    """A file that cannot be imported; the message names the file, the line and the problem."""

    def __init__(self, path: "str | Path", line: Any, problem: str) -> None:
        self.path, self.line, self.problem = str(path), line, problem
        where = f"line {line}" if isinstance(line, int) else str(line)
        super().__init__(f"{path}: {where}: {problem}")


@dataclass
class ImportResult:
    run_ids: list
    n_trajectories: int
    format: str


@dataclass
class _Item:
    case: FailureCase
    traj: Trajectory
    where: Any
    labels: list = field(default_factory=list)
    tags: list = field(default_factory=list)
    run_name: Optional[str] = None
    run_config: Optional[dict] = None
    diagnoses: Optional[list] = None  # None: diagnose on import (model-free rules)


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
            raise ValueError(f"diagnosis first_wrong_step={diagnosis.first_wrong_step} is not a step of this trajectory")
        diagnoses = [diagnosis] if diagnosis.kind else []
    return _Item(case=case, traj=traj, where=None, labels=labels, tags=tags,
                 run_name=run.get("name"), run_config=run.get("config"), diagnoses=diagnoses)


def _read_jsonl(path: Path) -> tuple[str, list]:
    items: list = []
    kinds: set = set()
    with path.open("r", encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except RecursionError:
                raise ImportFormatError(path, lineno, "JSON nested too deeply to read; flatten the record") from None
            except json.JSONDecodeError as exc:
                raise ImportFormatError(path, lineno, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(row, dict):
                raise ImportFormatError(path, lineno, f"expected a JSON object, got {type(row).__name__}")
            try:
                if "steps" in row:
                    item, kind = _our_row(row), "evalrx"
                elif "messages" in row:
                    case, traj = formats.from_openai_row(row, lineno)
                    item, kind = _Item(case=case, traj=traj, where=None), "openai"
                else:
                    raise ValueError(
                        "neither an evalrx trajectory (no `steps`) nor OpenAI chat messages (no `messages`)"
                    )
            except ImportFormatError:
                raise
            except (ValueError, TypeError, KeyError) as exc:
                raise ImportFormatError(path, lineno, str(exc)) from None
            item.where = lineno
            items.append(item)
            kinds.add(kind)
    if not items:
        raise ImportFormatError(path, 1, "the file holds no trajectories")
    return "+".join(sorted(kinds)), items


def _read_inspect(path: Path) -> tuple[str, list]:
    try:
        log = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ImportFormatError(path, 1, "JSON nested too deeply to read") from None
    except json.JSONDecodeError as exc:
        raise ImportFormatError(path, exc.lineno, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(log, dict) or "eval" not in log:
        raise ImportFormatError(path, 1, "not an Inspect AI eval log (no top-level `eval` object)")
    samples = log.get("samples")
    if not isinstance(samples, list) or not samples:
        raise ImportFormatError(path, 1, "the log has no samples (was it written with log_samples=False?)")
    name, config = formats.inspect_run_info(log)
    epochs = {s.get("epoch", 1) for s in samples if isinstance(s, dict)}
    items = []
    for i, sample in enumerate(samples):
        where = f"sample {i}" + (f" (id {sample.get('id')!r})" if isinstance(sample, dict) else "")
        try:
            case, traj = formats.from_inspect_sample(sample, log, multi_epoch=len(epochs) > 1)
        except (ValueError, TypeError, KeyError) as exc:
            raise ImportFormatError(path, where, str(exc)) from None
        items.append(_Item(case=case, traj=traj, where=where, run_name=name, run_config=config))
    return "inspect", items


def read_file(path: "str | Path") -> tuple[str, list]:
    """Parse and check a whole file; returns (format, items). Raises ImportFormatError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix.lower() == ".json":
        return _read_inspect(path)
    if path.suffix.lower() == ".eval":
        raise ImportFormatError(
            path, 1, "Inspect's binary .eval logs are not supported; convert with "
            "`inspect log convert --to json` and import the .json"
        )
    return _read_jsonl(path)


def import_file(
    path: "str | Path", *, run_name: Optional[str] = None, store: "Store | str | None" = None
) -> ImportResult:
    """Import trajectories from a file into new run(s), all in one transaction.

    Rows that name a run (our exports) go into one new run per distinct run; other rows
    go into one run named `run_name` or after the file.

    Args:
        path: a `.jsonl` (evalrx or OpenAI chat format) or an Inspect AI `.json` log.
        run_name: name for the new run (default: the exported run's name, or the file name).
        store: the store (default when None).

    Returns:
        The new run ids, the number of trajectories and the detected format.

    Raises:
        ImportFormatError: naming the file, the line (or sample) and the problem.
    """
    from evalrx.diagnosis import diagnose

    path = Path(path)
    fmt, items = read_file(path)
    groups: dict = {}
    for item in items:
        name = run_name or item.run_name or path.stem
        key = (name, convert.canonical_json(item.run_config or {}))
        groups.setdefault(key, []).append(item)
    run_ids = []
    with resolve(store).write() as s:
        for (name, _), group in groups.items():
            seen: dict = {}
            for item in group:
                if item.case.id in seen:
                    raise ImportFormatError(
                        path, item.where, f"case {item.case.id!r} appears twice in one run (also at {seen[item.case.id]})"
                    )
                seen[item.case.id] = item.where
            config = group[0].run_config or {"source_file": path.name}
            try:
                run_id = create_run(s, name=name, config=config, cases=[i.case for i in group],
                                    source="import", status="done", meta={"format": fmt, "file": path.name})
            except ValueError as exc:  # identical case content twice
                raise ImportFormatError(path, group[0].where, str(exc)) from None
            case_ids = dict(
                s.execute(select(t.RunCase.position, t.RunCase.case_id).where(t.RunCase.run_id == run_id)).all()
            )
            counts = {"pass": 0, "fail": 0, "error": 0}
            for pos, item in enumerate(group):
                found = item.diagnoses if item.diagnoses is not None else diagnose(item.traj, case=item.case)
                try:
                    save_trajectory(s, run_id, case_ids[pos], item.traj, labels=item.labels, tags=item.tags,
                                    diagnoses=found)
                except ValueError as exc:
                    raise ImportFormatError(path, item.where, str(exc)) from None
                if item.traj.outcome is Label.ERROR or item.traj.terminated == "error":
                    counts["error"] += 1
                else:
                    counts[item.traj.outcome.value] = counts.get(item.traj.outcome.value, 0) + 1
            run = s.get(t.Run, run_id)
            run.n_done, run.n_pass, run.n_fail, run.n_error = len(group), counts["pass"], counts["fail"], counts["error"]
            run.started_at = run.finished_at = t.utcnow()
            run_ids.append(run_id)
    return ImportResult(run_ids=run_ids, n_trajectories=len(items), format=fmt)


# ---------------------------------------------------------------- writing


def iter_export_rows(run_id: int, *, store: "Store | str | None" = None) -> Iterator[dict]:
    """Yield a run's trajectories as export rows, in the run's case order."""
    st = resolve(store)
    with st.read() as s:
        run = s.get(t.Run, run_id)
        if run is None:
            raise ValueError(f"no run with id {run_id}")
        run_info = {"name": run.name, "config": run.config or {}}
        ids = s.execute(
            select(t.Trajectory.id)
            .outerjoin(
                t.RunCase, (t.RunCase.run_id == t.Trajectory.run_id) & (t.RunCase.case_id == t.Trajectory.case_id)
            )
            .where(t.Trajectory.run_id == run_id)
            .order_by(t.RunCase.position, t.Trajectory.id)
        ).scalars().all()
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
                for c in s.execute(
                    select(t.Case).where(t.Case.id.in_({trajs[i].case_id for i in chunk}))
                ).scalars()
            }
            for tid in chunk:
                row = trajs[tid]
                case = case_rows[row.case_id]
                traj = convert.trajectory_from_rows(row, steps[tid])
                case_out = convert.case_dict(case)
                sha = case_out.pop("image_sha256")
                if sha:
                    blob = s.get(t.Blob, sha)
                    case_out["image"] = {"sha256": sha, "mime": blob.mime,
                                         "base64": base64.b64encode(bytes(blob.data)).decode()}
                yield {
                    "case_id": case.case_key,
                    "meta": case.meta or {},
                    **traj.to_dict(),
                    "case": case_out,
                    "labels": [lab.to_dict() for lab in history_in(s, tid)],
                    "tags": tags_in(s, tid),
                    "run": run_info,
                    "diagnosis": export_diagnosis(diagnoses_in(s, tid)),
                }


def export_diagnosis(diagnoses: list) -> dict:
    """The exported `diagnosis` object: the top diagnosis (`kind` None for a passing trajectory)."""
    if not diagnoses:
        return {"kind": None, "first_wrong_step": None, "evidence": {}, "confidence": 0.0, "source": None}
    return diagnoses[0].to_dict()


def export_run(
    run_id: int, path: "str | Path", *, fmt: Optional[str] = None, store: "Store | str | None" = None
) -> int:
    """Write a run's trajectories, grades, labels and tags to a file.

    Args:
        run_id: the run.
        path: output file; `.parquet` writes Parquet (needs pyarrow), anything else JSONL.
        fmt: "jsonl" or "parquet" to override the suffix.
        store: the store (default when None).

    Returns:
        The number of trajectories written.
    """
    from evalrx.store.queries import get_run

    path = Path(path)
    fmt = fmt or ("parquet" if path.suffix.lower() == ".parquet" else "jsonl")
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give a file path such as {path / f'run{run_id}.jsonl'}")
    if get_run(run_id, store=store) is None:
        raise ValueError(f"no run with id {run_id}")
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = iter_export_rows(run_id, store=store)
    if fmt == "parquet":
        return _write_parquet(rows, path)
    if fmt != "jsonl":
        raise ValueError(f"unknown export format {fmt!r}; use jsonl or parquet")
    n = 0
    tmp = path.with_name(path.name + ".part")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True, default=str) + "\n")
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
        flat.append({
            "run_name": r["run"]["name"], "case_id": r["case_id"], "sample_id": r["sample_id"], "goal": r["goal"],
            "final_answer": r["final_answer"], "ground_truth": dumps(r["ground_truth"]), "outcome": r["outcome"],
            "terminated": str(m.get("terminated", "")), "n_steps": len(r["steps"]),
            "latency_ms": float(m.get("total_latency_ms") or 0.0),
            "label": current.get("outcome"), "failure_mode": current.get("failure_mode"),
            "first_wrong_step": current.get("first_wrong_step"), "note": current.get("note"),
            "tags": r["tags"], "steps_json": dumps(r["steps"]), "metrics_json": dumps(m),
            "labels_json": dumps(r["labels"]), "case_json": dumps(r["case"]),
            "failure_kind": r["diagnosis"]["kind"], "diagnosis_json": dumps(r["diagnosis"]),
        })
    pq.write_table(pa.Table.from_pylist(flat), path)
    return len(flat)
