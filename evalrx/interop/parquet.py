"""Parquet export: one row per trajectory, flat columns for filtering and the nested parts as JSON (pyarrow).

Pictures are bytes in the `images` column (`step_idx` null for the case's); the JSON columns name
them by hash (`sha256`, `mime`) rather than carry them as base64 text.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Iterator, Optional

from evalrx.interop.registry import ExportOptions, Format, register


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


register(
    Format(name="parquet", title="Parquet", write=_write, suffixes=(".parquet",), mime="application/vnd.apache.parquet")
)
