"""The sidebar: store, worker status (starting one when needed), queue length."""

from __future__ import annotations

import time

import streamlit as st

from components.safe import md_escape, show_pre
from components.worker import WorkerStatus, ensure_local_worker, log_tail

# Look at the worker at most this often per browser session (each look is a lock + a query).
CHECK_EVERY_S = 5.0


def worker_status(store) -> WorkerStatus:
    """Ensure the local worker (throttled per session) and return its status."""
    last = st.session_state.get("_worker_checked", 0.0)
    cached = st.session_state.get("_worker_status")
    if cached is None or time.monotonic() - last > CHECK_EVERY_S:
        cached = ensure_local_worker(store)
        st.session_state["_worker_status"] = cached
        st.session_state["_worker_checked"] = time.monotonic()
    return cached


def render_sidebar(store) -> None:
    status = worker_status(store)
    with st.sidebar:
        n = len(status.workers)
        if status.state == "alive":
            busy = sum(1 for w in status.workers if w.get("status") == "busy")
            st.markdown(f":green-badge[:material/bolt: worker alive] {n} worker{'s' * (n != 1)}, {busy} busy")
        elif status.state == "started":
            st.markdown(":orange-badge[:material/hourglass_top: worker starting]")
        elif status.state == "disabled":
            color = "green" if n else "gray"
            st.markdown(f":{color}-badge[{n} remote worker{'s' * (n != 1)}] local worker off")
        else:
            st.markdown(":red-badge[:material/error: worker not running]")
        with st.expander("Worker details"):
            st.caption(md_escape(status.message) if status.message else "")
            for w in status.workers:
                st.caption(md_escape(f"{w['id']} · {w['status']} · job {w.get('job_id') or '-'}"))
            tail = log_tail(status.log, 15)
            if tail:
                show_pre(tail)
        st.caption("Store: " + md_escape(store.display_url))
