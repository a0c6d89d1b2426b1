"""BFCL v4 single-turn categories through the real stack: accuracy in BFCL's terms, diagnosed kinds, time, memory.

Each category is queued as a run (`evalrx.runner.enqueue_run`: the suite `bfcl/<category>`, no run
tools, so the model sees only the entry's functions, in its own native tool format) and executed
by a real `Worker` in this process on a SQLite store; every case is graded by BFCL's AST rules
(`evalrx.grade.check_calls`) and diagnosed by the worker as in any run. Per category it records
accuracy (cases whose calls are valid / cases), the diagnosed kinds of the failures, the grade
reasons seen most, the time per case (median and p90 of the trajectories' model latency, and wall
time per case) and the process's peak RSS. Results go to `benchmarks/results/bfcl_runs.json`
(merged per spec and category, so categories can be run in several sittings) and each run is
exported as evalrx JSONL beside it (`bfcl_<spec>_<category>.jsonl`, for `evalrx import`).

Usage:
    .venv/bin/python benchmarks/bfcl_runs.py --spec smollm2-135m-instruct
        [--categories simple_python,multiple,...] [--limit 100] [--max-new-tokens 96] [--store PATH]
    .venv/bin/python benchmarks/bfcl_runs.py --record-calls results/bfcl_<spec>_simple_python.jsonl \
        tests/fixtures/bfcl/smollm2_simple_python.jsonl
"""

from __future__ import annotations

import argparse
import collections
import datetime as _dt
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

from evalrx.suites.bfcl import CATEGORIES as BFCL_CATEGORIES

RESULTS = Path(__file__).with_name("results")
OUT = RESULTS / "bfcl_runs.json"
# The single-turn categories run by default: the loader's first seven (the live parallel and irrelevance
# ones are small or repeat these).
CATEGORIES = BFCL_CATEGORIES[:7]
# All of simple_python (the checker agreement uses it); the first N of the others.
FULL = {"simple_python"}
# Model turns per user turn: a single-turn case ends at its first calling turn; a multi-turn one may
# call, read and call again before it answers (BFCL allows more; CPU time does not).
MAX_TURNS = {"multi_turn": 4}


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def _pct(values: list, q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def run_category(
    store,
    spec: str,
    category: str,
    limit: int,
    max_new_tokens: int,
    prefix_cache: bool = True,
    export_dir: Path = RESULTS,
) -> dict:
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import enqueue_run
    from evalrx.runner.worker import Worker
    from evalrx.store import get_run, list_trajectories
    from evalrx.suites import load_cases

    cases = load_cases(f"bfcl/{category}")
    if category not in FULL:
        cases = cases[:limit]
    max_turns = next((n for prefix, n in MAX_TURNS.items() if category.startswith(prefix)), 1)
    cfg = RunConfig(model=ModelConfig(spec), tools=[], suite=f"bfcl/{category}", max_turns=max_turns, concurrency=1)
    run_id = enqueue_run(
        cfg,
        cases,
        name=f"{spec} on bfcl/{category}",
        runtime={"max_new_tokens": max_new_tokens, "prefix_cache": prefix_cache},
        store=store,
    )
    t0 = time.perf_counter()
    Worker(store, exit_when_idle=True, poll_s=0.2).run()
    wall = time.perf_counter() - t0
    run = get_run(run_id, store=store)
    rows = list_trajectories(run_id=run_id, limit=100_000, store=store).rows
    latencies = [float(r.latency_ms or 0.0) for r in rows]
    kinds = collections.Counter(r.diagnosis_kind for r in rows if r.outcome == "fail")
    from evalrx.store import get_trajectory

    reasons: collections.Counter = collections.Counter()
    ended: collections.Counter = collections.Counter()
    failing_turns: collections.Counter = collections.Counter()
    errors: collections.Counter = collections.Counter()
    for r in rows:
        ended[r.terminated] += 1
        detail = get_trajectory(r.id, store=store)
        metrics = detail.trajectory.metrics or {}
        if r.outcome == "error":
            errors[str(metrics.get("error") or "")[:70]] += 1
        if r.outcome == "fail":
            reason = metrics.get("grade_reason") or ""
            reasons[reason.split(":")[0][:60]] += 1
            if reason.startswith("user turn "):  # a multi-turn grade names the user turn that failed
                failing_turns[reason.split(":")[0]] += 1
    from evalrx.interop import export_run

    export = export_dir / f"bfcl_{spec}_{category}.jsonl"
    export_run(run_id, export, store=store)
    n = len(rows)
    return {
        "run_id": run_id,
        "cases": n,
        "passed": run.n_pass,
        "accuracy": round(run.n_pass / n, 4) if n else 0.0,
        "errors": run.n_error,
        "ended": dict(ended),
        "diagnosed_kinds": dict(kinds.most_common()),
        "top_grade_reasons": dict(reasons.most_common(5)),
        "failing_turns": dict(sorted(failing_turns.items())),
        "errors_seen": dict(errors.most_common(3)),
        "max_turns_per_user_turn": max_turns,
        "model_ms_per_case_median": round(statistics.median(latencies), 1) if latencies else 0.0,
        "model_ms_per_case_p90": _pct(latencies, 0.9),
        "wall_s_per_case": round(wall / n, 3) if n else 0.0,
        "wall_s": round(wall, 1),
        "peak_rss_mb": _peak_rss_mb(),
        "max_new_tokens": max_new_tokens,
        "prefix_cache": prefix_cache,
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "export": export.name,
    }


def record_calls(export: Path, out: Path) -> int:
    """The calls each trajectory of an exported single-turn run made (`{"id", "calls", "parse_error"}` a line):
    the recorded real-model outputs `tests/unit/test_grade_calls.py` checks against BFCL's own checker."""
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(export, encoding="utf-8") as src, open(out, "w", encoding="utf-8") as dst:
        for line in src:
            row = json.loads(line)
            actors = [s for s in row["steps"] if s["role"] == "actor"]
            turn = next((s for s in actors if s.get("tool_calls") or s.get("parse_error")), None)
            calls = [{"name": c["name"], "args": c.get("args") or {}} for c in (turn or {}).get("tool_calls") or []]
            record = {"id": row["case_id"], "calls": calls, "parse_error": (turn or {}).get("parse_error")}
            dst.write(json.dumps(record, sort_keys=True) + "\n")
            n += 1
    return n


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="smollm2-135m-instruct")
    parser.add_argument("--categories", default=",".join(CATEGORIES))
    parser.add_argument("--limit", type=int, default=100, help="cases per category (simple_python: all 400)")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="a call fits; a text answer is cut here")
    parser.add_argument(
        "--no-prefix-cache",
        action="store_true",
        help="prefill every prompt whole (RuntimeConfig.prefix_cache=False), as runs before the cache did",
    )
    parser.add_argument("--out", default=str(OUT), help="results JSON (merged per spec and category)")
    parser.add_argument("--store", default=None, help="SQLite file for the runs (default: a fresh one in /tmp)")
    parser.add_argument(
        "--record-calls",
        nargs=2,
        metavar=("EXPORT", "FIXTURE"),
        help="only write the calls of an exported run (e.g. results/bfcl_<spec>_simple_python.jsonl) to FIXTURE",
    )
    args = parser.parse_args(argv)
    if args.record_calls:
        n = record_calls(Path(args.record_calls[0]), Path(args.record_calls[1]))
        print(f"{n} trajectories' calls -> {args.record_calls[1]}")
        return 0

    from evalrx.store import connect, upgrade

    path = Path(args.store or f"/tmp/bfcl_runs_{os.getpid()}.sqlite")
    upgrade(f"sqlite:///{path}")
    store = connect(f"sqlite:///{path}")
    for category in [c.strip() for c in args.categories.split(",") if c.strip()]:
        print(f"{args.spec} on bfcl/{category} ...", file=sys.stderr, flush=True)
        out = Path(args.out)
        figures = run_category(
            store,
            args.spec,
            category,
            args.limit,
            args.max_new_tokens,
            prefix_cache=not args.no_prefix_cache,
            export_dir=out.parent,
        )
        print(json.dumps({category: figures}, indent=1), flush=True)
        # Read again before writing: another sitting (another spec) may have written meanwhile.
        results = json.loads(out.read_text()) if out.is_file() else {}
        results.setdefault("runs", {}).setdefault(args.spec, {})[category] = figures
        results["machine"] = {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        results["store"] = str(path)
        out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")  # each category kept as it ends
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
