"""A labels file dropped on the Import page: which run it labels (the user may pick another run that holds its
cases), then the labels stored on that run by `evalrx.interop.import_labels`."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from components.importer import shown_error
from components.safe import md_escape, short
from evalrx.interop import ImportFormatError, import_labels, preview_labels
from evalrx.store import get_run

_TITLES = {"csv": "labels CSV", "jsonl": "labels JSONL", "agentrx": "AgentRx ground truth", "trail": "TRAIL annotation"}


def labels_form(path: Path, store) -> None:
    """Preview a labels file, let the user choose the run, and import the labels onto it."""
    try:
        pre = preview_labels(path, store=store)
    except (ImportFormatError, ValueError) as exc:
        st.error(md_escape(shown_error(exc, path)))
        st.caption("Nothing was stored. Fix the file and drop it again.")
        return
    title = _TITLES.get(pre.format, pre.format)
    cols = st.columns(2)
    cols[0].metric("Format", title)
    cols[1].metric("Labels", pre.n_labels)
    if not pre.runs:
        st.error(
            md_escape(
                f"{path.name} labels cases that are in no run of this store; import the run they label "
                "first, then these labels."
            )
        )
        return
    names = {rid: get_run(rid, store=store) for rid, _ in pre.runs}
    counts = dict(pre.runs)

    def label(rid: int) -> str:
        name = short(names[rid].name if names[rid] is not None else "", 60)
        return f"run {rid}: {name} ({counts[rid]} of {pre.n_labels} labels)"

    if len(pre.runs) == 1:
        rid = pre.runs[0][0]
        st.info(md_escape(f"These labels are for {label(rid)}."))
    else:
        st.info(md_escape(f"The labelled cases are in {len(pre.runs)} runs; choose the run these labels are for."))
        rid = st.selectbox("Run", [r for r, _ in pre.runs], format_func=label, key="labels_run")
    annotator = st.text_input("Annotator (optional; default: the file's own names)", key="labels_annotator")
    if not st.button("Import labels", type="primary", key="labels_go"):
        return
    try:
        res = import_labels(path, run_id=rid, annotator=annotator or None, store=store)
    except (ImportFormatError, ValueError) as exc:
        st.error(md_escape(shown_error(exc, path)))
        st.caption("Nothing was stored: a labels import is one transaction.")
        return
    same = f", {res.n_unchanged} already there" if res.n_unchanged else ""
    st.success(
        md_escape(f"Stored {res.n_labels} labels and {res.n_step_labels} step labels ({title}) on {label(rid)}{same}.")
    )
    if res.kinds_created:
        st.caption(md_escape("New custom kinds: " + ", ".join(res.kinds_created)))
    if res.unmatched:
        shown = "; ".join(res.unmatched[:10]) + (
            f" and {len(res.unmatched) - 10} more" if len(res.unmatched) > 10 else ""
        )
        st.warning(md_escape(f"{len(res.unmatched)} not in run {rid}: {shown}"))
    st.page_link(
        "views/trajectories.py", label=f"Open run {rid}", icon=":material/list:", query_params={"run": str(rid)}
    )
