"""evalrx app entry point: `streamlit run app/main.py`.

The app reads the store and the spec registry and writes job requests, labels and
cancel flags; it never imports torch or a backend runtime (all model work happens in
the worker process, which the app starts when none is alive).
"""

from __future__ import annotations

import streamlit as st
from components.access import guard
from components.data import store_or_explain
from components.labelling import show_flash
from components.safe import TEXT_STYLE
from components.sidebar import render_sidebar

st.set_page_config(page_title="evalrx", page_icon=":material/troubleshoot:", layout="wide")
guard()  # loopback only, unless a login guards the app
st.html(TEXT_STYLE)  # plain text drawn like code, on every page

pages = {
    "Runs": [
        st.Page("views/runs.py", title="Runs", icon=":material/play_circle:", url_path="runs", default=True),
        st.Page("views/new_run.py", title="New run", icon=":material/add_circle:", url_path="new"),
        st.Page("views/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"),
    ],
    "Inspect": [
        st.Page("views/trajectories.py", title="Trajectories", icon=":material/list:", url_path="trajectories"),
        st.Page("views/trajectory.py", title="Trajectory", icon=":material/timeline:", url_path="trajectory"),
        st.Page("views/label.py", title="Label queue", icon=":material/label:", url_path="label"),
        st.Page("views/adjudicate.py", title="Adjudicate", icon=":material/gavel:", url_path="adjudicate"),
        st.Page("views/dashboard.py", title="Dashboard", icon=":material/monitoring:", url_path="dashboard"),
    ],
    "Setup": [
        st.Page("views/import_data.py", title="Import", icon=":material/upload_file:", url_path="import"),
        st.Page("views/models.py", title="Models", icon=":material/memory:", url_path="models"),
    ],
}
nav = st.navigation(pages)
store = store_or_explain()
if store is None:
    st.stop()
render_sidebar(store)
show_flash()
nav.run()
