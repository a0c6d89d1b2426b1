"""The handler of a run job: run the run's cases that have no trajectory yet, writing each as it ends.

Each finished case is written in one transaction (trajectory, steps, grade, analyses, run counters, job
progress) after checking that this worker still owns the job (`evalrx.store.record_case`), so a case is
stored at most once even if a worker thought dead comes back; the unique (run, case) constraint backs that
up. A killed worker's job is requeued and resumes with the cases that have no trajectory yet.
"""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Iterator, Optional

from evalrx.config import RunConfig
from evalrx.core.case import FailureCase, Label, Termination, Trajectory
from evalrx.runner import analysis
from evalrx.runner.diagnose import diagnose_case
from evalrx.runner.keys import api_key_for
from evalrx.runner.prompt_guard import check_prompt
from evalrx.runner.toolset import mcp_sessions, run_with_tools, shown_pictures
from evalrx.store import (
    AlreadyStored,
    JobStatus,
    LeaseLost,
    cancel_requested,
    finish_job,
    image_bytes,
    pending_work,
    record_case,
    release_job,
    start_case,
    tool_marks,
    update_run_meta,
)

if TYPE_CHECKING:
    from evalrx.runner.handlers.context import WorkerContext

log = logging.getLogger("evalrx.worker")


class JobCancelled(Exception):
    pass


@dataclasses.dataclass
class CaseResult:
    """A finished case: its trajectory, the tools it had, and the pictures its tools returned,
    by step index (the agent keeps only their count on the step)."""

    trajectory: Trajectory
    tools: list
    pictures: dict = dataclasses.field(default_factory=dict)


def _runtime_kwargs(run: RunConfig) -> dict:
    """RuntimeConfig settings of a run (never an API key; the model's device and dtype come with `load_model`)."""
    runtime = run.runtime.to_dict()
    if run.base_url:
        runtime.setdefault("base_url", run.base_url)
    return runtime


# Where a queued run's local model directory is given: the fix a missing checkpoint names (not evalrx.load).
RUN_CHECKPOINT_HOW = "the New run form's Local weights directory, under Advanced, or `evalrx run --checkpoint DIR`"


def load_handle(run: RunConfig, run_key: Optional[str] = None) -> Any:
    """Load the run's model once for the whole job (an API run gets the key `api_key_for` allows)."""
    from evalrx.models import CheckpointNotFoundError, load_model

    runtime = _runtime_kwargs(run)
    if run.model.backend == "api":
        key, url = api_key_for(run, run_key)
        runtime["base_url"] = url  # explicit: the environment's OPENAI_BASE_URL cannot redirect a key
        if key is not None:
            runtime["api_key"] = key
    try:
        return load_model(run.model, **runtime)
    except CheckpointNotFoundError as exc:
        raise exc.with_fix(RUN_CHECKPOINT_HOW) from None


def _case_picture(data: Optional[bytes]) -> Any:
    if data is None:
        return None
    try:
        import io

        from PIL import Image

        return Image.open(io.BytesIO(data))
    except Exception:  # no Pillow, or not an image Pillow reads: hand over the bytes
        return data


class CaseHandler:
    """Runs one claimed run job for `worker` (its store, id, stop flag, lease and limits)."""

    def __init__(self, worker: "WorkerContext") -> None:
        self.worker = worker
        self.store = worker.store

    def __call__(self, job: Any) -> str:
        """Run the job to its end; returns its final status (or "released"). Raises LeaseLost when it is lost."""
        log.info(
            "worker %s: job %s (run %s), %s/%s cases done",
            self.worker.worker_id,
            job.id,
            job.run_id,
            job.progress_done,
            job.progress_total,
        )
        try:
            return self.run_job(job)
        except JobCancelled:
            finish_job(self.store, job.id, self.worker.worker_id, JobStatus.CANCELLED)
            return JobStatus.CANCELLED

    def load_job(self, job: Any) -> tuple[RunConfig, list, dict]:
        """The job's run config (parsed once: the worker holds it until the last case is written),
        its pending attempts and their start counts."""
        run, cases, starts = pending_work(job.run_id, store=self.store)
        for _, _, case in cases:  # a stored picture's bytes become what tools expect
            case.inputs.image = _case_picture(case.inputs.image)
        return run, cases, starts

    def run_job(self, job: Any) -> str:
        run, cases, starts = self.load_job(job)
        limit = self.worker.max_case_attempts
        # An attempt that killed its worker max_case_attempts times is recorded as an error; the run goes on.
        for case_row_id, attempt, case in [c for c in cases if starts.get(c[:2], 0) >= limit]:
            died = RuntimeError(
                f"the worker died {starts[case_row_id, attempt]} times on this case; not run again "
                "(`evalrx runs retry` runs it once more)"
            )
            from evalrx.models.agent import error_trajectory

            traj = error_trajectory(case, died)
            traj.outcome, traj.attempt = Label.ERROR, attempt
            if self.record(job, None, run, [], case_row_id, case, CaseResult(traj, [])):
                raise JobCancelled()
        cases = [c for c in cases if starts.get(c[:2], 0) < limit]
        if not cases:
            finish_job(self.store, job.id, self.worker.worker_id, JobStatus.DONE)
            return JobStatus.DONE
        from evalrx.tools import get_tools

        get_tools(run.tools)  # an unknown tool fails the job before the model loads
        hooks = analysis.resolve(run.analyzers)
        sessions = mcp_sessions(run)
        try:
            return self._run_cases(job, run, cases, hooks, sessions)
        finally:
            if sessions is not None:
                sessions.close()

    def _run_cases(self, job: Any, run: RunConfig, cases: list, hooks: list, sessions: Optional[Any]) -> str:
        handle = load_handle(run, self.worker.run_key)
        # The load is the run's, kept apart from its first case's step latency.
        update_run_meta(job.run_id, model_load_ms=getattr(handle, "load_ms", None), store=self.store)
        if cancel_requested(self.store, job.id):
            raise JobCancelled()
        parallel = getattr(handle, "backend", None) == "api" and run.concurrency > 1
        results = (
            self._results_parallel(job.run_id, handle, run, cases, run.concurrency, sessions)
            if parallel
            else self._results_serial(job.run_id, handle, run, cases, sessions)
        )
        for case_row_id, case, result in results:
            if self.record(job, handle, run, hooks, case_row_id, case, result):
                raise JobCancelled()
            if self.worker.stop_event.is_set():  # this worker is stopping: the job goes back to the queue
                release_job(self.store, job.id, self.worker.worker_id)
                return "released"
        finish_job(self.store, job.id, self.worker.worker_id, JobStatus.DONE)
        return JobStatus.DONE

    # ------------------------------------------------------------ cases

    def run_case(
        self, handle: Any, run: RunConfig, case: FailureCase, attempt: int = 1, sessions: Optional[Any] = None
    ) -> CaseResult:
        # Local runs with white-box analyzers keep the generation's internals: no second forward for them.
        traj, tools, pictures = run_with_tools(
            handle,
            run,
            case,
            sessions,
            check=lambda: check_prompt(handle, case, self.worker.max_prompt_bytes),
            seed=run.attempt_seed(case.id, attempt),
            **analysis.with_capture(run.agent_kwargs(), handle, run.analyzers),
        )
        traj.attempt = attempt
        if traj.terminated == Termination.ERROR:
            log.warning("case %s: %s", case.id, traj.metrics.get("error"))
        return CaseResult(traj, tools, pictures)

    def _results_serial(
        self, run_id: int, handle: Any, run: RunConfig, cases: list, sessions: Optional[Any] = None
    ) -> Iterator[tuple]:
        for case_row_id, attempt, case in cases:
            if self.worker.lost():
                raise LeaseLost(f"job lease lost before case {case.id}")
            start_case(self.store, run_id, case_row_id, attempt)
            yield case_row_id, case, self.run_case(handle, run, case, attempt, sessions)

    def _results_parallel(
        self,
        run_id: int,
        handle: Any,
        run: RunConfig,
        cases: list,
        width: int,
        sessions: Optional[Any] = None,
    ) -> Iterator[tuple]:
        """A bounded pool: at most `width` cases in flight; results in completion order."""
        pending = iter(cases)
        with ThreadPoolExecutor(max_workers=width, thread_name_prefix="evalrx-case") as pool:
            running: dict = {}

            def submit() -> bool:
                nxt = next(pending, None)
                if nxt is None:
                    return False
                case_row_id, attempt, case = nxt
                start_case(self.store, run_id, case_row_id, attempt)
                running[pool.submit(self.run_case, handle, run, case, attempt, sessions)] = (case_row_id, case)
                return True

            for _ in range(width):
                if not submit():
                    break
            try:
                while running:
                    finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                    for fut in finished:
                        case_row_id, case = running.pop(fut)
                        yield case_row_id, case, fut.result()
                        if not (self.worker.stop_event.is_set() or self.worker.lost()):
                            submit()
            finally:  # cancelled or stopping: do not start more, let in-flight calls end
                pending = iter(())
                for fut in running:
                    fut.cancel()

    def record(
        self,
        job: Any,
        handle: Any,
        run: RunConfig,
        hooks: list,
        case_row_id: int,
        case: FailureCase,
        result: CaseResult,
    ) -> bool:
        """Analyse, then write one finished case in one transaction. Returns the cancel flag."""
        traj, tools = result.trajectory, result.tools
        pictures = {idx: [image_bytes(p) for p in pics] for idx, pics in result.pictures.items()}
        records: list = []
        if hooks:
            shown = shown_pictures(traj, case, result.pictures)
            records = analysis.analyse_case(hooks, handle, run, case, traj, tools, shown)
        diagnoses = diagnose_case(traj, case, tools, records, tool_marks(store=self.store))
        try:
            return record_case(
                self.store,
                job.id,
                self.worker.worker_id,
                job.run_id,
                case_row_id,
                traj,
                diagnoses=diagnoses,
                records=records,
                pictures=pictures,
            )
        except AlreadyStored:  # cannot happen while we own the job: never twice
            log.error("case %s of run %s was already stored; skipped", case.id, job.run_id)
            return cancel_requested(self.store, job.id)
