"""Keep one local worker alive for the app (DESIGN.md §3) and report on workers.

Starting is `evalrx.runner.ensure_worker`: the heartbeat check and the new worker's
row are one serialised store transaction, so reruns, refreshes, tabs and several app
processes never start two. The worker stops when the app process exits (it follows the
process that started it, as every `python -m evalrx.runner` does: `evalrx.runner.parent_watch`),
so stopping the app leaves no worker behind. This module adds what the sidebar needs: the log file,
the status, and reaping of workers this process started (a dead child left as a zombie
would still look alive to the pid check).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ENV_OFF = "EVALRX_NO_LOCAL_WORKER"
HEARTBEAT_WITHIN_S = 30.0

_spawned: list[int] = []  # pids of workers this process started


@dataclass
class WorkerStatus:
    """What the sidebar shows about workers."""

    state: str  # alive | started | disabled | none
    workers: list = field(default_factory=list)  # alive_workers() rows, all hosts
    pid: Optional[int] = None
    log: Optional[str] = None
    message: str = ""


def disabled() -> bool:
    """True when `EVALRX_NO_LOCAL_WORKER` asks the app not to start a worker."""
    return os.environ.get(ENV_OFF, "").strip() not in ("", "0")


def runtime_dir(url: str) -> Path:
    """A per-user, per-store folder for the worker log."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    uid = os.getuid() if hasattr(os, "getuid") else 0
    path = Path(tempfile.gettempdir()) / f"evalrx-{uid}-{digest}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _reap() -> None:
    for pid in list(_spawned):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _spawned.remove(pid)


def spawned_pids() -> list[int]:
    """Pids of workers this app process started and that have not exited."""
    _reap()
    return list(_spawned)


def ensure_local_worker(store) -> WorkerStatus:
    """Start a detached local worker unless a live one heartbeats on the store.

    Args:
        store: the `evalrx.store.Store` the worker serves.

    Returns:
        The `WorkerStatus` after the check.
    """
    from evalrx.runner import ensure_worker
    from evalrx.store import alive_workers

    _reap()
    log = runtime_dir(store.url) / "worker.log"
    if disabled():
        workers = alive_workers(within_s=HEARTBEAT_WITHIN_S, store=store)
        return WorkerStatus("disabled", workers, message=f"{ENV_OFF} is set: workers run elsewhere")
    pid = ensure_worker(store=store, within_s=HEARTBEAT_WITHIN_S, log_path=str(log))
    if pid:
        _spawned.append(pid)
    workers = alive_workers(within_s=HEARTBEAT_WITHIN_S, store=store)
    if pid:
        return WorkerStatus("started", workers, pid=pid, log=str(log), message=f"started a local worker (pid {pid})")
    return WorkerStatus("alive" if workers else "none", workers, log=str(log))


def log_tail(path: Optional[str], n: int = 30) -> str:
    """The last `n` lines of the worker log (for the sidebar's details)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 16_000))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])
