"""How long loading a BFCL v4 suite takes (`evalrx.suites.load_cases("bfcl/<category>")`), cold each time.

Each repeat clears the loader's cache, so every load reads and converts the category's JSON files
(entries, possible answers, schemas to JSON Schema, reference calls). Goal: under a second for a
suite. Writes `benchmarks/results/bfcl_load.json`.

Usage:
    .venv/bin/python benchmarks/bfcl_load.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import time
from pathlib import Path

OUT = Path(__file__).with_name("results") / "bfcl_load.json"


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)

    from evalrx.suites import bfcl, load_cases

    names = bfcl.bfcl_suites()
    if not names:
        raise SystemExit(bfcl.bfcl_missing_hint())
    times: dict = {name: [] for name in names}
    for _ in range(args.repeats):
        for name in names:  # interleaved: the machine's drift spreads over every suite alike
            bfcl._load.cache_clear()
            t0 = time.perf_counter()
            n = len(load_cases(name))
            times[name].append(time.perf_counter() - t0)
            times[name + ":n"] = n
    figures = {
        name: {
            "cases": times[name + ":n"],
            "median_s": round(statistics.median(times[name]), 4),
            "min_s": round(min(times[name]), 4),
            "max_s": round(max(times[name]), 4),
        }
        for name in names
    }
    slowest = max(figures.values(), key=lambda f: f["max_s"])
    result = {
        "suites": figures,
        "slowest_max_s": slowest["max_s"],
        "goal_s": 1.0,
        "repeats": args.repeats,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    for name, f in figures.items():
        print(
            f"{name:32} {f['cases']:>5} cases  median {f['median_s'] * 1000:7.1f} ms  max {f['max_s'] * 1000:7.1f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
