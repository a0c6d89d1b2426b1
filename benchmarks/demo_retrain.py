"""Does a demo trainer reproduce its committed model?

Retrains from scratch with the script's defaults (seed 0) into a scratch folder (or takes a
folder a retrain already wrote), evaluates it and the committed model on the held-out cases
with `demo_eval`, and records the solve-rate difference, per-case agreement and whether the
weights are bit-identical. `--spec evalrx-tiny` (default): `python -m evalrx.demo.train`, the 385
cases of `demo`, `benchmarks/results/demo_retrain.json`; `--spec evalrx-tiny-vl`:
`python -m evalrx.demo.train_vision`, the 340 cases of `demo/vision`, `demo_retrain_vision.json`.

Usage (about 40 minutes on 2 idle CPU cores each, most of it training):
    .venv/bin/python benchmarks/demo_retrain.py [--spec evalrx-tiny-vl] [--retrained DIR] [--train-log FILE]
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

RESULTS = Path(__file__).with_name("results")
# spec -> (trainer module, its committed model folder's attribute, held-out suite, records suffix, result file)
DEMOS = {
    "evalrx-tiny": ("evalrx.demo.train", "MODEL_DIR", "demo", "_retrain", "demo_retrain.json"),
    "evalrx-tiny-vl": (
        "evalrx.demo.train_vision",
        "VISION_MODEL_DIR",
        "demo/vision",
        "_vision_retrain",
        "demo_retrain_vision.json",
    ),
}


def _weights_identical(a: Path, b: Path) -> bool:
    from safetensors.torch import load_file

    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return wa.keys() == wb.keys() and all(wa[k].equal(wb[k]) for k in wa)


def _eval(spec: str, checkpoint: Path | None, cases: list) -> tuple[dict, dict]:
    import evalrx

    handle = evalrx.load(spec, checkpoint=str(checkpoint) if checkpoint else None, max_new_tokens=96)
    rows, summary = evaluate(handle, cases, max_turns=4, progress=False)
    return {r["id"]: r["label"] for r in rows}, summary


def main(argv: list | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="evalrx-tiny", choices=sorted(DEMOS))
    parser.add_argument("--retrained", default=None, help="a folder a retrain already wrote (skips training)")
    parser.add_argument("--train-log", default=None, help="that retrain's printed log (its summary is kept)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None, help="result file (default: the spec's in benchmarks/results)")
    args = parser.parse_args(argv)
    module, model_dir_name, suite, suffix, result_file = DEMOS[args.spec]

    import importlib

    import torch

    from evalrx.suites import load_cases

    committed_dir = getattr(importlib.import_module(module), model_dir_name)

    train_seconds = None
    if args.retrained:
        retrained = Path(args.retrained)
    else:
        retrained = Path(tempfile.mkdtemp(prefix="evalrx_retrain_")) / "model"
        t0 = time.perf_counter()
        # Records go to a throwaway suffix so the committed train_config.json stays as it is.
        subprocess.run(
            # No wall-clock cap: a busy machine must not stop the retrain short of the committed steps.
            [sys.executable, "-m", module, "--out", str(retrained), "--record-suffix", suffix, "--max-minutes", "1000"],
            check=True,
        )
        train_seconds = round(time.perf_counter() - t0, 1)
    torch.set_num_threads(args.threads)
    cases = load_cases(suite)
    committed_labels, committed = _eval(args.spec, None, cases)
    retrained_labels, again = _eval(args.spec, retrained, cases)
    agree = sum(committed_labels[k] == retrained_labels[k] for k in committed_labels)
    result = {
        "spec": args.spec,
        "suite": suite,
        "committed_solve_rate": committed["solve_rate"],
        "retrained_solve_rate": again["solve_rate"],
        "difference_points": round(100 * (again["solve_rate"] - committed["solve_rate"]), 2),
        "cases_with_same_outcome": agree,
        "n_cases": len(cases),
        "weights_bit_identical": _weights_identical(committed_dir, retrained),
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
    out = Path(args.out) if args.out else RESULTS / result_file
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
