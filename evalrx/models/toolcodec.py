"""Tool-call codecs: the one model-specific piece of the agent loop.

A codec turns `Tool`s into the schemas passed to `chat`, reads the calls out of a
`ChatTurn`, and writes the assistant and tool messages that go back into the
conversation, in the shape the family's chat template expects. Malformed calls are
data, not exceptions: `parse` returns them as short error strings next to the calls
it could read.

Styles (`ModelSpec.tool_call_style`) are looked up in `CODECS` (name -> factory); add
your own with `register_codec`. The spec registry checks against this one: a spec
naming a style without a codec is refused. The implementations live in
`evalrx.models.codecs`.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from evalrx import specs as _specs
from evalrx.models.codecs._base import ParsedTurn, ToolCallCodec, strip_think
from evalrx.models.codecs._hermes import Qwen3ToolCodec, QwenToolCodec
from evalrx.models.codecs._llama import Llama3ToolCodec
from evalrx.models.codecs._mistral import MistralToolCodec
from evalrx.models.codecs._openai import OpenAIToolCodec
from evalrx.models.codecs._pythonic import PythonicToolCodec

__all__ = [
    "CODECS",
    "Llama3ToolCodec",
    "MistralToolCodec",
    "OpenAIToolCodec",
    "ParsedTurn",
    "PythonicToolCodec",
    "Qwen3ToolCodec",
    "QwenToolCodec",
    "ToolCallCodec",
    "codec_for",
    "codec_style",
    "missing_codec",
    "register_codec",
    "strip_think",
]

CODECS: "dict[str, Callable[[], ToolCallCodec]]" = {
    "hermes": QwenToolCodec,
    "qwen": QwenToolCodec,
    "qwen3": Qwen3ToolCodec,
    "llama3": Llama3ToolCodec,
    "mistral": MistralToolCodec,
    "pythonic": PythonicToolCodec,
    "openai": OpenAIToolCodec,
}


def register_codec(style: str, factory: "Callable[[], ToolCallCodec]", *, replace: bool = False) -> None:
    """Register a codec factory under a `ModelSpec.tool_call_style` name.

    Args:
        style: the style name specs refer to.
        factory: a zero-argument callable (usually the class) returning a codec.
        replace: allow overriding an existing style.

    Raises:
        ValueError: the style is taken and `replace` is False.
    """
    key = _specs.style_key(style)
    if key in CODECS and not replace:
        raise ValueError(f"Codec style {key!r} is already registered; pass replace=True to override it.")
    CODECS[key] = factory


def codec_style(spec: Any, backend: Optional[str] = None) -> str:
    """The codec style a handle of `spec` on `backend` uses: native calls ("openai") on the
    `api` backend, the spec's `tool_call_style` elsewhere."""
    if backend == "api":
        return "openai"
    return _specs.style_key(getattr(spec, "tool_call_style", None))


def missing_codec(spec: Any, backend: Optional[str] = None) -> Optional[str]:
    """Why `spec` on `backend` cannot make tool calls (no codec for its style), or None."""
    style = codec_style(spec, backend)
    if style in CODECS:
        return None
    return (
        f"No tool-call codec for style {style!r} (spec {getattr(spec, 'key', '?')!r}). Known styles: "
        f"{', '.join(sorted(CODECS))}. Register one with evalrx.models.toolcodec.register_codec, "
        "or pass codec=... to Agent."
    )


def codec_for(handle: Any) -> ToolCallCodec:
    """Pick the codec for a model handle.

    API handles get native calls (`OpenAIToolCodec`); local backends follow
    `handle.spec.tool_call_style`.

    Args:
        handle: a model handle (`backend` and `spec` attributes).

    Returns:
        A fresh codec instance.

    Raises:
        ValueError: the spec's style has no registered codec.
    """
    spec = getattr(handle, "spec", None)
    backend = getattr(handle, "backend", None)
    problem = missing_codec(spec, backend)
    if problem is not None:
        raise ValueError(problem)
    return CODECS[codec_style(spec, backend)]()


# The spec registry sits on a lower floor and never imports this module: it is told here
# which styles have a codec, and checks the specs registered so far.
_specs.bind_codec_styles(lambda: CODECS)
