"""Parquet export: one row per trajectory, flat columns for filtering and the nested parts as JSON (pyarrow)."""

from __future__ import annotations

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

    flat = []
    for r in rows:
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
    pq.write_table(pa.Table.from_pylist(flat), path)
    return len(flat)


register(
    Format(name="parquet", title="Parquet", write=_write, suffixes=(".parquet",), mime="application/vnd.apache.parquet")
)
