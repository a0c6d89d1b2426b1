"""Stop a spawned worker when what it serves goes away: the process that started it, or its SQLite file.

A worker started by the app (or by a test) lives in its own session, so neither a signal
to the app's process group nor the app's exit reaches it. Linux's `PR_SET_PDEATHSIG` would
fire when the *thread* that spawned it ends (a Streamlit script thread ends after every
rerun), so a daemon thread polls instead, and asks the worker to stop the way an operator
would, with SIGTERM (it stops after the current case); a worker still running `grace_s`
later is ended at once (its job is requeued by the next worker to start).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from evalrx.store import pid_alive  # one definition of "is this process running"

log = logging.getLogger("evalrx.worker")

POLL_S = 1.0
GRACE_S = 60.0


def parent_gone(pid: int, started_under: int) -> bool:
    """True when the process `pid` that started this one has exited.

    Args:
        pid: the process to follow.
        started_under: `os.getppid()` when this process started. When it is `pid`, a
            change of parent (reparenting to init or a subreaper) is the exit, which no
            reuse of the pid can hide.
    """
    if pid == started_under:
        return os.getppid() != pid
    return not pid_alive(pid)


def file_id(path: Path) -> Optional[tuple]:
    """(device, inode) of `path`, or None when there is no such file: a new file at the path has another."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _stop_self(reason: str, grace_s: float) -> None:
    log.warning("%s: stopping this worker", reason)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    log.error("%s: still running %.0f s after SIGTERM; exiting now", reason, grace_s)
    logging.shutdown()
    os._exit(1)


def watch(
    *,
    parent_pid: Optional[int],
    started_under: int,
    store_path: Optional[Path] = None,
    poll_s: float = POLL_S,
    grace_s: float = GRACE_S,
    stop: Optional[Callable[[str, float], None]] = None,
) -> Optional[threading.Thread]:
    """Start a daemon thread that stops this process when its parent exits or its store file goes.

    Args:
        parent_pid: the process to follow (None or 0: do not follow one).
        started_under: `os.getppid()` read as early as possible in this process.
        store_path: a SQLite file: deleting or replacing it stops the worker (None: no check).
        poll_s: seconds between checks.
        grace_s: seconds between SIGTERM and a forced exit.
        stop: called with the reason and `grace_s` instead of signalling this process.

    Returns:
        The thread, or None when there is nothing to watch.
    """
    follow = parent_pid if parent_pid and parent_pid > 0 else None
    if follow is None and store_path is None:
        return None
    stop = stop or _stop_self
    opened = file_id(store_path) if store_path is not None else None

    def reason() -> Optional[str]:
        nonlocal opened
        if follow is not None and parent_gone(follow, started_under):
            return f"process {follow} that started this worker has exited"
        if store_path is not None:
            now = file_id(store_path)
            if opened is None:
                opened = now  # not created yet: follow the file from when it appears
            elif now != opened:
                return f"store file {store_path} was {'deleted' if now is None else 'replaced'}"
        return None

    def loop() -> None:
        while True:
            why = reason()
            if why:
                stop(why, grace_s)
                return
            time.sleep(poll_s)

    thread = threading.Thread(target=loop, name="evalrx-parent-watch", daemon=True)
    thread.start()
    return thread
