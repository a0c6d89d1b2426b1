"""The app's handle on the store: one cached `Store` per process, schema checked once.

Pages pass `store=store()` to every `evalrx.store` call, so a rerun never pays for a
schema check or a new engine.
"""

from __future__ import annotations

import streamlit as st

from evalrx.store import SchemaError, Store, StoreUnavailable, connect, default_url


@st.cache_resource(show_spinner=False)
def _connect(url: str) -> Store:
    return connect(url)  # raises SchemaError (not cached) until the schema is there


def store() -> Store:
    """The store at `$EVALRX_DATABASE_URL` (or the default file), schema-checked once per process."""
    return _connect(default_url())


def store_or_explain() -> "Store | None":
    """The store, or None after showing what to do when its schema is missing or out of date."""
    try:
        return store()
    except StoreUnavailable as exc:  # nothing to upgrade: the database is not there
        st.error(str(exc))
        return None
    except SchemaError as exc:
        st.error(str(exc))
        st.caption("`evalrx db upgrade` creates or upgrades the schema (`make run` does it for you).")
        newer = "newer than this evalrx" in str(exc)
        label = "Create the schema now" if "no evalrx schema yet" in str(exc) else "Upgrade the schema now"
        if not newer and st.button(label, type="primary", key="upgrade-schema"):
            from evalrx.store import upgrade

            upgrade(default_url())
            _connect.clear()
            st.rerun()
        return None
