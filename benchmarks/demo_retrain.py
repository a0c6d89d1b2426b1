"""Does `python -m evalrx.demo.train` reproduce the committed demo model?

Retrains from scratch with the script's defaults (seed 0) into a scratch folder (or takes a
folder a retrain already wrote), evaluates it and the committed model on the 385 held-out cases
with `demo_eval`, and records the solve-rate difference, per-case agreement and whether the
weights are bit-identical, to `benchmarks/results/demo_retrain.json`.

Usage (about 40 minutes on 2 idle CPU cores, most of it training):
    .venv/bin/python benchmarks/demo_retrain.py [--retrained DIR] [--train-log FILE]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from demo_eval import evaluate

RESULTS = Path(__file__).with_name("results") / "demo_retrain.json"


def _weights_identical(a: Path, b: Path) -> bool:
    from safetensors.torch import load_file

    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return wa.keys() == wb.keys() and all(wa[k].equal(wb[k]) for k in wa)


def _eval(checkpoint: Path | None, cases: list) -> tuple[dict, dict]:
    import evalrx

    handle = evalrx.load("evalrx-tiny", checkpoint=str(checkpoint) if checkpoint else None, max_new_tokens=96)
    rows, summary = evaluate(handle, cases, max_turns=4, progress=False)
    return {r["id"]: r["label"] for r in rows}, summary


def main(argv: list | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retrained", default=None, help="a folder a retrain already wrote (skips training)")
    parser.add_argument("--train-log", default=None, help="that retrain's printed log (its summary is kept)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)

    import torch

    from evalrx.demo.train import MODEL_DIR
    from evalrx.suites import load_cases

    train_seconds = None
    if args.retrained:
        retrained = Path(args.retrained)
    else:
        retrained = Path(tempfile.mkdtemp(prefix="evalrx_retrain_")) / "model"
        t0 = time.perf_counter()
        # Records go to a throwaway suffix so the committed train_config.json stays as it is.
        subprocess.run(
            [sys.executable, "-m", "evalrx.demo.train", "--out", str(retrained), "--record-suffix", "_retrain"],
            check=True,
        )
        train_seconds = round(time.perf_counter() - t0, 1)
    torch.set_num_threads(args.threads)
    cases = load_cases("demo")
    committed_labels, committed = _eval(None, cases)
    retrained_labels, again = _eval(retrained, cases)
    agree = sum(committed_labels[k] == retrained_labels[k] for k in committed_labels)
    result = {
        "committed_solve_rate": committed["solve_rate"],
        "retrained_solve_rate": again["solve_rate"],
        "difference_points": round(100 * (again["solve_rate"] - committed["solve_rate"]), 2),
        "cases_with_same_outcome": agree,
        "n_cases": len(cases),
        "weights_bit_identical": _weights_identical(MODEL_DIR, retrained),
        "retrained_failure_kinds": again["failure_kinds"],
        "retrained_per_task_type": {k: v["solve_rate"] for k, v in again["per_task_type"].items()},
        "train_seconds": train_seconds,
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
    }
    if args.train_log:
        text = Path(args.train_log).read_text(encoding="utf-8")
        result["retrain_summary"] = json.loads(text[text.rindex("\n{") + 1 :])  # the JSON the script prints last
        result["train_seconds"] = result["train_seconds"] or result["retrain_summary"]["train_seconds"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "committed_solve_rate",
                    "retrained_solve_rate",
                    "difference_points",
                    "cases_with_same_outcome",
                    "weights_bit_identical",
                )
            },
            indent=1,
        )
    )
    return result


if __name__ == "__main__":
    main()
