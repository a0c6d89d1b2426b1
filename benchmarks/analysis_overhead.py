"""What the white-box analyzers add to a demo-model run, through the real worker and store.

The same 40+ demo cases run three ways: with no analyzers ("plain"); with `logit_lens`,
`tool_decision`, `attention` and `token_uncertainty` as the worker runs them by default, read
from the generation's own captures ("capture"); and with the same analyzers and capture
switched off in the run's chat kwargs, so `evalrx.analyzers.analyze` runs one teacher-forced
pass per planned pass, shared by the four ("shared_pass"). Each variant loads its model once
and keeps one SQLite store for the whole benchmark, as a worker keeps its model over a job's
cases and serves one store (each block is a run of its own; loading per block would time cold
starts, and a store per block left SQLAlchemy objects behind that slowed the garbage collector).

This machine's speed drifts over seconds (a whole 80-case run of the same variant took 9.4 s
in one repeat and 11.6 s in the next; a fixed Python loop runs 0.23-0.39 s minute to minute),
so whole runs of one variant after the other give ratios that swing by +-15%. The variants are
therefore interleaved in blocks of `--block` cases (each block runs every way, in shuffled
order, well under a second apart), and each case's own time is read from the store: from the
previous case's write (for the first, from the job's claim) to its own trajectory's write (its
agent run, analyses and write). Per repeat, a variant's ratio is the sum of its case times over
the plain ones; the median and spread over repeats, the ratio of the sums of each case's
fastest time over the repeats (`ratio_of_fastest`), the whole-run ratios and the load average
go to `benchmarks/results/analysis_overhead.json`.

`capture_all` is the capture variant with `answer_points="all"` on `logit_lens` (every answer token read, as
before the default became the answer's values), recorded beside.

`capture_bf16` is the capture variant with the named cheaper setting `precision="bfloat16"` on the two
analyzers that unembed every layer (`logit_lens`, `tool_decision`): reported beside the exact variants,
never in their place.

Peak memory: each variant also runs in a child process of its own (`--memory-probe`), which loads the
model, runs one case to warm up, resets the peak RSS, then runs `--memory-cases` more, and reports the
RSS after the warm-up and the peak during the cases: what a case adds, with and without the analyzers.

`floor_shared_pass` is what the shared pass cannot go under: right after each block's plain run,
the teacher-forced forwards alone over its stored trajectories (hidden states, the generated
positions' logits, no planning or analysis) are timed, and added to the plain cases' time.

Usage:
    .venv/bin/python benchmarks/analysis_overhead.py [--cases 80] [--repeats 7] [--block 4]
    .venv/bin/python benchmarks/analysis_overhead.py --spec smollm2-135m-instruct --cases 8 --repeats 3
    .venv/bin/python benchmarks/analysis_overhead.py --spec evalrx-tiny-vl --cases 40 --repeats 5
(a vision spec runs `demo/vision` with the tools its cases offer, `VISION_TOOLS`; its passes see the run's pictures)
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
# The cheaper setting: the analyzers that unembed every layer do it in bfloat16.
ANALYZERS_BF16 = [
    {"name": "logit_lens", "precision": "bfloat16"},
    {"name": "tool_decision", "precision": "bfloat16"},
    "attention",
    "token_uncertainty",
]
# The capture variant with every answer token read by the lens (`answer_points="all"`, the setting before values).
ANALYZERS_ALL = [{"name": "logit_lens", "answer_points": "all"}, "tool_decision", "attention", "token_uncertainty"]
VARIANTS = {
    "plain": ([], None),
    "capture": (ANALYZERS, None),
    "shared_pass": (ANALYZERS, {"capture": False}),
    "capture_bf16": (ANALYZERS_BF16, None),
    "capture_all": (ANALYZERS_ALL, None),
}


_HANDLES: dict = {}


def _variant(analyzers: "list | None", chat_kwargs: "dict | None") -> str:
    """The key of a variant's model and store (what a run config's analyzers and chat kwargs make of it)."""
    return repr((repr(analyzers), dict(chat_kwargs or {})))


def _keep_handles() -> None:
    """One model per variant for the whole benchmark, as a worker keeps its model over a job's cases:
    loading one per block would time each block's cold start (caches, first-use checks) instead."""
    from evalrx.runner.handlers import cases as worker  # the run handler loads the model

    if getattr(worker.load_handle, "kept", False):
        return
    load = worker.load_handle

    def kept(cfg, run_key: "str | None" = None):
        # The worker holds a RunConfig, whose entries are `AnalyzerEntry`s: keyed as the variants write them.
        entries = [e.to_dict() if hasattr(e, "to_dict") else e for e in cfg.analyzers]
        key = _variant(entries, cfg.chat_kwargs)
        if key not in _HANDLES:
            _HANDLES[key] = load(cfg, run_key)
        return _HANDLES[key]

    kept.kept = True
    worker.load_handle = kept


_STORES: dict = {}


def _store(key: str):
    """One SQLite store per variant for the whole benchmark (each block a run of its own), as a worker
    serves one store: a store per block left ~1.5k SQLAlchemy objects each behind, and the growing
    heap made the garbage collector, run more often by the analyzers' allocations, slower repeat by repeat."""
    import evalrx.store as S

    if key not in _STORES:
        tmp = tempfile.mkdtemp(prefix="evalrx-bench-")
        url = f"sqlite:///{Path(tmp) / 's.sqlite'}"
        S.upgrade(url)
        _STORES[key] = (S.connect(url), tmp)
    return _STORES[key][0]


# The model every variant runs (`--spec`), its prefix cache, and the suite and tools its cases run with.
SPEC = {"key": "evalrx-tiny", "prefix_cache": True, "suite": "demo", "tools": ["calculator", "lookup"]}
# A vision spec runs the image suites with the tools they name (`--spec evalrx-tiny-vl`).
VISION = {"suite": "demo/vision"}


def one_run(cases: list, analyzers: list, chat_kwargs: "dict | None" = None) -> "tuple[float, list, int]":
    """Seconds the worker spent on the cases (its model already loaded), each case's own seconds, the run's id."""
    from sqlalchemy import select

    import evalrx.store as S
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import Worker, enqueue_run
    from evalrx.store import schema as t

    _keep_handles()
    store = _store(_variant(analyzers, chat_kwargs))
    cfg = RunConfig(
        model=ModelConfig(SPEC["key"]),
        tools=list(SPEC["tools"]),
        max_turns=4,
        analyzers=list(analyzers),
        chat_kwargs=dict(chat_kwargs or {}),
    )
    runtime = {"max_new_tokens": 96, "prefix_cache": SPEC["prefix_cache"]}
    run_id = enqueue_run(cfg, cases, runtime=runtime, store=store)
    t0 = time.perf_counter()
    Worker(store, exit_when_idle=True, poll_s=0.01, heartbeat_s=5).run()
    seconds = time.perf_counter() - t0
    with store.read() as s:
        claimed = s.execute(select(t.Job.claimed_at).where(t.Job.run_id == run_id)).scalar_one()
        written = list(
            s.execute(
                select(t.Trajectory.created_at).where(t.Trajectory.run_id == run_id).order_by(t.Trajectory.id)
            ).scalars()
        )
    assert S.get_run(run_id, store=store).n_done == len(cases)
    # A case's time: from the previous case's write (the first: from the job's claim) to its own.
    per_case = [(b - a).total_seconds() for a, b in zip([claimed] + written, written)]
    return seconds, per_case, run_id


def forward_only(run_id: int) -> list:
    """Seconds of the teacher-forced forwards alone over each trajectory of a plain run: the planned passes
    with hidden states and the generated positions' logits, as the shared pass runs them, and no analysis.
    A floor under the shared pass's cost (planned outside the timing)."""
    import evalrx.store as S
    from evalrx.analyzers import TrajectoryPlan
    from evalrx.internals.passes import forward, local_model
    from evalrx.models import batch_threads
    from evalrx.tools import get_tools

    store = _store(_variant([], None))
    local = local_model(_HANDLES[_variant([], None)], "forward_only")
    schemas = [tool.to_openai() for tool in get_tools(SPEC["tools"])]
    rows = S.list_trajectories(run_id=run_id, sort="id", descending=False, limit=10_000, store=store).rows
    out = []
    for row in rows:
        traj = S.get_trajectory(row.id, store=store).trajectory
        pictures = S.shown_pictures(row.id, store=store)  # a VLM's passes see what the run showed
        plan = TrajectoryPlan.build(local, traj, tools=schemas, images=pictures)
        with batch_threads(local.handle):  # on the cores the analyzers' own passes get
            t0 = time.perf_counter()
            for k, tf_pass in enumerate(plan.passes):
                keep = [i - 1 for pt in tf_pass.turns for i in range(max(1, pt.gen_tokens[0]), pt.gen_tokens[1])]
                forward(local, tf_pass.ids, keep or None, hidden=True, inputs=plan.inputs(k))
            out.append(time.perf_counter() - t0)
    return out


def _drop_stores() -> None:
    import shutil

    import evalrx.store as S

    for store, tmp in _STORES.values():
        S.forget(store.url)
        shutil.rmtree(tmp, ignore_errors=True)
    _STORES.clear()


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise KeyError(field)


def memory_probe(args: argparse.Namespace) -> dict:
    """In a child process: one variant's model loaded, one case to warm up, the peak reset (Linux's
    `clear_refs` 5), then `--memory-cases` cases; prints the RSS after the warm-up and the peak since (MB)."""
    import random as _random

    from evalrx.suites import load_cases

    cases = _random.Random(1).sample(load_cases(SPEC["suite"]), args.memory_cases + 1)
    one_run(cases[:1], *VARIANTS[args.memory_probe])
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM, the peak RSS: loading the model is not a case's peak
    after_warm = _status_mb("VmRSS")
    one_run(cases[1:], *VARIANTS[args.memory_probe])
    peak = _status_mb("VmHWM")
    out = {
        "rss_after_warm_case_mb": round(after_warm, 1),
        "peak_rss_during_cases_mb": round(peak, 1),
        "peak_added_by_cases_mb": round(peak - after_warm, 1),
    }
    _drop_stores()
    print(json.dumps(out))
    return out


def memory_of(variant: str, args: argparse.Namespace) -> dict:
    """Run `memory_probe` for `variant` in a child process (its peak is its own) and read its line."""
    import subprocess
    import sys

    cmd = [sys.executable, __file__, "--spec", args.spec, "--memory-probe", variant]
    cmd += ["--memory-cases", str(args.memory_cases), "--threads", str(args.threads)]
    if args.no_prefix_cache:
        cmd.append("--no-prefix-cache")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="evalrx-tiny", help="the model every variant runs")
    parser.add_argument(
        "--no-prefix-cache", action="store_true", help="every variant prefills each prompt whole (as before the cache)"
    )
    parser.add_argument("--cases", type=int, default=80)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--block", type=int, default=4, help="cases per block; every variant runs each block")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), help="plain is always run"
    )
    parser.add_argument("--memory-cases", type=int, default=3, help="cases of each variant's peak-memory child")
    parser.add_argument("--memory-probe", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help="default: results/analysis_overhead[_<spec>].json")
    args = parser.parse_args(argv)
    SPEC["key"] = args.spec
    SPEC["prefix_cache"] = not args.no_prefix_cache
    from evalrx.specs import get_spec

    if get_spec(args.spec).vision:
        from evalrx.demo.vision_data import VISION_TOOLS

        SPEC.update(VISION, tools=list(VISION_TOOLS))
    if "plain" not in args.variants:
        args.variants = ["plain", *args.variants]
    if args.memory_probe:
        return memory_probe(args)

    import torch

    from evalrx.suites import load_cases

    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    pool = load_cases(SPEC["suite"])
    cases = rng.sample(pool, args.cases)
    variants = {name: VARIANTS[name] for name in args.variants}
    for analyzers, chat_kwargs in variants.values():  # warm caches (tokenizer, template, imports) before timing
        one_run(cases[:2], analyzers, chat_kwargs)
    blocks = [list(range(i, min(i + args.block, len(cases)))) for i in range(0, len(cases), args.block)]
    timed = list(range(len(cases)))
    rows = []
    fastest = {name: {i: float("inf") for i in timed} for name in variants}
    for r in range(args.repeats):
        per_case: dict = {name: {} for name in variants}
        whole = {name: 0.0 for name in variants}
        forwards = 0.0
        for block in blocks:
            order = list(variants)
            rng.shuffle(order)
            for name in order:
                seconds, gaps, run_id = one_run([cases[i] for i in block], *variants[name])
                whole[name] += seconds
                per_case[name].update(zip(block, gaps))
                if name == "plain":
                    forwards += sum(forward_only(run_id))
        for name in variants:
            for i in timed:
                fastest[name][i] = min(fastest[name][i], per_case[name][i])
        sums = {name: sum(per_case[name][i] for i in timed) for name in variants}
        rows.append(
            {
                "repeat": r,
                **{f"{k}_cases_s": round(v, 3) for k, v in sums.items()},
                **{f"ratio_{k}": round(sums[k] / sums["plain"], 4) for k in variants if k != "plain"},
                **{f"ratio_whole_{k}": round(whole[k] / whole["plain"], 4) for k in variants if k != "plain"},
                "forward_only_s": round(forwards, 3),
                "floor_shared_pass": round(1 + forwards / sums["plain"], 4),
                "load_avg": round(os.getloadavg()[0], 2),
            }
        )
        print(json.dumps(rows[-1]))
    summary: dict = {}
    for k in variants:
        if k == "plain":
            continue
        ratios = [row[f"ratio_{k}"] for row in rows]
        summary[k] = {
            "ratio_median": round(statistics.median(ratios), 4),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "ratio_of_fastest": round(sum(fastest[k].values()) / sum(fastest["plain"].values()), 4),
            "ratio_whole_median": round(statistics.median(row[f"ratio_whole_{k}"] for row in rows), 4),
        }
    floors = [row["floor_shared_pass"] for row in rows]
    summary["floor_shared_pass"] = {
        "ratio_median": round(statistics.median(floors), 4),
        "ratio_min": min(floors),
        "ratio_max": max(floors),
    }
    result = {
        "spec": args.spec,
        "suite": SPEC["suite"],
        "prefix_cache": SPEC["prefix_cache"],
        "cases": args.cases,
        "timed_cases": len(timed),
        "block": args.block,
        "repeats": args.repeats,
        "analyzers": ANALYZERS,
        **summary,
        "ms_per_case_median": {
            name: round(1000 * statistics.median(row[f"{name}_cases_s"] for row in rows) / len(timed), 2)
            for name in variants
        },
        "fastest_ms_per_case": {name: round(1000 * sum(v.values()) / len(timed), 2) for name, v in fastest.items()},
        "rows": rows,
        "peak_memory_mb": {name: memory_of(name, args) for name in variants},
        "cpu_threads": {name: _HANDLES[_variant(*VARIANTS[name])].cpu_threads for name in variants},
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": args.threads,
            "cpus": os.cpu_count(),
            "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        },
    }
    _drop_stores()
    default = RESULTS if args.spec == "evalrx-tiny" else RESULTS.with_name(f"analysis_overhead_{args.spec}.json")
    out = Path(args.out or default)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        json.dumps(
            {
                k: result.get(k)
                for k in (
                    "capture",
                    "shared_pass",
                    "capture_bf16",
                    "capture_all",
                    "floor_shared_pass",
                    "ms_per_case_median",
                    "peak_memory_mb",
                )
            }
        )
    )
    return result


if __name__ == "__main__":
    main()
