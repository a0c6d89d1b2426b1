"""Run a suite straight to a JSONL file, no store needed (the `evalrx run --out` path)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from evalrx.config import RunConfig


def analyses_json(records: list) -> list:
    """Analysis records as JSON (`{"analyzer", "step_idx", "meta", "scores", "arrays"}`, each array as
    `{"dtype", "shape", "data"}`)."""
    out = []
    for rec in records:
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


def run_to_jsonl(args: Any, run: RunConfig, cases: list) -> int:
    """Load the model, run every case of `run` (`evalrx.config.RunConfig`) with the agent loop, grade and
    diagnose it, and write it to `args.out` as `evalrx export` writes a stored one (`evalrx.store.export_row`)."""
    from tqdm import tqdm

    import evalrx
    from evalrx.models import weights_problem
    from evalrx.models.agent import run_batch
    from evalrx.runner import analysis
    from evalrx.runner.diagnose import diagnose_case
    from evalrx.runner.enqueue import run_name
    from evalrx.runner.toolset import (
        capturing,
        mcp_sessions,
        pictures_by_step,
        run_with_tools,
        shown_pictures,
        static_tools,
    )
    from evalrx.store import export_case, export_picture, export_row, queued_config
    from evalrx.tools import get_tools

    get_tools(run.tools)  # fail on an unknown tool before loading weights
    hooks = analysis.resolve(run.analyzers)  # an unknown analyzer too
    problem = weights_problem(args.spec, backend=args.backend, checkpoint=args.checkpoint, how="--checkpoint DIR")
    if problem:  # said as New run says it, before an MCP server starts
        raise ValueError(problem)
    runtime = run.runtime.to_dict()  # the settings asked for (timeout, retries, temperature)
    # The run as a queued one stores it: what each record's `run` says.
    run_info = {"name": run_name(run), "config": queued_config(run)}
    sessions = mcp_sessions(run)
    handle = evalrx.load(
        args.spec,
        backend=args.backend,
        checkpoint=args.checkpoint,
        **({"base_url": run.base_url} if run.base_url else {}),
        **runtime,
    )
    if handle.backend == "api":
        # One tiny request first, so an unreachable server is one clear error, not N error rows.
        handle.chat([{"role": "user", "content": "ping"}], max_new_tokens=1)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    counts = {"pass": 0, "fail": 0}
    bar = tqdm(total=len(cases), unit="case", disable=args.no_progress, file=sys.stderr)
    t0 = time.perf_counter()
    with out.open("w", encoding="utf-8") as fh:

        def on_result(case: Any, traj: Any, tools: list, returned: dict) -> None:
            """`returned`: the pictures its tools returned by step, as the worker keeps them."""
            counts[traj.outcome.value] = counts.get(traj.outcome.value, 0) + 1
            shown = shown_pictures(traj, case, returned)  # as the worker gives them (a text model's pass skips them)
            records = analysis.analyse_case(hooks, handle, run, case, traj, tools, shown) if hooks else []
            diagnoses = diagnose_case(traj, case, tools, records)  # as the worker diagnoses a finished case
            pictures = {idx: [export_picture(p) for p in pics] for idx, pics in returned.items()}
            row = export_row(traj, export_case(case), run=run_info, diagnoses=diagnoses, pictures=pictures)
            if hooks:  # a file has no store to hold them: they go with their record
                row["analyses"] = analyses_json(records)
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True, default=str) + "\n")
            fh.flush()  # each case is on disk as soon as it finishes
            bar.update(1)
            bar.set_postfix(passed=counts["pass"], failed=counts["fail"])

        agent_kwargs = analysis.with_capture(
            {"block_repeat_calls": run.block_repeat_calls, "force_final_answer": run.force_final_answer},
            handle,
            run.analyzers,
        )
        if sessions is None:
            made: dict = {}  # id(case) -> the tools its run was given and the pictures they returned

            def tools_for(case: Any) -> list:
                captured: list = []
                tools = [capturing(tool, captured) for tool in static_tools(run, case)]
                made[id(case)] = (tools, captured)
                return tools

            def batch_result(case: Any, traj: Any) -> None:
                tools, captured = made.pop(id(case), ([], []))
                on_result(case, traj, tools, pictures_by_step(traj, captured))

            run_batch(
                handle,
                cases,
                tools_factory=tools_for,
                system=run.system,
                max_turns=run.max_turns,
                concurrency=args.concurrency,
                on_result=batch_result,
                agent_kwargs=agent_kwargs,
                grade=True,  # as the worker grades: a bad grader is the case's grade error, not the run's end
            )
        else:
            try:
                for case in cases:  # one at a time: each case's MCP servers start and stop around it
                    traj, tools, returned = run_with_tools(
                        handle, run, case, sessions, system=run.system, max_turns=run.max_turns, **agent_kwargs
                    )
                    on_result(case, traj, tools, returned)
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
