"""Export buttons: a run, or a filtered set of trajectories, as JSONL, Parquet, ATIF or OpenTelemetry
(OTLP JSON), or its labels alone as CSV. The file is written by `evalrx.interop` and handed to the browser."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable, Optional, Sequence

import streamlit as st

from components.safe import md_escape
from evalrx.interop import formats

# label -> (export format, file suffix, mime): the registry's writers, then the labels alone
FORMATS = {f.export_label: (f.exports_as, f.suffixes[0], f.mime) for f in formats() if f.write}
FORMATS["Labels (CSV)"] = ("labels", ".labels.csv", "text/csv")


def write_export(
    label: str,
    out_dir: Path,
    stem: str,
    *,
    run_id: Optional[int] = None,
    trajectory_ids: Optional[Sequence[int]] = None,
    store=None,
) -> tuple[Path, int]:
    """Write one export into `out_dir`; returns (file, rows written)."""
    from evalrx.interop import bundle, export_labels_csv, export_run, export_trajectories

    fmt, suffix, _ = FORMATS[label]
    path = out_dir / f"{stem}{suffix}"
    if fmt == "labels":
        n = export_labels_csv(path, run_id=run_id, trajectory_ids=trajectory_ids, store=store)
    elif trajectory_ids is not None:
        n = export_trajectories(trajectory_ids, path, fmt=fmt, store=store)
    else:
        n = export_run(run_id, path, fmt=fmt, store=store)
    return bundle(path), n  # an ATIF file whose pictures lie beside it goes as a zip of both


def export_controls(
    key: str,
    stem: str,
    *,
    run_id: Optional[int] = None,
    trajectory_ids: Optional[Callable[[], Sequence[int]]] = None,
    store=None,
) -> None:
    """A format choice, a Prepare button and, once written, the download button. `trajectory_ids` is
    called only when Prepare is pressed (a filter's ids are not read on every rerun)."""
    pick, go = st.columns([3, 1], vertical_alignment="bottom")
    label = pick.radio("Export as", list(FORMATS), key=f"{key}-fmt", horizontal=True)
    if go.button("Prepare", key=f"{key}-prepare", icon=":material/download:", width="stretch"):
        out = Path(tempfile.mkdtemp(prefix="evalrx-export-"))
        try:
            ids = trajectory_ids() if trajectory_ids is not None else None
            path, n = write_export(label, out, stem, run_id=run_id, trajectory_ids=ids, store=store)
        except (ValueError, ImportError) as exc:  # e.g. pyarrow or opentelemetry-proto not installed
            st.error(md_escape(str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
            return
        st.session_state[f"{key}-file"] = (str(path), n, label)
    ready = st.session_state.get(f"{key}-file")
    if ready and ready[2] == label and Path(ready[0]).exists():
        path = Path(ready[0])
        st.download_button(
            f"Download {path.name} ({ready[1]:,} rows)",
            data=path.read_bytes(),
            file_name=path.name,
            mime="application/zip" if path.suffix == ".zip" else FORMATS[label][2],
            key=f"{key}-download",
            type="primary",
        )
