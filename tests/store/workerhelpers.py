"""Helpers for the worker tests: scripted runs, worker subprocesses, store checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from sqlalchemy import text
from storehelpers import make_case

from evalrx.config import ModelConfig, RunConfig

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def scripted_config(*, api: bool = False, concurrency: int = 1, analyzers=(), max_turns: int = 3) -> RunConfig:
    return RunConfig(
        model=ModelConfig("scripted-api" if api else "scripted", backend="scripted"),
        tools=["calculator"],
        max_turns=max_turns,
        concurrency=concurrency,
        analyzers=list(analyzers),
    )


def cases(n: int, start: int = 0) -> list:
    return [make_case(i) for i in range(start, start + n)]


def start_worker(
    url: str, *args: str, log: Optional[Path] = None, plugin: Optional[str] = "scripted_backend"
) -> subprocess.Popen:
    """A worker subprocess (`python -m evalrx.runner`), by default with the scripted backend plugin."""
    env = dict(os.environ, EVALRX_DATABASE_URL=url, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]))
    cmd = [sys.executable, "-m", "evalrx.runner", *(["--plugin", plugin] if plugin else []), *args]
    out = open(log, "ab") if log else subprocess.DEVNULL
    return subprocess.Popen(
        cmd, env=env, stdout=out, stderr=subprocess.STDOUT if log else subprocess.DEVNULL, cwd=str(REPO)
    )


def integrity_report(store) -> dict:
    """Counts that must all be zero in a healthy store after runs finish."""
    q = {
        "duplicate_cases": "SELECT count(*) FROM (SELECT run_id, case_row_id, attempt FROM trajectories "
        "GROUP BY run_id, case_row_id, attempt HAVING count(*) > 1) d",
        "orphan_steps": "SELECT count(*) FROM steps s LEFT JOIN trajectories t ON t.id = s.trajectory_id "
        "WHERE t.id IS NULL",
        "orphan_analyses": "SELECT count(*) FROM analyses a LEFT JOIN trajectories t ON t.id = a.trajectory_id "
        "WHERE t.id IS NULL",
        "foreign_trajectories": "SELECT count(*) FROM trajectories t LEFT JOIN run_cases rc ON "
        "rc.run_id = t.run_id AND rc.case_row_id = t.case_row_id AND rc.attempt = t.attempt "
        "WHERE rc.run_id IS NULL",
        "incomplete_steps": "SELECT count(*) FROM trajectories t WHERE t.n_steps <> "
        "(SELECT count(*) FROM steps s WHERE s.trajectory_id = t.id) OR "
        "(SELECT coalesce(max(idx), -1) FROM steps s WHERE s.trajectory_id = t.id) <> t.n_steps - 1",
        "bad_run_counters": "SELECT count(*) FROM runs r WHERE r.source = 'queue' AND r.n_done <> "
        "(SELECT count(*) FROM trajectories t WHERE t.run_id = r.id)",
    }
    with store.read() as s:
        return {k: s.execute(text(v)).scalar() for k, v in q.items()}
