"""Import: drop a file (Inspect .eval or .json log, ATIF, evalrx or OpenAI chat JSONL, a team's log, spans, any
export of ours), see what it holds, then import it with a progress bar. The import runs in the background; other
pages stay usable. A labels file goes onto the run it labels instead."""

from __future__ import annotations

import uuid

import streamlit as st
from components import importer
from components.data import store
from components.labels_upload import labels_form
from components.safe import md_escape, short

from evalrx.interop import ImportFormatError, labels_format, preview_file

st.title("Import")
st.caption(
    "Trajectories made elsewhere: Inspect AI logs (.eval, .json), ATIF documents, evalrx exports, "
    "OpenAI chat-messages JSONL, tau-bench results, multi-agent logs (Who&When, Magentic-One) and traces "
    "(OpenInference, Phoenix, TRAIL, OTLP JSON: one trajectory a trace), and every export of this app (JSONL, "
    "Parquet, ATIF with its pictures, OTLP). Human labels (a labels CSV or JSONL, AgentRx ground truth, a TRAIL "
    "annotation) go onto the run they label. The format is read from the content, not the name."
)

key = st.session_state.setdefault("import_key", uuid.uuid4().hex)
job = importer.current(key)

if job is None:
    upload = st.file_uploader("File to import", key="import_upload", help=importer.upload_limit())
    st.caption(importer.upload_limit())
    if upload is None:
        st.stop()
    path = importer.save_upload(upload.name, upload.getvalue())
    if labels_format(path) is not None:
        labels_form(path, store())
        st.stop()
    try:
        pre = preview_file(path, store=store())
    except ImportFormatError as exc:
        st.error(md_escape(importer.shown_error(exc, path)))
        st.caption("Nothing was imported. Fix the file (or raise the limit the message names) and drop it again.")
        st.stop()
    except ValueError as exc:
        st.error(md_escape(importer.shown_error(exc, path)))
        st.stop()
    cols = st.columns(5)
    cols[0].metric("Format", pre.format)
    cols[1].metric("Trajectories", pre.n_trajectories)
    cols[2].metric("Cases", pre.n_cases)
    cols[3].metric("Attempts (epochs)", pre.max_attempt)
    cols[4].metric("Models", len(pre.models))
    if pre.models:
        st.caption("Models: " + ", ".join(md_escape(short(m, 60)) for m in pre.models))
    for note in pre.notes:
        st.warning(md_escape(note))
    st.subheader(f"First {len(pre.first)} trajectories")
    st.dataframe(
        [
            {
                "case": short(c.id, 40),
                "attempt": tr.attempt,
                "outcome": tr.outcome.value,
                "steps": len(tr.steps),
                "goal": short(tr.goal, 80),
                "final answer": short(tr.final_answer, 80),
            }
            for c, tr in pre.first
        ],
        hide_index=True,
        width="stretch",
    )
    again = False
    if pre.already_imported_as:
        runs = ", ".join(str(r) for r in pre.already_imported_as)
        st.info(f"This file was already imported as run {runs}.")
        again = st.checkbox("Import it again as a new run", key="import_again")
    name = st.text_input("Run name (optional)", key="import_name")
    if st.button("Import", type="primary", disabled=bool(pre.already_imported_as) and not again, key="import_go"):
        importer.start(key, path, pre.n_trajectories, store(), again=again, name=name)
        st.rerun()
    st.stop()


@st.fragment(run_every=0.5)
def progress() -> None:
    job = importer.current(key)
    if job is None:
        return
    st.progress(
        min(job.done / job.total, 1.0),
        text=f"Imported {job.done:,} of {job.total:,} trajectories ({job.rate:,.0f} a second)",
    )
    if not job.finished:
        st.caption("You can use the other pages meanwhile.")
        return
    if job.error:
        st.error(md_escape(job.error))
        st.caption("Nothing was written: an import is one transaction.")
    elif job.result.already_imported:
        st.info(f"Already imported as run {', '.join(map(str, job.result.run_ids))}; nothing written.")
    else:
        st.success(
            f"Imported {job.result.n_trajectories} trajectories ({job.result.format}) "
            f"into run {', '.join(map(str, job.result.run_ids))}."
        )
        for rid in job.result.run_ids:
            st.page_link(
                "views/trajectories.py", label=f"Open run {rid}", icon=":material/list:", query_params={"run": str(rid)}
            )
    if st.button("Import another file", key="import_another"):
        importer.forget(key)
        st.session_state.pop("import_upload", None)
        st.rerun(scope="app")


progress()
