"""A judge model on real failures labelled by people: the AgentRx tau-bench retail runs, beside the rule sources.

Imports `../shared/data/agentrx_tau_retail/tau_dataset_failed.json` through the public path into a fresh
SQLite store, judges every failed run with the given spec (`evalrx.runner.judging.judge_trajectories`, the
code behind `evalrx diagnose RUN --judge SPEC`), and prints the figures `diagnosis_real.py` prints (root step
exact and within one agent turn on the 20 agent-rooted runs, at any labelled failure, kind through the
taxonomy mapping, user-rooted runs named `user_error`) for the judge beside the reference, the model-free rules
and the two trivial baselines, each with a Wilson 95% interval; and how many answers were refused by the checks.

Any OpenAI-compatible server is a judge (the key is read from the named environment variable):
    .venv/bin/python benchmarks/judge_real.py --judge gpt-4o-mini --backend api \\
        --base-url https://api.example.com/v1 --api-key-env OPENAI_API_KEY
A local model:
    .venv/bin/python benchmarks/judge_real.py --judge smollm2-135m-instruct
Results go to `benchmarks/results/judge_real_<spec>.json`. A 135M model's figure says the path works, not
what a capable judge finds: that is for the user to measure with their own model.
"""

from __future__ import annotations

import argparse
import collections
import datetime as _dt
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from diagnosis_real import DEFAULT_DATA, RESULTS, VARIANTS, load_stored, predicted, score_failed


def _judge_predictor(url: str):
    import evalrx.store as S

    by_sample: dict = {}

    def predict(traj: Any, case: Any) -> "tuple[Optional[str], Optional[int]]":
        if not by_sample:
            for row in S.list_trajectories(limit=100_000, store=url).rows:
                by_sample[str(row.sample_id)] = row.id
        found = [d for d in S.get_diagnoses(by_sample[str(traj.sample_id)], store=url) if d.source == "judge"]
        if not found:
            return None, None
        step = next((s for s in traj.steps if s.idx == found[0].first_wrong_step), None)
        return found[0].kind, (step.span.get("message") if step is not None else None)

    return predict


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge", default="smollm2-135m-instruct", help="the judge's model spec")
    parser.add_argument("--backend", default="hf_local", choices=("hf_local", "api"))
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible server (with --backend api)")
    parser.add_argument("--api-key-env", default=None, help="the environment variable holding its key")
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--limit", type=int, default=0, help="only the first N failed runs (0: all 29)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--max-steps", type=int, default=16, help="steps of each run the prompt shows")
    parser.add_argument("--max-step-chars", type=int, default=300, help="characters of each step's text")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import evalrx
    import evalrx.store as S
    from evalrx.interop import import_file
    from evalrx.runner.judging import judge_targets, judge_trajectories

    data = Path(args.data)
    runs = json.loads((data / "tau_dataset_failed.json").read_text())
    labels = json.loads((data / "tau_ground_truth.json").read_text())
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not key:
        raise SystemExit(f"{args.api_key_env} is not set: export the judge's key in it first")
    runtime: dict = {"base_url": args.base_url, "api_key": key} if args.backend == "api" else {"device": "cpu"}
    model = evalrx.load(args.judge, backend=args.backend, **{k: v for k, v in runtime.items() if v})
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'judge.sqlite'}"
        S.upgrade(url)
        run_id = import_file(data / "tau_dataset_failed.json", store=url).run_ids[0]
        ids = judge_targets(run_id, limit=args.limit or None, store=url)
        judged = judge_trajectories(
            ids,
            model,
            server=args.base_url,
            store=url,
            max_new_tokens=args.max_new_tokens,
            max_steps=args.max_steps,
            max_step_chars=args.max_step_chars,
            on_result=lambda j: print(j.line(), flush=True),
        )
        stored = load_stored(url, run_id)
        judged_ids = {str(j.sample_id) for j in judged}
        stored = {sid: v for sid, v in stored.items() if sid in judged_ids}
        labels = [lab for lab in labels if str(lab["trajectory_id"]) in judged_ids]
        predictors = {v: (lambda t, c, v=v: predicted(t, c, v)) for v in VARIANTS}
        predictors["judge"] = _judge_predictor(url)
        scores = score_failed(stored, runs, labels, predictors)
        S.forget(url)
    refusals = collections.Counter((j.refusal or "").split(" (")[0][:80] for j in judged if j.refusal and not j.failed)
    tokens = [j.diagnosis.evidence.get("judge", {}) for j in judged if j.diagnosis is not None]
    results = {
        "judge": {"spec": args.judge, "backend": args.backend, "server": bool(args.base_url)},
        "prompt": {"max_new_tokens": args.max_new_tokens, "max_steps": args.max_steps, "chars": args.max_step_chars},
        "judged": len(judged),
        "verdicts": sum(j.diagnosis is not None for j in judged),
        "refused": sum(bool(j.refusal) and not j.failed for j in judged),
        "failed_calls": sum(j.failed for j in judged),
        "refusal_reasons": dict(refusals.most_common(6)),
        "judge_latency_ms_median": sorted(t.get("latency_ms", 0.0) for t in tokens)[len(tokens) // 2]
        if tokens
        else None,
        "failed": scores["variants"],
        "per_run": scores["per_run"],
        "seconds": round(time.perf_counter() - t0, 1),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg_after": [round(x, 2) for x in os.getloadavg()],
            "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        },
    }
    out = Path(args.out or RESULTS / f"judge_real_{args.judge}.json")
    out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print(f"{results['verdicts']} verdicts, {results['refused']} refused, {results['failed_calls']} failed calls")
    for variant, figures in results["failed"].items():
        line = ", ".join(f"{k} {v['k']}/{v['n']}" for k, v in figures.items() if isinstance(v, dict) and "k" in v)
        print(f"{variant:16s} {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
