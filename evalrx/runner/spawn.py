"""Start one detached local worker for the UI, never two (by heartbeat in the store)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from typing import Optional

from evalrx.store import Store, resolve, start_worker_unless_alive

ENV_NO_WORKER = "EVALRX_NO_LOCAL_WORKER"


def ensure_worker(
    *, store: "Store | str | None" = None, within_s: float = 30.0, log_path: Optional[str] = None
) -> Optional[int]:
    """Start a detached `evalrx worker` unless a live one heartbeats on this store.

    Safe on every Streamlit rerun, refresh and tab: the check and the new worker's row
    are written in one serialised transaction, so concurrent callers start one worker.
    Set `EVALRX_NO_LOCAL_WORKER=1` when workers run elsewhere. The worker stops when
    this process exits or the store's SQLite file is deleted (`evalrx.runner.parent_watch`).

    Returns:
        The new worker's pid, or None when one was alive (or local workers are turned off).
    """
    if os.environ.get(ENV_NO_WORKER, "").strip() not in ("", "0"):
        return None
    st = resolve(store)

    def start() -> "tuple[str, int]":
        worker_id = f"{socket.gethostname()}:spawned:{uuid.uuid4().hex[:8]}"
        env = dict(os.environ, EVALRX_DATABASE_URL=st.url)
        log = open(log_path, "ab") if log_path else None
        out = log if log is not None else subprocess.DEVNULL
        proc = subprocess.Popen(
            [sys.executable, "-m", "evalrx.runner", "--worker-id", worker_id, "--parent-pid", str(os.getpid())],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
        if log is not None:
            log.close()  # the worker holds its own copy
        return worker_id, proc.pid

    return start_worker_unless_alive(st, within_s, start)
