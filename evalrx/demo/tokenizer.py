"""The demo tokenizer: byte-level BPE trained by the project, with Qwen2.5-style special tokens.

Also used by the tests to give tiny random models a real tokenizer and chat template.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

CHAT_TEMPLATE_PATH = Path(__file__).with_name("chat_template.jinja")

# Control tokens never appear in generated text; tool markup tokens do (as in Qwen2.5).
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|image_pad|>"]
MARKUP_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


def chat_template() -> str:
    return CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")


def build_tokenizer(texts: Iterable[str], vocab_size: int = 2048, digits: str = "individual") -> Any:
    """Train a byte-level BPE on `texts` and return a `PreTrainedTokenizerFast` with the chat template.

    Args:
        texts: the training corpus.
        vocab_size: BPE vocabulary size (before the added markup tokens).
        digits: "individual" (one token per digit) or "runs" (each run of digits is pre-tokenized
            on its own, with no leading space, so a number gets the same tokens wherever it appears).
    """
    if digits not in ("individual", "runs"):
        raise ValueError(f"digits must be 'individual' or 'runs', got {digits!r}")
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Digits are split from their surroundings, so " 1423" and "(1423" tokenize the same way.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=digits == "individual"),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    # Markup stays visible in decoded text (skip_special_tokens keeps it), as in Qwen2.5.
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|image_pad|>"]})
    fast.chat_template = chat_template()
    return fast
