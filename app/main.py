"""evalrx app entry point: `streamlit run app/main.py`.

The app reads the store and the spec registry; it never imports torch or a backend
runtime (all model work happens in the worker process).
"""

from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="evalrx", layout="wide")

pages = [
    st.Page("pages/models.py", title="Models", icon=":material/memory:", url_path="models", default=True),
]
st.navigation(pages).run()
