"""Trajectory logit lens: evalrx against a plain forward pass and against tuned-lens's `LogitLens`.

A Llama-shaped random model (8 layers, hidden 512, vocab 32k) and a hand-built agent
trajectory of about 1k tokens (four tool calls with observations and a final answer,
rendered with the demo chat template). Measured in ONE run, interleaved, median of
several repeats:

* plain: one forward pass over the final conversation (full logits, no hidden states);
* evalrx: `LogitLensAnalyzer(top_k=10).run_trajectory(...)` end to end (rebuilding the
  conversation, finding decision positions, one teacher-forced pass, the lens over all
  layers at those positions, numpy results);
* tuned_lens: the same output (top-k, entropy, the chosen token's log-prob and rank per
  layer at the same positions) computed the way tuned-lens documents it
  (`PredictionTrajectory.from_lens_and_model`): a forward pass with hidden states, then
  `LogitLens.forward(h, i)` and a log-softmax over every position of every layer, the
  model's own log-probs for the last layer; the stats are then read at the decision
  positions. We skip its final copy of the whole [layers, T, V] array to numpy, which only
  favours tuned-lens.
* tuned_lens_at_positions (for reference): tuned-lens's `LogitLens` applied only at the
  decision positions, layer by layer, after a full forward pass.
* evalrx_plan_only / evalrx_compute_only (for reference): the host-side part (rebuilding
  and rendering the conversation, tokenizing, the prefix checks) and the model-side part
  (the pass and the lens, with results copied to numpy) of the evalrx run.

Goals: evalrx <= 1.2x plain; tuned_lens >= 3x evalrx; stored bytes <= 1/50 of a
full-vocabulary fp32 lens at the same positions.

tuned-lens is a benchmark-only dependency: `pip install --no-deps tuned-lens` (its
declared dependencies pull wandb, datasets, torchdata ... that `LogitLens` does not use).

Usage:
    .venv/bin/python benchmarks/lens.py [--repeats 9] [--threads 1] [--device cpu|cuda] [--dtype float32]

The recorded CPU run used `--repeats 9 --threads 1` on a shared 2-core machine.
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

RESULTS = Path(__file__).with_name("results") / "lens.json"

SYSTEM = "You are a careful research assistant. Use the tools to find facts, then answer briefly."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web and return the top passages.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a key up in the facts table.",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    },
]
QUESTION = "What is the population density of Lyon, in people per square kilometre? Check the sources."
CALLS = [
    ("search", {"query": "population of Lyon 2020 census"}),
    ("lookup", {"key": "lyon_area_km2"}),
    ("calculator", {"expression": "522250 / 47.87"}),
    ("search", {"query": "Lyon population density official figure"}),
]
ANSWER = "The population density of Lyon is about 10,909 people per square kilometre (522,250 people on 47.87 km2)."
SENTENCES = [
    "Lyon is the third-largest city of France and the capital of the Auvergne-Rhone-Alpes region.",
    "The 2020 census counted 522,250 inhabitants within the city limits.",
    "The metropolis of Lyon had about 1.4 million residents in the same year.",
    "The city covers 47.87 square kilometres between the Rhone and the Saone rivers.",
    "Its historic centre is a UNESCO World Heritage Site.",
    "Population figures differ between the commune, the metropolis and the urban area.",
]


def _call_text(name: str, args: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def _observation(i: int, n_sentences: int) -> str:
    return " ".join(SENTENCES[(i + j) % len(SENTENCES)] for j in range(n_sentences))


def build_trajectory(n_sentences: int):
    """The benchmark trajectory; `n_sentences` per search observation sets its length."""
    from evalrx.core import Step, StepRole, Trajectory

    steps = [Step(0, StepRole.USER, QUESTION)]
    observations = [None, "47.87", "10909.5", None]
    for i, (name, args) in enumerate(CALLS):
        text = _call_text(name, args)
        steps.append(Step(len(steps), StepRole.ACTOR, text, tool_calls=[{"name": name, "args": args, "raw": text}]))
        obs = observations[i] or _observation(i, n_sentences)
        steps.append(Step(len(steps), StepRole.TOOL, name, observation=obs, span={"call": 0}))
    steps.append(Step(len(steps), StepRole.ACTOR, ANSWER))
    return Trajectory("bench-lyon", QUESTION, steps=steps, final_answer=ANSWER, metrics={"terminated": "final"})


def build_model(device: str, dtype: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=512,
        intermediate_size=1376,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device=device, dtype=getattr(torch, dtype)).eval()
    return model


def build_tokenizer():
    from evalrx.demo.tokenizer import build_tokenizer as build

    corpus = SENTENCES + [SYSTEM, QUESTION, ANSWER] + [_call_text(n, a) for n, a in CALLS]
    corpus += [json.dumps(t) for t in TOOLS]
    return build(corpus * 8, vocab_size=2048)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def tuned_lens_stats(model, lens, ids, positions, targets, k, *, at_positions_only: bool):
    """The same per-layer statistics as evalrx, computed with tuned-lens's `LogitLens`."""
    import torch

    with torch.inference_mode():
        input_ids = torch.tensor([ids], device=model.device)
        out = model(input_ids, output_hidden_states=True)
        stream = list(out.hidden_states)
        pos = torch.tensor(positions, device=model.device)
        tgt = torch.tensor(targets, device=model.device)
        rows = []
        for i, h in enumerate(stream[:-1]):
            if at_positions_only:
                rows.append(lens.forward(h[:, pos], i).float().log_softmax(-1)[0])
            else:  # the documented flow: every position of every layer, then read the ones we want
                rows.append(lens.forward(h, i).float().log_softmax(-1)[0].index_select(0, pos))
        rows.append(out.logits.float().log_softmax(-1)[0].index_select(0, pos))
        result = []
        for lp in rows:
            vals, idx = lp.topk(k, -1)
            ent = torch.special.entr(lp.exp()).sum(-1)
            chosen = lp.gather(-1, tgt.view(-1, 1)).squeeze(-1)
            rank = (lp > chosen.unsqueeze(-1)).sum(-1)
            result.append(
                (idx.cpu().numpy(), vals.cpu().numpy(), ent.cpu().numpy(), chosen.cpu().numpy(), rank.cpu().numpy())
            )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tokens", type=int, default=1024, help="target trajectory length")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()

    import numpy as np
    import torch

    import evalrx
    from evalrx.analyzers import LogitLensAnalyzer, plan_trajectory
    from evalrx.analyzers.logit_lens import lens_on_ids
    from evalrx.internals.passes import local_model

    if args.threads:
        torch.set_num_threads(args.threads)
    tuned_lens_note = None
    try:
        from tuned_lens.nn import LogitLens
    except ImportError as exc:  # pragma: no cover - the benchmark says how to install it
        raise SystemExit(f"tuned-lens is needed for this benchmark: pip install --no-deps tuned-lens ({exc})")

    tok = build_tokenizer()
    model = build_model(args.device, args.dtype)
    handle = evalrx.wrap(model, tok)
    analyzer = LogitLensAnalyzer(top_k=10)

    # Grow the search observations until the conversation reaches the target length.
    n_sentences, traj, passes = 1, None, None
    while True:
        traj = build_trajectory(n_sentences)
        _, passes = plan_trajectory(tok, traj, tools=TOOLS, system=SYSTEM, renderer=handle)
        if len(passes[0].ids) >= args.tokens or n_sentences > 200:
            break
        n_sentences += 1
    ids = passes[0].ids
    n_tokens = len(ids)

    lens = LogitLens.from_model(model)
    local = local_model(handle, "benchmark")
    reference = analyzer.run_trajectory(handle, traj, tools=TOOLS, system=SYSTEM)
    positions = reference.positions.tolist()
    targets = reference.target_ids.tolist()
    assert reference.info["plan"]["mode"] == "one_pass"

    def plain():
        with torch.inference_mode():
            model(torch.tensor([ids], device=model.device), use_cache=False)

    runs = {
        "plain_forward": plain,
        "evalrx": lambda: analyzer.run_trajectory(handle, traj, tools=TOOLS, system=SYSTEM),
        "tuned_lens": lambda: tuned_lens_stats(model, lens, ids, positions, targets, 10, at_positions_only=False),
        "tuned_lens_at_positions": lambda: tuned_lens_stats(
            model, lens, ids, positions, targets, 10, at_positions_only=True
        ),
        "evalrx_plan_only": lambda: plan_trajectory(tok, traj, tools=TOOLS, system=SYSTEM, renderer=handle),
        "evalrx_compute_only": lambda: lens_on_ids(local, ids, positions, 10),
    }
    for _ in range(args.warmup):
        for fn in runs.values():
            fn()
            _sync(args.device)
    load_before = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    samples = {name: [] for name in runs}
    for _ in range(args.repeats):  # interleaved, so load from other processes hits every variant alike
        for name, fn in runs.items():
            _sync(args.device)
            t0 = time.perf_counter()
            fn()
            _sync(args.device)
            samples[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(v) for name, v in samples.items()}

    # Ratios of the runs of one round, then their median: load from other processes drifts
    # slowly, so neighbours in time see the same load (shared machines).
    def paired(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(samples[a], samples[b]))

    # Same output: tuned-lens's numbers against evalrx's.
    tl = tuned_lens_stats(model, lens, ids, positions, targets, 10, at_positions_only=False)
    tl_topk_lp = np.stack([r[1] for r in tl])
    tl_topk_ids = np.stack([r[0] for r in tl])
    tl_entropy = np.stack([r[2] for r in tl])
    max_diff = float(np.abs(tl_topk_lp - reference.topk_logprobs).max())
    ids_agree = float((tl_topk_ids == reference.topk_ids).mean())
    ent_diff = float(np.abs(tl_entropy - reference.entropy).max())

    n_layers = reference.num_layers
    vocab = model.config.vocab_size
    stored = reference.stored_nbytes()
    full_at_positions = (n_layers + 1) * len(positions) * vocab * 4
    full_all_positions = (n_layers + 1) * n_tokens * vocab * 4
    kinds = {k: reference.kinds.count(k) for k in sorted(set(reference.kinds))}

    device_name = args.device
    if args.device.startswith("cuda"):
        device_name = f"{args.device} ({torch.cuda.get_device_name()})"
    entry = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "device": device_name,
            "torch_threads": torch.get_num_threads(),
            "load_average_before_after": [load_before, list(os.getloadavg()) if hasattr(os, "getloadavg") else None],
        },
        "model": {
            "arch": "llama",
            "layers": n_layers,
            "hidden": 512,
            "intermediate": 1376,
            "vocab": vocab,
            "dtype": args.dtype,
            "random_init": True,
        },
        "trajectory": {
            "tokens": n_tokens,
            "tool_calls": len(CALLS),
            "decision_positions": len(positions),
            "positions_by_kind": kinds,
            "plan": reference.info["plan"]["mode"],
        },
        "top_k": 10,
        "repeats": args.repeats,
        "seconds_median": {k: round(v, 5) for k, v in med.items()},
        "seconds_all": {k: [round(x, 5) for x in v] for k, v in samples.items()},
        "ratios": {
            "evalrx_over_plain": round(paired("evalrx", "plain_forward"), 3),
            "tuned_lens_over_evalrx": round(paired("tuned_lens", "evalrx"), 2),
            "tuned_lens_at_positions_over_evalrx": round(paired("tuned_lens_at_positions", "evalrx"), 2),
            "evalrx_compute_only_over_plain": round(paired("evalrx_compute_only", "plain_forward"), 3),
            "how": "median over rounds of the ratio within each round (variants interleaved)",
        },
        "same_output": {
            "topk_logprob_max_abs_diff": max_diff,
            "topk_ids_agreement": ids_agree,
            "entropy_max_abs_diff": ent_diff,
        },
        "storage_bytes": {
            "evalrx_stored": stored,
            "full_vocab_fp32_at_positions": full_at_positions,
            "full_vocab_fp32_all_positions": full_all_positions,
            "fraction_of_full_at_positions": round(stored / full_at_positions, 5),
        },
        "goals": {
            "evalrx_within_1.2x_plain": paired("evalrx", "plain_forward") <= 1.2,
            "at_least_3x_faster_than_tuned_lens": paired("tuned_lens", "evalrx") >= 3,
            "stored_at_most_1_50_of_full": stored * 50 <= full_at_positions,
        },
        "tuned_lens": {
            "package": "tuned-lens 0.2.0, installed with --no-deps (only LogitLens is used)",
            "method": "PredictionTrajectory.from_lens_and_model's loop: LogitLens.forward(h, i) + log_softmax over "
            "all positions per layer, model log-probs for the last layer; the final numpy copy is skipped",
            "note": tuned_lens_note,
        },
        "why_evalrx_is_cheaper": "the lens runs only at decision positions, all layers stacked in one matmul per "
        "block, and the pass asks the model for logits only there (logits_to_keep)",
    }
    out = Path(args.out)
    data = json.loads(out.read_text()) if out.exists() else {}
    data.setdefault("benchmark", "lens")
    data.setdefault("runs", {})
    key = ("cuda" if args.device.startswith("cuda") else "cpu") + ("" if args.dtype == "float32" else f"-{args.dtype}")
    data["runs"][key] = entry
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(
        json.dumps(
            {k: entry[k] for k in ("trajectory", "seconds_median", "ratios", "same_output", "storage_bytes", "goals")},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
