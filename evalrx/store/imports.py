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
from evalrx.store.runs import NewTrajectory, create_run, save_trajectories, upsert_cases
from evalrx.store.status import JobStatus


def _from_source(session: Any, sha256: str) -> list:
    """(id, meta) of the runs imported from a file with these bytes (its sha256), oldest first."""
    q = select(t.Run.id, t.Run.meta).where(t.Run.source_sha256 == sha256).order_by(t.Run.id)
    return [(r.id, r.meta or {}) for r in session.execute(q).all()]


def runs_from_source(sha256: str, *, store: "Store | str | None" = None) -> list:
    """The ids of runs imported from a file with these bytes (its sha256), oldest first."""
    with resolve(store).read() as s:
        return [run_id for run_id, _ in _from_source(s, sha256)]


class ImportedRun:
    """One new run filled trajectory by trajectory inside an import's transaction.

    Trajectories are written in batches of `BATCH` (a few statements a batch instead of eight a
    trajectory: the store's per-statement cost was most of an import's time); one with labels or tags
    is written at once, after the batch before it, so an error in them names its own record.
    """

    BATCH = 256

    def __init__(self, session: Any, *, name: str, config: dict, meta: dict, sha256: str) -> None:
        self.s = session
        self.run_id = create_run(
            session, name=name, config=config, cases=[], source="import", status=JobStatus.DONE, meta=meta
        )
        self.s.get(t.Run, self.run_id).source_sha256 = sha256
        self.positions: dict = {}  # case row id -> position: a case keeps one place whatever its attempts
        self.counts = {"pass": 0, "fail": 0, "error": 0}
        self.n = 0
        self.pending: list = []  # (case, NewTrajectory) not written yet

    def add(
        self,
        case: FailureCase,
        traj: Trajectory,
        *,
        labels: list,
        tags: list,
        diagnoses: Optional[list],
        pictures: Optional[dict] = None,
    ) -> None:
        """Store one trajectory of the run (its attempt from `traj.attempt`) and the pictures its tools returned
        (`pictures`: step idx -> bytes); ValueError for a bad label or tag."""
        # Converted now: a record that cannot be stored fails here, named, not in a later batch.
        item = NewTrajectory(
            self.run_id,
            0,
            traj,
            labels=list(labels or []),
            tags=list(tags or []),
            diagnoses=list(diagnoses or []),
            pictures=dict(pictures or {}),
        )
        self.pending.append((case, item.prepare()))  # its case row id is known when the batch is written
        if traj.outcome is Label.ERROR or traj.terminated == Termination.ERROR:
            self.counts["error"] += 1
        elif traj.outcome.value in self.counts:
            self.counts[traj.outcome.value] += 1
        self.n += 1
        if labels or tags or len(self.pending) >= self.BATCH:
            self.flush()

    def flush(self) -> None:
        """Write the pending trajectories: their cases, run-case rows and trajectories, a few statements in all."""
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        case_ids = upsert_cases(self.s, [case for case, _ in batch])
        rows = []
        for case_row_id, (_, item) in zip(case_ids, batch):
            item.case_row_id = case_row_id
            position = self.positions.setdefault(case_row_id, len(self.positions))
            attempt = max(1, int(item.traj.attempt or 1))
            rows.append({"run_id": self.run_id, "case_row_id": case_row_id, "attempt": attempt, "position": position})
        self.s.execute(insert(t.RunCase), rows)
        save_trajectories(self.s, [item for _, item in batch])

    def finish(self, fmt: str) -> None:
        """Write what is pending and close the run: its format, counts and times."""
        self.flush()
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
