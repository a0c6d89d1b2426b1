"""One handler per kind of queued job (`evalrx.store.JobKind`), each in its own module: a run's cases
(`cases`), a judge job (`judge`), an analysis request (`analysis`). The worker claims a job and hands it to
its kind's handler, which returns the job's final status ("released" when the worker is stopping)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from evalrx.store import JobKind

if TYPE_CHECKING:
    from evalrx.runner.handlers.context import WorkerContext


def handlers_for(worker: "WorkerContext") -> "dict[str, Callable[[Any], str]]":
    """Each kind's handler, bound to `worker` (imported here: a worker loads what it serves)."""
    from evalrx.runner.handlers.analysis import AnalysisHandler
    from evalrx.runner.handlers.cases import CaseHandler
    from evalrx.runner.handlers.judge import JudgeHandler

    return {
        JobKind.RUN: CaseHandler(worker),
        JobKind.JUDGE: JudgeHandler(worker),
        JobKind.ANALYSIS: AnalysisHandler(worker),
    }
