"""Train the bundled demo model: `python -m evalrx.demo.train`.

A tiny Qwen2 learns, from synthetic agent episodes rendered with the chat template, to call
`calculator` and `lookup` in the Hermes format and to answer from their observations. The loss
covers assistant tokens only. Seeded and single-threaded by default, so a retrain gives the same
weights bit for bit; on this machine it takes under an hour (58 min with another run beside it).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

from evalrx.demo.data import DEMO_DIR, DEMO_TOOLS, KB_PATH, held_out_prompts
from evalrx.demo.episodes import training_episodes
from evalrx.demo.world import make_world

MODEL_DIR = DEMO_DIR / "model"

DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "episodes": 100000,
    "world_pool": 256,
    "tokenizer_episodes": 6000,
    "vocab_size": 1024,
    "digits": "individual",
    "hidden_size": 160,
    "intermediate_size": 480,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 768,
    "rope_theta": 10000.0,
    "batch_size": 32,
    "steps": 5500,
    "lr": 2e-3,
    "min_lr_ratio": 0.05,
    "warmup_steps": 200,
    "weight_decay": 0.05,
    "grad_clip": 1.0,
    "threads": 1,
    "device": "cpu",
    "max_minutes": 60.0,
    "save_every": 0,
    "checkpoint_dir": "",
}


def render(tokenizer: Any, messages: list[dict], tools: list[dict], add_generation_prompt: bool = False) -> str:
    """Render messages with the model's chat template (text, not ids)."""
    return tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt
    )


def render_plain(template: str, messages: list[dict], tools: list[dict], add_generation_prompt: bool = False) -> str:
    """Render with the bare template, before any tokenizer exists (to train the tokenizer on)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    # Annotated `-> str` in transformers 5, it returns (rendered conversations, generation indices).
    render_jinja: Any = render_jinja_template
    rendered, _ = render_jinja(
        [messages], tools=tools, chat_template=template, add_generation_prompt=add_generation_prompt
    )
    return rendered[0]


def encode_episode(tokenizer: Any, messages: list[dict], tools: list[dict]) -> tuple[list[int], list[int]]:
    """Token ids of the whole conversation and a 0/1 mask that is 1 on assistant tokens.

    Assistant spans are each assistant message's content plus its `<|im_end|>`, located by
    rendering the prefix before it (the template is prefix-stable, checked here).
    """
    full = render(tokenizer, messages, tools)
    spans = []
    for i, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        prefix = render(tokenizer, messages[:i], tools, add_generation_prompt=True)
        if not full.startswith(prefix):
            raise RuntimeError("chat template is not prefix-stable; cannot mask assistant tokens")
        end = len(prefix) + len(msg["content"]) + len("<|im_end|>")
        if full[len(prefix) : end] != msg["content"] + "<|im_end|>":
            raise RuntimeError("assistant content is not rendered verbatim")
        spans.append((len(prefix), end))
    enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    mask = [1 if any(a <= s < b for a, b in spans) else 0 for s, _ in enc["offset_mapping"]]
    return enc["input_ids"], mask


def _lr_at(step: int, cfg: dict) -> float:
    if step < cfg["warmup_steps"]:
        return cfg["lr"] * (step + 1) / cfg["warmup_steps"]
    progress = (step - cfg["warmup_steps"]) / max(1, cfg["steps"] - cfg["warmup_steps"])
    floor = cfg["lr"] * cfg["min_lr_ratio"]
    return floor + (cfg["lr"] - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def shared_prefix(tokenizer: Any, tools: list[dict]) -> list[int]:
    """Token ids of the system turn plus `<|im_start|>user\\n`, common to every episode."""
    probe = render(tokenizer, [{"role": "user", "content": "\x00"}], tools)
    text = probe[: probe.index("\x00")]
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class BatchSampler:
    """Length-bucketed batches: shuffle, sort a pool of 32 batches by length, shuffle the batches."""

    def __init__(self, items: list, batch_size: int, seed: int, pool_batches: int = 32) -> None:
        self.items, self.batch_size, self.pool = items, batch_size, pool_batches
        self.rng = random.Random(seed)
        self.queue: list[list[int]] = []
        self.order: list[int] = []

    def next(self) -> list:
        if not self.queue:
            need = self.batch_size * self.pool
            while len(self.order) < need:
                fresh = list(range(len(self.items)))
                self.rng.shuffle(fresh)
                self.order.extend(fresh)
            pool, self.order = self.order[:need], self.order[need:]
            pool.sort(key=lambda i: len(self.items[i][0]))
            self.queue = [pool[i : i + self.batch_size] for i in range(0, need, self.batch_size)]
            self.rng.shuffle(self.queue)
        return [self.items[i] for i in self.queue.pop()]


def collate(batch: list, pad: int) -> tuple:
    """Right-padded ids, attention mask and labels (-100 outside assistant tokens)."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (ids, mask) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attn[row, : len(ids)] = 1
        labels[row, : len(ids)] = torch.tensor([t if m else -100 for t, m in zip(ids, mask)])
    return input_ids, attn, labels


def prefix_cached_loss(model: Any, prefix: Any, input_ids: Any, attn: Any, labels: Any, **inputs: Any) -> Any:
    """Mean next-token loss on `labels`, with the shared `prefix` (1, P) computed once for the batch.

    `inputs` go with the batch's own tokens (a VLM's `pixel_values`: the prefix has no picture).
    """
    import torch
    from transformers import DynamicCache

    batch = input_ids.shape[0]
    cache = DynamicCache(config=model.config.get_text_config())
    model(input_ids=prefix, past_key_values=cache, use_cache=True)
    for layer in cache.layers:
        kv: Any = layer  # a full-attention layer, its keys and values set by the prefix's forward
        kv.keys = kv.keys.expand(batch, -1, -1, -1)
        kv.values = kv.values.expand(batch, -1, -1, -1)
    n_prefix = prefix.shape[1]
    full_mask = torch.cat([torch.ones((batch, n_prefix), dtype=attn.dtype), attn], dim=1)
    positions = torch.arange(n_prefix, n_prefix + input_ids.shape[1]).unsqueeze(0).expand(batch, -1)
    out = model(
        input_ids=input_ids,
        attention_mask=full_mask,
        past_key_values=cache,
        position_ids=positions,
        use_cache=True,
        **inputs,
    )
    # The label of position t is token t+1; the first suffix token follows the prefix (never a label here).
    logits = out.logits[:, :-1].float()
    target = labels[:, 1:]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100
    )


def make_optimizer(named_parameters: list, cfg: dict) -> Any:
    """AdamW with weight decay on the matrices only (not on biases and norms)."""
    import torch

    decay = [p for n, p in named_parameters if p.dim() >= 2]
    no_decay = [p for n, p in named_parameters if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg["lr"],
        betas=(0.9, 0.98),
        eps=1e-8,
    )


def optimizer_step(model: Any, opt: Any, loss: Any, cfg: dict) -> None:
    """One step on `loss`, the model's gradient norm clipped to `grad_clip`."""
    import torch

    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
    opt.step()


def track_loss(curve: list, step: int, value: float, ema: Any, cfg: dict, t_start: float) -> float:
    """The loss's moving average after `step`; every 10th step and the last are added to `curve`."""
    ema = value if ema is None else 0.95 * ema + 0.05 * value
    if step % 10 == 0 or step == cfg["steps"] - 1:
        curve.append(
            {
                "step": step,
                "loss": round(value, 5),
                "ema_loss": round(ema, 5),
                "lr": round(_lr_at(step, cfg), 7),
                "elapsed_s": round(time.time() - t_start, 1),
            }
        )
    return ema


def save_trained(model: Any, processor: Any, out_dir: Path, eos_token_id: Any, pad: int) -> None:
    """Save the trained model, greedy by default, with its tokenizer or processor."""
    from transformers import GenerationConfig

    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        eos_token_id=eos_token_id, pad_token_id=pad, do_sample=False, max_new_tokens=96
    )
    model.save_pretrained(out_dir, safe_serialization=True)
    processor.save_pretrained(out_dir)


def train(cfg: dict, out_dir: Path = MODEL_DIR, log: Any = print) -> dict:
    """Generate data, train tokenizer and model, save everything to `out_dir`; returns a summary."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from evalrx.demo.tokenizer import build_tokenizer, chat_template
    from evalrx.tools import get_tools

    t_start = time.time()
    torch.set_num_threads(int(cfg["threads"]))
    if cfg.get("device", "cpu") != "cpu":  # e.g. "cuda": every tensor below is created there
        torch.set_default_device(cfg["device"])
    random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    torch.use_deterministic_algorithms(True, warn_only=True)

    world = make_world()
    if KB_PATH.exists() and json.loads(KB_PATH.read_text(encoding="utf-8")) != world:
        raise RuntimeError(f"{KB_PATH} differs from the generated world; run `python -m evalrx.demo.data`")
    exclude = held_out_prompts()
    episodes = list(
        training_episodes(
            cfg["episodes"], seed=cfg["seed"], exclude=exclude, world=world, world_pool=int(cfg.get("world_pool", 0))
        )
    )
    tools = [t.to_openai() for t in get_tools(DEMO_TOOLS)]
    log(f"{len(episodes)} episodes generated ({len(exclude)} held-out prompts excluded)")

    template = chat_template()
    tok_texts = [render_plain(template, ep.messages(), tools) for ep in episodes[: cfg["tokenizer_episodes"]]]
    tokenizer = build_tokenizer(tok_texts, vocab_size=cfg["vocab_size"], digits=cfg["digits"])
    data = [encode_episode(tokenizer, ep.messages(), tools) for ep in episodes]
    lengths = [len(ids) for ids, _ in data]
    log(
        f"tokenizer: {len(tokenizer)} tokens; episode length mean {sum(lengths) / len(lengths):.0f}, "
        f"max {max(lengths)}; tokenised in {time.time() - t_start:.0f}s"
    )
    if max(lengths) > cfg["max_position_embeddings"]:
        raise RuntimeError(f"an episode has {max(lengths)} tokens > max_position_embeddings")

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=cfg["num_hidden_layers"],
        num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"],
        max_position_embeddings=cfg["max_position_embeddings"],
        rope_parameters={"rope_type": "default", "rope_theta": cfg["rope_theta"]},  # what rope_theta= became
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters")

    opt = make_optimizer(list(model.named_parameters()), cfg)
    # Every episode starts with the same system turn (both tools): run that shared prefix once per
    # step with batch 1 and let the batch attend to its (expanded) KV cache. Same maths as full
    # sequences under causal attention, about 3x less compute.
    prefix_ids = shared_prefix(tokenizer, tools)
    n_prefix = len(prefix_ids)
    for ids, _ in data:
        if ids[:n_prefix] != prefix_ids:
            raise RuntimeError("an episode does not start with the shared system prefix")
    suffixes = [(ids[n_prefix:], mask[n_prefix:]) for ids, mask in data]
    batches = BatchSampler(suffixes, cfg["batch_size"], seed=cfg["seed"] + 1)
    prefix_tensor = torch.tensor([prefix_ids])
    pad = tokenizer.pad_token_id
    curve: list[dict] = []
    model.train()
    ema = None
    deadline = t_start + 60 * float(cfg["max_minutes"])
    steps_done = 0
    for step in range(cfg["steps"]):
        batch = batches.next()
        input_ids, attn, labels = collate(batch, pad)
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg)
        loss = prefix_cached_loss(model, prefix_tensor, input_ids, attn, labels)
        optimizer_step(model, opt, loss, cfg)
        steps_done = step + 1
        value = float(loss.detach())
        ema = track_loss(curve, step, value, ema, cfg, t_start)
        if step % 50 == 0 or step < 3 or step == 20:
            log(
                f"step {step:5d} loss {value:.4f} ema {ema:.4f} lr {_lr_at(step, cfg):.2e} {time.time() - t_start:.0f}s"
            )
        if cfg["save_every"] and steps_done % cfg["save_every"] == 0:
            snap = Path(cfg["checkpoint_dir"] or "/tmp/evalrx_demo_ckpt") / f"step_{steps_done}"
            model.save_pretrained(snap, safe_serialization=True)
            tokenizer.save_pretrained(snap)
        if time.time() > deadline:
            log(f"time budget of {cfg['max_minutes']} min reached at step {step}; stopping")
            break

    save_trained(model, tokenizer, out_dir, config.eos_token_id, pad)
    elapsed = time.time() - t_start
    summary = {
        "config": cfg,
        "parameters": n_params,
        "steps_done": steps_done,
        "final_ema_loss": round(ema or float("nan"), 5),
        "train_seconds": round(elapsed, 1),
        "episodes": len(episodes),
        "mean_episode_tokens": round(sum(lengths) / len(lengths), 1),
        "vocab_size": len(tokenizer),
        "torch": torch.__version__,
    }
    return {"summary": summary, "curve": curve}


def write_records(result: dict, demo_dir: Path = DEMO_DIR, suffix: str = "") -> None:
    """Write train_config.json, loss_curve.csv and (if matplotlib is there) loss_curve.png."""
    (demo_dir / f"train_config{suffix}.json").write_text(json.dumps(result["summary"], indent=1) + "\n")
    with open(demo_dir / f"loss_curve{suffix}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["step", "loss", "ema_loss", "lr", "elapsed_s"])
        writer.writeheader()
        writer.writerows(result["curve"])
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the PNG is a nicety; the CSV is the record
        return
    fig, ax = plt.subplots(figsize=(5, 3), dpi=80)
    ax.plot([r["step"] for r in result["curve"]], [r["ema_loss"] for r in result["curve"]])
    ax.set_xlabel("step")
    ax.set_ylabel("loss (EMA, assistant tokens)")
    ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(demo_dir / f"loss_curve{suffix}.png")


def run_command(
    train_fn: Any, defaults: dict, *, doc: str, out: Path, suffix: str, argv: "list[str] | None" = None
) -> None:
    """A trainer's command line: every `defaults` key is a flag (`--steps 3000`); `--out` picks the model folder,
    `--record-suffix` the records' names (`train_config<suffix>.json`, `loss_curve<suffix>.csv`)."""
    parser = argparse.ArgumentParser(description=doc)
    for key, value in defaults.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--out", default=str(out))
    parser.add_argument("--record-suffix", default=suffix, help="write train_config<suffix>.json etc.")
    args = vars(parser.parse_args(argv))
    out_dir = Path(args.pop("out"))
    record_suffix = args.pop("record_suffix")
    cfg = {k: args[k] for k in defaults}
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    result = train_fn(cfg, out_dir, log=lambda m: print(m, flush=True))
    write_records(result, suffix=record_suffix)
    print(json.dumps(result["summary"], indent=1), flush=True)


def main(argv: list[str] | None = None) -> None:
    """`python -m evalrx.demo.train [--steps 3000 ...]`."""
    run_command(train, DEFAULTS, doc=__doc__, out=MODEL_DIR, suffix="", argv=argv)


if __name__ == "__main__":
    main()
