"""Importing a large Inspect log: samples/s and peak memory, `.eval` (Zstandard and Deflate) and `.json`.

    python benchmarks/import_eval.py                          # 10k samples, both compressions, 3 repeats
    python benchmarks/import_eval.py --samples 500 --out /tmp/import_eval_small.json
    python benchmarks/import_eval.py --sample-kb 200          # ~2 GB of samples: memory must stay flat
    python benchmarks/import_eval.py --compression json --out benchmarks/results/import_json.json

One real sample is written by inspect_ai (`mockllm/model`, offline: a tool call, its result, the
answer), then copied `--samples` times (new ids, optionally padded to `--sample-kb`) into a zip in
Inspect's layout (`_journal/start.json`, `samples/{id}_epoch_1.json`, `header.json`) with each
compression, Zstandard entries written by Inspect's own multi-frame compressor; `json` writes the same
samples as one `.json` log document (Inspect's `log_format="json"` layout: `version`, `status`, `eval`,
..., `samples`), which evalrx reads sample by sample. Each import runs in
a fresh child process into a fresh SQLite store, so its peak RSS (VmHWM) is the import's
alone (the parent migrates the fresh store first); the child's RSS before the import is recorded too.
Machine load is read before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The store is migrated by the parent, so the child's peak RSS is the import's, not Alembic's. Peak RSS is
# VmHWM (it starts afresh at exec; ru_maxrss on Linux keeps the forking parent's peak across exec).
_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])

def rss_mb(field):
    try:
        with open("/proc/self/status") as fh:
            return next(int(l.split()[1]) / 1024 for l in fh if l.startswith(field + ":"))
    except OSError:  # not Linux: ru_maxrss (bytes on macOS)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024

import evalrx.interop as X
url = "sqlite:///" + sys.argv[3]
before = rss_mb("VmRSS")
t0 = time.perf_counter()
res = X.import_file(sys.argv[2], store=url)
seconds = time.perf_counter() - t0
print(json.dumps({"n": res.n_trajectories, "format": res.format, "seconds": seconds,
                  "peak_rss_mb": rss_mb("VmHWM"), "rss_before_import_mb": before}))
"""


def template_sample(work: Path) -> tuple[dict, dict]:
    """(sample, start.json) of a one-sample eval that inspect_ai writes here."""
    os.environ.setdefault("INSPECT_DISPLAY", "none")
    os.environ["XDG_DATA_HOME"] = str(work / "xdg-data")
    os.environ["XDG_CACHE_HOME"] = str(work / "xdg-cache")
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate, use_tools
    from inspect_ai.tool import tool

    @tool
    def lookup():
        async def execute(key: str) -> str:
            """Look a key up.

            Args:
                key: The key.

            Returns:
                The value.
            """
            return f"the value of {key} is 42; " + "details " * 20

        return execute

    def model(messages, tools, tool_choice, config):
        if not any(m.role == "tool" for m in messages):
            out = ModelOutput.for_tool_call("mockllm/model", "lookup", {"key": "a"}, content="Let me look.")
        else:
            out = ModelOutput.from_content("mockllm/model", "The answer is 42.")
        out.usage = ModelUsage(input_tokens=120, output_tokens=16, total_tokens=136)
        return out

    task = Task(
        dataset=[Sample(id="template", input="What is the value of a?", target="42")],
        solver=[use_tools(lookup()), generate()],
        scorer=includes(),
        name="import_bench",
    )
    with ThreadPoolExecutor(1) as pool:
        logs = pool.submit(
            inspect_eval,
            task,
            model="mockllm/model",
            model_args={"custom_outputs": model},
            log_dir=str(work / "template"),
            display="none",
        ).result()
    assert logs[0].status == "success", logs[0].error
    (path,) = (work / "template").glob("*.eval")
    with zipfile.ZipFile(path) as zf:  # inspect_ai is imported: its patch lets zipfile read its entries
        sample = json.loads(zf.read("samples/template_epoch_1.json"))
        start = json.loads(zf.read("_journal/start.json"))
    return sample, start


def build_log(path: Path, sample: dict, start: dict, n: int, compression: str, sample_kb: int) -> dict:
    """A `.eval` zip of `n` copies of `sample` in Inspect's layout; returns its sizes."""
    method = zipfile.ZIP_DEFLATED if compression == "deflate" else zipfile.ZIP_ZSTANDARD  # the latter from Inspect
    ids = [f"s{i:06d}" for i in range(n)]
    spec = json.loads(json.dumps(start))
    spec["eval"]["dataset"] = {"samples": n, "sample_ids": ids, "shuffled": False}
    raw = 0
    level = 5 if method == zipfile.ZIP_DEFLATED else None
    with zipfile.ZipFile(path, "w", compression=method, compresslevel=level) as zf:
        zf.writestr("_journal/start.json", json.dumps(spec))
        pad = "x" * max(0, sample_kb * 1024 - len(json.dumps(sample)))
        for sid in ids:
            # padding goes in the sample's store: Inspect keeps it, evalrx does not (the database stays small)
            s = dict(sample, id=sid, store={"pad": pad} if pad else sample.get("store", {}))
            data = json.dumps(s)
            raw += len(data)
            zf.writestr(f"samples/{sid}_epoch_1.json", data)
        zf.writestr("header.json", json.dumps({**spec, "status": "success"}))
    return {"compressed_mb": round(path.stat().st_size / 2**20, 2), "samples_mb": round(raw / 2**20, 2)}


def build_json_log(path: Path, sample: dict, start: dict, n: int, sample_kb: int) -> dict:
    """A `.json` log document of `n` copies of `sample`, written as a stream (Inspect's key order)."""
    ids = [f"s{i:06d}" for i in range(n)]
    spec = json.loads(json.dumps(start))
    spec["eval"]["dataset"] = {"samples": n, "sample_ids": ids, "shuffled": False}
    raw = 0
    pad = "x" * max(0, sample_kb * 1024 - len(json.dumps(sample)))
    with path.open("w") as fh:
        fh.write('{"version": 2, "status": "success", "eval": ' + json.dumps(spec["eval"]))
        fh.write(', "plan": ' + json.dumps(spec.get("plan") or {}) + ', "samples": [')
        for i, sid in enumerate(ids):
            s = dict(sample, id=sid, store={"pad": pad} if pad else sample.get("store", {}))
            data = json.dumps(s, indent=2)
            raw += len(data)
            fh.write(("," if i else "") + "\n" + data)
        fh.write("\n]}\n")
    return {"compressed_mb": round(path.stat().st_size / 2**20, 2), "samples_mb": round(raw / 2**20, 2)}


def import_once(log: Path, work: Path, i: int) -> dict:
    import evalrx.store as S

    db = work / f"bench-{log.stem}-{i}.sqlite"
    S.upgrade(f"sqlite:///{db}")
    S.forget(f"sqlite:///{db}")
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(ROOT), str(log), str(db)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"import failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["samples_per_s"] = out["n"] / out["seconds"]
    out["db_mb"] = round(db.stat().st_size / 2**20, 2)
    for extra in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        extra.unlink(missing_ok=True)
    return out


def summary(values: list) -> dict:
    med = statistics.median(values)
    return {
        "median": round(med, 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "spread_pct": round(100 * (max(values) - min(values)) / med, 1) if med else None,
        "values": [round(v, 3) for v in values],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=3, help="imports per compression (at least 3 for a spread)")
    p.add_argument(
        "--compression", choices=["zstd", "deflate", "both", "json"], default="both", help="json: a .json log"
    )
    p.add_argument("--sample-kb", type=int, default=0, help="pad each sample to about this size (0: as written)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "import_eval.json"))
    args = p.parse_args(argv)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="evalrx-import-bench-") as tmp:
        work = Path(tmp)
        sample, start = template_sample(work)
        results = {}
        for compression in ["zstd", "deflate"] if args.compression == "both" else [args.compression]:
            t0 = time.perf_counter()
            if compression == "json":
                log = work / "bench.json"
                sizes = build_json_log(log, sample, start, args.samples, args.sample_kb)
            else:
                log = work / f"bench-{compression}.eval"
                sizes = build_log(log, sample, start, args.samples, compression, args.sample_kb)
            runs = [import_once(log, work, i) for i in range(args.repeats)]
            fmt = "inspect" if compression == "json" else "inspect-eval"
            assert all(r["n"] == args.samples and r["format"] == fmt for r in runs), runs
            results[compression] = {
                **sizes,
                "build_s": round(time.perf_counter() - t0 - sum(r["seconds"] for r in runs), 2),
                "samples_per_s": summary([r["samples_per_s"] for r in runs]),
                "seconds": summary([r["seconds"] for r in runs]),
                "peak_rss_mb": summary([r["peak_rss_mb"] for r in runs]),
                "rss_before_import_mb": summary([r["rss_before_import_mb"] for r in runs]),
                "db_mb": runs[-1]["db_mb"],
            }
            print(
                f"{compression}: {args.samples} samples ({sizes['samples_mb']} MB of JSON, "
                f"{sizes['compressed_mb']} MB zipped): {results[compression]['samples_per_s']['median']:.0f} "
                f"samples/s, peak RSS {results[compression]['peak_rss_mb']['max']:.0f} MB "
                f"(spread {results[compression]['samples_per_s']['spread_pct']}%)",
                flush=True,
            )
    import inspect_ai

    report = {
        "benchmark": "import_eval",
        "samples": args.samples,
        "sample_kb": args.sample_kb,
        "repeats": args.repeats,
        "results": results,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg_at_start": load_start,
            "load_avg_at_end": os.getloadavg(),
            "inspect_ai": inspect_ai.__version__,
        },
        "note": "each import in a fresh child process into a fresh SQLite store; peak RSS is the child's VmHWM",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
