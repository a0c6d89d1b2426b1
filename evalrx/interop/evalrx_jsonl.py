"""evalrx JSONL: our export rows (and the rows `evalrx run --out` writes), one JSON object a line."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Iterator, Optional

from evalrx.core.case import FailureCase, Inputs, Label, Step, Trajectory
from evalrx.core.failures import Diagnosis
from evalrx.interop.files import write_lines
from evalrx.interop.messages import as_dict
from evalrx.interop.records import Reading, Record, checked_attempt
from evalrx.interop.registry import ExportOptions, Format, register


def record_of_row(row: dict) -> Record:
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
        for key in ("content", "parse_error"):  # the store indexes them as text (an observation may be structured)
            if s.get(key) is not None and not isinstance(s[key], str):
                raise ValueError(f"step {i}: `{key}` must be text or null, not {type(s[key]).__name__}")
        if s.get("idx") != i:
            raise ValueError(f"step {i} has idx {s.get('idx')!r}; steps must be numbered 0, 1, 2, ... in order")
    by_step: dict = {}
    for i, s in enumerate(data["steps"]):
        pictures = s.get("images")
        if pictures is None:
            continue
        if not isinstance(pictures, list) or not all(isinstance(p, dict) and p.get("base64") for p in pictures):
            raise ValueError(f"step {i}: `images` must be a list of pictures with `base64`")
        try:
            by_step[i] = [base64.b64decode(p["base64"], validate=True) for p in pictures]
        except ValueError:
            raise ValueError(f"step {i}: a picture is not valid base64") from None
    for key in ("goal", "final_answer"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ValueError(f"`{key}` must be text or null, not {type(data[key]).__name__}")
    if data.get("outcome") not in (None, *Label._value2member_map_):
        raise ValueError(f"outcome {data['outcome']!r} is not one of {', '.join(Label._value2member_map_)}")
    if data.get("metrics") is not None and not isinstance(data["metrics"], dict):
        raise ValueError("`metrics` must be an object")
    if data.get("attempt") is not None:
        checked_attempt(data["attempt"])
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
    labels = [_current_label_keys(lab) for lab in labels]
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
    run = as_dict(row.get("run"))
    if run.get("config") is not None and not isinstance(run["config"], dict):
        raise ValueError(f"`run.config` must be an object, not {type(run['config']).__name__}")
    if run.get("name") is not None and not isinstance(run["name"], str):
        raise ValueError(f"`run.name` must be text, not {type(run['name']).__name__}")
    diagnoses = None
    listed = row.get("diagnoses")
    if listed is not None:  # every source's candidate, best first (exports since the judge source)
        if not isinstance(listed, list):
            raise ValueError("`diagnoses` must be a list of diagnosis objects")
        diagnoses = [_diagnosis_of(d, traj, f"diagnoses[{i}]") for i, d in enumerate(listed)]
    elif row.get("diagnosis") is not None:
        diagnosis = _diagnosis_of(row["diagnosis"], traj, "diagnosis")
        diagnoses = [diagnosis] if diagnosis.kind else []
    return Record(
        case=case,
        traj=traj,
        where=None,
        labels=labels,
        tags=tags,
        run_name=run.get("name"),
        run_config=run.get("config"),
        diagnoses=diagnoses,
        pictures=by_step,
    )


def _diagnosis_of(value: Any, traj: Trajectory, where: str) -> Diagnosis:
    try:
        diagnosis = Diagnosis.from_dict(value)
    except ValueError as exc:  # its messages already say "diagnosis ..."
        raise ValueError(f"{where}: {exc}" if where != "diagnosis" else str(exc)) from None
    if diagnosis.first_wrong_step is not None and not 0 <= diagnosis.first_wrong_step < max(len(traj.steps), 1):
        raise ValueError(f"{where} first_wrong_step={diagnosis.first_wrong_step} is not a step of this trajectory")
    return diagnosis


def _current_label_keys(label: dict) -> dict:
    """A label as this version writes it: files written before labels said `failure_kind` call it `failure_mode`."""
    if "failure_mode" not in label:
        return label
    out = {k: v for k, v in label.items() if k != "failure_mode"}
    out.setdefault("failure_kind", label["failure_mode"])
    return out


def _is_ours(obj: dict, whole: bool) -> bool:
    return "steps" in obj


def _read(obj: dict, where: Any, reading: Reading) -> Iterator[Record]:
    record = record_of_row(obj)
    record.where = where
    yield record


def _write(rows: Iterator[dict], path: Optional[Path], options: ExportOptions) -> int:
    if path is None:
        raise ValueError("a JSONL export needs an output file")
    return write_lines(path, (json.dumps(row, ensure_ascii=False, sort_keys=True, default=str) for row in rows))


register(
    Format(
        name="evalrx",
        title="evalrx JSONL",
        sniff_rank=30,
        sniff_record=_is_ours,
        read_record=_read,
        write=_write,
        export_name="jsonl",
        export_title="JSONL",
        suffixes=(".jsonl",),
        mime="application/jsonl",
    )
)
