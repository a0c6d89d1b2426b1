"""The handler of an analysis job: a stored trajectory's requested analyses, stored in place of older results.

A trajectory of an API (or other non-local) model is replayed teacher-forced on the request's local model
(default `evalrx.store.default_replay_model()`: SmolLM2-135M-Instruct when installed, else the demo model).
The local model is loaded once and kept for the next request on the same spec.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional

from evalrx.config import RunConfig
from evalrx.core.capability import Capability
from evalrx.runner import analysis
from evalrx.runner.diagnose import rediagnose
from evalrx.runner.handlers.cases import load_handle
from evalrx.store import (
    JobStatus,
    default_replay_model,
    finish_request,
    get_trajectory,
    request_of_job,
    shown_pictures,
    stored_run,
    unreachable,
)

if TYPE_CHECKING:
    from evalrx.runner.handlers.context import WorkerContext

log = logging.getLogger("evalrx.worker")


class AnalysisHandler:
    """Runs claimed analysis jobs for `worker`, keeping the last local model loaded."""

    def __init__(self, worker: "WorkerContext") -> None:
        self.worker = worker
        self.store = worker.store
        self._replay_handle: Optional[tuple] = None  # (spec name, handle) kept between requests

    def local_handle(self, name: str, run: Optional[RunConfig] = None) -> Any:
        """A local model to analyse on, loaded once and kept for the next request on the same spec."""
        if self._replay_handle is None or self._replay_handle[0] != name:
            if run is not None and run.model.name == name and run.model.backend != "api":
                handle = load_handle(run)
            else:
                import evalrx

                handle = evalrx.load(name, backend="hf_local")
            self._replay_handle = (name, handle)
        return self._replay_handle[1]

    def __call__(self, job: Any) -> str:
        """Run a claimed analysis job: its request's analyzers on the trajectory. Returns "done" or "failed"
        (a bad request is recorded on its job; the worker goes on), or "lost" when another worker owns it now."""
        req = request_of_job(job.id, store=self.store)
        if req is None:  # its trajectory was deleted meanwhile
            finish_request(self.store, job.id, self.worker.worker_id, JobStatus.FAILED, error="the request is gone")
            return JobStatus.FAILED
        try:
            status, error, records = self._analyse(req)
        except Exception as exc:
            if unreachable(exc):  # the store went away, not the request: the worker leaves it to be requeued
                raise
            log.warning("analysis request %s failed: %s", req["id"], exc)
            status, error, records = JobStatus.FAILED, f"{type(exc).__name__}: {exc}", []
        tid = req["trajectory_id"]
        if not finish_request(
            self.store, job.id, self.worker.worker_id, status, error=error, trajectory_id=tid, records=records
        ):
            log.warning("analysis request %s: lost to another worker; its results are not stored", req["id"])
            return "lost"
        if records:
            rediagnose([tid], store=self.store)  # white-box evidence may change the diagnosis
        return status

    def _analyse(self, req: dict) -> "tuple[JobStatus, Optional[str], list]":
        from evalrx.core.tool import Tool
        from evalrx.tools import TOOLS, get_tools

        tid = req["trajectory_id"]
        detail = get_trajectory(tid, store=self.store)
        if detail is None:
            raise ValueError(f"trajectory {tid} no longer exists")
        run = stored_run(detail.row.run_id, store=self.store)  # imported runs' too
        local = run.model.backend == "hf_local" and run.model.name
        name = req.get("model") or (run.model.name if local else default_replay_model())
        handle = self.local_handle(name, run)
        # The tools the model was offered, as stored with the trajectory (a case's own, an MCP server's);
        # trajectories stored before offered tools were kept get the run's.
        offered = detail.trajectory.offered_tools
        builtin = [n for n in run.tools if n in TOOLS]  # an imported config's paths are never imported here
        tools = [Tool.from_document(spec) for spec in offered] if offered else get_tools(builtin)
        from evalrx.models.agent import case_system

        ctx = analysis.CaseContext(
            handle=handle,
            case=None,
            trajectory=detail.trajectory,
            tools=tools,
            tool_schemas=[tool.to_openai() for tool in tools],
            system=case_system(run.system, (detail.case or {}).get("meta")),
            run=run,
            # Only a vision model sees pictures: a text one would drop them, so none are read for it.
            images=shown_pictures(tid, store=self.store)
            if Capability.VISION in (getattr(handle, "capabilities", None) or ())
            else {},
        )
        records = analysis.run_all(analysis.resolve(req["analyzers"]), ctx)
        source = f"{run.model.name or None} on {run.model.backend}"
        for rec in records:
            rec.meta = dict(rec.meta or {}, requested=req["id"], scored_on=name, source_model=source)
        failed = [r for r in records if (r.meta or {}).get("error")]
        error = "; ".join(f"{r.analyzer}: {r.meta['error']}" for r in failed) or None
        status = JobStatus.FAILED if failed and len(failed) == len(records) else JobStatus.DONE
        return status, error, records
