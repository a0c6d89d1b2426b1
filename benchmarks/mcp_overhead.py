"""What an MCP call over stdio adds to a tool call, against the same function called in-process.

Both variants go through the agent loop's `ToolExecutor` with the same arguments: `add(a, b)` as a plain
Python tool, and the `add` tool of the fixture server (tests/fixtures/mcp_flaky_server.py) started with
`open_mcp_tools`. Each repeat runs blocks of calls, alternating which variant goes first, and times every
call; the added time is an MCP call's time minus the median in-process call of the same repeat. Also
timed: starting a session (spawn, handshake, tools/list), which a case pays once with a fresh session.
Goal from the issue: an MCP call over stdio adds at most 5 ms to a tool call.

Usage:
    .venv/bin/python benchmarks/mcp_overhead.py [--calls 200] [--blocks 5] [--repeats 5] [--starts 3]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from evalrx.core.tool import Tool, ToolCall
from evalrx.models.agent import ToolError, ToolExecutor
from evalrx.tools.mcp_servers import McpServer, open_mcp_tools

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results") / "mcp_overhead.json"
SERVER = ROOT / "tests" / "fixtures" / "mcp_flaky_server.py"
GOAL_MS = 5.0


def add(a: float, b: float) -> str:
    """The fixture server's `add`, in-process."""
    return str(a + b)


LOCAL = Tool(
    "add",
    "Add two numbers.",
    {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
    fn=add,
)


def server() -> McpServer:
    return McpServer("bench", command=sys.executable, args=[str(SERVER)])


def timed_calls(executor: ToolExecutor, n: int, offset: int) -> list[float]:
    """Seconds per call for `n` calls of add(i, 1)."""
    out = []
    for i in range(n):
        call = ToolCall("add", {"a": offset + i, "b": 1})
        t0 = time.perf_counter()
        result = executor.execute(call)
        out.append(time.perf_counter() - t0)
        if isinstance(result, ToolError) or float(result) != offset + i + 1:
            raise SystemExit(f"add({offset + i}, 1) gave {result!r}")
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per block and variant")
    parser.add_argument("--blocks", type=int, default=5, help="blocks per repeat (variants alternate first)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--starts", type=int, default=3, help="session starts timed (a fresh session per case)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--note", default="", help="what else ran on the machine, for the results file")
    args = parser.parse_args()

    load_start = [round(x, 2) for x in os.getloadavg()]
    starts = []
    for _ in range(args.starts):
        t0 = time.perf_counter()
        with open_mcp_tools([server()]) as box:
            starts.append(time.perf_counter() - t0)
            if not any(t.name == "add" for t in box.tools):
                raise SystemExit(f"{SERVER} offers no add tool")

    local = ToolExecutor([LOCAL])
    with open_mcp_tools([server()]) as box:
        remote = ToolExecutor(box.tools)
        timed_calls(remote, 50, 0)  # warm-up: the server's first calls, the client's caches
        timed_calls(local, 50, 0)
        added_per_repeat, added_all, local_ms, mcp_ms = [], [], [], []
        for r in range(args.repeats):
            local_s, mcp_s = [], []
            for b in range(args.blocks):
                order = (local, remote) if (r + b) % 2 == 0 else (remote, local)
                for executor in order:
                    (local_s if executor is local else mcp_s).extend(timed_calls(executor, args.calls, b * args.calls))
            base = statistics.median(local_s)
            added = [(s - base) * 1000 for s in mcp_s]
            added_per_repeat.append(statistics.median(added))
            added_all.extend(added)
            local_ms.append(base * 1000)
            mcp_ms.append(statistics.median(mcp_s) * 1000)

    median_added = statistics.median(added_all)
    result = {
        "benchmark": "mcp_overhead",
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "load_avg_start": load_start,
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        "server": "tests/fixtures/mcp_flaky_server.py add(a, b), stdio, mcp SDK client and server",
        "path": "ToolExecutor.execute -> Tool.fn (in-process function vs open_mcp_tools' stdio session)",
        "calls_per_variant": args.calls * args.blocks * args.repeats,
        "calls": args.calls,
        "blocks": args.blocks,
        "repeats": args.repeats,
        "added_ms_median": round(median_added, 3),
        "added_ms_repeat_median_min": round(min(added_per_repeat), 3),
        "added_ms_repeat_median_max": round(max(added_per_repeat), 3),
        "added_ms_p10": round(percentile(added_all, 0.10), 3),
        "added_ms_p90": round(percentile(added_all, 0.90), 3),
        "added_ms_max": round(max(added_all), 3),
        "mcp_call_ms_median": round(statistics.median(mcp_ms), 3),
        "local_call_ms_median": round(statistics.median(local_ms), 4),
        "session_start_s": [round(s, 3) for s in starts],
        "goal_added_ms": GOAL_MS,
        "meets_goal": median_added <= GOAL_MS,
        "note": "added = an MCP call's time minus the same repeat's median in-process call; shared 2-core machine"
        + (f"; {args.note}" if args.note else ""),
    }
    print(
        f"MCP over stdio adds {result['added_ms_median']} ms per call median "
        f"(per-repeat medians {result['added_ms_repeat_median_min']}-{result['added_ms_repeat_median_max']}, "
        f"p10 {result['added_ms_p10']}, p90 {result['added_ms_p90']}) over {result['calls_per_variant']} calls; "
        f"goal <= {GOAL_MS} ms: {'met' if result['meets_goal'] else 'NOT met'}"
    )
    print(
        f"in-process call {result['local_call_ms_median']} ms; session start {result['session_start_s']} s; "
        f"load avg {load_start} -> {result['load_avg_end']}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
