"""Writing imported runs: one transaction for a whole file, a new run per distinct source run.

The formats themselves live in `evalrx.interop`; this is the persistence they write through.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional

from sqlalchemy import insert, select

from evalrx.core.case import FailureCase, Label, Termination, Trajectory
from evalrx.store import convert
from evalrx.store import schema as t
from evalrx.store.engine import Store, resolve
from evalrx.store.runs import create_run, save_trajectory, upsert_case


def _from_source(session: Any, sha256: str) -> list:
    """(id, meta) of the runs imported from a file with these bytes (its sha256), oldest first."""
    q = select(t.Run.id, t.Run.meta).where(t.Run.source_sha256 == sha256).order_by(t.Run.id)
    return [(r.id, r.meta or {}) for r in session.execute(q).all()]


def runs_from_source(sha256: str, *, store: "Store | str | None" = None) -> list:
    """The ids of runs imported from a file with these bytes (its sha256), oldest first."""
    with resolve(store).read() as s:
        return [run_id for run_id, _ in _from_source(s, sha256)]


class ImportedRun:
    """One new run filled trajectory by trajectory inside an import's transaction."""

    def __init__(self, session: Any, *, name: str, config: dict, meta: dict, sha256: str) -> None:
        self.s = session
        self.run_id = create_run(session, name=name, config=config, cases=[], source="import", status="done", meta=meta)
        self.s.get(t.Run, self.run_id).source_sha256 = sha256
        self.positions: dict = {}  # case row id -> position: a case keeps one place whatever its attempts
        self.counts = {"pass": 0, "fail": 0, "error": 0}
        self.n = 0

    def add(self, case: FailureCase, traj: Trajectory, *, labels: list, tags: list, diagnoses: Optional[list]) -> None:
        """Store one trajectory of the run (its attempt from `traj.attempt`); ValueError for a bad label or tag."""
        attempt = max(1, int(traj.attempt or 1))
        case_row_id = upsert_case(self.s, case)
        position = self.positions.setdefault(case_row_id, len(self.positions))
        self.s.execute(
            insert(t.RunCase),
            [{"run_id": self.run_id, "case_row_id": case_row_id, "attempt": attempt, "position": position}],
        )
        save_trajectory(self.s, self.run_id, case_row_id, traj, labels=labels, tags=tags, diagnoses=diagnoses)
        if traj.outcome is Label.ERROR or traj.terminated == Termination.ERROR:
            self.counts["error"] += 1
        elif traj.outcome.value in self.counts:
            self.counts[traj.outcome.value] += 1
        self.n += 1

    def finish(self, fmt: str) -> None:
        """Close the run: its format, counts and times."""
        run = self.s.get(t.Run, self.run_id)
        run.meta = convert.jsonable({**(run.meta or {}), "format": fmt})
        run.n_cases = run.n_done = self.n
        run.n_pass, run.n_fail, run.n_error = self.counts["pass"], self.counts["fail"], self.counts["error"]
        run.started_at = run.finished_at = t.utcnow()


class ImportTransaction:
    """A file's import: runs created in it are written together or not at all."""

    def __init__(self, session: Any) -> None:
        self.s = session

    def runs_from_source(self, sha256: str) -> list:
        """(id, meta) of runs imported before from the same bytes, oldest first."""
        return _from_source(self.s, sha256)

    def new_run(self, *, name: str, config: dict, meta: dict, sha256: str) -> ImportedRun:
        return ImportedRun(self.s, name=name, config=config, meta=meta, sha256=sha256)


@contextmanager
def importing(store: "Store | str | None" = None) -> Iterator[ImportTransaction]:
    """One write transaction for an import; an exception inside leaves the store as it was."""
    with resolve(store).write() as s:
        yield ImportTransaction(s)
