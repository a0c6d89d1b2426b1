"""Tiny random models and a real tokenizer for tests (no hub access, a few KB of weights each).

Import from any test as ``from tiny_models import ...`` (``tests/conftest.py`` puts
``tests/`` on ``sys.path``).

* ``tiny_tokenizer()``: a byte-level BPE (vocab ~500) built once per process with
  ``evalrx.demo.tokenizer.build_tokenizer``; it carries the Qwen2.5-style chat template.
* ``make_tiny_model(arch, vocab_size, **overrides)``: a seeded, random-init,
  eval-mode ``AutoModelForCausalLM`` for one of ``ARCHS``.
* ``save_tiny_checkpoint(path, arch="qwen2")``: model + tokenizer saved as a
  safetensors checkpoint directory, loadable with ``from_pretrained(path)``.
* ``make_tiny_vlm()`` / ``save_tiny_vlm_checkpoint(path)``: a tiny LLaVA (CLIP vision
  tower + Qwen2 language tower) and its processor (28x28 images, 4 image tokens).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

ARCHS = ("qwen2", "llama", "mistral", "gemma", "gemma2", "phi3", "gpt2")

TOKENIZER_VOCAB = 500
SEED = 1234

# Chat, tool-call and tool-response text, so common markup merges into few tokens.
_CORPUS = [
    "You are a helpful assistant.",
    "What is 3*4? Use the calculator tool.",
    'To call a tool, reply with <tool_call>\n{"name": <name>, "arguments": <args>}\n</tool_call>',
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>',
    '<tool_call>\n{"name": "search", "arguments": {"query": "weather in Paris"}}\n</tool_call>',
    "<tool_response>\n12\n</tool_response>",
    "<tool_response>\nSunny, 21 degrees.\n</tool_response>",
    "The answer is 12.",
    "The weather in Paris is sunny.",
    '{"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic '
    'expression.", "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, '
    '"required": ["expression"]}}}',
    "Hello! How can I help you today?",
    "I could not find that file. Please check the path and try again.",
    "system user assistant tool",
]


@functools.lru_cache(maxsize=1)
def tiny_tokenizer() -> Any:
    """Return the shared tiny tokenizer (built once; do not mutate it)."""
    from evalrx.demo.tokenizer import build_tokenizer

    return build_tokenizer(_CORPUS * 4, vocab_size=TOKENIZER_VOCAB)


def _config_kwargs(arch: str, vocab_size: int) -> dict:
    common = dict(vocab_size=vocab_size, max_position_embeddings=256)
    if arch == "gpt2":
        return dict(common, n_embd=32, n_layer=2, n_head=2, n_positions=256)
    base = dict(
        common,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    if arch == "gemma2":
        # Softcapping and sliding windows stay on: discovery must cope with the real config.
        base.update(query_pre_attn_scalar=16, sliding_window=64)
    if arch == "phi3":
        base.pop("head_dim")
        base.update(num_key_value_heads=2)
    if arch == "mistral":
        base.update(sliding_window=None)
    return base


def make_tiny_model(arch: str = "qwen2", vocab_size: int | None = None, **overrides: Any) -> Any:
    """Build a seeded random-init causal LM of `arch` in eval mode.

    Args:
        arch: one of `ARCHS`.
        vocab_size: embedding rows; defaults to the tiny tokenizer's length.
        **overrides: config fields to change (e.g. `num_hidden_layers=3`,
            `attn_implementation="eager"`).

    Returns:
        An `AutoModelForCausalLM` in float32 on CPU.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if arch not in ARCHS:
        raise ValueError(f"unknown tiny arch {arch!r}; choose from {ARCHS}")
    if vocab_size is None:
        vocab_size = len(tiny_tokenizer())
    kwargs = _config_kwargs(arch, vocab_size)
    tok = tiny_tokenizer()
    if vocab_size >= len(tok):
        # Generation needs the real eos/pad ids of the tokenizer the model is paired with.
        kwargs.update(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    else:
        kwargs.update(eos_token_id=vocab_size - 1, pad_token_id=0, bos_token_id=None)
    attn = overrides.pop("attn_implementation", None)
    kwargs.update(overrides)
    config = AutoConfig.for_model(arch, **kwargs)
    torch.manual_seed(SEED)
    extra = {"attn_implementation": attn} if attn else {}
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, **extra)
    return model.eval()


def save_tiny_checkpoint(path: "str | Path", arch: str = "qwen2", **overrides: Any) -> Path:
    """Save a tiny model of `arch` and the tiny tokenizer to `path` (safetensors) and return it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model = make_tiny_model(arch, **overrides)
    model.generation_config.eos_token_id = tiny_tokenizer().eos_token_id
    model.generation_config.pad_token_id = tiny_tokenizer().pad_token_id
    model.save_pretrained(path, safe_serialization=True)
    tiny_tokenizer().save_pretrained(path)
    return path


VLM_IMAGE_SIZE = 28  # two 14-pixel patches a side: 4 image tokens per image


def make_tiny_vlm() -> tuple[Any, Any]:
    """Build a seeded tiny LLaVA and its `LlavaProcessor` (slow CLIP image processor: no torchvision needed).

    Returns:
        `(model, processor)`; the processor's tokenizer is a copy of `tiny_tokenizer()`
        whose chat template renders an image block as `<|image_pad|>`.
    """
    import copy

    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, LlavaProcessor

    try:  # the PIL backend by name: the default one wants torchvision
        from transformers import CLIPImageProcessorPil as CLIPImageProcessor
    except ImportError:  # older transformers
        from transformers import CLIPImageProcessor

    tok = copy.deepcopy(tiny_tokenizer())
    image_id = tok.convert_tokens_to_ids("<|image_pad|>")
    ids = dict(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    config = AutoConfig.for_model(
        "llava",
        text_config=dict(
            model_type="qwen2", vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256, bos_token_id=None, **ids,
        ),
        vision_config=dict(
            model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=2, image_size=VLM_IMAGE_SIZE, patch_size=14, projection_dim=32,
        ),
        image_token_id=image_id,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        **ids,
    )
    torch.manual_seed(SEED)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32).eval()
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": VLM_IMAGE_SIZE}, crop_size={"height": VLM_IMAGE_SIZE, "width": VLM_IMAGE_SIZE}
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        chat_template=tok.chat_template,
        patch_size=14,
        vision_feature_select_strategy="default",
        image_token="<|image_pad|>",
        num_additional_image_tokens=1,  # CLIP's CLS token, dropped by the "default" strategy
    )
    return model, processor


def save_tiny_vlm_checkpoint(path: "str | Path") -> Path:
    """Save `make_tiny_vlm()`'s model and processor to `path` and return it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model, processor = make_tiny_vlm()
    model.save_pretrained(path, safe_serialization=True)
    processor.save_pretrained(path)
    return path
