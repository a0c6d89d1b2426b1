"""The worker process (`evalrx worker`): a dispatcher over the store's one job queue.

It claims jobs by kind, runs first, then judge jobs, then analysis requests of stored trajectories, and hands
each to its kind's handler (`evalrx.runner.handlers`); meanwhile a thread heartbeats the worker and its job.
A killed worker's job (of any kind) is requeued by the next worker to start (or by any idle worker's periodic
check) and resumes where it stopped. SIGTERM/SIGINT stop after the current piece of work, handing the job back.
"""

from __future__ import annotations

import argparse
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
from typing import Any, Optional, Sequence

from evalrx.core import first_line
from evalrx.runner.argtypes import interval_seconds, positive_int
from evalrx.runner.handlers import handlers_for
from evalrx.runner.handlers.cases import RUN_CHECKPOINT_HOW, load_handle
from evalrx.runner.keys import ENV_RUN_KEY
from evalrx.runner.prompt_guard import DEFAULT_PROMPT_BYTES
from evalrx.store import (
    DEFAULT_MAX_ATTEMPTS,
    JobKind,
    JobStatus,
    LeaseLost,
    SchemaError,
    Store,
    StoreUnwritable,
    claim_job,
    connect,
    finish_job,
    heartbeat,
    register_worker,
    requeue_stale,
    stop_worker,
    unreachable,
)

log = logging.getLogger("evalrx.worker")

DEFAULT_CASE_ATTEMPTS = 3  # a case that killed its worker this often is recorded as an error, not run again

__all__ = ["RUN_CHECKPOINT_HOW", "Worker", "build_parser", "load_handle", "worker_main"]


# Seconds between tries while the store cannot be reached (a PostgreSQL server restarting).
STORE_RETRY_S = 2.0


class Worker:
    """Claims and runs jobs until stopped.

    Args:
        store: the store.
        worker_id: a unique id (default: host, pid and a random suffix).
        poll_s: seconds between claims when the queue is empty.
        heartbeat_s: seconds between heartbeats.
        stale_after_s: a running job whose heartbeat is older than this is requeued.
        backends: claim only runs and judge jobs on these backends, and analysis requests only with
            hf_local among them (None: all).
        exit_when_idle: return when the queue is empty instead of waiting.
        max_jobs: return after this many run jobs.
        max_attempts: fail a job after this many claims in a row that stored nothing.
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
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        run_id: Optional[int] = None,
        run_key: Optional[str] = None,
        max_case_attempts: int = DEFAULT_CASE_ATTEMPTS,
        max_prompt_bytes: int = DEFAULT_PROMPT_BYTES,
    ) -> None:
        self.store = store
        self.run_id, self.max_case_attempts, self.max_prompt_bytes = run_id, max_case_attempts, max_prompt_bytes
        self.run_key = run_key  # the pinned run's own key, held in memory only
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.poll_s, self.heartbeat_s, self.stale_after_s = poll_s, heartbeat_s, stale_after_s
        self.backends = list(backends) if backends else None
        self.exit_when_idle, self.max_jobs, self.max_attempts = exit_when_idle, max_jobs, max_attempts
        self.stop_event = threading.Event()
        self.current_job: Optional[int] = None
        self.lost_job: Optional[int] = None  # the id of a job the heartbeat found taken from us
        self._hb_thread: Optional[threading.Thread] = None
        self.handlers = handlers_for(self)

    # ------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Stop after the current piece of work; the job goes back to the queue for another worker."""
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
        if not heartbeat(self.store, self.worker_id, job) and job is not None and job == self.current_job:
            log.warning("worker %s lost job %s", self.worker_id, job)
            self.lost_job = job

    def lost(self) -> bool:
        """Whether the heartbeat found the current job taken from this worker."""
        return self.current_job is not None and self.lost_job == self.current_job

    def kinds(self) -> "list[JobKind]":
        """The kinds this worker claims, in the order it prefers them: a worker pinned to a run serves only
        it; one kept to API backends has no local model for analysis requests."""
        if self.run_id is not None:
            return [JobKind.RUN]
        if self.backends and "hf_local" not in self.backends:
            return [JobKind.RUN, JobKind.JUDGE]
        return [JobKind.RUN, JobKind.JUDGE, JobKind.ANALYSIS]

    def claim(self) -> Optional[Any]:
        """The next job this worker serves (None when there is none)."""
        for kind in self.kinds():
            job = claim_job(self.store, self.worker_id, kind, backends=self.backends, run_id=self.run_id)
            if job is not None:
                return job
        return None

    def _requeue_dead(self) -> None:
        requeued = requeue_stale(self.store, stale_after_s=self.stale_after_s, max_attempts=self.max_attempts)
        if requeued:
            log.info("requeued jobs %s of dead workers", requeued)

    def run(self) -> int:
        """Serve the queue until stopped (or idle, with `exit_when_idle`); returns the run jobs run."""
        register_worker(self.store, self.worker_id)
        self._requeue_dead()
        self._hb_thread = threading.Thread(target=self._heartbeats, name="evalrx-heartbeat", daemon=True)
        self._hb_thread.start()
        done = 0
        last_sweep = time.monotonic()
        try:
            while not self.stop_event.is_set():
                try:
                    job = self.claim()
                    if job is None and time.monotonic() - last_sweep > max(self.stale_after_s / 2, self.poll_s):
                        self._requeue_dead()
                        last_sweep = time.monotonic()
                except Exception as exc:
                    if not unreachable(exc):
                        raise
                    # A restarting database server: wait it out rather than die, as the heartbeat thread does.
                    log.warning("store unreachable (%s); retrying in %g s", first_line(exc), STORE_RETRY_S)
                    self.stop_event.wait(STORE_RETRY_S)
                    continue
                if job is None:
                    if self.exit_when_idle:
                        break
                    self.stop_event.wait(self.poll_s)
                    continue
                self.run_job(job)
                if job.kind != JobKind.RUN:
                    continue
                done += 1
                if self.max_jobs is not None and done >= self.max_jobs:
                    break
        finally:
            self.stop_event.set()
            stop_worker(self.store, self.worker_id)
        return done

    def run_job(self, job: Any) -> str:
        """Run one claimed job with its kind's handler; returns its final status (or "lost"/"released")."""
        self.current_job = job.id
        try:
            status = self.handlers[job.kind](job)
        except LeaseLost as exc:
            log.warning("%s; leaving it to its new owner", exc)
            status = "lost"
        except Exception as exc:
            if unreachable(exc):  # the job is not at fault: its lease runs out and another claim retries it
                log.warning("job %s: store unreachable (%s); leaving it to be requeued", job.id, first_line(exc))
                return "released"
            msg = f"{type(exc).__name__}: {exc}"
            log.error("job %s failed: %s\n%s", job.id, msg, traceback.format_exc())
            finish_job(self.store, job.id, self.worker_id, JobStatus.FAILED, error=msg)
            status = JobStatus.FAILED
        finally:
            self.current_job = None
        log.info("worker %s: %s job %s %s", self.worker_id, job.kind, job.id, status)
        return status


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
