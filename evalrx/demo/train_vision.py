"""Train the bundled demo VLM (`evalrx-tiny-vl`): `python -m evalrx.demo.train_vision`.

A LLaVA: a small CLIP vision tower and a two-layer projector in front of the demo's trained
language model (`evalrx.demo.train`), whose weights it starts from, as LLaVA starts from a
trained language model. It learns, from the episodes of `evalrx.demo.vision_data` built through
the agent's own `ConversationBuilder` (so training sees exactly the messages a run sends), to read
the numbers and names in the pictures of `evalrx.demo.vision_world`, to call `calculator` on the
numbers, `lookup` on a name, and to zoom into a small label with `image_zoom`; a share of the
episodes are the text demo's own, with no picture, so the language model keeps its skills. The loss
covers assistant tokens only; every weight trains. Episodes are drawn as training goes (seeded), so a
retrain gives the same weights on the same machine and thread count.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, cast

from evalrx.demo.data import DEMO_DIR
from evalrx.demo.train import (
    _lr_at,
    encode_episode,
    make_optimizer,
    optimizer_step,
    prefix_cached_loss,
    run_command,
    save_trained,
    shared_prefix,
    track_loss,
)
from evalrx.demo.vision_data import VISION_TOOLS, VisionEpisode, held_out_keys, training_episodes

TEXT_MODEL_DIR = DEMO_DIR / "model"
VISION_MODEL_DIR = DEMO_DIR / "vision_model"

DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "image_size": 96,  # the processor's size: the 192-pixel pictures are seen at half size
    "patch_size": 12,  # 8 x 8 = 64 image tokens a picture
    "vision_hidden": 128,
    "vision_intermediate": 384,
    "vision_layers": 3,
    "vision_heads": 4,
    "batch_size": 24,
    "steps": 2000,
    "lr": 1e-3,
    "min_lr_ratio": 0.05,
    "warmup_steps": 100,
    "weight_decay": 0.05,
    "grad_clip": 1.0,
    "threads": 1,  # one core each: a retrain check runs beside the training it checks
    "max_minutes": 60.0,
    "cell_weight": 1.0,  # the vision tower's own reading loss (see `cell_targets`)
    "max_positions": 1024,
}


def build_processor(tokenizer: Any, cfg: dict) -> Any:
    """The LLaVA processor: a CLIP image processor (Pillow, no torchvision) and the demo tokenizer."""
    from transformers import LlavaProcessor

    processor_class: Any
    try:  # the PIL backend by name: the default one wants torchvision
        from transformers import CLIPImageProcessorPil as processor_class
    except ImportError:  # older transformers
        from transformers import CLIPImageProcessor as processor_class

    size = int(cfg["image_size"])
    image_processor = processor_class(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
        patch_size=int(cfg["patch_size"]),
        vision_feature_select_strategy="default",
        image_token="<|image_pad|>",
        num_additional_image_tokens=1,  # CLIP's CLS token, dropped by the "default" strategy
    )


def build_model(cfg: dict, text_dir: Path = TEXT_MODEL_DIR) -> tuple[Any, Any]:
    """A LLaVA whose language model is the trained text demo's (weights copied) and whose vision
    tower and projector are new (seeded); returns `(model, tokenizer)`."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, LlavaConfig, LlavaForConditionalGeneration, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(text_dir))
    text = Qwen2ForCausalLM.from_pretrained(str(text_dir), dtype=torch.float32)
    ids = dict(eos_token_id=text.config.eos_token_id, pad_token_id=text.config.pad_token_id)
    config = AutoConfig.for_model(
        "llava",
        # More positions than the text demo's 768: the three tools' schemas and two pictures need ~800.
        text_config={**text.config.to_dict(), "max_position_embeddings": int(cfg["max_positions"])},
        vision_config=dict(
            model_type="clip_vision_model",
            hidden_size=int(cfg["vision_hidden"]),
            intermediate_size=int(cfg["vision_intermediate"]),
            num_hidden_layers=int(cfg["vision_layers"]),
            num_attention_heads=int(cfg["vision_heads"]),
            image_size=int(cfg["image_size"]),
            patch_size=int(cfg["patch_size"]),
            projection_dim=int(cfg["vision_hidden"]),
        ),
        image_token_id=tokenizer.convert_tokens_to_ids("<|image_pad|>"),
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        tie_word_embeddings=True,
        **ids,
    )
    torch.manual_seed(int(cfg["seed"]))
    model = LlavaForConditionalGeneration(cast(LlavaConfig, config))  # for_model("llava") builds a LlavaConfig
    missing = model.model.language_model.load_state_dict(text.model.state_dict())
    if missing.missing_keys or missing.unexpected_keys:
        raise RuntimeError(f"the text demo's weights do not fit: {missing}")
    model.tie_weights()
    return model, tokenizer


def episode_messages(ep: VisionEpisode, codec: Any) -> tuple[list[dict], list]:
    """The messages a run of `ep` sends (built by the agent's `ConversationBuilder`) and its pictures in order
    (none for a text episode)."""
    from evalrx.core.tool import ChatTurn, ToolCall
    from evalrx.demo.episodes import call_text, run_tool
    from evalrx.models.conversation import ConversationBuilder
    from evalrx.tools.image_zoom import zoom

    conv = ConversationBuilder(codec)
    conv.prompt(ep.prompt, ep.image)
    images = [] if ep.image is None else [ep.image]
    for i, (name, args) in enumerate(ep.calls):
        call = ToolCall(name, dict(args), id=f"call_{i}")
        conv.assistant(ChatTurn(text=call_text(name, args)), [call])
        if name == "image_zoom":
            result = zoom(ep.image, **args)
            conv.tool(call, result.text, result.images)
            images.extend(result.images)
        else:
            conv.tool(call, run_tool(name, args, ep.kb))
    conv.assistant(ChatTurn(text=ep.answer), [])
    return conv.messages, images


NOTHING = 10  # the class of a patch with no character
N_CELL_CLASSES = 11 + 26  # digits 0-9, nothing, letters a-z (either case)


def cell_class(ch: str) -> int:
    """The class the tower's reading head names for a character: its digit, or 11 + its letter."""
    return int(ch) if ch.isdigit() else 11 + ord(ch.lower()) - ord("a")


def cell_targets(ep: VisionEpisode, n_pictures: int, side: int) -> list:
    """For each picture of `ep`, what each of its `side` x `side` patches shows: a character's class
    (`cell_class`), `NOTHING`, or -100 where training does not say (a small label's cells).

    The pictures put one character (a digit, or a name's letter) a patch column (`vision_world.CELL`),
    and the renderer records where (`info["cells"]`; a zoomed label's in `info["zoom_cells"]`). Naming
    the character under each patch trains the tower to read in minutes; the language model alone
    learns it far more slowly, having to find the characters among 64 tokens first. The head that
    names them is dropped after training.
    """
    if not n_pictures:
        return []
    info = ep.image.info
    cells = info.get("cells", {}).items()
    first = {**{c: -100 for c in info.get("unreadable", ())}, **{c: cell_class(d) for c, d in cells}}
    grids = [first]
    if n_pictures > 1:
        grids.append({c: cell_class(d) for c, d in info.get("zoom_cells", {}).items()})
    out = []
    for grid in grids[:n_pictures]:
        out.append([grid.get((col, row), NOTHING) for row in range(side) for col in range(side)])
    return out


def encode_vision_episode(processor: Any, ep: VisionEpisode, codec: Any, tools: list[dict], n_image: int) -> tuple:
    """(input ids with each picture's tokens in place, assistant-token mask, pixel values, patch targets)."""
    messages, images = episode_messages(ep, codec)
    ids, mask = encode_episode(processor.tokenizer, messages, tools)
    image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    out_ids: list[int] = []
    out_mask: list[int] = []
    for t, m in zip(ids, mask):
        if t == image_id:
            out_ids.extend([image_id] * n_image)
            out_mask.extend([0] * n_image)
        else:
            out_ids.append(t)
            out_mask.append(m)
    if ids.count(image_id) != len(images):
        raise RuntimeError(f"{ids.count(image_id)} image blocks for {len(images)} pictures")
    pixels = processor.image_processor(images, return_tensors="pt")["pixel_values"] if images else None
    side = int(round(n_image**0.5))
    return out_ids, out_mask, pixels, cell_targets(ep, len(images), side)


def _collate(batch: list, pad: int) -> tuple:
    import torch

    width = max(len(ids) for ids, *_ in batch)
    input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (ids, mask, *_) in enumerate(batch):
        n = len(ids)
        input_ids[i, :n] = torch.tensor(ids)
        attn[i, :n] = 1
        labels[i, :n] = torch.tensor([t if m else -100 for t, m in zip(ids, mask)])
    shown = [b[2] for b in batch if b[2] is not None]  # text episodes show no picture
    grids = [grid for b in batch for grid in b[3]]
    pixels = torch.cat(shown) if shown else None
    cells = torch.tensor(grids, dtype=torch.long) if grids else None
    return input_ids, attn, labels, pixels, cells


def train(cfg: dict, out_dir: Path = VISION_MODEL_DIR, log: Any = print) -> dict:
    """Build the VLM from the text demo, train it on streamed vision episodes, save it with its processor."""
    import torch

    from evalrx.models.toolcodec import CODECS
    from evalrx.tools import get_tools

    t_start = time.time()
    torch.set_num_threads(int(cfg["threads"]))
    random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    torch.use_deterministic_algorithms(True, warn_only=True)

    model, tokenizer = build_model(cfg)
    processor = build_processor(tokenizer, cfg)
    n_image = (int(cfg["image_size"]) // int(cfg["patch_size"])) ** 2
    codec = CODECS["hermes"]()
    tools = [t.to_openai() for t in get_tools(VISION_TOOLS)]
    exclude = held_out_keys()
    stream = training_episodes(10**9, seed=int(cfg["seed"]), exclude=exclude)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters; {n_image} tokens a picture; {len(exclude)} suite tasks held out")

    cell_head = torch.nn.Linear(int(cfg["vision_hidden"]), N_CELL_CLASSES)  # per patch; not saved
    named = list(model.named_parameters()) + [(f"cell_head.{n}", p) for n, p in cell_head.named_parameters()]
    opt = make_optimizer(named, cfg)
    pad = tokenizer.pad_token_id
    max_len = model.config.text_config.max_position_embeddings
    # Every episode starts with the same system turn: computed once a step (`prefix_cached_loss`).
    prefix_ids = shared_prefix(tokenizer, tools)
    n_prefix = len(prefix_ids)
    prefix_tensor = torch.tensor([prefix_ids])
    curve: list[dict] = []
    model.train()
    ema = None
    deadline = t_start + 60 * float(cfg["max_minutes"])
    steps_done, seen, longest = 0, 0, 0
    for step in range(int(cfg["steps"])):
        batch = [
            encode_vision_episode(processor, next(stream), codec, tools, n_image) for _ in range(cfg["batch_size"])
        ]
        seen += len(batch)
        longest = max(longest, *(len(b[0]) for b in batch))
        if longest > max_len:
            raise RuntimeError(f"an episode has {longest} tokens > {max_len} positions")
        if any(b[0][:n_prefix] != prefix_ids for b in batch):
            raise RuntimeError("an episode does not start with the shared system prefix")
        input_ids, attn, labels, pixels, cells = _collate(
            [(i[n_prefix:], m[n_prefix:], p, c) for i, m, p, c in batch], pad
        )
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg)
        lm_loss = prefix_cached_loss(model, prefix_tensor, input_ids, attn, labels, pixel_values=pixels)
        cell_loss = torch.zeros(())
        if pixels is not None:
            tower = model.model.vision_tower(pixel_values=pixels, output_hidden_states=True)
            cell_loss = torch.nn.functional.cross_entropy(
                cell_head(tower.hidden_states[-1][:, 1:]).reshape(-1, N_CELL_CLASSES),
                cells.reshape(-1),
                ignore_index=-100,
            )
        loss = lm_loss + float(cfg["cell_weight"]) * cell_loss
        optimizer_step(model, opt, loss, cfg)  # the cell head's gradient is not clipped, as before
        steps_done = step + 1
        value = float(lm_loss.detach())
        ema = track_loss(curve, step, value, ema, cfg, t_start)
        if step % 25 == 0 or step < 3:
            log(
                f"step {step:5d} loss {value:.4f} ema {ema:.4f} cells {float(cell_loss):.4f} "
                f"lr {_lr_at(step, cfg):.2e} {time.time() - t_start:.0f}s"
            )
        if time.time() > deadline:
            log(f"time budget of {cfg['max_minutes']} min reached at step {step}; stopping")
            break

    save_trained(model, processor, out_dir, model.config.text_config.eos_token_id, pad)
    summary = {
        "config": cfg,
        "parameters": n_params,
        "steps_done": steps_done,
        "episodes_seen": seen,
        "longest_episode_tokens": longest,
        "final_ema_loss": round(ema or float("nan"), 5),
        "train_seconds": round(time.time() - t_start, 1),
        "torch": torch.__version__,
    }
    return {"summary": summary, "curve": curve}


def main(argv: list[str] | None = None) -> None:
    """`python -m evalrx.demo.train_vision [--steps 500 ...]`."""
    run_command(train, DEFAULTS, doc=__doc__, out=VISION_MODEL_DIR, suffix="_vision", argv=argv)


if __name__ == "__main__":
    main()
