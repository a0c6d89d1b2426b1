"""How well the diagnosis says why the demo model's failures failed, on its full held-out run.

Runs the demo model over every demo case through the real path (a queued run, a worker, the
SQLite store), then reads the stored diagnoses and checks:

- coverage: every failed trajectory has a diagnosis with a first wrong step;
- the reference source agrees with the benchmark classifier it replaced (per-case kinds kept in
  `results/previous_classifier_kinds.json`, old keys mapped by `canonical_kind`); where it names
  a finer kind (an argument garbled from an earlier observation is `misread_observation`, the old
  `wrong_arguments`), the case is listed as a refinement, never hidden;
- the model-free rules alone (the reference hidden, as for an import) against the reference:
  how often their top kind is the reference's kind, the confusion matrix, and each rule's precision
  (of the trajectories whose top rule is kind K, the share the reference also calls K).

Results go to `benchmarks/results/diagnosis_eval.json`.

With `--whitebox` the run also stores logit-lens and tool-decision results, and the white-box
signs are scored against the reference (same first wrong step; same kind and step).

Usage:
    .venv/bin/python benchmarks/diagnosis_eval.py [--suite demo] [--limit N] [--whitebox]
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

RESULTS = Path(__file__).with_name("results")
PREVIOUS = RESULTS / "previous_classifier_kinds.json"
# Finer kinds the library's reference source may name where the old classifier had a coarser one.
REFINEMENTS = {
    ("bad_arguments", "misread_observation"),
    ("wrong_tool", "unknown_tool"),
    ("wrong_tool", "unneeded_tool_call"),
}


def run_demo(
    url: str, suite: str, limit: int, max_turns: int, max_new_tokens: int, analyzers: tuple = ()
) -> tuple[int, float]:
    """Queue the demo model on `suite` and run it with one worker; returns (run id, seconds)."""
    import evalrx.store as S
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import Worker, enqueue_run
    from evalrx.suites import load_cases

    S.upgrade(url)
    store = S.connect(url)
    cases = load_cases(suite)
    if limit:
        cases = cases[:limit]
    cfg = RunConfig(
        model=ModelConfig("evalrx-tiny"), tools=["calculator", "lookup"], max_turns=max_turns, analyzers=list(analyzers)
    )
    run_id = enqueue_run(cfg, cases, name="diagnosis eval", runtime={"max_new_tokens": max_new_tokens}, store=store)
    t0 = time.perf_counter()
    Worker(store, exit_when_idle=True, poll_s=0.05).run()
    return run_id, time.perf_counter() - t0


def evaluate(url: str, run_id: int) -> dict:
    """Coverage, agreement with the previous classifier, and the rules' recovery and precision."""
    import evalrx.store as S
    from evalrx.core.failures import canonical_kind
    from evalrx.diagnosis import diagnose

    store = S.connect(url)
    previous = json.loads(PREVIOUS.read_text())["kinds"] if PREVIOUS.is_file() else {}
    rows = []
    cursor = None
    while True:
        page = S.list_trajectories(run_id=run_id, outcome="fail", limit=500, after=cursor, store=store)
        rows += page.rows
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    confusion: collections.Counter = collections.Counter()
    agree = refined = compared = covered = recovered = 0
    whitebox = collections.Counter()
    disagreements, refinements = [], []
    for row in rows:
        detail = S.get_trajectory(row.id, store=store)
        stored = detail.diagnoses
        top = stored[0] if stored else None
        covered += top is not None and top.kind is not None and top.first_wrong_step is not None
        reference = next((d for d in stored if d.source == "reference"), None)
        for d in (d for d in stored if d.source == "whitebox"):
            whitebox["proposed"] += 1
            whitebox["same_step"] += bool(reference) and d.first_wrong_step == reference.first_wrong_step
            whitebox["same_kind_and_step"] += bool(reference) and (d.kind, d.first_wrong_step) == (
                reference.kind,
                reference.first_wrong_step,
            )
        rules = diagnose(detail.trajectory, use_reference=False)
        rule_kind = rules[0].kind if rules else None
        ref_kind = reference.kind if reference else None
        confusion[(ref_kind, rule_kind)] += 1
        recovered += rule_kind == ref_kind
        old = canonical_kind(previous.get(row.sample_id))
        if old is not None and ref_kind is not None:
            compared += 1
            if old == ref_kind:
                agree += 1
            elif (old, ref_kind) in REFINEMENTS:
                refined += 1
                refinements.append({"case": row.sample_id, "previous": old, "reference": ref_kind})
            else:
                disagreements.append({"case": row.sample_id, "previous": old, "reference": ref_kind})
    n = len(rows)
    kinds = sorted({k for pair in confusion for k in pair if k}, key=str)
    matrix = {
        ref: {rule or "none": confusion[(ref, rule)] for rule in kinds + [None] if confusion[(ref, rule)]}
        for ref in kinds
    }
    precision = {}
    for kind in kinds:
        proposed = sum(v for (ref, rule), v in confusion.items() if rule == kind)
        right = confusion[(kind, kind)]
        if proposed:
            precision[kind] = {"proposed": proposed, "right": right, "precision": round(right / proposed, 4)}
    return {
        "n_failures": n,
        "with_diagnosis_and_first_wrong_step": covered,
        "previous_classifier": {
            "compared": compared,
            "same_kind": agree,
            "refined": refined,
            "disagree": len(disagreements),
            "disagreements": disagreements,
            "refinements": refinements,
        },
        "rules_only": {
            "recovered": recovered,
            "recovery_rate": round(recovered / n, 4) if n else None,
            "confusion_reference_by_rules": matrix,
            "precision_by_rule": precision,
        },
        "top_kinds": S.failure_kind_counts(run_id, store=store),
        "whitebox_vs_reference": dict(whitebox),
    }


def main(argv: list | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="demo")
    parser.add_argument("--limit", type=int, default=0, help="only the first N cases (0: all)")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--whitebox",
        action="store_true",
        help="also run logit_lens and tool_decision, and score the white-box signs against the reference",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="default: results/diagnosis_eval.json (diagnosis_eval_whitebox.json with --whitebox)",
    )
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'store.sqlite'}"
        analyzers = ("logit_lens", "tool_decision") if args.whitebox else ()
        run_id, seconds = run_demo(url, args.suite, args.limit, args.max_turns, args.max_new_tokens, analyzers)
        result = evaluate(url, run_id)
        import evalrx.store as S

        S.forget(url)
    result.update(
        {
            "suite": args.suite,
            "limit": args.limit,
            "max_turns": args.max_turns,
            "run_seconds": round(seconds, 1),
            "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "threads": args.threads,
                "cpus": os.cpu_count(),
                "load_avg": [round(x, 2) for x in os.getloadavg()],
            },
        }
    )
    out = Path(args.out or RESULTS / ("diagnosis_eval_whitebox.json" if args.whitebox else "diagnosis_eval.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    brief = {k: result[k] for k in ("n_failures", "with_diagnosis_and_first_wrong_step", "top_kinds")}
    brief["previous_classifier"] = {
        k: v for k, v in result["previous_classifier"].items() if k not in ("disagreements", "refinements")
    }
    brief["rules_only"] = {k: result["rules_only"][k] for k in ("recovered", "recovery_rate")}
    brief["whitebox_vs_reference"] = result["whitebox_vs_reference"]
    print(json.dumps(brief, indent=1))
    return result


if __name__ == "__main__":
    main()
