"""What the white-box analyzers see on the demo VLM's pictures, through the real worker and store.

Runs the image suites (`demo/vision`) on `evalrx-tiny-vl` in a worker with `logit_lens`, `tool_decision`
and `attention` (read from the generation's own captures, as a run does), then reads back what was stored:

- where the attention of the tokens that write a number read from a card goes: the share of the picture's
  attention that lands on the patches holding the card's digits (the renderer records which cell shows
  which digit; a cell is one patch of the model's view), over the share those patches would get from an
  even spread (`focus`: 1 = no preference), per decoder layer, for solved and failed cases apart;
- the picture's share of those tokens' attention over an even share (`looked`, what the
  `misread_observation` sign compares with 0.5), solved and failed apart;
- per failed trajectory, the reference kind and whether the white-box picture sign proposed a kind.

The figures describe the demo model; the sign's threshold is not fitted to them.

Usage (a few minutes on 2 idle cores):
    .venv/bin/python benchmarks/vision_whitebox.py [--limit 0] [--out benchmarks/results/vision_whitebox.json]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import tempfile
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).with_name("results") / "vision_whitebox.json"
ANALYZERS = ["logit_lens", "tool_decision", "attention"]


def _digit_cells() -> dict:
    """`{case id: {(row, col) of each patch showing a digit of the card}}` for the card pictures."""
    from evalrx.demo.vision_data import make_suites

    out = {}
    for name, episodes in make_suites().items():
        for i, ep in enumerate(episodes, start=1):
            cells = ep.image.info.get("cells") or {}
            if ep.kind in ("read", "read_only"):
                out[f"{name}-{i:03d}"] = {(row, col) for col, row in cells}
    return out


def _summary(values: list) -> dict:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "mean": round(statistics.fmean(values), 3),
        "median": round(statistics.median(values), 3),
        "q10": round(sorted(values)[len(values) // 10], 3),
        "q90": round(sorted(values)[(9 * len(values)) // 10], 3),
    }


def main(argv: list | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N cases (0: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)

    import numpy as np
    import torch

    import evalrx.store as S
    from evalrx.analyzers import KINDS, AttentionResult
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.demo.vision_data import VISION_TOOLS
    from evalrx.runner import Worker, enqueue_run
    from evalrx.suites import load_cases

    torch.set_num_threads(args.threads)
    cases = load_cases("demo/vision")
    if args.limit:
        cases = cases[: args.limit]
    url = f"sqlite:///{Path(tempfile.mkdtemp(prefix='evalrx-vwb-')) / 's.sqlite'}"
    S.upgrade(url)
    store = S.connect(url)
    cfg = RunConfig(model=ModelConfig("evalrx-tiny-vl"), tools=list(VISION_TOOLS), max_turns=4, analyzers=ANALYZERS)
    rid = enqueue_run(cfg, cases, runtime={"max_new_tokens": 96}, store=store)
    Worker(store, exit_when_idle=True, poll_s=0.01, heartbeat_s=5).run()
    digits = _digit_cells()
    focus: dict = {"pass": [], "fail": []}  # per case: [layers] focus ratios
    looked: dict = {"pass": [], "fail": []}
    failures: list = []
    sources = Counter()
    trajectories = S.list_trajectories(run_id=rid, limit=10_000, store=store).rows
    for row in trajectories:
        outcome = "pass" if row.outcome == "pass" else "fail"
        stored = {a["analyzer"]: a for a in S.load_analyses(row.id, store=store)}
        att_rec = stored.get("attention")
        if att_rec is None or att_rec["meta"].get("error"):
            continue
        att = AttentionResult.from_arrays(att_rec["arrays"], att_rec["meta"])
        steps, kinds = att.labels["label_step"], att.labels["label_kind"]
        # The first model turn's argument tokens: where a number read from the case picture is written.
        first = min((int(s) for s in steps), default=None)
        rows = [p for p in range(len(att.positions)) if int(steps[p]) == first and KINDS[int(kinds[p])] == "arg_value"]
        if rows and att.images and att.images[0]["step"] == 0:
            img = att.images[0]
            block = att.patches[rows, :, img["offset"] : img["offset"] + img["n"]]  # [P, L, 64]
            share = block.sum(-1)  # [P, L]
            looked[outcome].append(att.looked(rows, 0))
            cells = digits.get(row.sample_id)
            if cells:
                gr, gc = img["grid"]
                mask = np.zeros(gr * gc, dtype=bool)
                for r, c in cells:
                    if r < gr and c < gc:
                        mask[r * gc + c] = True
                on = block[:, :, mask].sum(-1) / np.maximum(share, 1e-12)
                focus[outcome].append((on.mean(0) / (mask.sum() / mask.size)).tolist())
        if outcome == "fail":
            found = S.get_diagnoses(row.id, store=store)
            ref = next((d.kind for d in found if d.source == "reference"), None)
            wb = [d.kind for d in found if d.source == "whitebox" and "image_step" in (d.evidence or {})]
            sources.update(d.source for d in found)
            failures.append({"id": row.sample_id, "reference": ref, "picture_sign": wb[0] if wb else None})
    n_layers = len(focus["pass"][0]) if focus["pass"] else 0
    fired = [f for f in failures if f["picture_sign"]]
    result = {
        "n_cases": len(cases),
        "solved": sum(1 for r in trajectories if r.outcome == "pass"),
        "focus_on_digit_patches": {
            outcome: {f"layer_{i + 1}": _summary([v[i] for v in focus[outcome]]) for i in range(n_layers)}
            for outcome in ("pass", "fail")
        },
        "picture_share_over_even": {outcome: _summary(looked[outcome]) for outcome in ("pass", "fail")},
        "failures": len(failures),
        "picture_sign_fired": len(fired),
        "picture_sign_agrees_with_reference": sum(1 for f in fired if f["picture_sign"] == f["reference"]),
        "reference_kinds_of_failures": dict(Counter(f["reference"] for f in failures)),
        "diagnosis_sources_of_failures": dict(sources),
        "when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "load_avg": round(os.getloadavg()[0], 2),
        "torch": torch.__version__,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("solved", "picture_share_over_even", "picture_sign_fired")}, indent=1))
    return result


if __name__ == "__main__":
    main()
