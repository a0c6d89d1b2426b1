"""A worker for one run whose API key was given for it alone (on New run, or `evalrx run --api-key-env`).

The key travels only in that worker's environment (`EVALRX_RUN_KEY`, which the worker reads and
drops at start): never a command line, the store, a log or an export. The worker serves only
that run (`--run ID`) and sends the key only to that run's base_url; no other worker claims the
run (`runs.key_bound`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Optional

from evalrx.runner.keys import ENV_RUN_KEY


def start_keyed_worker(
    store_url: str, run_id: int, api_key: str, *, log_path: Optional[str] = None, follow_parent: bool = True
) -> int:
    """Start a detached worker pinned to `run_id` holding `api_key`; it exits when the run is done
    (and, with `follow_parent`, when this process exits first).

    Returns:
        The worker's pid.
    """
    if not api_key:
        raise ValueError("no API key to bind to the run")
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}  # only the run's own key
    env.update(EVALRX_DATABASE_URL=store_url, **{ENV_RUN_KEY: api_key})
    out: Any = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "evalrx.runner",
                "--run",
                str(int(run_id)),
                "--once",
                "--max-jobs",
                "1",
                *([] if follow_parent else ["--parent-pid", "0"]),
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        if out is not subprocess.DEVNULL:
            out.close()
    return proc.pid


__all__ = ["start_keyed_worker"]
