"""Run a suite straight to a JSONL file, no store needed (the `evalrx run --out` path)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def analyses_of(hooks: list, handle: Any, run: Any, case: Any, traj: Any, system: Any) -> list:
    """The case's analyses as JSON (`{"analyzer", "step_idx", "meta", "scores", "arrays"}`, each array as
    `{"dtype", "shape", "data"}`), run as the worker runs them."""
    from evalrx.models.agent import case_system
    from evalrx.runner import analysis
    from evalrx.runner.toolset import static_tools

    tools = static_tools(run, case)
    ctx = analysis.CaseContext(
        handle=handle,
        case=case,
        trajectory=traj,
        tools=tools,
        tool_schemas=[t.to_openai() for t in tools],
        system=case_system(system, case.meta),
        run_config=run,
    )
    out = []
    for rec in analysis.run_all(hooks, ctx):
        arrays = {
            name: {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.tolist()}
            for name, a in (rec.arrays or {}).items()
            if hasattr(a, "tolist")
        }
        out.append(
            {
                "analyzer": rec.analyzer,
                "step_idx": rec.step_idx,
                "meta": rec.meta,
                "scores": rec.scores,
                "arrays": arrays,
            }
        )
    return out


def run_to_jsonl(args: Any) -> int:
    """Load the model, run every case with the agent loop, grade it and append it to `args.out`."""
    from tqdm import tqdm

    import evalrx
    from evalrx.core.case import Label
    from evalrx.models import weights_problem
    from evalrx.models.agent import error_trajectory, run_batch, run_case
    from evalrx.suites import load_cases
    from evalrx.tools import get_tools

    cases = load_cases(args.cases or args.suite)
    if args.limit:
        cases = cases[: args.limit]
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import analysis
    from evalrx.runner.toolset import case_toolset, mcp_server_entries, mcp_sessions, run_tools, static_tools, tool_list

    run = RunConfig(
        model=ModelConfig(args.spec),
        tools=run_tools(tool_list(args.tools), cases, spec=args.spec),
        mcp_servers=mcp_server_entries(args.mcp_config),
        analyzers=list(getattr(args, "analyzers", None) or []),
    )
    get_tools(run.tools)  # fail on an unknown tool before loading weights
    hooks = analysis.resolve(run.analyzers)  # an unknown analyzer too
    problem = weights_problem(args.spec, backend=args.backend, checkpoint=args.checkpoint, how="--checkpoint DIR")
    if problem:  # said as New run says it, before an MCP server starts
        raise ValueError(problem)
    sessions = mcp_sessions(run)
    runtime = {"base_url": args.base_url} if args.base_url else {}
    runtime.update(
        {
            k: v
            for k, v in (("timeout", getattr(args, "timeout", None)), ("max_retries", getattr(args, "retries", None)))
            if v is not None
        }
    )
    handle = evalrx.load(args.spec, backend=args.backend, checkpoint=args.checkpoint, **runtime)
    if handle.backend == "api":
        # One tiny request first, so an unreachable server is one clear error, not N error rows.
        handle.chat([{"role": "user", "content": "ping"}], max_new_tokens=1)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    counts = {"pass": 0, "fail": 0}
    bar = tqdm(total=len(cases), unit="case", disable=args.no_progress, file=sys.stderr)
    t0 = time.perf_counter()
    with out.open("w", encoding="utf-8") as fh:

        def on_result(case: Any, traj: Any) -> None:
            counts[traj.outcome.value] = counts.get(traj.outcome.value, 0) + 1
            row = {"case_id": case.id, "meta": case.meta, **traj.to_dict()}
            if hooks:  # as the worker runs them: after the case, reading its generation's captures
                row["analyses"] = analyses_of(hooks, handle, run, case, traj, args.system)
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
            fh.flush()  # each case is on disk as soon as it finishes
            bar.update(1)
            bar.set_postfix(passed=counts["pass"], failed=counts["fail"])

        agent_kwargs = analysis.with_capture(
            {"block_repeat_calls": args.block_repeat_calls, "force_final_answer": args.force_final_answer},
            handle,
            run.analyzers,
        )
        if sessions is None:
            run_batch(
                handle,
                cases,
                tools_factory=lambda case: static_tools(run, case),
                system=args.system,
                max_turns=args.max_turns,
                concurrency=args.concurrency,
                on_result=on_result,
                agent_kwargs=agent_kwargs,
                grade=True,  # as the worker grades: a bad grader is the case's grade error, not the run's end
            )
        else:
            try:
                for case in cases:  # one at a time: each case's MCP servers start and stop around it
                    try:
                        with case_toolset(run, case, sessions) as tools:
                            traj = run_case(
                                handle,
                                case,
                                tools,
                                grade=True,
                                system=args.system,
                                max_turns=args.max_turns,
                                **agent_kwargs,
                            )
                    except Exception as exc:  # a server that did not start fails the case, not the run
                        traj = error_trajectory(case, exc)
                        traj.outcome = Label.ERROR
                    on_result(case, traj)
            finally:
                sessions.close()
    bar.close()
    elapsed = time.perf_counter() - t0
    n = len(cases)
    load_ms = getattr(handle, "load_ms", None)
    loaded = f"model loaded in {load_ms / 1000:.1f} s; " if load_ms is not None else ""
    print(
        f"{loaded}{n} cases in {elapsed:.1f} s ({n / elapsed if elapsed else 0:.2f} cases/s): "
        f"{counts['pass']} passed, {counts['fail']} failed -> {out}",
        file=sys.stderr,
    )
    return 0
