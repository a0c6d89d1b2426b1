"""What the white-box analyzers add to a demo-model run when they read the generation itself.

Library level (`run_case` + `evalrx.analyzers.analyze`, no worker or store): the same 40+
demo cases (a seeded sample of `load_cases("demo")`, max_turns 4, max_new_tokens 96, 2
threads) run three ways per repeat, in shuffled order:

* plain: the agent alone;
* capture: the agent with `chat_kwargs={"capture": ...}` (what the runner's `with_capture`
  sets), then `logit_lens`, `tool_decision`, `attention` and `token_uncertainty` through
  `analyze`, built from the captures wherever they cover a pass;
* teacher_forced: the agent alone, then the same `analyze` with `captures=None` (one
  teacher-forced forward per planned pass, as before).

Each repeat runs every case the three ways back to back (cases and variants shuffled), so
a burst of load from the shared machine hits all three; the ratio to plain is taken within
each repeat. The median and the spread over repeats, the ratio of each case's fastest run
(the cost without the noise), the load average at each repeat and where the analyzers'
numbers came from go to `benchmarks/results/capture_overhead.json`. Each
configuration of the model is measured: "default" (loaded as the worker loads it, sdpa
attention: the rows are rebuilt after generation from the captured states and the KV cache)
and "eager" (`want=["attention"]`: the rows come from eager attention's own weights). The capture run's
trajectories are checked to equal the plain run's (capture must not change generation).

Usage:
    .venv/bin/python benchmarks/capture_overhead.py [--cases 40] [--repeats 5] [--configs default eager]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import random
import statistics
import time
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).with_name("results") / "capture_overhead.json"
ANALYZERS = ["logit_lens", "tool_decision", "attention", "token_uncertainty"]
CONFIGS = {"default": [], "eager": ["attention"]}
VARIANTS = ("plain", "capture", "teacher_forced")


def one_case(handle, case, variant: str, agent_kwargs: dict) -> dict:
    """One case run one way: the agent's seconds, the analyzers' seconds (0 for plain), its steps, sources."""
    from evalrx.analyzers import analyze
    from evalrx.models.agent import run_case
    from evalrx.tools import get_tools

    t0 = time.perf_counter()
    tools = get_tools(["calculator", "lookup"], case=case)
    traj = run_case(handle, case, tools, **agent_kwargs)
    t1 = time.perf_counter()
    sources: dict = {}
    if variant != "plain":
        results = analyze(
            handle,
            traj,
            ANALYZERS,
            tools=[t.to_openai() for t in tools],
            captures="auto" if variant == "capture" else None,
        )
        sources = {name: result.info.get("source") for name, result in results.items()}
    t2 = time.perf_counter()
    return {"run": t1 - t0, "analysis": t2 - t1, "steps": [s.content for s in traj.steps], "sources": sources}


def run_config(
    name: str, want: list, cases: list, repeats: int, rng: random.Random, max_turns: int, max_new_tokens: int
) -> dict:
    """Every repeat runs each case three ways back to back (shuffled), so a burst of load hits all three."""
    import evalrx
    from evalrx.runner.analysis import with_capture

    handle = evalrx.load("evalrx-tiny", want=want, max_new_tokens=max_new_tokens)
    kwargs = {
        "plain": {"max_turns": max_turns},
        "teacher_forced": {"max_turns": max_turns},
        "capture": with_capture({"max_turns": max_turns}, handle, ANALYZERS),
    }
    for case in cases[:2]:  # warm caches (tokenizer, template, hooks, imports) before timing
        for variant in VARIANTS:
            one_case(handle, case, variant, kwargs[variant])
    rows = []
    same = True
    best: dict = {}  # (case index, variant) -> fastest seconds over the repeats
    sources: Counter = Counter()
    for r in range(repeats):
        totals = {v: 0.0 for v in VARIANTS}
        analysis = {v: 0.0 for v in VARIANTS}
        order = list(range(len(cases)))
        rng.shuffle(order)
        for i in order:
            variants = list(VARIANTS)
            rng.shuffle(variants)
            got = {v: one_case(handle, cases[i], v, kwargs[v]) for v in variants}
            same = same and got["capture"]["steps"] == got["plain"]["steps"] == got["teacher_forced"]["steps"]
            for v in VARIANTS:
                seconds = got[v]["run"] + got[v]["analysis"]
                totals[v] += seconds
                analysis[v] += got[v]["analysis"]
                best[(i, v)] = min(best.get((i, v), seconds), seconds)
            if r == 0:
                sources.update(f"{n}:{s}" for n, s in got["capture"]["sources"].items())
        rows.append(
            {
                "repeat": r,
                **{v: round(totals[v], 3) for v in VARIANTS},
                "capture_analysis_s": round(analysis["capture"], 3),
                "teacher_forced_analysis_s": round(analysis["teacher_forced"], 3),
                "ratio_capture": round(totals["capture"] / totals["plain"], 4),
                "ratio_teacher_forced": round(totals["teacher_forced"] / totals["plain"], 4),
                "load_avg": round(os.getloadavg()[0], 2),
            }
        )
        print(name, json.dumps(rows[-1]), flush=True)
    out: dict = {
        "attn_implementation": handle.model.config._attn_implementation,
        "want": want,
        "same_trajectories": same,
        "sources": dict(sorted(sources.items())),
    }
    for key in ("ratio_capture", "ratio_teacher_forced"):
        values = [row[key] for row in rows]
        out[f"{key}_median"] = round(statistics.median(values), 4)
        out[f"{key}_min"], out[f"{key}_max"] = min(values), max(values)
    fastest = {v: sum(best[(i, v)] for i in range(len(cases))) for v in VARIANTS}
    # Each case's fastest run of each variant: the cost without the machine's noise.
    out["ratio_capture_of_fastest"] = round(fastest["capture"] / fastest["plain"], 4)
    out["ratio_teacher_forced_of_fastest"] = round(fastest["teacher_forced"] / fastest["plain"], 4)
    for v in VARIANTS:
        out[f"{v}_s_median"] = round(statistics.median(row[v] for row in rows), 3)
    for v in ("capture", "teacher_forced"):
        out[f"{v}_analysis_s_median"] = round(statistics.median(row[f"{v}_analysis_s"] for row in rows), 3)
    out["rows"] = rows
    return out


def main(argv: list | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--analyzers", nargs="+", default=list(ANALYZERS), help="default: the four white-box ones")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)

    import torch

    from evalrx.suites import load_cases

    torch.set_num_threads(args.threads)
    ANALYZERS[:] = args.analyzers
    rng = random.Random(0)
    cases = rng.sample(load_cases("demo"), args.cases)
    result = {
        "cases": args.cases,
        "repeats": args.repeats,
        "analyzers": ANALYZERS,
        "max_turns": args.max_turns,
        "max_new_tokens": args.max_new_tokens,
        "level": "library (run_case + analyze; no worker, no store)",
        "configs": {
            name: run_config(name, CONFIGS[name], cases, args.repeats, rng, args.max_turns, args.max_new_tokens)
            for name in args.configs
        },
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": args.threads,
            "cpus": os.cpu_count(),
            "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    for name, cfg in result["configs"].items():
        print(name, json.dumps({k: v for k, v in cfg.items() if k not in ("rows", "want")}))
    return result


if __name__ == "__main__":
    main()
