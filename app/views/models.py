"""Models: the spec registry and what each backend provides for each spec."""

import streamlit as st
from components.registry_view import backend_rows, spec_rows

st.title("Models")
st.caption(
    "Every model evalrx knows, and the capabilities each backend gives it. "
    "White-box analyzers need hf_local (logits, hidden states, attention)."
)
rows = spec_rows()
st.subheader(f"{len(rows)} model specs")
st.table(rows)
st.subheader("Backends")
st.table(backend_rows())
st.caption("Add your own model with `evalrx.specs.register_spec(ModelSpec(...))`.")
