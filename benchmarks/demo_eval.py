"""Solve rate and failure kinds of a bundled demo model on its held-out demo suites.

Runs the real stack (`evalrx.load("evalrx-tiny")` on hf_local, or `--spec evalrx-tiny-vl` on the
image suites `--suite demo/vision`; `run_batch` with the Agent and the Qwen codec, each case's
own tools), grades every trajectory, classifies each
failure with the library's reference source (`evalrx.diagnosis.from_reference`: the case's
reference calls and expected answer), and records solve rates per task type, suite and failure
kind, plus cases per second, to `benchmarks/results/demo_eval.json`.

Usage:
    .venv/bin/python benchmarks/demo_eval.py [--suite demo] [--max-turns 4] [--limit N]
        [--checkpoint DIR] [--key committed] [--trajectories runs.jsonl]
    .venv/bin/python benchmarks/demo_eval.py --spec evalrx-tiny-vl --suite demo/vision \
        --out benchmarks/results/demo_eval_vision.json
"""

from __future__ import annotations

import argparse
import collections
import datetime as _dt
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from evalrx.core.case import FailureCase, Label, Trajectory
from evalrx.grade import grade_trajectory
from evalrx.suites import load_cases
from evalrx.tools import get_tools

RESULTS = Path(__file__).with_name("results") / "demo_eval.json"


def classify_failure(traj: Trajectory, case: FailureCase, tools: dict) -> str:
    """The failure kind the library's reference source gives a failed run (see `evalrx.core.failures`)."""
    from evalrx.diagnosis import from_reference

    found = from_reference(traj, case, tools)
    return found.kind if found is not None else "wrong_final_answer"


def _rate(solved: int, n: int) -> float:
    return round(solved / n, 4) if n else 0.0


def evaluate(handle: Any, cases: list, max_turns: int, progress: bool = True) -> tuple[list, dict]:
    """Run, grade and classify every case with its own tools (`meta["tools"]`); returns (per-case rows, summary)."""
    from evalrx.models.agent import run_batch

    def tool_names(case: FailureCase) -> list:
        return list(case.meta.get("tools") or ["calculator", "lookup"])

    rows: list[dict] = []
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(cases), desc="demo eval", unit="case")
        except ImportError:  # progress is cosmetic
            bar = None

    def on_result(case: FailureCase, traj: Trajectory) -> None:
        label = grade_trajectory(traj, case)
        reference_tools = {t.name: t for t in get_tools(tool_names(case), case)}
        kind = None if label is Label.PASS else classify_failure(traj, case, reference_tools)
        rows.append(
            {
                "id": case.id,
                "suite": case.meta.get("suite"),
                "task_type": case.meta.get("task_type"),
                "difficulty": case.meta.get("difficulty"),
                "label": label.value,
                "failure_kind": kind,
                "final_answer": traj.final_answer,
                "expected": case.expected,
                "n_tool_calls": traj.metrics.get("n_tool_calls"),
                "terminated": traj.terminated,
                "trajectory": traj.to_dict(),
            }
        )
        if bar is not None:
            bar.update(1)

    t0 = time.perf_counter()
    run_batch(
        handle,
        cases,
        tools_factory=lambda case: get_tools(tool_names(case), case),
        max_turns=max_turns,
        concurrency=1,
        on_result=on_result,
    )
    seconds = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    return rows, summarize(rows, seconds)


def summarize(rows: list, seconds: float) -> dict:
    """Solve rates overall and per task type / suite / difficulty, and failure-kind counts."""

    def group(key: str) -> dict:
        out: dict = {}
        for value in sorted({r[key] for r in rows}, key=str):
            sub = [r for r in rows if r[key] == value]
            solved = sum(r["label"] == "pass" for r in sub)
            kinds = collections.Counter(r["failure_kind"] for r in sub if r["failure_kind"])
            out[str(value)] = {
                "n": len(sub),
                "solved": solved,
                "solve_rate": _rate(solved, len(sub)),
                "failure_kinds": dict(kinds.most_common()),
            }
        return out

    solved = sum(r["label"] == "pass" for r in rows)
    kinds = collections.Counter(r["failure_kind"] for r in rows if r["failure_kind"])
    examples: dict = collections.defaultdict(list)
    for r in rows:
        if r["failure_kind"] and len(examples[r["failure_kind"]]) < 3:
            examples[r["failure_kind"]].append(
                {"id": r["id"], "final_answer": r["final_answer"], "expected": r["expected"]}
            )
    return {
        "n_cases": len(rows),
        "solved": solved,
        "solve_rate": _rate(solved, len(rows)),
        "failure_kinds": dict(kinds.most_common()),
        "n_failure_kinds": len(kinds),
        "per_task_type": group("task_type"),
        "per_suite": group("suite"),
        "per_difficulty": group("difficulty"),
        "seconds": round(seconds, 1),
        "cases_per_second": round(len(rows) / seconds, 3) if seconds else None,
        "mean_tool_calls": round(sum(r["n_tool_calls"] or 0 for r in rows) / max(1, len(rows)), 3),
        "failure_examples": dict(examples),
    }


def main(argv: list | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="evalrx-tiny", help="evalrx-tiny, or evalrx-tiny-vl for demo/vision")
    parser.add_argument("--suite", default="demo")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--limit", type=int, default=0, help="only the first N cases (0: all)")
    parser.add_argument("--checkpoint", default=None, help="model directory (default: the committed model)")
    parser.add_argument("--key", default="committed", help="name of this result inside the JSON file")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--trajectories", default=None, help="also write every trajectory as JSONL here")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    import torch

    import evalrx

    torch.set_num_threads(args.threads)
    cases = load_cases(args.suite)
    if args.limit:
        cases = cases[: args.limit]
    t_load = time.perf_counter()
    handle = evalrx.load(args.spec, checkpoint=args.checkpoint, max_new_tokens=args.max_new_tokens)
    load_s = time.perf_counter() - t_load
    rows, summary = evaluate(handle, cases, args.max_turns, progress=not args.no_progress)
    model_dir = Path(args.checkpoint or evalrx.get_spec(args.spec).hf_repo)
    summary.update(
        {
            "spec": args.spec,
            "suite": args.suite,
            "max_turns": args.max_turns,
            "max_new_tokens": args.max_new_tokens,
            "checkpoint": str(model_dir.relative_to(Path.cwd()))
            if model_dir.is_relative_to(Path.cwd())
            else str(model_dir),
            "model_dir_bytes": sum(p.stat().st_size for p in model_dir.glob("*") if p.is_file()),
            "load_seconds": round(load_s, 2),
            "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "threads": args.threads,
                "cpus": os.cpu_count(),
            },
        }
    )
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.is_file() else {}
    results[args.key] = summary
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    if args.trajectories:
        with open(args.trajectories, "w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, default=str) + "\n")
    brief = {k: summary[k] for k in ("n_cases", "solved", "solve_rate", "failure_kinds", "cases_per_second")}
    brief["per_task_type"] = {k: v["solve_rate"] for k, v in summary["per_task_type"].items()}
    brief["per_suite"] = {k: v["solve_rate"] for k, v in summary["per_suite"].items()}
    print(json.dumps(brief, indent=1))
    return summary


if __name__ == "__main__":
    main()
