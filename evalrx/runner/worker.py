"""The worker process (`evalrx worker`): claims jobs from the store and runs them.

Each finished case is written in one transaction (trajectory, steps, grade, analyses,
run counters, job progress) after checking that this worker still owns the job, so a
case is stored at most once even if a worker thought dead comes back; the unique
(run, case) constraint backs that up. A killed worker's job is requeued by the next
worker to start (or by any idle worker's periodic check) and resumes with the cases
that have no trajectory yet. With no run waiting, a worker serves judge jobs (`evalrx.runner.judge_jobs`),
then analysis requests of stored trajectories.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any, Iterator, Optional, Sequence

from sqlalchemy.exc import IntegrityError

from evalrx.config import RunConfig
from evalrx.core.capability import Capability
from evalrx.core.case import FailureCase, Label, Termination, Trajectory
from evalrx.runner import analysis
from evalrx.runner.argtypes import interval_seconds, positive_int
from evalrx.runner.diagnose import diagnose_case, rediagnose
from evalrx.runner.keys import ENV_RUN_KEY, api_key_for
from evalrx.runner.prompt_guard import DEFAULT_PROMPT_BYTES, check_prompt
from evalrx.runner.toolset import capturing, case_toolset, mcp_sessions, pictures_by_step, shown_pictures
from evalrx.store import JobStatus, convert, jobs, tool_marks
from evalrx.store import analyses as analysis_store
from evalrx.store import judge_jobs as judge_store
from evalrx.store.engine import SchemaError, Store, StoreUnwritable, connect
from evalrx.store.runs import stored_run, update_run_meta

log = logging.getLogger("evalrx.worker")

DEFAULT_CASE_ATTEMPTS = 3  # a case that killed its worker this often is recorded as an error, not run again


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


class Worker:
    """Claims and runs jobs until stopped.

    Args:
        store: the store.
        worker_id: a unique id (default: host, pid and a random suffix).
        poll_s: seconds between claims when the queue is empty.
        heartbeat_s: seconds between heartbeats.
        stale_after_s: a running job whose heartbeat is older than this is requeued.
        backends: claim only runs on these backends (None: all).
        exit_when_idle: return when the queue is empty instead of waiting.
        max_jobs: return after this many jobs.
        max_attempts: fail a job after this many claims in a row that stored no case.
        run_id: serve only this run (a worker started for a run whose key was bound to it).
        run_key: that run's API key (sent only to that run's base_url).
        max_case_attempts: a case whose worker died this many times is stored as an error trajectory.
        max_prompt_bytes: a longer prompt is an error trajectory, before any model call.
    """

    def __init__(
        self,
        store: Store,
        *,
        worker_id: Optional[str] = None,
        poll_s: float = 1.0,
        heartbeat_s: float = 5.0,
        stale_after_s: float = 60.0,
        backends: Optional[Sequence[str]] = None,
        exit_when_idle: bool = False,
        max_jobs: Optional[int] = None,
        max_attempts: int = jobs.DEFAULT_MAX_ATTEMPTS,
        run_id: Optional[int] = None,
        run_key: Optional[str] = None,
        max_case_attempts: int = DEFAULT_CASE_ATTEMPTS,
        max_prompt_bytes: int = DEFAULT_PROMPT_BYTES,
    ) -> None:
        self.store = store
        self.run_id, self.max_case_attempts, self.max_prompt_bytes = run_id, max_case_attempts, max_prompt_bytes
        self._run_key = run_key  # the pinned run's own key, held in memory only
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.poll_s, self.heartbeat_s, self.stale_after_s = poll_s, heartbeat_s, stale_after_s
        self.backends = list(backends) if backends else None
        self.exit_when_idle, self.max_jobs, self.max_attempts = exit_when_idle, max_jobs, max_attempts
        self.stop_event = threading.Event()
        self.current_job: Optional[int] = None
        self.lost_job: Optional[int] = None  # the id of a job the heartbeat found taken from us
        self._hb_thread: Optional[threading.Thread] = None
        self._replay_handle: Optional[tuple] = None  # (spec name, handle) kept between analysis requests

    # ------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Stop after the current case; the job goes back to the queue for another worker."""
        self.stop_event.set()

    def _heartbeats(self) -> None:
        while not self.stop_event.wait(self.heartbeat_s):
            try:
                self._beat(self.current_job)
            except Exception as exc:  # a database hiccup must not kill the heartbeat thread
                log.warning("heartbeat failed: %s", exc)

    def _beat(self, job: Optional[int]) -> None:
        """One heartbeat for `job` (read from `current_job` a moment ago)."""
        # The job may have finished since it was read: only a job still current is lost.
        if not jobs.heartbeat(self.store, self.worker_id, job) and job is not None and job == self.current_job:
            log.warning("worker %s lost job %s", self.worker_id, job)
            self.lost_job = job

    def run(self) -> int:
        """Serve the queue until stopped (or idle, with `exit_when_idle`); returns jobs run."""
        jobs.register_worker(self.store, self.worker_id)
        requeued = jobs.requeue_stale(self.store, stale_after_s=self.stale_after_s, max_attempts=self.max_attempts)
        if requeued:
            log.info("requeued jobs %s of dead workers", requeued)
        with self.store.read() as s:
            live = [w["id"] for w in jobs.alive_in(s, self.stale_after_s)]
        analysis_store.requeue_stale_requests(self.store, live + [self.worker_id])
        judge_store.requeue_stale_judge_jobs(self.store, live + [self.worker_id])
        self._hb_thread = threading.Thread(target=self._heartbeats, name="evalrx-heartbeat", daemon=True)
        self._hb_thread.start()
        done = 0
        last_sweep = time.monotonic()
        try:
            while not self.stop_event.is_set():
                job = jobs.claim_next(self.store, self.worker_id, backends=self.backends, run_id=self.run_id)
                if job is None and (self._serve_judge_job() or self._serve_analysis_request()):
                    continue
                if job is None:
                    if self.exit_when_idle:
                        break
                    if time.monotonic() - last_sweep > max(self.stale_after_s / 2, self.poll_s):
                        jobs.requeue_stale(self.store, stale_after_s=self.stale_after_s, max_attempts=self.max_attempts)
                        with self.store.read() as s:
                            live = [w["id"] for w in jobs.alive_in(s, self.stale_after_s)]
                        judge_store.requeue_stale_judge_jobs(self.store, live + [self.worker_id])
                        last_sweep = time.monotonic()
                    self.stop_event.wait(self.poll_s)
                    continue
                self.run_job(job)
                done += 1
                if self.max_jobs is not None and done >= self.max_jobs:
                    break
        finally:
            self.stop_event.set()
            jobs.stop_worker(self.store, self.worker_id)
        return done

    # ------------------------------------------------------------ one job

    def run_job(self, job: Any) -> str:
        """Run one claimed job to its end; returns its final status (or "lost"/"released")."""
        self.current_job = job.id
        log.info(
            "worker %s: job %s (run %s), %s/%s cases done",
            self.worker_id,
            job.id,
            job.run_id,
            job.progress_done,
            job.progress_total,
        )
        try:
            status = self._run_job(job)
        except jobs.LeaseLost as exc:
            log.warning("%s; leaving it to its new owner", exc)
            status = "lost"
        except JobCancelled:
            jobs.finish_job(self.store, job.id, self.worker_id, JobStatus.CANCELLED)
            status = JobStatus.CANCELLED
        except Exception as exc:
            msg = f"{type(exc).__name__}: {exc}"
            log.error("job %s failed: %s\n%s", job.id, msg, traceback.format_exc())
            jobs.finish_job(self.store, job.id, self.worker_id, JobStatus.FAILED, error=msg)
            status = JobStatus.FAILED
        finally:
            self.current_job = None
        log.info("worker %s: job %s %s", self.worker_id, job.id, status)
        return status

    def _load_job(self, job: Any) -> tuple[RunConfig, list, dict]:
        """The job's run config (parsed once: the worker holds it until the last case is written),
        its pending attempts and their start counts."""
        from evalrx.store.runs import pending_work

        run, cases, starts = pending_work(job.run_id, store=self.store)
        for _, _, case in cases:  # a stored picture's bytes become what tools expect
            case.inputs.image = _case_picture(case.inputs.image)
        return run, cases, starts

    def _run_job(self, job: Any) -> str:
        run, cases, starts = self._load_job(job)
        # An attempt that killed its worker max_case_attempts times is recorded as an error; the run goes on.
        for case_row_id, attempt, case in [c for c in cases if starts.get(c[:2], 0) >= self.max_case_attempts]:
            died = RuntimeError(
                f"the worker died {starts[case_row_id, attempt]} times on this case; not run again "
                "(`evalrx runs retry` runs it once more)"
            )
            from evalrx.models.agent import error_trajectory

            traj = error_trajectory(case, died)
            traj.outcome, traj.attempt = Label.ERROR, attempt
            if self._record(job, None, run, [], case_row_id, case, CaseResult(traj, [])):
                raise JobCancelled()
        cases = [c for c in cases if starts.get(c[:2], 0) < self.max_case_attempts]
        if not cases:
            jobs.finish_job(self.store, job.id, self.worker_id, JobStatus.DONE)
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
        handle = load_handle(run, self._run_key)
        # The load is the run's, kept apart from its first case's step latency.
        update_run_meta(job.run_id, model_load_ms=getattr(handle, "load_ms", None), store=self.store)
        if jobs.cancel_requested(self.store, job.id):
            raise JobCancelled()
        parallel = getattr(handle, "backend", None) == "api" and run.concurrency > 1
        results = (
            self._results_parallel(job.run_id, handle, run, cases, run.concurrency, sessions)
            if parallel
            else self._results_serial(job.run_id, handle, run, cases, sessions)
        )
        for case_row_id, case, result in results:
            cancel = self._record(job, handle, run, hooks, case_row_id, case, result)
            if cancel:
                raise JobCancelled()
            if self.stop_event.is_set():
                return self._release(job)
        jobs.finish_job(self.store, job.id, self.worker_id, JobStatus.DONE)
        return JobStatus.DONE

    def _release(self, job: Any) -> str:
        """Hand an unfinished job back to the queue (this worker is stopping)."""
        jobs.release_job(self.store, job.id, self.worker_id)
        return "released"

    def _lost(self) -> bool:
        return self.current_job is not None and self.lost_job == self.current_job

    # ------------------------------------------------------------ cases

    def _run_case(
        self, handle: Any, run: RunConfig, case: FailureCase, attempt: int = 1, sessions: Optional[Any] = None
    ) -> CaseResult:
        from evalrx.models.agent import error_trajectory, run_case

        captured: list = []
        tools: list = []
        try:
            check_prompt(handle, case, self.max_prompt_bytes)
            with case_toolset(run, case, sessions) as offered:
                tools = [capturing(tool, captured) for tool in offered]
                # Local runs with white-box analyzers keep the generation's internals: no second forward for them.
                traj = run_case(
                    handle,
                    case,
                    tools,
                    grade=True,
                    seed=run.attempt_seed(case.id, attempt),
                    **analysis.with_capture(run.agent_kwargs(), handle, run.analyzers),
                )
        except Exception as exc:  # refused before any model call (a bad tool, a server that did not start)
            traj, tools = error_trajectory(case, exc), []
            traj.outcome = Label.ERROR
        traj.attempt = attempt
        if traj.terminated == Termination.ERROR:
            log.warning("case %s: %s", case.id, traj.metrics.get("error"))
        return CaseResult(traj, tools, pictures_by_step(traj, captured))

    def _results_serial(
        self, run_id: int, handle: Any, run: RunConfig, cases: list, sessions: Optional[Any] = None
    ) -> Iterator[tuple]:
        for case_row_id, attempt, case in cases:
            if self._lost():
                raise jobs.LeaseLost(f"job lease lost before case {case.id}")
            jobs.start_case(self.store, run_id, case_row_id, attempt)
            yield case_row_id, case, self._run_case(handle, run, case, attempt, sessions)

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
                jobs.start_case(self.store, run_id, case_row_id, attempt)
                running[pool.submit(self._run_case, handle, run, case, attempt, sessions)] = (case_row_id, case)
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
                        if not (self.stop_event.is_set() or self._lost()):
                            submit()
            finally:  # cancelled or stopping: do not start more, let in-flight calls end
                pending = iter(())
                for fut in running:
                    fut.cancel()

    def _record(
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
        from evalrx.models.agent import case_system

        traj, tools = result.trajectory, result.tools
        pictures = {idx: [convert.image_bytes(p) for p in pics] for idx, pics in result.pictures.items()}
        records: list = []
        if hooks:
            schemas = [tool.to_openai() for tool in tools]
            ctx = analysis.CaseContext(
                handle=handle,
                case=case,
                trajectory=traj,
                tools=tools,
                tool_schemas=schemas,
                system=case_system(run.system, case.meta),
                run=run,
                images=shown_pictures(traj, case, result.pictures),
            )
            records = analysis.run_all(hooks, ctx)
        diagnoses = diagnose_case(traj, case, tools, records, tool_marks(store=self.store))
        try:
            return jobs.record_case(
                self.store,
                job.id,
                self.worker_id,
                job.run_id,
                case_row_id,
                traj,
                diagnoses=diagnoses,
                records=records,
                media=pictures,
            )
        except IntegrityError:  # already stored (cannot happen while we own the job): never twice
            log.error("case %s of run %s was already stored; skipped", case.id, job.run_id)
            return jobs.cancel_requested(self.store, job.id)

    # ------------------------------------------------------------ judge jobs

    def _serve_judge_job(self) -> bool:
        """Run one queued judge job, if any (`evalrx.runner.judge_jobs`); a worker pinned to a run serves only it."""
        if self.run_id is not None:
            return False
        job = judge_store.claim_judge_job(self.store, self.worker_id, backends=self.backends)
        if job is None:
            return False
        from evalrx.runner.judge_jobs import run_judge_job

        run_judge_job(self.store, job, self.worker_id, self.stop_event)
        return True

    # ------------------------------------------------------------ analysis requests

    def _serve_analysis_request(self) -> bool:
        """Run one queued analysis request of a stored trajectory, if any (only when no job waits)."""
        if self.backends and "hf_local" not in self.backends:
            return False  # a worker kept to API runs has no local model to analyse on
        req = analysis_store.claim_request(self.store, self.worker_id)
        if req is None:
            return False
        self.run_analysis_request(req)
        return True

    def _local_handle(self, name: str, run: Optional[RunConfig] = None) -> Any:
        """A local model to analyse on, loaded once and kept for the next request on the same spec."""
        if self._replay_handle is None or self._replay_handle[0] != name:
            if run is not None and run.model.name == name and run.model.backend != "api":
                handle = load_handle(run)
            else:
                import evalrx

                handle = evalrx.load(name, backend="hf_local")
            self._replay_handle = (name, handle)
        return self._replay_handle[1]

    def run_analysis_request(self, req: dict) -> str:
        """Run a claimed analysis request: its analyzers on the trajectory, stored in place of older results.

        A trajectory of an API (or other non-local) model is replayed teacher-forced on the
        request's local model (default `analyses.default_replay_model()`: SmolLM2-135M-Instruct when
        installed, else the demo model). Returns "done" or "failed".
        """
        tid = req["trajectory_id"]
        try:
            from evalrx.core.tool import Tool
            from evalrx.store.queries import get_trajectory
            from evalrx.store.queries import shown_pictures as stored_pictures
            from evalrx.tools import TOOLS, get_tools

            detail = get_trajectory(tid, store=self.store)
            if detail is None:
                raise ValueError(f"trajectory {tid} no longer exists")
            run = stored_run(detail.row.run_id, store=self.store)  # imported runs' too
            local = run.model.backend == "hf_local" and run.model.name
            name = req.get("model") or (run.model.name if local else analysis_store.default_replay_model())
            handle = self._local_handle(name, run)
            # The tools the model was offered, as stored with the trajectory (a case's own, an MCP server's);
            # trajectories stored before offered tools were kept get the run's.
            offered = detail.trajectory.offered_tools
            builtin = [n for n in run.tools if n in TOOLS]  # an imported config's paths are never imported here
            tools = [Tool.from_document(spec) for spec in offered] if offered else get_tools(builtin)
            from evalrx.models.agent import case_system

            system = case_system(run.system, (detail.case or {}).get("meta"))
            ctx = analysis.CaseContext(
                handle=handle,
                case=None,
                trajectory=detail.trajectory,
                tools=tools,
                tool_schemas=[tool.to_openai() for tool in tools],
                system=system,
                run=run,
                # Only a vision model sees pictures: a text one would drop them, so none are read for it.
                images=stored_pictures(tid, store=self.store)
                if Capability.VISION in (getattr(handle, "capabilities", None) or ())
                else {},
            )
            records = analysis.run_all(analysis.resolve(req["analyzers"]), ctx)
            source = f"{run.model.name or None} on {run.model.backend}"
            for rec in records:
                rec.meta = dict(rec.meta or {}, requested=req["id"], scored_on=name, source_model=source)
            failed = [r for r in records if (r.meta or {}).get("error")]
            error = "; ".join(f"{r.analyzer}: {r.meta['error']}" for r in failed) or None
            analysis_store.finish_request(
                self.store,
                req["id"],
                JobStatus.FAILED if failed and len(failed) == len(records) else JobStatus.DONE,
                error=error,
                trajectory_id=tid,
                records=records,
            )
            rediagnose([tid], store=self.store)  # white-box evidence may change the diagnosis
            return JobStatus.FAILED if failed and len(failed) == len(records) else JobStatus.DONE
        except Exception as exc:  # a bad request is recorded, the worker goes on
            log.warning("analysis request %s failed: %s", req["id"], exc)
            analysis_store.finish_request(self.store, req["id"], JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
            return JobStatus.FAILED


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evalrx worker", description="Run queued evalrx jobs from the store.")
    p.add_argument("--url", help="store URL (default: $EVALRX_DATABASE_URL or db/evalrx.sqlite)")
    p.add_argument("--once", action="store_true", help="exit when the queue is empty")
    p.add_argument("--max-jobs", type=positive_int, help="exit after this many jobs")
    p.add_argument("--poll", type=interval_seconds, default=1.0, help="seconds between polls of an empty queue")
    p.add_argument("--heartbeat", type=interval_seconds, default=5.0, help="seconds between heartbeats")
    p.add_argument(
        "--stale-after",
        type=interval_seconds,
        default=60.0,
        help="requeue running jobs whose heartbeat is older than this (seconds)",
    )
    p.add_argument(
        "--backend",
        action="append",
        dest="backends",
        help="claim only runs on this backend (repeatable), e.g. api on a machine without a GPU",
    )
    p.add_argument(
        "--plugin",
        action="append",
        default=[],
        help="import this module first (to register specs, backends, tools or analyzers); "
        "also read from $EVALRX_PLUGINS (comma-separated)",
    )
    p.add_argument("--worker-id", help="a unique worker id (default: host:pid:random)")
    p.add_argument(
        "--run",
        type=positive_int,
        dest="run_id",
        help=f"serve only this run; its API key, if it has one of its own, comes from ${ENV_RUN_KEY}",
    )
    p.add_argument(
        "--max-case-attempts",
        type=positive_int,
        default=DEFAULT_CASE_ATTEMPTS,
        help="record a case whose worker died this many times as an error and go on",
    )
    p.add_argument(
        "--max-prompt-bytes",
        type=positive_int,
        default=DEFAULT_PROMPT_BYTES,
        help="a longer prompt is recorded as an error without calling the model",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    return p


def worker_main(argv: Optional[Sequence[str]] = None) -> int:
    """`evalrx worker`: serve the job queue until interrupted (SIGTERM/SIGINT stop after the current case).

    Returns:
        0 on a clean stop; 2 when the store's schema is not current (the message names `evalrx db upgrade`).
    """
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.stale_after <= 2 * args.heartbeat:
        parser.error(
            f"--stale-after ({args.stale_after:g} s) must exceed twice --heartbeat ({args.heartbeat:g} s), "
            "or live jobs look dead and their cases run twice"
        )
    run_key = os.environ.pop(ENV_RUN_KEY, None) or None  # held in memory; not passed on to any child
    if run_key and args.run_id is None:
        parser.error(f"${ENV_RUN_KEY} is set but no --run: a run's own key serves only that run")
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    plugins = list(args.plugin) + [m for m in os.environ.get("EVALRX_PLUGINS", "").split(",") if m.strip()]
    for mod in plugins:
        importlib.import_module(mod.strip())
    try:
        store = connect(args.url)
    except SchemaError as exc:
        print(f"evalrx worker: {exc}", file=sys.stderr)
        return 2
    worker = Worker(
        store,
        worker_id=args.worker_id,
        poll_s=args.poll,
        heartbeat_s=args.heartbeat,
        stale_after_s=args.stale_after,
        backends=args.backends,
        exit_when_idle=args.once,
        max_jobs=args.max_jobs,
        run_id=args.run_id,
        run_key=run_key,
        max_case_attempts=args.max_case_attempts,
        max_prompt_bytes=args.max_prompt_bytes,
    )

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %s: stopping after the current case", signum)
        worker.stop()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    try:
        n = worker.run()
    except StoreUnwritable as exc:  # read-only or full: one line; an unfinished job's lease runs out and it is retried
        print(f"evalrx worker: {exc}", file=sys.stderr)
        return 2
    log.info("worker %s stopped after %s job(s)", worker.worker_id, n)
    return 0
