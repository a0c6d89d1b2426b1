"""The handler of a judge job: the judge model loaded with the key the worker may send, each trajectory judged
(`judge_trajectories`: the cache, the checks and the storing are the CLI's own), `concurrency` calls at a time on
the api backend, each outcome recorded on the job as it goes, stopping between trajectories when cancelled.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Optional

from evalrx.core import one_line
from evalrx.store import (
    JobStatus,
    JudgeJobInfo,
    LeaseLost,
    Store,
    finish_job,
    record_judged,
    release_job,
    start_judge_job,
    unreachable,
)

if TYPE_CHECKING:
    from evalrx.runner.handlers.context import WorkerContext

log = logging.getLogger("evalrx.worker")


class JudgeHandler:
    """Runs claimed judge jobs for `worker`."""

    def __init__(self, worker: "WorkerContext") -> None:
        self.worker = worker

    def __call__(self, job: Any) -> str:
        w = self.worker
        return run_judge_job(w.store, start_judge_job(w.store, job.id, w.worker_id), w.worker_id, w.stop_event)


def load_judge(job: JudgeJobInfo) -> "tuple[Any, Optional[str]]":
    """The job's judge model, and the key it holds (to scrub from any line kept on the job).

    Raises:
        ValueError: one line: the named variable is unset here, or its host is not one this worker sends keys to.
    """
    from urllib.parse import urlsplit

    from evalrx.config import ModelConfig, RunConfig
    from evalrx.diagnosis.judge import MAX_ANSWER_TOKENS
    from evalrx.models import load
    from evalrx.runner.keys import ENV_KEY_HOSTS, api_key_for, key_hosts

    runtime: dict = {"max_new_tokens": MAX_ANSWER_TOKENS}
    key: Optional[str] = None
    if job.backend == "api":
        run = RunConfig(model=ModelConfig(job.spec, backend="api"), base_url=job.base_url)
        key, url = api_key_for(run, None)  # without a named variable: the worker's own key, where allowed
        if job.api_key_env:
            key = os.environ.get(job.api_key_env) or None
            if key is None:
                raise ValueError(
                    f"this worker has no ${job.api_key_env} in its environment: start the worker with it set"
                )
            host = (urlsplit(str(url)).hostname or "").lower()
            if host not in key_hosts():
                raise ValueError(
                    f"this worker does not send keys to {host}: add the host to {ENV_KEY_HOSTS} in its environment"
                )
        runtime["base_url"] = url  # explicit: the environment's OPENAI_BASE_URL cannot redirect a key
        if key is not None:
            runtime["api_key"] = key
        runtime.update({k: v for k, v in job.options.items() if k in ("timeout", "max_retries")})
    return load(job.spec, backend=job.backend, **runtime), key


def run_judge_job(store: Store, job: JudgeJobInfo, worker_id: str, stop: threading.Event) -> str:
    """Run a claimed judge job to its end; returns its final status ("done", "failed", "cancelled"), or
    "released" (this worker is stopping: back to the queue) or "lost" (another worker owns it now)."""
    from evalrx.models.backends.api_secrets import scrub

    log.info("worker %s: judge job %s, %s trajectories with %s", worker_id, job.id, job.progress_total, job.spec)
    key: Optional[str] = None
    model = None
    try:
        model, key = load_judge(job)
        status = _judge_all(store, job, worker_id, model, key, stop)
    except LeaseLost as exc:
        log.warning("%s; leaving it to its new owner", exc)
        status = "lost"
    except Exception as exc:  # the judge could not start (no key, no such server): a line on the job
        if unreachable(exc):  # the store went away, not the judge: the worker leaves the job to be requeued
            raise
        reason = scrub(one_line(f"{exc}" or type(exc).__name__, 1000), key)
        log.warning("judge job %s failed: %s", job.id, reason)
        finish_job(store, job.job_id, worker_id, JobStatus.FAILED, error=reason)
        status = JobStatus.FAILED
    finally:
        close = getattr(model, "close", None)
        if close is not None:
            close()
    log.info("worker %s: judge job %s %s", worker_id, job.id, status)
    return status


def _judge_all(
    store: Store, job: JudgeJobInfo, worker_id: str, model: Any, key: Optional[str], stop: threading.Event
) -> str:
    from evalrx.models.backends.api_secrets import redact_url, scrub
    from evalrx.runner.judging import judge_trajectories

    server = redact_url(getattr(model, "base_url", None)).split("?")[0].split("#")[0] or None
    width = job.concurrency if getattr(model, "backend", None) == "api" else 1

    limits = {k: v for k, v in job.options.items() if k in ("max_new_tokens", "max_steps", "max_step_chars")}
    strategy = job.options.get("strategy") or None

    def one(tid: int) -> list:
        return judge_trajectories(
            [tid], model, server=server, with_findings=job.with_findings, store=store, strategy=strategy, **limits
        )

    pending = iter(job.trajectory_ids)
    cancel = False
    with ThreadPoolExecutor(max_workers=max(1, width), thread_name_prefix="evalrx-judge") as pool:
        running: dict = {}

        def submit() -> bool:
            tid = next(pending, None)
            if tid is None:
                return False
            running[pool.submit(one, tid)] = tid
            return True

        for _ in range(max(1, width)):
            if not submit():
                break
        while running:
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for fut in finished:
                tid = running.pop(fut)
                note: Optional[str] = None
                try:
                    results = fut.result()
                except Exception as exc:  # a store or model error on one trajectory: counted, the job goes on
                    results, note = [], f"trajectory {tid}: failed: {type(exc).__name__}: {exc}"
                else:
                    if not results:
                        note = f"trajectory {tid}: failed: it no longer exists"
                done = results[0] if results else None
                verdict = done is not None and done.diagnosis is not None
                failed = done is None or done.failed
                refused = not verdict and not failed
                if done is not None and not verdict:
                    note = done.line()  # the refusal or the failed call, in one inert line
                cancel = (
                    record_judged(
                        store,
                        job.job_id,
                        worker_id,
                        verdict=verdict,
                        refused=refused,
                        failed=failed,
                        cached=bool(done is not None and done.cached),
                        note=scrub(note, key) if note else None,
                        trajectory_id=tid,
                        answer=scrub(done.answer, key) if done is not None and note else "",
                    )
                    or cancel
                )
                if not (cancel or stop.is_set()):
                    submit()
    if cancel:
        finish_job(store, job.job_id, worker_id, JobStatus.CANCELLED)
        return JobStatus.CANCELLED
    if next(pending, None) is not None:  # stopping with trajectories left: another worker resumes from the cache
        release_job(store, job.job_id, worker_id)
        return "released"
    finish_job(store, job.job_id, worker_id, JobStatus.DONE)
    return JobStatus.DONE
