"""Parquet: one row per trajectory, flat columns for filtering and the nested parts as JSON (pyarrow).

Pictures are bytes in the `images` column (`step_idx` null for the case's); the JSON columns name
them by hash (`sha256`, `mime`) rather than carry them as base64 text. `rest_json` holds the row's
other fields (the run's config, the case's meta, offered tools, every diagnosis), so an export reads
back as the run it came from.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Iterator, Optional

from evalrx.interop.errors import ImportFormatError
from evalrx.interop.evalrx_jsonl import record_of_row
from evalrx.interop.limits import check_size
from evalrx.interop.records import Reading, Record
from evalrx.interop.registry import ExportOptions, Format, register

MAGIC = b"PAR1"
_BATCH = 64  # rows decoded at once: a large file is never whole in memory
# the export row's fields with columns of their own; the rest (the run's name and config with them) go into `rest_json`
_COLUMNS = {"case_id", "sample_id", "attempt", "goal", "final_answer", "ground_truth", "outcome", "steps", "metrics"}
_COLUMNS |= {"labels", "case", "tags", "diagnosis"}


def _write(rows: Iterator[dict], path: Optional[Path], options: ExportOptions) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError("Parquet export needs pyarrow: pip install 'evalrx[export]'") from None

    def dumps(v: Any) -> str:
        return json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)

    flat, images_of = [], []
    for r in rows:
        r, images = _pictures_apart(r)
        current: dict = next(
            (lab for lab in reversed(r["labels"]) if lab["step_idx"] is None and lab["is_current"]), {}
        )
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
                "label_kind": current.get("failure_kind"),  # the current human label's kind
                "first_wrong_step": current.get("first_wrong_step"),
                "note": current.get("note"),
                "tags": r["tags"],
                "steps_json": dumps(r["steps"]),
                "metrics_json": dumps(m),
                "labels_json": dumps(r["labels"]),
                "case_json": dumps(r["case"]),
                "failure_kind": r["diagnosis"]["kind"],  # the top diagnosis's kind
                "diagnosis_json": dumps(r["diagnosis"]),
                "rest_json": dumps({k: v for k, v in r.items() if k not in _COLUMNS}),
            }
        )
        images_of.append(images)
    picture = pa.struct(
        [("step_idx", pa.int32()), ("sha256", pa.string()), ("mime", pa.string()), ("data", pa.binary())]
    )
    table = pa.Table.from_pylist(flat).append_column("images", pa.array(images_of, type=pa.list_(picture)))
    pq.write_table(table, path)
    return len(flat)


def _pictures_apart(row: dict) -> tuple[dict, list]:
    """The row with each picture named by its hash only, and the pictures' bytes (the case's first)."""
    images: list = []

    def apart(picture: dict, step_idx: Any) -> dict:
        images.append(
            {
                "step_idx": step_idx,
                "sha256": picture["sha256"],
                "mime": picture["mime"],
                "data": base64.b64decode(picture["base64"]),
            }
        )
        return {"sha256": picture["sha256"], "mime": picture["mime"]}

    case = row.get("case") or {}
    if isinstance(case.get("image"), dict) and case["image"].get("base64"):
        row = {**row, "case": {**case, "image": apart(case["image"], None)}}
    if any(s.get("images") for s in row["steps"]):
        row = {
            **row,
            "steps": [
                {**s, "images": [apart(p, s["idx"]) for p in s["images"]]} if s.get("images") else s
                for s in row["steps"]
            ],
        }
    return row, images


def _read(reading: Reading) -> Iterator[Record]:
    """An evalrx Parquet export's rows as records, a batch at a time; each problem one line naming the row."""
    path = reading.path
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportFormatError(path, "file", "reading Parquet needs pyarrow: pip install 'evalrx[export]'") from None
    try:
        table = pq.ParquetFile(path)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # a damaged schema's names are not UTF-8
        raise ImportFormatError(path, "file", f"not a readable Parquet file ({exc})") from None
    missing = [c for c in ("case_id", "steps_json") if c not in table.schema_arrow.names]
    if missing:
        raise ImportFormatError(
            path, "file", f"a Parquet file, but not an evalrx export (it has no {' or '.join(missing)} column)"
        )
    reading.kinds.add("parquet")
    n = 0
    for flat in _rows(table, path):
        n += 1
        where = f"row {n}"
        check_size(_size(flat), path, where, reading.limits, what="row")
        try:
            record = record_of_row(_row_of(flat))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ImportFormatError(path, where, str(exc)) from None
        record.where = where
        yield record
    if n == 0:
        raise ImportFormatError(path, "file", "the file holds no trajectories")


def _rows(table: Any, path: Path) -> Iterator[dict]:
    import pyarrow as pa

    try:
        for batch in table.iter_batches(batch_size=_BATCH):
            yield from batch.to_pylist()
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # a damaged row group, text that is not UTF-8
        raise ImportFormatError(path, "file", f"not a readable Parquet file ({exc})") from None


def _size(flat: dict) -> int:
    """About how many bytes one row holds (its text and picture bytes)."""
    n = sum(len(v) for v in flat.values() if isinstance(v, (str, bytes)))
    return n + sum(len(p.get("data") or b"") for p in flat.get("images") or [] if isinstance(p, dict))


def _row_of(flat: dict) -> dict:
    """The export row a Parquet row was written from."""

    def loads(column: str, default: Any) -> Any:
        value = flat.get(column)
        try:
            return json.loads(value) if value is not None else default
        except ValueError:
            raise ValueError(f"`{column}` is not valid JSON") from None

    rest = loads("rest_json", {})  # absent from files written before it
    if not isinstance(rest, dict):
        raise ValueError("`rest_json` must be an object")
    row = {
        **rest,
        "run": rest.get("run") or {"name": flat.get("run_name")},
        "case_id": flat.get("case_id"),
        "sample_id": flat.get("sample_id") or flat.get("case_id"),
        "attempt": flat.get("attempt") or 1,
        "goal": flat.get("goal") or "",
        "final_answer": flat.get("final_answer"),
        "ground_truth": loads("ground_truth", None),
        "outcome": flat.get("outcome"),
        "steps": loads("steps_json", None),
        "metrics": loads("metrics_json", {}),
        "labels": loads("labels_json", []),
        "case": loads("case_json", {}),
        "tags": flat.get("tags") or [],
        "diagnosis": loads("diagnosis_json", None),
    }
    return _pictures_back(row, flat.get("images") or [])


def _pictures_back(row: dict, images: list) -> dict:
    """The row with each picture named by hash given its bytes again, from the `images` column."""
    data: dict = {
        p.get("sha256"): p["data"] for p in images if isinstance(p, dict) and isinstance(p.get("data"), bytes)
    }

    def back(picture: Any) -> Any:
        if isinstance(picture, dict) and "base64" not in picture and picture.get("sha256") in data:
            return {**picture, "base64": base64.b64encode(data[picture["sha256"]]).decode()}
        return picture

    case = row.get("case")
    if isinstance(case, dict) and isinstance(case.get("image"), dict):
        row["case"] = {**case, "image": back(case["image"])}
    if isinstance(row["steps"], list):
        row["steps"] = [
            {**s, "images": [back(p) for p in s["images"]]}
            if isinstance(s, dict) and isinstance(s.get("images"), list)
            else s
            for s in row["steps"]
        ]
    return row


register(
    Format(
        name="parquet",
        title="Parquet",
        sniff_bytes=lambda head: head.startswith(MAGIC),
        read_path=_read,
        write=_write,
        suffixes=(".parquet",),
        mime="application/vnd.apache.parquet",
    )
)
