"""Store at scale: fill a store with synthetic trajectories and time the pages' queries.

    python benchmarks/store_scale.py                       # 100k trajectories, 2M steps, temp SQLite
    python benchmarks/store_scale.py --n 5000 --out /tmp/small.json
    python benchmarks/store_scale.py --url postgresql://postgres@127.0.0.1:5432/bench

Records the insert rate (the worker's path: one transaction per trajectory, and batched
transactions as an import does) and p50/p95 of: the filtered, paginated trajectory list
(first and a deep keyset page, with several filters and sorts), one trajectory with its
steps, and per-run aggregates. Goal on SQLite: p50 < 50 ms for each.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalrx.core import FailureCase, Inputs, Label, Step, StepRole, Trajectory  # noqa: E402

TOOLS = ("calculator", "lookup", "image_zoom", "search", "python")
TERMS = ("final", "final", "final", "max_turns", "forced_final", "error")
WORDS = (
    "the",
    "value",
    "of",
    "tool",
    "result",
    "answer",
    "check",
    "again",
    "city",
    "population",
    "river",
    "mountain",
    "year",
    "price",
    "total",
    "because",
    "so",
    "then",
    "first",
    "next",
)


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def make(i: int, n_steps: int, rng: random.Random) -> tuple[FailureCase, Trajectory]:
    prompt = f"Task {i}: {sentence(rng, 12)}?"
    case = FailureCase(
        inputs=Inputs(prompt=prompt),
        id=f"case-{i:07d}",
        expected=str(i % 97),
        grader={"kind": "normalized"},
        meta={"suite": f"suite{i % 7}"},
    )
    steps = [Step(0, StepRole.USER, prompt, span={"has_image": False})]
    turn = 0
    while len(steps) < n_steps - 1:
        turn += 1
        tool = rng.choice(TOOLS)
        args = {"query": sentence(rng, 3)}
        bad = rng.random() < 0.03
        steps.append(
            Step(
                len(steps),
                StepRole.ACTOR,
                f"<tool_call>\n{json.dumps({'name': tool, 'arguments': args})}\n</tool_call>",
                tool_calls=[] if bad else [{"name": tool, "args": args}],
                parse_error="Expecting ',' delimiter" if bad else None,
                span={
                    "latency_ms": round(rng.lognormvariate(4, 0.6), 3),
                    "prompt_tokens": 200 + 40 * turn,
                    "completion_tokens": rng.randint(10, 60),
                    "turn": turn,
                },
            )
        )
        steps.append(
            Step(
                len(steps),
                StepRole.TOOL,
                tool,
                observation={"text": sentence(rng, 18), "n_images": 0},
                span={"turn": turn, "call": 0, "latency_ms": round(rng.uniform(0.05, 40), 3)},
            )
        )
    steps.append(
        Step(
            len(steps),
            StepRole.ACTOR,
            f"The answer is {sentence(rng, 6)}.",
            span={
                "latency_ms": round(rng.lognormvariate(4, 0.6), 3),
                "prompt_tokens": 200 + 40 * turn,
                "completion_tokens": 20,
                "turn": turn + 1,
            },
        )
    )
    actor = [s for s in steps if s.role is StepRole.ACTOR]
    term = rng.choice(TERMS)
    traj = Trajectory(
        sample_id=case.id,
        goal=prompt,
        steps=steps,
        final_answer=None if term == "max_turns" else steps[-1].content,
        ground_truth=case.expected,
        outcome=Label.PASS if rng.random() < 0.4 else Label.FAIL,
        metrics={
            "n_steps": len(steps),
            "n_turns": len(actor),
            "terminated": term,
            "n_tool_calls": sum(len(s.tool_calls) for s in actor),
            "n_parse_errors": sum(1 for s in actor if s.parse_error),
            "total_latency_ms": round(sum(s.span["latency_ms"] for s in actor), 3),
            "total_prompt_tokens": sum(s.span["prompt_tokens"] for s in actor),
            "total_completion_tokens": sum(s.span["completion_tokens"] for s in actor),
        },
    )
    return case, traj


def fill(store, n: int, steps: int, runs: int, per_txn_sample: int, batch: int, seed: int) -> dict:
    from sqlalchemy import select

    from evalrx.store import runs as R
    from evalrx.store import schema as t

    rng = random.Random(seed)
    per_run = n // runs
    timings = {"per_case_txn": {"n": 0, "s": 0.0}, "batched": {"n": 0, "s": 0.0}}
    n_steps_total = 0
    t_start = time.perf_counter()
    for r in range(runs):
        base = r * per_run
        data = [make(base + i, rng.randint(steps - 4, steps + 4), rng) for i in range(per_run)]
        with store.write() as s:
            run_id = R.create_run(
                s,
                name=f"bench run {r}",
                config={"model": {"name": f"model-{r % 4}", "backend": "hf_local"}, "tools": list(TOOLS)},
                cases=[c for c, _ in data],
                status="done",
            )
            case_ids = dict(
                s.execute(select(t.RunCase.position, t.RunCase.case_row_id).where(t.RunCase.run_id == run_id)).all()
            )
        first = min(per_txn_sample, per_run) if r == 0 else 0
        if first:
            t0 = time.perf_counter()
            for i in range(first):
                with store.write() as s:  # the worker's path: one transaction per finished case
                    R.save_trajectory(s, run_id, case_ids[i], data[i][1])
            timings["per_case_txn"] = {"n": first, "s": time.perf_counter() - t0}
        t0 = time.perf_counter()
        done_here = 0
        for start in range(first, per_run, batch):
            with store.write() as s:
                for j in range(start, min(start + batch, per_run)):
                    R.save_trajectory(s, run_id, case_ids[j], data[j][1])
                    done_here += 1
        timings["batched"]["n"] += done_here
        timings["batched"]["s"] += time.perf_counter() - t0
        n_steps_total += sum(len(tr.steps) for _, tr in data)
        with store.write() as s:
            run = s.get(t.Run, run_id)
            run.n_done = per_run
        print(
            f"  run {r + 1}/{runs}: {(r + 1) * per_run} trajectories, "
            f"{(r + 1) * per_run / (time.perf_counter() - t_start):.0f}/s",
            file=sys.stderr,
            flush=True,
        )
    out = {
        "trajectories": per_run * runs,
        "steps": n_steps_total,
        "runs": runs,
        "wall_s": time.perf_counter() - t_start,
    }
    for k, v in timings.items():
        out[f"{k}_trajectories_per_s"] = round(v["n"] / v["s"], 1) if v["s"] else None
        out[f"{k}_steps_per_s"] = round(v["n"] * steps / v["s"], 1) if v["s"] else None
        out[f"{k}_n"] = v["n"]
    return out


def timeit(fn, reps: int) -> dict:
    fn()  # warm the page cache and the statement cache
    xs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - t0) * 1000)
    xs.sort()
    return {
        "p50_ms": round(statistics.median(xs), 2),
        "p95_ms": round(xs[int(0.95 * (len(xs) - 1))], 2),
        "max_ms": round(xs[-1], 2),
        "reps": reps,
    }


def queries(store, reps: int, seed: int) -> dict:
    import evalrx.store as S

    rng = random.Random(seed)
    run_ids = [r.id for r in S.list_runs(store=store, limit=1000)]
    ids = [r.id for r in S.list_trajectories(store=store, limit=2000).rows]
    deep = {}
    for rid in run_ids[:5]:  # a cursor 20 pages deep into each of a few runs
        cur = None
        for _ in range(20):
            cur = S.list_trajectories(store=store, run_id=rid, outcome="fail", limit=50, after=cur).next_cursor
        deep[rid] = cur
    r = lambda: rng.choice(run_ids)  # noqa: E731
    cases = {
        "list_run_failures_first_page": lambda: S.list_trajectories(store=store, run_id=r(), outcome="fail", limit=50),
        "list_run_failures_deep_page": lambda: S.list_trajectories(
            store=store, run_id=(k := rng.choice(list(deep))), outcome="fail", limit=50, after=deep[k]
        ),
        "list_run_with_total": lambda: S.list_trajectories(store=store, run_id=r(), limit=50, with_total=True),
        "list_run_unlabelled": lambda: S.list_trajectories(store=store, run_id=r(), label="none", limit=50),
        "list_run_by_tool_and_terminated": lambda: S.list_trajectories(
            store=store, run_id=r(), tool=rng.choice(TOOLS), terminated="max_turns", limit=50
        ),
        "list_run_sorted_by_latency": lambda: S.list_trajectories(store=store, run_id=r(), sort="latency_ms", limit=50),
        "list_run_text_search": lambda: S.list_trajectories(
            store=store, run_id=r(), text=rng.choice(WORDS) + " " + rng.choice(WORDS), limit=50
        ),
        "list_all_runs_failures": lambda: S.list_trajectories(store=store, outcome="fail", limit=50),
        "list_all_runs_text_search_rare": lambda: S.list_trajectories(
            store=store, text=f"task {rng.randrange(10**5)}:", limit=50
        ),
        "get_trajectory_with_steps": lambda: S.get_trajectory(rng.choice(ids), store=store),
        "run_stats": lambda: S.run_stats(r(), store=store),
        "list_runs": lambda: S.list_runs(store=store),
    }
    out = {}
    for name, fn in cases.items():
        out[name] = timeit(fn, reps)
        print(
            f"  {name:34} p50 {out[name]['p50_ms']:8.2f} ms   p95 {out[name]['p95_ms']:8.2f} ms",
            file=sys.stderr,
            flush=True,
        )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=100_000, help="trajectories")
    p.add_argument("--steps", type=int, default=20, help="mean steps per trajectory")
    p.add_argument("--runs", type=int, default=20, help="runs the trajectories are spread over")
    p.add_argument("--per-case-sample", type=int, default=2000, help="trajectories written one transaction each")
    p.add_argument("--batch", type=int, default=500, help="trajectories per transaction for the bulk fill")
    p.add_argument("--reps", type=int, default=60)
    p.add_argument("--url", help="store URL (default: a new SQLite file in a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the temp SQLite file")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "store_scale.json"))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    import evalrx.store as S

    tmpdir = None
    url = args.url
    if url is None:
        tmpdir = tempfile.mkdtemp(prefix="evalrx-bench-")
        url = f"sqlite:///{tmpdir}/bench.sqlite"
    S.upgrade(url)
    store = S.connect(url)
    print(f"filling {url} with {args.n} trajectories ...", file=sys.stderr)
    insert = fill(store, args.n, args.steps, args.runs, args.per_case_sample, args.batch, args.seed)
    # Label 5% of trajectories, as a labelling session would.
    rng = random.Random(args.seed + 1)
    ids = [r.id for r in S.list_trajectories(store=store, limit=args.n).rows]
    t0 = time.perf_counter()
    for tid in rng.sample(ids, max(1, len(ids) // 20)):
        S.set_label(
            tid, rng.choice(["pass", "fail"]), failure_kind=rng.choice(["wrong_tool", "loop", None]), store=store
        )
    label_ms = (time.perf_counter() - t0) * 1000 / max(1, len(ids) // 20)
    if store.dialect == "sqlite":
        with store.write() as s:
            from sqlalchemy import text

            s.execute(text("ANALYZE"))
    else:
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            from sqlalchemy import text

            c.execute(text("ANALYZE"))
    print("queries:", file=sys.stderr)
    q = queries(store, args.reps, args.seed)
    size = None
    if store.dialect == "sqlite":
        path = Path(url[len("sqlite:///") :])
        size = sum(f.stat().st_size for f in path.parent.glob(path.name + "*"))
    result = {
        "backend": store.dialect,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_avg_at_end": os.getloadavg(),
        },
        "insert": insert,
        "set_label_ms_mean": round(label_ms, 2),
        "db_bytes": size,
        "queries": q,
        "goal": "p50 < 50 ms per query on SQLite",
        "goal_met": all(v["p50_ms"] < 50 for v in q.values()),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if tmpdir and not args.keep:
        S.forget(url)
        for f in Path(tmpdir).glob("*"):
            f.unlink()
        os.rmdir(tmpdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
