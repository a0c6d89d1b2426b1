"""Who may reach the app: loopback only, unless a login (Streamlit's OIDC `st.login`) guards it.

Streamlit listens on every interface unless told otherwise; `.streamlit/config.toml` binds
127.0.0.1. Served on any other address without `[auth]` in `.streamlit/secrets.toml`, the app
shows one line saying how to fix it and nothing else, unless the operator sets
`EVALRX_ALLOW_UNAUTHENTICATED=1` (for example behind an authenticating proxy).
"""

from __future__ import annotations

import os
from typing import Optional

import streamlit as st

LOOPBACK = ("127.0.0.1", "localhost", "::1")
ENV_OPEN = "EVALRX_ALLOW_UNAUTHENTICATED"
# A page user may name a command (an MCP server) or a Python function for the worker to run only when the
# app is private to this machine's user, or the operator allows it for every logged-in user.
ENV_COMMANDS = "EVALRX_APP_COMMANDS"


def commands_allowed() -> bool:
    """May the pages name commands and Python functions for the worker to run (see `ENV_COMMANDS`)?"""
    if os.environ.get(ENV_COMMANDS, "").strip() not in ("", "0"):
        return True
    return (st.get_option("server.address") or "").strip() in LOOPBACK


def exposure_problem(address: Optional[str], auth: bool, allowed: bool) -> Optional[str]:
    """What is wrong with serving on `address` (None: nothing). An empty address means every interface."""
    if (address or "").strip() in LOOPBACK or auth or allowed:
        return None
    where = address or "every network interface"
    return (
        f"evalrx is being served on {where} without a login. Serve it on 127.0.0.1 "
        "(`make run` does), configure a login ([auth] in .streamlit/secrets.toml, see docs/security.md), "
        f"or, behind an authenticating proxy, set {ENV_OPEN}=1."
    )


def _auth_configured() -> bool:
    try:
        return "auth" in st.secrets
    except Exception:  # no secrets file: no login configured
        return False


def guard() -> None:
    """Stop the page unless the app is private (loopback) or guarded by a login; log in when one is configured."""
    auth = _auth_configured()
    problem = exposure_problem(
        st.get_option("server.address"), auth, os.environ.get(ENV_OPEN, "").strip() not in ("", "0")
    )
    if problem:
        st.error(problem)
        st.stop()
    if auth and not st.user.is_logged_in:
        st.title("evalrx")
        st.button("Log in", on_click=st.login, type="primary")
        st.stop()
