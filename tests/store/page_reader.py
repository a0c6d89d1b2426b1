"""A reader process for the concurrency tests: runs the pages' queries in a loop.

Usage: python page_reader.py URL SECONDS OUT_JSON. Runs until OUT_JSON + ".stop" exists
(or SECONDS pass), then writes the number of query rounds, the slowest query in ms, and
every error it met.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(url: str, seconds: float, out: str) -> None:
    import evalrx.store as S

    store = S.connect(url)
    slowest, rounds, errors = 0.0, 0, []
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (rounds > 5 and os.path.exists(out + ".stop")):
        try:
            for q in (
                lambda: S.list_runs(store=store),
                lambda: S.list_trajectories(store=store, limit=50),
                lambda: S.list_trajectories(store=store, outcome="pass", text="answer", sort="latency_ms", limit=50),
                lambda: S.count_trajectories(store=store, label="none"),
                lambda: [S.run_stats(r.id, store=store) for r in S.list_runs(store=store)[:3]],
                lambda: [S.get_trajectory(r.id, store=store) for r in S.list_trajectories(store=store, limit=3).rows],
                lambda: S.alive_workers(store=store),
            ):
                t0 = time.perf_counter()
                q()
                slowest = max(slowest, (time.perf_counter() - t0) * 1000)
            rounds += 1
        except Exception as exc:  # recorded; the test fails on any
            errors.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.05)
    with open(out, "w") as fh:
        json.dump({"rounds": rounds, "slowest_ms": slowest, "errors": errors[:20]}, fh)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), sys.argv[3])
