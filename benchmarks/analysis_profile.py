"""Where a white-box run's time goes: a worker's run with the four analyzers under cProfile, by phase.

Runs `--cases` demo cases through the real worker and store with `logit_lens`, `tool_decision`, `attention`
and `token_uncertainty` (read from the generation's captures, the worker's default), once with the analyzers
and once without, under `cProfile`, and reports the cumulative seconds of the functions that make each
phase: the model's generation, the capture's bookkeeping, planning the passes, the teacher-forced forwards
left, each analyzer's arithmetic (the lens' statistics, the tool decision, attention, uncertainty), the
diagnosis and the store's writes. Phases nest (the lens' arithmetic is inside the analyzers' total): read
them as "how much of the analyzed run is this", not as a sum. Issue 27 starts from this record.

Usage:
    .venv/bin/python benchmarks/analysis_profile.py [--spec smollm2-135m-instruct] [--cases 6]
Results go to `benchmarks/results/analysis_profile_<spec>.json`.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as _dt
import json
import os
import platform
import pstats
import resource
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).with_name("results")
ANALYZERS = ["logit_lens", "tool_decision", "attention", "token_uncertainty"]
# (phase, module path fragment, function name): a phase's seconds are its functions' cumulative time.
PHASES = [
    ("generation (model.generate)", "transformers/generation/utils.py", "generate"),
    ("capture: finish (stack states, rows)", "evalrx/internals/capture.py", "finish"),
    ("analyzers, all (run_all)", "evalrx/runner/analysis.py", "run_all"),
    ("plan the passes", "evalrx/internals/passes/planning.py", "build"),
    ("teacher-forced forwards left", "evalrx/internals/passes/compute.py", "forward"),
    ("logit lens statistics (lens_stats)", "evalrx/internals/passes/lens.py", "lens_stats"),
    ("  of which the unembedding matmuls", "evalrx/internals/discover.py", "lens_logits"),
    ("  of which softmax/top-k/entropy (_block_stats)", "evalrx/internals/passes/lens.py", "_block_stats"),
    ("tool decision", "evalrx/analyzers/tool_decision.py", "read"),
    ("attention", "evalrx/analyzers/attention.py", "read"),
    ("token uncertainty", "evalrx/analyzers/uncertainty.py", "read"),
    ("diagnosis", "evalrx/runner/diagnose.py", "diagnose_case"),
    ("store: record the case", "evalrx/store/cases.py", "record_case"),
]


def run_once(spec: str, cases: list, analyzers: list) -> "tuple[float, pstats.Stats]":
    import evalrx.store as S
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import Worker, enqueue_run

    tmp = tempfile.mkdtemp(prefix="evalrx-profile-")
    url = f"sqlite:///{Path(tmp) / 's.sqlite'}"
    S.upgrade(url)
    store = S.connect(url)
    cfg = RunConfig(model=ModelConfig(spec), tools=["calculator", "lookup"], max_turns=4, analyzers=list(analyzers))
    enqueue_run(cfg, cases, runtime={"max_new_tokens": 96}, store=store)
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    Worker(store, exit_when_idle=True, poll_s=0.01, heartbeat_s=5).run()
    profile.disable()
    seconds = time.perf_counter() - t0
    S.forget(url)
    return seconds, pstats.Stats(profile)


def phases(stats: pstats.Stats) -> dict:
    """Cumulative seconds per phase (the largest entry of each matching function: a recursive call counts once)."""
    out = {}
    for name, path, func in PHASES:
        best = 0.0
        for (file, _line, fn), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
            if fn == func and path in file.replace("\\", "/"):
                best = max(best, ct)
        out[name] = round(best, 3)
    return out


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="smollm2-135m-instruct")
    parser.add_argument("--cases", type=int, default=6)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    from evalrx.suites import load_cases

    cases = load_cases("demo")[: args.cases]
    run_once(args.spec, cases[:1], [])  # load the model and warm its caches outside the profile
    plain_s, plain = run_once(args.spec, cases, [])
    analyzed_s, analyzed = run_once(args.spec, cases, ANALYZERS)
    result = {
        "spec": args.spec,
        "cases": len(cases),
        "analyzers": ANALYZERS,
        "seconds": {"plain": round(plain_s, 2), "analyzed": round(analyzed_s, 2)},
        "ratio_under_profile": round(analyzed_s / plain_s, 3) if plain_s else None,
        "phases_plain": phases(plain),
        "phases_analyzed": phases(analyzed),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "note": "cProfile slows Python-heavy code more than matrix products: the ratio here is not the "
        "benchmark's (analysis_overhead.py); the phases say where the time goes.",
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg_after": [round(x, 2) for x in os.getloadavg()],
            "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        },
    }
    out = Path(args.out or RESULTS / f"analysis_profile_{args.spec}.json")
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
