"""Importing a 10k-span trace file: spans/s and peak memory, as OpenTelemetry SDK span JSON lines and as OTLP JSON.

    python benchmarks/trace_import.py                       # 10k spans, both layouts and containers, 3 repeats
    python benchmarks/trace_import.py --spans 2000 --repeats 1 --out /tmp/trace_import_small.json

The template is a real trace (`tests/fixtures/interop/autogen_team.spans.jsonl`: an autogen-agentchat team traced
by OpenInference and autogen's own tracing, 75 spans, 65 of no OpenInference kind), copied with fresh trace and span
ids until the file holds `--spans` spans. Two layouts: `traces` (each copy its own traces, ~130 trajectories) and
`one_trace` (every copy's spans under one root: a single trajectory of 10k spans, the worst case for the per-trace
work). Each layout is written as the SDK's span JSON (one span a line) and as OTLP JSON (one request of 100 spans a
line, as the Collector's file exporter writes). Each import runs in a fresh child process into a fresh SQLite store
(`import_eval.import_once`: its peak RSS is the import's alone); the variants are interleaved within each repeat and
the machine's load is read before and after.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from import_eval import import_once, summary  # noqa: E402

TEMPLATE = ROOT / "tests" / "fixtures" / "interop" / "autogen_team.spans.jsonl"


def copies(n_spans: int, one_trace: bool) -> list:
    """SDK span dicts: the template copied with fresh ids until `n_spans` (a copy is cut short at the end)."""
    template = [json.loads(line) for line in TEMPLATE.read_text().splitlines() if line.strip()]
    out: list = []
    counter = itertools.count(1)
    top = "0x%016x" % 0xABCDEF if one_trace else None
    if one_trace:
        first = template[0]
        out.append(
            {
                **first,
                "name": "benchmark root",
                "parent_id": None,
                "attributes": {"openinference.span.kind": "CHAIN"},
                "context": {**first["context"], "trace_id": "0x%032x" % 1, "span_id": top},
            }
        )
    k = 0
    while len(out) < n_spans:
        k += 1
        ids: dict = {}
        for s in template:
            ids.setdefault(s["context"]["span_id"], "0x%016x" % next(counter))
        traces: dict = {}
        for s in template:
            if len(out) >= n_spans:
                break
            trace = (
                "0x%032x" % 1
                if one_trace
                else traces.setdefault(s["context"]["trace_id"], "0x%032x" % (k * 10 + len(traces) + 2))
            )
            parent = ids.get(s["parent_id"]) if s["parent_id"] else top
            out.append(
                {
                    **s,
                    "context": {**s["context"], "trace_id": trace, "span_id": ids[s["context"]["span_id"]]},
                    "parent_id": parent,
                }
            )
    return out


def write_sdk(path: Path, spans: list) -> None:
    path.write_text("".join(json.dumps(s) + "\n" for s in spans))


def write_otlp(path: Path, spans: list) -> None:
    """OTLP JSON lines (hex ids, `{key, value}` attributes), 100 spans a request."""

    def value(v):
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        if isinstance(v, float):
            return {"doubleValue": v}
        if isinstance(v, (list, tuple)):
            return {"arrayValue": {"values": [value(x) for x in v]}}
        return {"stringValue": str(v)}

    def ns(iso):
        from datetime import datetime

        return str(int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1e9))

    lines = []
    for start in range(0, len(spans), 100):
        out = []
        for s in spans[start : start + 100]:
            out.append(
                {
                    "traceId": s["context"]["trace_id"][2:],
                    "spanId": s["context"]["span_id"][2:],
                    **({"parentSpanId": s["parent_id"][2:]} if s["parent_id"] else {}),
                    "name": s["name"],
                    "startTimeUnixNano": ns(s["start_time"]),
                    "endTimeUnixNano": ns(s["end_time"]),
                    "attributes": [{"key": k, "value": value(v)} for k, v in (s.get("attributes") or {}).items()],
                }
            )
        lines.append(
            json.dumps(
                {
                    "resourceSpans": [
                        {"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "bench"}, "spans": out}]}
                    ]
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "trace_import.json")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = {}
        for layout in ("traces", "one_trace"):
            spans = copies(args.spans, layout == "one_trace")
            for container, write in (("sdk_jsonl", write_sdk), ("otlp_json", write_otlp)):
                path = work / f"{layout}-{container}.jsonl"
                write(path, spans)
                files[f"{layout}/{container}"] = (path, len(spans))
        runs: dict = {k: [] for k in files}
        for i in range(args.repeats):
            for key, (path, n) in files.items():  # interleaved: each repeat runs every variant once
                out = import_once(path, work, i)
                out["spans_per_s"] = n / out["seconds"]
                runs[key].append(out)
                print(
                    f"{key} #{i + 1}: {out['n']} trajectories, {out['spans_per_s']:,.0f} spans/s, "
                    f"peak {out['peak_rss_mb']:.0f} MB",
                    flush=True,
                )
        for key, (path, n) in files.items():
            r = runs[key]
            results[key] = {
                "spans": n,
                "file_mb": round(path.stat().st_size / 2**20, 2),
                "trajectories": r[0]["n"],
                "spans_per_s": summary([x["spans_per_s"] for x in r]),
                "seconds": summary([x["seconds"] for x in r]),
                "peak_rss_mb": summary([x["peak_rss_mb"] for x in r]),
                "rss_before_import_mb": summary([x["rss_before_import_mb"] for x in r]),
            }
    record = {
        "benchmark": "trace_import",
        "spans": args.spans,
        "repeats": args.repeats,
        "template": str(TEMPLATE.relative_to(ROOT)),
        "results": results,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: (v["spans_per_s"]["median"], v["peak_rss_mb"]["median"]) for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
