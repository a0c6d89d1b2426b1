"""Which tool-call style a loaded model speaks, read from its chat template and special tokens.

Used by `evalrx.wrap`, where no spec says it. The signals, strongest first:

* `[TOOL_CALLS]` as a special token or in the template: Mistral (v0.3 and later).
* a pythonic call format in the template (`[func_name1(params_name1=...`, "python list",
  `<|python_start|>`): Llama 3.2 / 4 pythonic.
* `<|python_tag|>` or the `ipython` role: Llama 3.1 / 3.2 JSON.
* `<tool_call>` next to `<think>` in the template: Qwen3 (Hermes after reasoning).
* otherwise Hermes (`<tool_call>` JSON, Qwen2.5 and models prompted the same way).

The model config only backs up a Mistral `[INST]` template without tool tokens.
"""

from __future__ import annotations

import re
from typing import Any

_PYTHONIC = re.compile(r"\[\s*func_name1\s*\(|python list|<\|python_start\|>")
_MISTRAL_TYPES = frozenset({"mistral", "mixtral", "mistral3", "ministral"})


def _template_text(owner: Any) -> str:
    template = getattr(owner, "chat_template", None)
    if isinstance(template, dict):  # named templates ("default", "tool_use", ...)
        return "\n".join(str(t) for t in template.values())
    return str(template or "")


def _special_tokens(tokenizer: Any) -> set:
    tokens = {getattr(t, "content", str(t)) for t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values()}
    tokens.update(str(t) for t in getattr(tokenizer, "all_special_tokens", None) or ())
    return tokens


def detect_style(tokenizer: Any, config: Any = None, processor: Any = None) -> str:
    """The tool-call style (a `CODECS` name) of the model behind `tokenizer`.

    Args:
        tokenizer: the model's tokenizer (its chat template and special tokens are read).
        config: the model config (`model_type` backs up a Mistral template).
        processor: a multimodal processor whose chat template is used too.

    Returns:
        "mistral", "pythonic", "llama3", "qwen3" or "hermes".
    """
    template = _template_text(processor) + "\n" + _template_text(tokenizer)
    specials = _special_tokens(tokenizer)
    if "[TOOL_CALLS]" in specials or "[TOOL_CALLS]" in template:
        return "mistral"
    if _PYTHONIC.search(template):
        return "pythonic"
    if "<|python_tag|>" in template or "ipython" in template or "<|python_tag|>" in specials:
        return "llama3"
    if "<tool_call>" in template and "<think>" in template:
        return "qwen3"
    model_type = str(getattr(config, "model_type", "") or "").lower()
    if model_type in _MISTRAL_TYPES and "[INST]" in template:
        return "mistral"
    return "hermes"
