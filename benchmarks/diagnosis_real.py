"""How well the diagnosis finds why real agents failed: tau-bench retail runs labelled by people (AgentRx).

Reads `../shared/data/agentrx_tau_retail/` (29 failed runs with human labels, and 100 runs of the same
tasks of which 73 passed), imports both files through the public path (`evalrx.interop.import_file`, which
reads tau-bench results: the task's gold actions become the case's reference calls) into a fresh SQLite
store, reads the trajectories back, and diagnoses them:

- `model_free`: the rules alone (the reference hidden, as for an import without gold actions);
- `reference`: everything the diagnosis has (the gold actions as reference calls, then the rules);
- `first_assistant` / `last_assistant`: the two trivial baselines.

Against the people's root step (a message index) it reports, with a Wilson 95% interval each: root step
exact on the 20 assistant-rooted runs, within one assistant turn, at any labelled failure step; kind
agreement through the taxonomy mapping (`evalrx.core.taxonomies`); how many of the user-rooted runs are
named `user_error`; how many runs whose last agent message is a reply to the user still get
`no_final_answer`. The false-alarm side: the 73 passing runs diagnosed as if they had failed, and the
signs (kinds) the rules raise on them.

Measure, do not tune: nothing in `evalrx` may name a tool, an id or a phrase of this data set.

Usage:
    .venv/bin/python benchmarks/diagnosis_real.py [--data ../shared/data/agentrx_tau_retail]
Results go to `benchmarks/results/diagnosis_real.json`.
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

from evalrx.interop.tau_bench import to_openai_row

RESULTS = Path(__file__).with_name("results")
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "agentrx_tau_retail"
VARIANTS = ("model_free", "reference", "first_assistant", "last_assistant")


# ------------------------------------------------------------------ scoring


def wilson(k: int, n: int) -> list:
    """The Wilson score 95% interval of k successes in n (`evalrx.runstats.wilson_share`, over scipy's)."""
    if n == 0:
        return [0.0, 0.0]
    from evalrx.runstats import wilson_share

    share = wilson_share(k, n)
    return [round(share["low"], 3), round(share["high"], 3)]


def _count(k: int, n: int) -> dict:
    return {"k": k, "n": n, "share": round(k / n, 3) if n else 0.0, "wilson95": wilson(k, n)}


def assistant_ordinal(messages: list, index: Optional[int]) -> Optional[int]:
    """How many assistant messages come at or before message `index` (1-based): which assistant turn it is in."""
    if index is None:
        return None
    return sum(1 for i, m in enumerate(messages, start=1) if i <= index and m["role"] == "assistant")


def last_reply_is_to_user(messages: list) -> bool:
    """Whether the agent's last message is a reply to the user (no call after it, only the user may follow)."""
    for m in reversed(messages):
        if m["role"] == "assistant":
            return not m.get("tool_calls") and bool((m.get("content") or "").strip())
        if m["role"] == "tool":
            return False
    return False


def predicted(traj: Any, case: Any, variant: str) -> tuple[Optional[str], Optional[int]]:
    """(kind, message index) a variant names for a stored trajectory."""
    from evalrx.core import StepRole
    from evalrx.diagnosis import diagnose

    steps = traj.steps
    actors = [s for s in steps if s.role is StepRole.ACTOR]
    if variant == "first_assistant":
        return None, actors[0].span.get("message") if actors else None
    if variant == "last_assistant":
        return None, actors[-1].span.get("message") if actors else None
    found = diagnose(traj, case=case, use_reference=(variant == "reference"))
    if not found:
        return None, None
    top = found[0]
    step = next((s for s in steps if s.idx == top.first_wrong_step), None)
    return top.kind, (step.span.get("message") if step is not None else None)


def load_stored(url: str, run_id: int) -> dict:
    """sample id -> (trajectory, case) as the store gives them back."""
    import evalrx.store as S
    from evalrx.core import FailureCase, Inputs

    out = {}
    for row in S.list_trajectories(run_id=run_id, limit=100_000, store=url).rows:
        detail = S.get_trajectory(row.id, store=url)
        c = detail.case
        case = FailureCase(inputs=Inputs(prompt=c.get("prompt") or ""), id=c.get("id") or "", meta=c.get("meta") or {})
        out[str(row.sample_id)] = (detail.trajectory, case)
    return out


def score_failed(stored: dict, runs: list, labels: list, predictors: Optional[dict] = None) -> dict:
    """The figures of each variant against the people's labels. `predictors`: name -> f(traj, case) giving
    (kind, message index); the default is this script's four variants (another script adds its own)."""
    from evalrx.core.taxonomies import map_category

    by_id = {str(r["task_id"]): r for r in runs}
    out: dict = {}
    per_run: dict = {}
    predictors = predictors or {v: (lambda t, c, v=v: predicted(t, c, v)) for v in VARIANTS}
    for variant, predict in predictors.items():
        exact = within = anywhere = kind_ok = user_named = false_nfa = 0
        n_assistant = n_user = n_reply_last = 0
        kinds: collections.Counter = collections.Counter()
        for lab in labels:
            sid = str(lab["trajectory_id"])
            traj, case = stored[sid]
            messages = to_openai_row(by_id[sid])["messages"]  # the roles by message index, as imported
            failures = {f["failure_id"]: f for f in lab["failures"]}
            root = failures[lab["root_cause"]["failure_id"]]
            root_step = int(root["step_number"])
            root_role = messages[root_step - 1]["role"]
            kind, step = predict(traj, case)
            kinds[kind or "-"] += 1
            per_run.setdefault(sid, {"root_step": root_step, "root_role": root_role})[variant] = [kind, step]
            if root_role == "assistant":
                n_assistant += 1
                exact += step == root_step
                a, b = assistant_ordinal(messages, step), assistant_ordinal(messages, root_step)
                within += a is not None and abs(a - b) <= 1
                anywhere += step in {int(f["step_number"]) for f in lab["failures"]}
            else:
                n_user += 1
                user_named += kind == "user_error"
            if variant not in ("first_assistant", "last_assistant"):
                kind_ok += kind == map_category(root["failure_category"], "agentrx")
            if last_reply_is_to_user(messages):
                n_reply_last += 1
                false_nfa += kind == "no_final_answer"
        out[variant] = {
            "root_step_exact": _count(exact, n_assistant),
            "within_one_assistant_turn": _count(within, n_assistant),
            "at_any_labelled_failure": _count(anywhere, n_assistant),
            "user_rooted_named_user_error": _count(user_named, n_user),
            "no_final_answer_after_a_reply": _count(false_nfa, n_reply_last),
            "kinds": dict(kinds.most_common()),
        }
        if variant not in ("first_assistant", "last_assistant"):
            out[variant]["kind_agrees_with_root_category"] = _count(kind_ok, len(labels))
    return {"variants": out, "per_run": per_run}


def score_passing(stored: dict) -> dict:
    """The rules on passing runs diagnosed as if they had failed: the signs they raise (false alarms)."""
    from evalrx.core import Label
    from evalrx.diagnosis import from_rules

    signs: collections.Counter = collections.Counter()
    runs_with_sign = 0
    for traj, _case in stored.values():
        traj.outcome = Label.FAIL
        found = [d for d in from_rules(traj) if d.confidence >= 0.3]  # the fallback is not a sign
        runs_with_sign += bool(found)
        signs.update(d.kind for d in found)
    return {"runs": len(stored), "runs_with_a_sign": _count(runs_with_sign, len(stored)), "signs": dict(signs)}


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="the agentrx_tau_retail folder")
    parser.add_argument("--out", default=str(RESULTS / "diagnosis_real.json"))
    args = parser.parse_args(argv)
    data = Path(args.data)
    failed = json.loads((data / "tau_dataset_failed.json").read_text())
    labels = json.loads((data / "tau_ground_truth.json").read_text())

    import evalrx.store as S
    from evalrx.core import Label
    from evalrx.interop import import_file

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'real.sqlite'}"
        S.upgrade(url)
        stored = {}
        for name, path in (("failed", "tau_dataset_failed.json"), ("full", "tau_dataset_full.json")):
            result = import_file(data / path, store=url)
            stored[name] = load_stored(url, result.run_ids[0])
        stored["passing"] = {sid: v for sid, v in stored["full"].items() if v[0].outcome is Label.PASS}
        failed_scores = score_failed(stored["failed"], failed, labels)
        passing_scores = score_passing(stored["passing"])
        S.forget(url)
    results = {
        "data": "AgentRx tau-bench retail (29 failed runs labelled by people; 73 passing runs)",
        "failed": failed_scores["variants"],
        "passing_as_if_failed": passing_scores,
        "per_run": failed_scores["per_run"],
        "seconds": round(time.perf_counter() - t0, 1),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        },
    }
    Path(args.out).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    for variant, figures in results["failed"].items():
        line = ", ".join(f"{k} {v['k']}/{v['n']}" for k, v in figures.items() if isinstance(v, dict) and "k" in v)
        print(f"{variant:16s} {line}")
        print(f"{'':16s} kinds {figures['kinds']}")
    print(f"passing runs with a sign: {passing_scores['runs_with_a_sign']['k']}/{passing_scores['runs']}", end=" ")
    print(passing_scores["signs"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
