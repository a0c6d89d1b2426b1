"""Run-level questions at scale: `evalrx compare` of two 50k-trajectory runs and the predictors table.

    python benchmarks/runlevel_scale.py                  # two runs x 50k trajectories, temp SQLite
    python benchmarks/runlevel_scale.py --n 5000 --out /tmp/small.json

Fills a store with two runs over the same 50k cases (B fixes some of A's failures and breaks
some passes), each trajectory with a smallest tool margin that goes with failure and a diagnosed
kind on failures, then times, interleaved over repeats: `compare_runs` (what `evalrx compare` and
the Compare page compute), the whole `evalrx compare --json` command in a fresh process (Python
start and imports included), and `predictor_table` over both runs; then the Compare page in
Chromium (a fresh tab until its figures show). Records p50/p95 and the spread and the machine's
load. Goals: compare and the page p50 <= 1.5 s, predictors p50 <= 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

KINDS = ("bad_arguments", "wrong_tool", "no_tool_call", "misread_observation", "wrong_final_answer")


def fill(store, n: int, seed: int) -> tuple[int, int]:
    """Two runs over the same `n` cases; returns their ids."""
    from sqlalchemy import insert, select

    from evalrx.core import FailureCase, Inputs, Label, Step, StepRole, Trajectory
    from evalrx.store import runs as R
    from evalrx.store import schema as t

    rng = random.Random(seed)
    cases = [
        FailureCase(
            inputs=Inputs(prompt=f"Task {i}"), id=f"case-{i:07d}", expected=str(i % 97), grader={"kind": "normalized"}
        )
        for i in range(n)
    ]
    passed_a = [rng.random() < 0.6 for _ in range(n)]
    # B fixes 15% of A's failures and breaks 8% of its passes.
    passed_b = [(rng.random() >= 0.08) if p else (rng.random() < 0.15) for p in passed_a]
    ids = []
    for name, passed in (("A", passed_a), ("B", passed_b)):
        t0 = time.perf_counter()
        with store.write() as s:
            run_id = R.create_run(
                s, name=f"bench {name}", config={"model": {"name": f"model-{name}"}}, cases=cases, status="done"
            )
            case_ids = dict(
                s.execute(select(t.RunCase.position, t.RunCase.case_row_id).where(t.RunCase.run_id == run_id)).all()
            )
        for start in range(0, n, 2000):
            with store.write() as s:
                scores, diags = [], []
                for i in range(start, min(start + 2000, n)):
                    turns = rng.randint(1, 5) + (0 if passed[i] else rng.randint(0, 2))
                    steps = [Step(0, StepRole.USER, cases[i].inputs.prompt)]
                    for k in range(turns - 1):
                        steps.append(
                            Step(
                                len(steps),
                                StepRole.ACTOR,
                                "",
                                tool_calls=[{"name": "lookup", "args": {"q": f"x{k}"}}],
                                span={"latency_ms": 10.0},
                            )
                        )
                        steps.append(Step(len(steps), StepRole.TOOL, "lookup", observation=f"r{k}"))
                    steps.append(Step(len(steps), StepRole.ACTOR, "The answer.", span={"latency_ms": 10.0}))
                    traj = Trajectory(
                        sample_id=cases[i].id,
                        goal=cases[i].inputs.prompt,
                        steps=steps,
                        final_answer="The answer.",
                        outcome=Label.PASS if passed[i] else Label.FAIL,
                        metrics={"terminated": "final"},
                    )
                    tid = R.save_trajectory(s, run_id, case_ids[i], traj)
                    scores.append(
                        {
                            "trajectory_id": tid,
                            "name": "tool_margin",
                            "value": rng.gauss(3.0 if passed[i] else 1.5, 1.0),
                        }
                    )
                    if not passed[i]:
                        kind = rng.choice(KINDS)
                        diags.append(
                            {
                                "trajectory_id": tid,
                                "rank": 0,
                                "kind": kind,
                                "first_wrong_step": 1,
                                "evidence": {},
                                "confidence": 0.8,
                                "source": "rules",
                            }
                        )
                s.execute(insert(t.TrajectoryScore.__table__), scores)
                if diags:
                    s.execute(insert(t.DiagnosisRow.__table__), diags)
                    for d in diags:
                        s.execute(
                            t.Trajectory.__table__.update()
                            .where(t.Trajectory.id == d["trajectory_id"])
                            .values(diagnosis_kind=d["kind"])
                        )
        print(f"  run {name}: {n} trajectories in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        ids.append(run_id)
    return ids[0], ids[1]


def page_times(url: str, a: int, b: int, reps: int) -> dict:
    """The Compare page of runs a and b in Chromium, fresh tab until its figures show (the first load,
    which warms the server, is left out)."""
    from app_latency import READY_JS, stats
    from apphelpers import CHROMIUM_ARGS, AppServer
    from playwright.sync_api import sync_playwright

    env = dict(os.environ, EVALRX_DATABASE_URL=url, EVALRX_NO_LOCAL_WORKER="1")
    server = AppServer(env, Path(tempfile.mkdtemp(prefix="evalrx-runlevel-bench-")))
    times = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
            ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
            for i in range(reps + 1):
                page = ctx.new_page()
                t0 = time.perf_counter()
                page.goto(f"{server.url}/compare?a={a}&b={b}")
                page.wait_for_function(
                    READY_JS, arg=["Compare", "[data-testid='stMetric']"], polling=20, timeout=120_000
                )
                if i:
                    times.append(time.perf_counter() - t0)
                page.close()
            browser.close()
    finally:
        server.stop()
    return stats(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=50_000, help="trajectories per run (two runs)")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--url", help="store URL (default: a new SQLite file in a temp dir, kept with --keep)")
    p.add_argument("--reuse", action="store_true", help="--url already holds the two runs (ids 1 and 2)")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "runlevel_scale.json"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-page", action="store_true", help="skip the Compare page in Chromium")
    args = p.parse_args(argv)

    import evalrx.store as S
    from evalrx import reports

    url = args.url or f"sqlite:///{tempfile.mkdtemp(prefix='evalrx-bench-')}/bench.sqlite"
    S.upgrade(url)
    store = S.connect(url)
    if args.reuse:
        a, b = 1, 2
    else:
        print(f"filling {url} with 2 x {args.n} trajectories ...", file=sys.stderr)
        a, b = fill(store, args.n, args.seed)
        with store.write() as s:
            from sqlalchemy import text

            s.execute(text("ANALYZE"))
    cli = [sys.executable, "-m", "evalrx", "compare", str(a), str(b), "--json", "--url", url]
    timings: dict = {"compare_runs": [], "compare_cli": [], "predictor_table": []}
    reports.compare_runs(a, b, store=store)  # warm the page cache
    loads = []
    for rep in range(args.reps):
        order = list(timings)
        random.Random(rep).shuffle(order)  # interleaved, in a different order each repeat
        for name in order:
            t0 = time.perf_counter()
            if name == "compare_runs":
                out = reports.compare_runs(a, b, store=store)
            elif name == "compare_cli":
                res = subprocess.run(cli, capture_output=True, text=True, check=True)
                out = json.loads(res.stdout)
            else:
                table = reports.predictor_table([a, b], store=store)
            timings[name].append(time.perf_counter() - t0)
        loads.append(os.getloadavg()[0])
    page = None if args.no_page else page_times(url, a, b, args.reps)
    summary = {
        k: {
            "p50_s": round(statistics.median(v), 3),
            "p95_s": round(sorted(v)[int(0.95 * (len(v) - 1))], 3),
            "min_s": round(min(v), 3),
            "max_s": round(max(v), 3),
        }
        for k, v in timings.items()
    }
    result = {
        "trajectories_per_run": args.n,
        "reps": args.reps,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_avg_per_rep": loads,
        },
        "timings": summary,
        "compare_page": page,
        "comparison": {
            k: out[k]
            for k in (
                "n_paired",
                "both_pass",
                "both_fail",
                "regressions",
                "fixes",
                "mcnemar_p",
                "diff",
                "diff_ci_low",
                "diff_ci_high",
            )
        },
        "strongest_predictor": table[0] if table else None,
        "goals": {"compare_p50_s": 1.5, "predictors_p50_s": 2.0},
        "goals_met": {
            "compare_runs": summary["compare_runs"]["p50_s"] <= 1.5,
            "compare_cli": summary["compare_cli"]["p50_s"] <= 1.5,
            "predictor_table": summary["predictor_table"]["p50_s"] <= 2.0,
            "compare_page": None if page is None else page["p50_s"] <= 1.5,
        },
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
