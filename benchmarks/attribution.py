"""Failure attribution on Who&When: which agent broke the run, at which step, against the people's labels.

Reads `../shared/data/whowhen_algorithm_generated/` (126 failed runs of AutoGen CaptainAgent teams, each with the
responsible agent and the decisive step labelled by people; see its README), imports every file through the public
path (`evalrx.interop.import_file`) into a fresh SQLite store, reads the trajectories back, and scores:

- `model_free`: the diagnosis without the reference (the ground-truth answer hidden);
- `with_reference`: the diagnosis with the ground-truth answer as the case's expected answer;
- baselines: `random` (as the paper computes it: the expected accuracy of a uniform pick, 1/agents and 1/steps
  averaged over runs), `first_agent_step` (the first step an agent took), `last_step`, `most_frequent_agent`
  (the agent with the most steps in the log, at its first step);
- with `--judge SPEC` (a local spec, or `--backend api --base-url URL [--api-key-env VAR]`): each judge strategy
  (`--strategies`, all three by default), through `evalrx.runner.judge_trajectories` on the same store; a
  refused or failed verdict counts as a miss, and how many there were is recorded.

Agent-level accuracy (the named agent), step-level (the exact history index) and within one step, each with a
Wilson 95% interval, beside the paper's published figures (GPT-4o, without the ground truth).

Measure, do not tune: nothing in `evalrx` may name an agent, a tool, an id or a phrase of this data set.

    .venv/bin/python benchmarks/attribution.py [--data DIR] [--out benchmarks/results/attribution.json]
"""

from __future__ import annotations

import argparse
import collections
import datetime as _dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from diagnosis_real import _count  # noqa: E402  (Wilson 95% intervals, one definition)

RESULTS = Path(__file__).with_name("results")
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "whowhen_algorithm_generated"
# The paper's Table (arXiv 2505.00212), Algorithm-Generated, GPT-4o judges without the ground truth.
PUBLISHED = {
    "source": "Who&When (ICML 2025, arXiv 2505.00212), Algorithm-Generated, GPT-4o, without ground truth",
    "random": {"agent": 0.2910, "step": 0.1906},
    "all_at_once": {"agent": 0.5112, "step": 0.1353},
    "step_by_step": {"agent": 0.2602, "step": 0.1531},
    "binary_search": {"agent": 0.3011, "step": 0.1659},
}


def load(url: str, data: Path, limit: Optional[int] = None) -> list:
    """[(trajectory, case, label, source file)] for every run, imported and read back through the store."""
    import evalrx.store as S
    from evalrx.core import FailureCase, Inputs
    from evalrx.interop import import_file

    out = []
    files = sorted(data.glob("*.json"), key=lambda p: int(p.stem) if p.stem.isdigit() else p.stem)
    for path in files[:limit]:
        result = import_file(path, store=url)
        (row,) = S.list_trajectories(run_id=result.run_ids[0], store=url).rows
        detail = S.get_trajectory(row.id, store=url)
        c = detail.case
        case = FailureCase(
            inputs=Inputs(prompt=c.get("prompt") or ""), id=c["id"], expected=c.get("expected"), meta=c.get("meta")
        )
        (label,) = [x for x in detail.labels if x.step_idx is None]
        out.append((detail.trajectory, case, label, path.name))
    return out


def _agents(traj: Any) -> list:
    return [s.agent for s in traj.steps if s.agent]


def diagnosed(use_reference: bool) -> Callable:
    def predict(traj: Any, case: Any) -> tuple:
        """(agent, step, the sign or kind that named them)."""
        from evalrx.diagnosis import diagnose

        found = diagnose(traj, case=case, use_reference=use_reference)
        top = found[0] if found else None
        return (top.agent, top.first_wrong_step, top.evidence.get("sign") or top.kind) if top else (None, None, "-")

    return predict


def first_agent_step(traj: Any, case: Any) -> tuple:
    first = next((s for s in traj.steps if s.agent), None)
    return (first.agent, first.idx) if first else (None, None)


def last_step(traj: Any, case: Any) -> tuple:
    last = traj.steps[-1]
    return last.agent, last.idx


def most_frequent_agent(traj: Any, case: Any) -> tuple:
    counts = collections.Counter(_agents(traj))
    if not counts:
        return None, None
    agent = max(counts, key=lambda a: (counts[a], -next(s.idx for s in traj.steps if s.agent == a)))
    return agent, next(s.idx for s in traj.steps if s.agent == agent)


PREDICTORS = {
    "model_free": diagnosed(False),
    "with_reference": diagnosed(True),
    "first_agent_step": first_agent_step,
    "last_step": last_step,
    "most_frequent_agent": most_frequent_agent,
}


def score(runs: list, predictors: dict) -> dict:
    out: dict = {}
    per_run: dict = {}
    for name, predict in predictors.items():
        agent_ok = step_ok = near = 0
        signs: collections.Counter = collections.Counter()
        for traj, case, label, source in runs:
            agent, step, *sign = predict(traj, case)  # a diagnosis also says which sign named them
            agent_ok += agent is not None and agent == label.agent
            step_ok += step is not None and step == label.first_wrong_step
            near += step is not None and label.first_wrong_step is not None and abs(step - label.first_wrong_step) <= 1
            per_run.setdefault(source, {"label": [label.agent, label.first_wrong_step]})[name] = [agent, step]
            if sign:
                signs[sign[0]] += 1
        n = len(runs)
        out[name] = {"agent": _count(agent_ok, n), "step": _count(step_ok, n), "within_one_step": _count(near, n)}
        if signs:
            out[name]["top_sign"] = dict(signs.most_common())
    n = len(runs)
    out["random"] = {
        "agent": {"share": round(sum(1 / len(set(_agents(t))) for t, *_ in runs) / n, 4), "n": n},
        "step": {"share": round(sum(1 / len(t.steps) for t, *_ in runs) / n, 4), "n": n},
    }
    return {"variants": out, "per_run": per_run}


def judged(url: str, runs: list, args: argparse.Namespace) -> "tuple[dict, dict]":
    """Predictors for each judge strategy (their verdicts asked once, up front), and each one's refusals."""
    import evalrx.store as S
    from evalrx.models import load as load_model
    from evalrx.runner.judging import judge_trajectories

    runtime: dict = {"max_new_tokens": args.max_new_tokens}
    if args.backend == "api":
        runtime["base_url"] = args.base_url
        if args.api_key_env:
            runtime["api_key"] = os.environ[args.api_key_env]  # held by the client only, never recorded
    model = load_model(args.judge, backend=args.backend, **runtime)
    ids = {traj.sample_id: S.list_trajectories(sample_id=traj.sample_id, store=url).rows[0].id for traj, *_ in runs}
    predictors, misses = {}, {}
    for strategy in args.strategies.split(","):
        verdicts = {
            j.trajectory_id: j for j in judge_trajectories(list(ids.values()), model, store=url, strategy=strategy)
        }
        misses[f"judge_{strategy}"] = {
            "refused": sum(1 for j in verdicts.values() if j.diagnosis is None and not j.failed),
            "failed": sum(1 for j in verdicts.values() if j.failed),
        }

        def predict(traj: Any, case: Any, verdicts: dict = verdicts) -> tuple:
            judged = verdicts.get(ids[traj.sample_id])
            d = judged.diagnosis if judged is not None else None
            return (d.agent, d.first_wrong_step) if d is not None else (None, None)

        predictors[f"judge_{strategy}"] = predict
    return predictors, misses


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="the whowhen_algorithm_generated folder")
    parser.add_argument("--out", default=str(RESULTS / "attribution.json"))
    parser.add_argument("--judge", metavar="SPEC", help="also score a judge model, with each strategy")
    parser.add_argument("--backend", default="hf_local", help="the judge's backend (api for a server)")
    parser.add_argument("--base-url", help="the judge's server (api backend)")
    parser.add_argument("--api-key-env", metavar="VAR", help="the environment variable holding the judge's key")
    parser.add_argument("--strategies", default="all_at_once,step_by_step,binary_search")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--limit", type=int, help="the first N runs only (a quick check; not a recorded figure)")
    args = parser.parse_args(argv)
    import evalrx.store as S

    t0 = time.perf_counter()
    predictors, misses = dict(PREDICTORS), {}
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'whowhen.sqlite'}"
        S.upgrade(url)
        runs = load(url, Path(args.data), args.limit)
        if args.judge:
            more, misses = judged(url, runs, args)
            predictors.update(more)
        result = score(runs, predictors)
        S.forget(url)
    for name, counts in misses.items():
        result["variants"][name].update(counts)
    record = {
        "benchmark": "attribution",
        "data": "Who&When Algorithm-Generated",
        "runs": len(runs),
        "results": result["variants"],
        "published": PUBLISHED,
        "targets": {"model_free": {"agent": 0.60, "step": 0.30, "within_one_step": 0.45}},
        "judge": {"spec": args.judge, "backend": args.backend} if args.judge else None,
        "per_run": result["per_run"],
        "seconds": round(time.perf_counter() - t0, 1),
        "load": [round(x, 2) for x in os.getloadavg()],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "when": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    for name, v in result["variants"].items():
        print(
            f"{name:20s} agent {v['agent']['share']:.3f}  step {v['step']['share']:.3f}"
            + (f"  within one {v['within_one_step']['share']:.3f}" if "within_one_step" in v else "")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
