"""The box of work in progress on the Runs page (a run, a judge job): what it is, a Cancel button, its progress."""

from __future__ import annotations

from typing import Any, Callable

import streamlit as st


def live_job(
    keys: "tuple[str, str]", heading: str, cancel: Callable[..., None], args: tuple, job: Any, text: str
) -> None:
    """`keys`: the box's and the Cancel button's widget keys; `job` has `cancel_requested` and `progress` (0..1)."""
    box_key, cancel_key = keys
    with st.container(border=True, key=box_key):
        head, btn = st.columns([5, 1], vertical_alignment="center")
        head.markdown(heading)
        btn.button(
            "Cancel",
            key=cancel_key,
            icon=":material/stop_circle:",
            disabled=job.cancel_requested,
            on_click=cancel,
            args=args,
            width="stretch",
        )
        st.progress(job.progress, text=text)
