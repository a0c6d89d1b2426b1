"""What the white-box analyzers add to a demo-model run, through the real worker and store.

The same 40+ demo cases run twice per repeat, in shuffled order: once with no analyzers and
once with `logit_lens`, `tool_decision`, `attention` and `token_uncertainty` (run together by
`evalrx.analyzers.analyze`, read from the generation's own captures, as the worker runs them).
Each variant gets a fresh SQLite store; the model is loaded once per worker and its load time
left out (the worker records it apart). The ratio is taken within each repeat, so machine
noise hits both sides; the median and the spread over repeats, and the load average, go to
`benchmarks/results/analysis_overhead.json`.

This machine's noise comes in bursts of seconds, longer than a case, so a whole-run ratio
swings by +-15% between repeats. Each case's own time is read from the store too (the gap
between its trajectory's write and the one before: its run, analyses and write), and the
ratio of the sums of each case's fastest time over the repeats is reported beside it
(`ratio_of_fastest`): a burst that slows one variant's run of a case is not its cost. The
first case of a run (its gap includes the job's start) is left out of that sum.

Usage:
    .venv/bin/python benchmarks/analysis_overhead.py [--cases 40] [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).with_name("results") / "analysis_overhead.json"
ANALYZERS = ["logit_lens", "tool_decision", "attention", "token_uncertainty"]


def one_run(cases: list, analyzers: list) -> "tuple[float, list]":
    """Seconds the worker spent on the cases (model load excluded), and each case's own seconds."""
    import evalrx.store as S
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import Worker, enqueue_run
    from sqlalchemy import select

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 's.sqlite'}"
        S.upgrade(url)
        store = S.connect(url)
        cfg = RunConfig(model=ModelConfig("evalrx-tiny"), tools=["calculator", "lookup"], max_turns=4,
                        analyzers=list(analyzers))
        run_id = enqueue_run(cfg, cases, runtime={"max_new_tokens": 96}, store=store)
        t0 = time.perf_counter()
        Worker(store, exit_when_idle=True, poll_s=0.01, heartbeat_s=5).run()
        seconds = time.perf_counter() - t0
        with store.read() as s:
            from evalrx.store import schema as t

            load_ms = (s.get(t.Run, run_id).meta or {}).get("model_load_ms") or 0.0
            written = list(s.execute(select(t.Trajectory.created_at).where(t.Trajectory.run_id == run_id)
                                     .order_by(t.Trajectory.id)).scalars())
        assert S.get_run(run_id, store=store).n_done == len(cases)
        S.forget(url)
    per_case = [None] + [(b - a).total_seconds() for a, b in zip(written, written[1:])]
    return seconds - load_ms / 1000.0, per_case


def main(argv: list | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)

    import torch

    from evalrx.suites import load_cases

    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    pool = load_cases("demo")
    cases = rng.sample(pool, args.cases)
    one_run(cases[:2], [])  # warm caches (tokenizer, template, imports) before timing
    one_run(cases[:2], ANALYZERS)
    rows = []
    fastest: dict = {"plain": [float("inf")] * len(cases), "analyzers": [float("inf")] * len(cases)}
    for r in range(args.repeats):
        order = [("plain", []), ("analyzers", ANALYZERS)]
        rng.shuffle(order)
        got = {}
        for name, analyzers in order:
            got[name], per_case = one_run(cases, analyzers)
            fastest[name] = [min(f, c) if c is not None else f for f, c in zip(fastest[name], per_case)]
        rows.append({"repeat": r, "order": [n for n, _ in order], **{k: round(v, 3) for k, v in got.items()},
                     "ratio": round(got["analyzers"] / got["plain"], 4), "load_avg": round(os.getloadavg()[0], 2)})
        print(json.dumps(rows[-1]))
    ratios = [row["ratio"] for row in rows]
    timed = [i for i in range(len(cases)) if fastest["plain"][i] != float("inf")]
    of_fastest = sum(fastest["analyzers"][i] for i in timed) / sum(fastest["plain"][i] for i in timed)
    result = {
        "cases": args.cases, "repeats": args.repeats, "analyzers": ANALYZERS,
        "ratio_median": round(statistics.median(ratios), 4), "ratio_min": min(ratios), "ratio_max": max(ratios),
        "ratio_of_fastest": round(of_fastest, 4),
        "fastest_ms_per_case": {k: round(1000 * sum(v[i] for i in timed) / len(timed), 2) for k, v in fastest.items()},
        "plain_s_median": round(statistics.median(r["plain"] for r in rows), 3),
        "analyzers_s_median": round(statistics.median(r["analyzers"] for r in rows), 3),
        "rows": rows,
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "threads": args.threads,
                    "cpus": os.cpu_count(), "load_avg_end": [round(x, 2) for x in os.getloadavg()]},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("ratio_median", "ratio_min", "ratio_max", "ratio_of_fastest",
                                             "fastest_ms_per_case", "plain_s_median", "analyzers_s_median")}))
    return result


if __name__ == "__main__":
    main()
