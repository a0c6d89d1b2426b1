"""Human labels from elsewhere, into the store: a labels CSV, labels JSONL, or AgentRx ground truth.

The format is told from the content: a JSON list is AgentRx ground truth, one JSON object with `errors` a
TRAIL annotation (errors located by span id), lines of JSON objects are labels JSONL, anything else a CSV
with `export_labels_csv`'s columns (so an export imports back); `labels_format` tells a labels file from a
file of trajectories, and `preview_labels` says which runs a file labels before anything is written. A
label lands on a trajectory by its case id and attempt (the first attempt when none is given), within
one run when `run_id` says which; labels JSONL may name a store trajectory id instead. A label whose
trajectory is not in the store is counted and named, not fatal. Categories of other taxonomies become
our kinds through `evalrx.core.taxonomies`; one we have no kind for is added as a custom kind.

Each source keeps its own annotator (AgentRx: "agentrx"; TRAIL: "trail"; a JSONL record without one: the
file's name), so the Agreement report scores the diagnosis against those people as against any other.

    res = import_labels("tau_ground_truth.json", run_id=3)
    res.n_labels, res.unmatched, res.failure_steps
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from evalrx import store as S
from evalrx.core.case import Label
from evalrx.core.taxonomies import AGENTRX, TRAIL, map_category
from evalrx.interop.errors import ImportFormatError
from evalrx.interop.files import existing
from evalrx.interop.limits import ImportLimits, decode_utf8, parse_json
from evalrx.interop.registry import record_format
from evalrx.interop.span_files import span_key

OUTCOMES = tuple(x.value for x in Label)
AGENTRX_ANNOTATOR = "agentrx"
TRAIL_ANNOTATOR = "trail"
_FORMULA = tuple("=+-@")  # what `export_labels_csv` quotes with a leading "'" so spreadsheets keep it as text


@dataclass(frozen=True)
class FailureStep:
    """One labelled failure of a ground-truth file, on the step it names (AgentRx lists several per run)."""

    trajectory_id: int
    sample_id: str
    step_idx: int
    message: Optional[int]  # the source message index the file gave, when it gave one
    kind: str
    category: str  # as the file spells it
    root: bool  # the root cause: the failure the run never recovered from


@dataclass
class LabelImportResult:
    """What an import stored and what it could not place."""

    path: str
    format: str  # "csv", "jsonl" or "agentrx"
    n_labels: int = 0  # whole-trajectory labels written
    n_step_labels: int = 0  # step labels written
    n_unchanged: int = 0  # equal to the current label already there: not written again
    unmatched: "list[str]" = field(default_factory=list)  # records with no trajectory in the store, and why
    kinds_created: "list[str]" = field(default_factory=list)
    annotators: "list[str]" = field(default_factory=list)
    failure_steps: "list[FailureStep]" = field(default_factory=list)


@dataclass
class _Row:
    """One label read from the file, before it is placed on a trajectory."""

    where: Any  # line number or "record N" for errors
    sample_id: Optional[str] = None
    attempt: Optional[int] = None
    trajectory_id: Optional[int] = None  # a store id (labels JSONL only)
    outcome: Optional[str] = None
    kind: Optional[str] = None
    first_wrong_step: Optional[int] = None
    first_wrong_message: Optional[int] = None
    step_idx: Optional[int] = None
    step_message: Optional[int] = None
    note: Optional[str] = None
    annotator: Optional[str] = None
    created_at: Optional[datetime] = None
    agent: Optional[str] = None  # the team's agent blamed (AgentRx's failed_agent)
    step_span: Optional[str] = None  # the step given as the id of the span it came from (TRAIL's location)
    first_wrong_span: Optional[list] = None  # (span, kind) of errors: the earliest's step and kind are the label's
    failure: Optional[dict] = None  # AgentRx: the failure this row stands for (kept in failure_steps)


def import_labels(
    path: "str | Path",
    *,
    run_id: Optional[int] = None,
    annotator: Optional[str] = None,
    store: "S.Store | str | None" = None,
) -> LabelImportResult:
    """Import human labels from a file (labels CSV, labels JSONL or AgentRx ground truth) in one transaction.

    Args:
        path: the file.
        run_id: look the case ids up in this run only (needed when a case is in several runs).
        annotator: who the labels are from, replacing the file's own names (default: the file's
            `annotator` column or key; AgentRx ground truth: "agentrx").
        store: the store (default store when None).

    Returns:
        What was stored, what was already there, the kinds added and the records with no trajectory.

    Raises:
        ImportFormatError: the file (at the line or record it names) cannot be read as labels; nothing is written.
        ValueError: an unknown run.
    """
    path = existing(path)
    fmt, rows = _read(path)
    if annotator is not None:
        annotator = annotator.strip() or None
    default_who = {AGENTRX: AGENTRX_ANNOTATOR, TRAIL: TRAIL_ANNOTATOR, "jsonl": path.stem}.get(fmt)
    targets = _targets_of(rows, run_id=run_id, messages=fmt != "csv", store=store)
    res = LabelImportResult(path=str(path), format=fmt)
    writes = []
    for row in rows:
        target = _place(row, targets, run_id, res, path)
        if target is None:
            continue
        who = annotator or row.annotator or default_who
        if row.first_wrong_span is not None:  # the earliest error's step and kind
            row.first_wrong_step, row.kind = min(
                ((_span_step(sp, target, row, path), kind) for sp, kind in row.first_wrong_span), key=lambda x: x[0]
            )
        fields = {
            "trajectory_id": target.trajectory_id,
            "outcome": row.outcome,
            "failure_kind": row.kind,
            "first_wrong_step": _step(row.first_wrong_step, row.first_wrong_message, target, row, path),
            "step_idx": _step(row.step_idx, row.step_message, target, row, path)
            if row.step_span is None
            else _span_step(row.step_span, target, row, path),
            "note": row.note,
            "annotator": who,
            "created_at": row.created_at,
            "agent": target.agent_named(row.agent),
        }
        writes.append(fields)
        if row.failure is not None:
            f = row.failure
            res.failure_steps.append(
                FailureStep(
                    target.trajectory_id,
                    target.sample_id,
                    fields["step_idx"],
                    f["message"],
                    row.kind or "",
                    f["category"],
                    f["root"],
                )
            )
    try:
        written, res.kinds_created = S.set_labels(writes, store=store)
    except ValueError as exc:  # a check the store makes that ours missed: still one line, nothing written
        raise ImportFormatError(path, "labels", str(exc)) from None
    for w, new in zip(writes, written):
        if not new:
            res.n_unchanged += 1
        elif w["step_idx"] is None:
            res.n_labels += 1
        else:
            res.n_step_labels += 1
    res.unmatched = list(dict.fromkeys(res.unmatched))  # AgentRx: a record's failures share its case
    res.annotators = sorted({w["annotator"] for w in writes if w["annotator"]})
    return res


@dataclass
class LabelPreview:
    """What a labels file holds and which runs it labels, read without writing."""

    path: str
    format: str  # as `LabelImportResult.format`
    n_labels: int  # whole-trajectory and step labels the file holds
    runs: "list[tuple[int, int]]" = field(default_factory=list)  # (run id, its labels there): most, then newest, first


def preview_labels(path: "str | Path", *, store: "S.Store | str | None" = None) -> LabelPreview:
    """Read a labels file as `import_labels` would and say which runs hold the trajectories it labels.

    Raises:
        ImportFormatError: the file cannot be read as labels.
    """
    path = existing(path)
    fmt, rows = _read(path)
    targets = _targets_of(rows, store=store)
    per_run: dict = {}
    for row in rows:
        for rid in {x.run_id for x in targets.of(row)}:
            per_run[rid] = per_run.get(rid, 0) + 1
    runs = sorted(per_run.items(), key=lambda kv: (-kv[1], -kv[0]))
    return LabelPreview(path=str(path), format=fmt, n_labels=len(rows), runs=runs)


def _targets_of(
    rows: list, *, run_id: Optional[int] = None, messages: bool = False, store: "S.Store | str | None" = None
) -> _Targets:
    return _Targets(
        S.label_targets(
            sample_ids={r.sample_id for r in rows if r.sample_id is not None},
            trajectory_ids={r.trajectory_id for r in rows if r.trajectory_id is not None},
            run_id=run_id,
            messages=messages,
            store=store,
        )
    )


_SNIFF_BYTES = 1 << 16  # a labels CSV or JSONL is told by its first line
_WHOLE_BYTES = 64 << 20  # a JSON document (AgentRx, TRAIL) is parsed whole to be told; larger files are not labels
_LABEL_KEYS = ("outcome", "kind", "failure_kind", "step", "first_wrong_step", "message", "note")


def labels_format(path: "str | Path") -> Optional[str]:
    """The labels format a file is in ("csv", "jsonl", "agentrx", "trail"), told from its content; None for
    anything else (trajectories, which `import_file` reads, or an unknown file)."""
    path = existing(path)
    with path.open("rb") as fh:
        head = fh.read(_SNIFF_BYTES)
    if b"\x00" in head:  # binary (a zip, Parquet) or UTF-16: never labels
        return None
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff").lstrip()
    first = text.split("\n", 1)[0].strip()
    if text[:1] == "{":
        try:
            obj = json.loads(first)
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict) and _is_label_record(obj):
            return "jsonl"
        whole = _document(path) if '"errors"' in text else None  # a log is not parsed whole just to be told
        if isinstance(whole, dict) and isinstance(whole.get("errors"), list) and record_format(whole, True) is None:
            return TRAIL
        return None
    if text[:1] == "[":
        doc = _document(path) if '"failures"' in text else None
        if not isinstance(doc, list) or not doc:
            return None
        return AGENTRX if all(isinstance(d, dict) and {"trajectory_id", "failures"} <= d.keys() for d in doc) else None
    try:
        header = next(csv.reader([first]), [])
    except csv.Error:  # a stray carriage return or NUL: not a labels CSV
        return None
    return "csv" if {"case_id", "outcome"} <= {h.strip() for h in header} else None


def _is_label_record(obj: dict) -> bool:
    """One JSON object that names a trajectory and says something of it, and that no trajectory format claims."""
    names = any(k in obj for k in ("case_id", "sample_id", "trajectory_id"))
    return names and any(k in obj for k in _LABEL_KEYS) and record_format(obj) is None


def _document(path: Path) -> Any:
    if path.stat().st_size > _WHOLE_BYTES:
        return None
    try:
        return json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        return None


# ---------------------------------------------------------------- placing a label


class _Targets:
    """The store's trajectories a file's labels may land on, found by store id or by case id."""

    def __init__(self, targets: list) -> None:
        self.by_id = {x.trajectory_id: x for x in targets}
        self.by_case: dict = {}
        for x in targets:  # in the store's order: by run, then attempt
            self.by_case.setdefault(x.sample_id, []).append(x)

    def of(self, row: _Row) -> list:
        """The trajectories a row names: its store trajectory, or its case's (of its attempt, when it gives one)."""
        if row.trajectory_id is not None and row.sample_id is None:
            hit = self.by_id.get(row.trajectory_id)
            return [hit] if hit is not None else []
        same = self.by_case.get(None if row.sample_id is None else S.storable_text(row.sample_id), [])  # as stored
        return [x for x in same if x.attempt == row.attempt] if row.attempt is not None else list(same)


def _place(row: _Row, targets: _Targets, run_id: Optional[int], res: LabelImportResult, path: Path) -> Any:
    """The trajectory a row lands on, or None (noted in `res.unmatched`)."""
    if row.trajectory_id is not None and row.sample_id is None:
        hit = targets.of(row)
        if not hit:
            res.unmatched.append(f"trajectory {row.trajectory_id}" + (f" (not in run {run_id})" if run_id else ""))
        return hit[0] if hit else None
    same = targets.of(row)
    name = f"case {row.sample_id}" + (f" attempt {row.attempt}" if row.attempt is not None else "")
    if not same:
        res.unmatched.append(name + (f" (not in run {run_id})" if run_id else ""))
        return None
    runs = sorted({x.run_id for x in same})
    if len(runs) > 1:
        res.unmatched.append(f"{name} (in runs {', '.join(map(str, runs))}: choose one with --run)")
        return None
    return same[0]  # the first attempt when none was named


def _span_step(span_id: str, target: Any, row: _Row, path: Path) -> int:
    """The step a span id stands for (the span it came from, or a span it stands for; `evalrx.interop.traces`)."""
    key = span_key(span_id, "location")
    if key not in target.spans:
        raise ImportFormatError(
            path,
            row.where,
            f"span {span_id} is not in trajectory {target.trajectory_id} (trace {target.sample_id}); "
            "is the label file for this trace?",
        )
    return target.spans[key]


def _step(idx: Optional[int], message: Optional[int], target: Any, row: _Row, path: Path) -> Optional[int]:
    """A step index, given as one or as the 1-based index of the source message the step came from."""
    if message is not None:
        if message not in target.messages:
            known = (
                f"its steps come from messages {min(target.messages)}-{max(target.messages)}"
                if target.messages
                else "its steps carry no message index (import the transcript again with this evalrx)"
            )
            raise ImportFormatError(
                path,
                row.where,
                f"message {message} is not a step of trajectory {target.trajectory_id} "
                f"(case {target.sample_id}): {known}; is the label file for this transcript?",
            )
        return target.messages[message]
    if idx is not None and not 0 <= idx < max(target.n_steps, 1):
        raise ImportFormatError(
            path,
            row.where,
            f"step {idx} is outside trajectory {target.trajectory_id}'s steps 0..{target.n_steps - 1}",
        )
    return idx


# ---------------------------------------------------------------- reading the file


def _read(path: Path) -> "tuple[str, list[_Row]]":
    data = path.read_bytes()
    if not data.strip():
        raise ImportFormatError(path, 1, "the file is empty; give a labels CSV, labels JSONL or AgentRx ground truth")
    text = decode_utf8(data, path, None, first=True).lstrip("\ufeff")
    head = text.lstrip()[:1]
    if head == "[":
        return AGENTRX, _agentrx(parse_json(data, path, None, ImportLimits(), first=True, what="file"), path)
    if head == "{":
        whole = _whole_object(data)
        if isinstance(whole, dict) and isinstance(whole.get("errors"), list):
            return TRAIL, _trail(whole, path)
        return "jsonl", _jsonl(text, path)
    return "csv", _csv(text, path)


def _whole_object(data: bytes) -> Any:
    """The file as one JSON value when it is one (a TRAIL annotation), else None (JSONL: one object a line)."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _trail(doc: dict, path: Path) -> "list[_Row]":
    """TRAIL's annotation of one trace: a step label per error, at the span it names (`location`), and one
    whole-trajectory label whose first wrong step is the earliest error's. The trace is the file's `trace_id`,
    else the file's name (TRAIL names each file after its trace)."""
    try:
        case = span_key(doc.get("trace_id"), "trace_id") or path.stem
    except ValueError as exc:
        raise ImportFormatError(path, "trace_id", str(exc)) from None
    rows: list = []
    for n, e in enumerate(doc["errors"], 1):
        where = f"error {n}"
        if not isinstance(e, dict) or not _text(e.get("location")) or not _text(e.get("category")):
            raise ImportFormatError(path, where, "a TRAIL error needs `category` and `location` (a span id)")
        note = " ".join(
            p
            for p in (
                f"TRAIL category: {_text(e['category'])}.",
                _text(e.get("description")),
                f"Evidence: {_text(e.get('evidence'))}" if _text(e.get("evidence")) else None,
                f"Impact: {_text(e.get('impact'))}." if _text(e.get("impact")) else None,
            )
            if p
        )
        rows.append(
            _Row(
                where=where,
                sample_id=case,
                outcome="fail",
                kind=_kind(e["category"], path, where, TRAIL),
                step_span=_text(e["location"]),
                note=note,
            )
        )
    if rows:
        rows.append(
            _Row(where="errors", sample_id=case, outcome="fail", first_wrong_span=[(r.step_span, r.kind) for r in rows])
        )
    return rows


def _int(value: Any, path: Path, where: Any, name: str, *, least: int = 0) -> Optional[int]:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ImportFormatError(path, where, f"{name} must be a whole number, got {value!r}")
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ImportFormatError(path, where, f"{name} must be a whole number, got {value!r}") from None
    if n < least:
        raise ImportFormatError(path, where, f"{name} must be at least {least}, got {n}")
    return n


def _text(value: Any) -> Optional[str]:
    if value is None:
        return None
    value = str(value).strip()
    return value or None


def _outcome(value: Any, path: Path, where: Any, *, default: Optional[str]) -> Optional[str]:
    value = _text(value)
    if value is None:
        return default
    value = value.lower()
    if value not in OUTCOMES:
        raise ImportFormatError(path, where, f"outcome must be one of {', '.join(OUTCOMES)}, got {value!r}")
    return value


def _kind(value: Any, path: Path, where: Any, source: Optional[str] = None) -> Optional[str]:
    value = _text(value)
    if value is None:
        return None
    try:
        return map_category(value, source)
    except ValueError as exc:
        raise ImportFormatError(path, where, str(exc)) from None


def _csv(text: str, path: Path) -> "list[_Row]":
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        raise ImportFormatError(path, 1, f"not readable as CSV ({exc})") from None
    missing = [c for c in ("case_id", "outcome") if c not in header]
    if missing:
        raise ImportFormatError(
            path,
            1,
            f"a labels CSV needs the columns {', '.join(S.LABEL_COLUMNS)} (as `export_labels_csv` writes them); "
            f"missing {', '.join(missing)} (a JSONL file needs one JSON object per line)",
        )
    rows = []
    records = iter(reader)
    while True:
        try:
            rec = next(records, None)
        except csv.Error as exc:  # a stray carriage return in a cell, a NUL
            raise ImportFormatError(path, reader.line_num, f"not readable as CSV ({exc})") from None
        if rec is None:
            break
        where = reader.line_num
        if None in rec:
            raise ImportFormatError(path, where, f"more cells than the header's {len(header)} columns")
        rec = {k: _unquote(v) for k, v in rec.items()}
        if not _text(rec.get("case_id")):
            raise ImportFormatError(path, where, "case_id is empty; every label needs the case it is about")
        created = _text(rec.get("created_at"))
        try:
            when = datetime.fromisoformat(created) if created else None
        except ValueError:
            raise ImportFormatError(path, where, f"created_at {created!r} is not an ISO date and time") from None
        rows.append(
            _Row(
                where=where,
                sample_id=_text(rec["case_id"]),
                attempt=_int(rec.get("attempt"), path, where, "attempt", least=1),
                outcome=_outcome(rec.get("outcome"), path, where, default=None),
                kind=_kind(rec.get("failure_kind"), path, where),
                first_wrong_step=_int(rec.get("first_wrong_step"), path, where, "first_wrong_step"),
                step_idx=_int(rec.get("step_idx"), path, where, "step_idx"),
                note=_text(rec.get("note")),
                annotator=_text(rec.get("annotator")),
                created_at=when,
                agent=_text(rec.get("agent")),
            )
        )
    return rows


def _unquote(value: Any) -> Any:
    """Undo the "'" `export_labels_csv` puts before a cell a spreadsheet would read as a formula."""
    if isinstance(value, str) and value[:1] == "'" and value[1:2] in _FORMULA:
        return value[1:]
    return value


def _jsonl(text: str, path: Path) -> "list[_Row]":
    rows = []
    limits = ImportLimits()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        rec = parse_json(line.encode("utf-8"), path, lineno, limits)
        if not isinstance(rec, dict):
            raise ImportFormatError(path, lineno, f"a label must be a JSON object, got {type(rec).__name__}")
        case = rec.get("sample_id", rec.get("case_id"))
        tid = _int(rec.get("trajectory_id"), path, lineno, "trajectory_id")
        if _text(case) is None and tid is None:
            raise ImportFormatError(
                path, lineno, "a label needs `case_id` (or `sample_id`, with `attempt`) or a store `trajectory_id`"
            )
        step = rec.get("step", rec.get("first_wrong_step"))
        message = _int(rec.get("message"), path, lineno, "message", least=1)
        if step is not None and message is not None:
            raise ImportFormatError(path, lineno, "give the first wrong step as `step` or as `message`, not both")
        kind = _kind(rec.get("kind", rec.get("failure_kind")), path, lineno)
        wrong = kind is not None or step is not None or message is not None
        rows.append(
            _Row(
                where=lineno,
                sample_id=_text(case),
                attempt=_int(rec.get("attempt"), path, lineno, "attempt", least=1),
                trajectory_id=tid,
                outcome=_outcome(rec.get("outcome"), path, lineno, default="fail" if wrong else None),
                kind=kind,
                first_wrong_step=_int(step, path, lineno, "step"),
                first_wrong_message=message,
                note=_text(rec.get("note")),
                annotator=_text(rec.get("annotator")),
                agent=_text(rec.get("agent")),
            )
        )
    return rows


def _agentrx_row(where: str, case: Optional[str], f: dict, reason: Any, **place: Any) -> _Row:
    """The label row of one AgentRx failure (`place`: where it stands: its step, or the first wrong one)."""
    return _Row(
        where=where,
        sample_id=case,
        outcome="fail",
        kind=f["kind"],
        note=_note(f, reason),
        agent=_text(f["f"].get("failed_agent")),
        **place,
    )


def _agentrx(doc: Any, path: Path) -> "list[_Row]":
    """One whole-trajectory label per record (its root cause) and one step label per labelled failure."""
    rows: list = []
    for n, rec in enumerate(doc, 1):
        where = f"record {n}"
        if not isinstance(rec, dict) or "trajectory_id" not in rec or not isinstance(rec.get("failures"), list):
            raise ImportFormatError(
                path,
                where,
                "AgentRx ground truth is a list of {trajectory_id, failures: [...], root_cause: {failure_id}}",
            )
        case = _text(rec["trajectory_id"])
        where = f"record {n} (trajectory_id {case})"
        failures: dict = {}
        for f in rec["failures"]:
            if not isinstance(f, dict) or "failure_id" not in f or "step_number" not in f:
                raise ImportFormatError(path, where, "each failure needs failure_id, step_number and failure_category")
            category = _text(f.get("failure_category"))
            if category is None:
                raise ImportFormatError(path, where, f"failure {f['failure_id']} has no failure_category")
            fid = f["failure_id"]
            if isinstance(fid, bool) or not isinstance(fid, (int, str)):
                raise ImportFormatError(path, where, f"failure_id must be a number or text, got {fid!r}")
            failures[fid] = {
                "message": _int(f["step_number"], path, where, "step_number", least=1),
                "category": category,
                "kind": _kind(category, path, where, AGENTRX),
                "f": f,
            }
        root_cause = rec.get("root_cause") or {}
        root_id = root_cause.get("failure_id") if isinstance(root_cause, dict) else None
        if isinstance(root_id, (list, dict)) or root_id not in failures:
            raise ImportFormatError(
                path, where, f"root_cause failure_id {root_id!r} is none of the failures' ids {list(failures)}"
            )
        for fid, f in failures.items():
            failure = {"message": f["message"], "category": f["category"], "root": fid == root_id}
            rows.append(_agentrx_row(where, case, f, None, step_message=f["message"], failure=failure))
        root = failures[root_id]
        reason = root_cause.get("reason_for_root_cause")
        rows.append(_agentrx_row(where, case, root, reason, first_wrong_message=root["message"]))
    return rows


def _note(failure: dict, root_reason: Any) -> str:
    f = failure["f"]
    parts = [
        f"AgentRx category: {failure['category']}.",
        _text(f.get("step_reason")),
        _text(f.get("category_reason")),
        f"Root cause: {_text(root_reason)}" if _text(root_reason) else None,
    ]
    return " ".join(p for p in parts if p)


__all__ = ["FailureStep", "LabelImportResult", "LabelPreview", "import_labels", "labels_format", "preview_labels"]
