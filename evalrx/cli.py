"""`evalrx` command line: serve, run, specs, suites.

Errors raised by evalrx with a clear message are printed as one line (no traceback)
with exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from evalrx.config import ModelConfig, RunConfig, RuntimeConfig
from evalrx.config.mcp import load_mcp_config
from evalrx.core.capability import CapabilityError
from evalrx.models.backends.api_errors import APIBackendError
from evalrx.models.backends.api_http import MAX_RETRIES
from evalrx.runner.argtypes import analyzer_names, call_timeout, env_var_name, retries, temperature, whole
from evalrx.runner.toolset import run_tools, tool_list
from evalrx.store.engine import SchemaError


class UserError(Exception):
    """A problem with what the user asked for; printed as one line."""


# Exceptions our own code raises with messages written for the user.
_USER_ERRORS: tuple = (
    UserError,
    CapabilityError,
    APIBackendError,
    ValueError,
    FileNotFoundError,
    ImportError,
    SchemaError,
)


def _choose_backend(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Default the backend from the spec; refuse a local backend for an API-only model (it would go to OpenAI)."""
    from evalrx.models import resolve_spec_key
    from evalrx.specs import get_spec

    spec = get_spec(resolve_spec_key(args.spec))
    if args.backend is None:
        args.backend = "api" if spec.api_only else "hf_local"
    elif spec.api_only and args.backend != "api":
        parser.error(
            f"{spec.key} is API-only: use --backend api (with --base-url for your server), not {args.backend!r}"
        )
    if args.out and args.repeats > 1:
        parser.error(
            "--repeats needs the store (attempts are kept per case there): drop --out, then `evalrx export RUN FILE`"
        )
    if args.out and args.name:
        parser.error("--name names a run in the store; with --out the file is the run: drop --name or --out")
    if args.out and Path(args.out).is_dir():
        parser.error(f"--out {args.out} is a directory; give a file path such as {Path(args.out) / 'run.jsonl'}")


def _call_budget(args: argparse.Namespace) -> dict:
    """The RuntimeConfig settings `--timeout` / `--retries` / `--temperature` ask for (none when not given)."""
    asked = {"timeout": args.timeout, "max_retries": args.retries, "temperature": args.temperature}
    return {k: v for k, v in asked.items() if v is not None}


def _cmd_specs(args: argparse.Namespace) -> int:
    from evalrx.models.backends import BACKENDS
    from evalrx.specs import REGISTRY

    names = sorted(BACKENDS)
    print(f"{'spec':28} {'family':10} " + " ".join(f"{n:34}" for n in names))
    for key in sorted(REGISTRY):
        spec = REGISTRY[key]
        cells = []
        for n in names:
            caps = BACKENDS[n].provides(spec)
            cells.append(f"{','.join(sorted(c.value for c in caps)) or '-':34}")
        print(f"{key:28} {spec.family:10} " + " ".join(cells))
    return 0


def _cmd_suites() -> int:
    from evalrx.suites import list_suites, load_cases
    from evalrx.suites.bfcl import bfcl_missing_hint

    for name in list_suites():
        print(f"{name:32} {len(load_cases(name)):>5} cases")
    hint = bfcl_missing_hint()
    if hint:
        print(hint)
    return 0


def _cmd_serve(argv: Sequence[str]) -> int:
    from evalrx.serve import main as serve_main

    return serve_main(list(argv)) or 0


def run_config(args: argparse.Namespace, cases: Sequence) -> RunConfig:
    """The run `evalrx run` asks for: what a queued run stores, and what a run to a file records as its run."""
    return RunConfig(
        model=ModelConfig(args.spec, backend=args.backend, checkpoint=args.checkpoint),
        tools=run_tools(tool_list(args.tools), cases, spec=args.spec),
        mcp_servers=load_mcp_config(args.mcp_config) if args.mcp_config else [],
        suite=args.suite,
        case_file=args.cases,
        max_turns=args.max_turns,
        system=args.system,
        block_repeat_calls=args.block_repeat_calls,
        force_final_answer=args.force_final_answer,
        concurrency=args.concurrency or RunConfig.concurrency,
        base_url=args.base_url,
        repeats=args.repeats,
        seed=args.seed,
        analyzers=list(args.analyzers or []),
        runtime=RuntimeConfig(**_call_budget(args)),
    )


def _cmd_run(args: argparse.Namespace) -> int:
    if args.out:  # straight to a file, no store or worker involved
        from evalrx.runner.offline import run_to_jsonl
        from evalrx.suites import load_cases

        cases = load_cases(args.cases or args.suite)[: args.limit or None]
        return run_to_jsonl(args, run_config(args, cases), cases)
    return _enqueue(args)


def _enqueue(args: argparse.Namespace) -> int:
    """Queue the run for a worker; with --wait, follow its progress until it ends."""
    import time

    from evalrx.models import weights_problem
    from evalrx.runner import enqueue_run
    from evalrx.store import FINAL_STATUSES, JobStatus, RunInfo, connect, get_run
    from evalrx.suites import load_cases

    store = connect(args.url)
    cases = load_cases(args.cases or args.suite)[: args.limit or None]
    problem = weights_problem(args.spec, backend=args.backend, checkpoint=args.checkpoint, how="--checkpoint DIR")
    if problem:  # as New run says it; a worker on another machine may hold them, so queue all the same
        print(f"evalrx: warning: {problem}", file=sys.stderr)
    cfg = run_config(args, cases)
    key = None
    if args.api_key_env:
        import os

        key = os.environ.get(args.api_key_env)
        if not key:
            raise UserError(f"--api-key-env {args.api_key_env}: that environment variable is empty or unset")
        if args.backend != "api":
            raise UserError("--api-key-env needs --backend api")
    run_id = enqueue_run(cfg, cases, name=args.name, key_bound=key is not None, store=store)
    if key is not None:
        from evalrx.runner.keyed_worker import start_keyed_worker

        pid = start_keyed_worker(store.url, run_id, key, follow_parent=args.wait)  # without --wait it outlives us
        print(f"queued run {run_id}; worker {pid} runs it with its own key")
    else:
        print(f"queued run {run_id}; a worker (`evalrx worker`, or the app's) will pick it up")
    if not args.wait:
        return 0
    from tqdm import tqdm

    def current() -> RunInfo:
        run = get_run(run_id, store=store)
        if run is None:
            raise UserError(f"run {run_id} was deleted while --wait watched it")
        return run

    run = current()
    bar = tqdm(total=run.n_cases, unit="case", disable=args.no_progress, file=sys.stderr)
    while run.status not in FINAL_STATUSES:
        time.sleep(0.5)
        run = current()
        bar.update(run.n_done - bar.n)
        bar.set_postfix(passed=run.n_pass, failed=run.n_fail, status=run.status)
    bar.close()
    print(f"run {run_id} {run.status}: {run.n_pass} passed, {run.n_fail} failed, {run.n_error} errors")
    return 0 if run.status == JobStatus.DONE else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evalrx", description="Find out why tool-calling agents fail.")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("specs", help="list model specs and what each backend provides")
    sub.add_parser("suites", help="list the bundled case suites (names `--suite` takes)")

    sub.add_parser(
        "serve", help="OpenAI-compatible server over a local model (see `evalrx serve --help`)", add_help=False
    )

    from evalrx.runner.commands import COMMANDS  # store and queue commands parse their own flags

    for name, (_, text) in COMMANDS.items():
        sub.add_parser(name, help=text, add_help=False)

    run = sub.add_parser("run", help="run the agent over a suite of cases")
    run.add_argument("--spec", required=True, help="model spec key, e.g. evalrx-tiny")
    run.add_argument("--backend", help="hf_local | api | vllm_offline (default: api for API-only specs, else hf_local)")
    run.add_argument("--checkpoint", help="local model directory overriding the spec's weights")
    src = run.add_mutually_exclusive_group(required=True)
    src.add_argument("--suite", help="suite name (e.g. demo, demo/arithmetic) ")
    src.add_argument("--cases", help="path to a JSONL case file")
    run.add_argument(
        "--tools",
        help="comma-separated tools: built-in names and package.module:function paths, offered in the order "
        "the cases name them, then by name (default: the tools the cases name, as the app's New run offers; "
        "none for suites whose cases bring their own, such as bfcl/*; else calculator,lookup, "
        "and image_zoom for a vision model)",
    )
    run.add_argument(
        "--mcp-config",
        metavar="FILE",
        help='an mcpServers JSON file ({"mcpServers": {name: {command, args, env} | {url}}}); '
        "write secrets as ${VAR} and export VAR where the worker runs",
    )
    run.add_argument("--out", help="write trajectories to this JSONL file instead of queueing the run")
    run.add_argument("--wait", action="store_true", help="follow a queued run's progress until it ends")
    run.add_argument("--name", help="the run's name, as the app lists it (default: model on suite)")
    run.add_argument("--url", help="store URL (default: $EVALRX_DATABASE_URL or db/evalrx.sqlite)")
    run.add_argument("--max-turns", type=whole(1, 100), default=4, help="model turns per case, 1-100")
    run.add_argument("--limit", type=whole(1, 10_000_000), help="run only the first N cases")
    run.add_argument("--block-repeat-calls", action="store_true")
    run.add_argument("--force-final-answer", action="store_true")
    run.add_argument(
        "--concurrency",
        type=whole(1, 64),
        help=f"api backend: cases run at once (default {RunConfig.concurrency}); any other runs one at a time",
    )
    run.add_argument("--base-url", help="OpenAI-compatible server URL (api backend)")
    run.add_argument(
        "--api-key-env",
        type=env_var_name,
        metavar="VAR",
        help="api backend: the name of an environment variable holding this run's own key; "
        "a worker started for the run holds it and sends it only to --base-url",
    )
    run.add_argument(
        "--timeout",
        type=call_timeout,
        metavar="SECONDS",
        help="api backend: budget of one model call, every retry and wait included "
        f"(default {RuntimeConfig.timeout:g})",
    )
    run.add_argument(
        "--retries",
        type=retries,
        metavar="N",
        help=f"api backend: tries after the first within that budget, 0-{MAX_RETRIES} "
        f"(default {RuntimeConfig.max_retries})",
    )
    run.add_argument(
        "--repeats",
        type=whole(1, 100),
        default=1,
        metavar="K",
        help="attempts per case, 1-100 (pass@k, flaky cases); pair with --temperature > 0",
    )
    run.add_argument(
        "--temperature", type=temperature, metavar="T", help="sampling temperature (0 = greedy, the default)"
    )
    run.add_argument(
        "--seed",
        type=whole(0, 2**31 - 1),
        default=0,
        help="local models: base of every attempt's sampling seed, so a run reproduces",
    )
    run.add_argument("--system", help="system prompt")
    run.add_argument(
        "--analyzers",
        type=analyzer_names,
        help="comma-separated white-box analyzers to run on each case (local models), e.g. "
        "logit_lens,tool_decision,attention,token_uncertainty; with --out each record carries its analyses",
    )
    run.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # text from files (ids, names) may hold what the terminal cannot
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        if argv and argv[0] == "serve":  # serve parses its own flags
            return _cmd_serve(argv[1:])
        from evalrx.runner.commands import COMMANDS

        if argv and argv[0] in COMMANDS:  # so do db, worker, runs, import and export
            return COMMANDS[argv[0]][0](argv[1:])
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command == "run":
            _choose_backend(parser, args)
        api_only = args.command == "run" and (args.timeout is not None or args.retries is not None)
        if api_only and args.backend != "api":  # a sampling temperature applies to every backend
            parser.error(f"--timeout and --retries apply to the api backend only, not {args.backend!r}")
        if args.command == "run" and (args.concurrency or 1) > 1 and args.backend != "api":
            parser.error(
                f"--concurrency applies to the api backend only: {args.backend!r} runs one case at a time; "
                "drop --concurrency"
            )
        if args.command == "specs":
            return _cmd_specs(args)
        if args.command == "suites":
            return _cmd_suites()
        if args.command == "run":
            return _cmd_run(args)
    except _USER_ERRORS as exc:
        print(f"evalrx: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("evalrx: interrupted", file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
