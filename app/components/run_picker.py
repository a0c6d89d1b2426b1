"""The Run picker that the Trajectories, Label queue and Adjudicate pages share: bound to the URL's `run`."""

from __future__ import annotations

from typing import Any, Callable, Optional

import streamlit as st

from components.data import store
from components.safe import md_escape
from evalrx.store import list_runs


@st.cache_data(ttl=5, show_spinner=False)
def run_names(url: str) -> dict:
    """Run id (as the URL writes it) -> the run's name or spec key, newest first."""
    return {str(r.id): r.name or r.spec_key or "" for r in list_runs(limit=500, store=store())}


def pick_run(where: Any, placeholder: str, on_change: Callable[[], None]) -> Optional[str]:
    """The picked run's id as the URL has it (a typed id is kept for the page to check), its name shown below."""
    runs = run_names(store().url)
    run_key = where.selectbox(
        "Run",
        list(runs),
        index=None,
        key="run",
        bind="query-params",
        accept_new_options=True,
        placeholder=placeholder,
        on_change=on_change,
    )
    if run_key in runs:
        where.caption(md_escape(runs[run_key]))
    return run_key
