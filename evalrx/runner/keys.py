"""Which API key a worker sends where.

A run whose key was given for it alone (`evalrx run --api-key-env`, New run) is served by a worker
that holds that key in `EVALRX_RUN_KEY` and sends it only to the run's own base URL. Any other API
run gets the worker's own `OPENAI_API_KEY` only where `EVALRX_KEY_HOSTS` allows the URL's host.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from evalrx.config import RunConfig

log = logging.getLogger("evalrx.worker")  # the worker's log: these decisions are the worker's

ENV_KEY_HOSTS = "EVALRX_KEY_HOSTS"
ENV_RUN_KEY = "EVALRX_RUN_KEY"  # the key of the one run a pinned worker serves (never on a command line)
DEFAULT_KEY_HOSTS = ("127.0.0.1", "localhost", "::1", "api.openai.com")


def key_hosts() -> "set[str]":
    """Hosts a worker's own `OPENAI_API_KEY` may be sent to (`EVALRX_KEY_HOSTS`, comma-separated)."""
    raw = os.environ.get(ENV_KEY_HOSTS)
    hosts = DEFAULT_KEY_HOSTS if raw is None else [h for h in raw.split(",")]
    return {h.strip().lower().strip("[]") for h in hosts if h.strip()}


def api_key_for(run: RunConfig, run_key: Optional[str]) -> "tuple[Optional[str], Optional[str]]":
    """(key, base_url) to call a run's API with: its own bound key to its own URL, or this worker's
    environment key only where `EVALRX_KEY_HOSTS` allows that URL's host (else no key at all)."""
    from urllib.parse import urlsplit

    from evalrx.models.backends.api import DEFAULT_BASE_URL
    from evalrx.models.backends.api_secrets import PLACEHOLDER_KEY

    url = run.base_url or run.runtime.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    if run_key:
        return run_key, url
    host = (urlsplit(url).hostname or "").lower()
    if os.environ.get("OPENAI_API_KEY") and host not in key_hosts():
        log.warning(
            "not sending this worker's OPENAI_API_KEY to %s (add the host to %s to allow it)", host, ENV_KEY_HOSTS
        )
        return PLACEHOLDER_KEY, url
    return None, url  # the backend reads the environment's key


__all__ = ["DEFAULT_KEY_HOSTS", "ENV_KEY_HOSTS", "ENV_RUN_KEY", "api_key_for", "key_hosts"]
