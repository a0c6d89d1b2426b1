"""Queue a run: fix its case list in the store and add a job for a worker to claim."""

from __future__ import annotations

from typing import Optional, Sequence

from evalrx.config import RunConfig
from evalrx.core.case import FailureCase
from evalrx.store import Store, queue_run, queued_config, request_cancel, retry_run

__all__ = ["cancel_run", "enqueue_run", "retry_run", "run_name"]  # retry_run: the store's, where callers find it


def _check(run: RunConfig) -> None:
    """Fail at enqueue, not minutes later in the worker: the config itself (`RunConfig.validate`), then
    the names it refers to: unknown spec, backend, tool, Python function, MCP server entry or analyzer."""
    from evalrx.models import resolve_spec_key
    from evalrx.models.backends import get_backend
    from evalrx.tools import get_tools

    run.validate()
    from evalrx.specs import get_spec

    spec = get_spec(resolve_spec_key(run.model.name))
    get_backend(run.model.backend)
    if spec.api_only and run.model.backend != "api":
        raise ValueError(f"{spec.key} is API-only: run it on the api backend (with a base_url for your server)")
    get_tools(run.tools)  # unknown names and bad Python paths: one line each
    from evalrx.analyzers import analyzer_class

    for entry in run.analyzers:  # MCP servers and analyzer entries were parsed when the RunConfig was made
        cls = analyzer_class(entry.name)  # unknown: lists the known
        if entry.kwargs:  # settings are checked now, not on every case by the worker
            try:
                cls(**entry.kwargs)
            except TypeError as exc:
                raise ValueError(f"analyzer {entry.name}: {str(exc).split(') ', 1)[-1]}") from None


def run_name(run: RunConfig, name: Optional[str] = None) -> str:
    """A run's display name: `name`, or for none (or a blank one) its model on its suite."""
    return (name or "").strip() or f"{run.model.name} on {run.suite or run.case_file or 'cases'}"


def enqueue_run(
    run: RunConfig,
    cases: Optional[Sequence[FailureCase]] = None,
    *,
    name: Optional[str] = None,
    runtime: Optional[dict] = None,
    key_bound: bool = False,
    store: "Store | str | None" = None,
) -> int:
    """Queue a run for the workers and return its id.

    The case list is fixed now (stored with the run), so a worker needs neither the
    suite file nor the caller. The API key is never stored: workers read it from their
    environment (`OPENAI_API_KEY`).

    Args:
        run: the run (left as it is: what is queued is a copy); a dict as `RunConfig.to_dict` writes one is
            read with `RunConfig.from_dict`.
        cases: the cases; None loads `run.suite` or `run.case_file`.
        name: a display name (default, and for a blank one: spec and suite).
        runtime: `RuntimeConfig` settings to apply over `run.runtime` (max_new_tokens, temperature, ...).
        key_bound: the run has an API key of its own, held by a worker started for it
            (`start_keyed_worker`); no other worker claims it. Its base_url is fixed now.
        store: the store (default when None).

    Raises:
        ValueError: unknown spec, backend, tool, analyzer or runtime setting; no cases.
    """
    import dataclasses

    if not isinstance(run, RunConfig):  # a dict, as `RunConfig.to_dict` writes one (as earlier releases took)
        if not isinstance(run, dict):
            raise TypeError(f"enqueue_run takes a RunConfig (or its dict), not {type(run).__name__}")
        run = RunConfig.from_dict(run, strict=True).validate()
    run = dataclasses.replace(run, runtime=run.runtime.updated(runtime))
    _check(run)
    if key_bound:
        if run.model.backend != "api":
            raise ValueError("an API key can be bound only to a run on the api backend")
        from evalrx.models.backends.api import DEFAULT_BASE_URL

        run.base_url = run.base_url or DEFAULT_BASE_URL  # the key goes to this URL, no other
    if cases is None:
        source = run.case_file or run.suite
        if not source:
            raise ValueError("no cases: pass `cases`, or set the run config's suite or case_file")
        from evalrx.suites import load_cases

        cases = load_cases(source)
    cases = list(cases)
    if not cases:
        raise ValueError("the run has no cases")
    from evalrx.runner.toolset import run_tools

    run.tools = run_tools(run.tools, cases)  # one order for every caller: the prompt depends on it
    name = run_name(run, name)
    cfg = queued_config(run)  # what is stored: the allowed keys, no secret
    return queue_run(name=name, config=cfg, cases=cases, key_bound=key_bound, repeats=run.repeats, store=store)


def cancel_run(run_id: int, *, store: "Store | str | None" = None) -> str:
    """Stop a run: a queued one at once, a running one after its current case.

    Returns:
        The job's status after the request ("cancelled", or "running" until the worker stops).
    """
    return request_cancel(run_id, store=store)
