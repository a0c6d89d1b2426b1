"""The model registry: the single source of truth for which models evalrx knows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional


@dataclass(frozen=True)
class ModelSpec:
    """What evalrx needs to know about a model before loading it.

    `hf_repo` is a hub id or a local directory (hf_local / vllm); `api_model` is the
    name sent to an OpenAI-compatible server (defaults to `hf_repo` or the key).
    `tool_call_style` picks the codec for local backends (`evalrx.models.toolcodec.CODECS`):
    "hermes" (Qwen2.5, `<tool_call>` JSON), "qwen3" (Hermes after a think block),
    "llama3" (Llama 3.1 / 3.2 JSON), "pythonic" (Llama 3.2 / 4 `[f(x=1)]`), "mistral"
    (`[TOOL_CALLS]`) or "openai" (native calls from an API server).
    """

    key: str
    family: str
    hf_repo: Optional[str] = None
    api_only: bool = False
    tool_call_style: str = "hermes"
    vision: bool = False
    context_length: int = 32768
    notes: str = ""
    api_model: Optional[str] = None
    tags: tuple = field(default_factory=tuple)

    @property
    def served_name(self) -> str:
        return self.api_model or self.hf_repo or self.key


REGISTRY: dict[str, ModelSpec] = {}

DEFAULT_TOOL_CALL_STYLE = "hermes"

# Which tool-call styles have a codec. The codec registry (`evalrx.models.toolcodec`, a floor
# above) binds its lookup when it is imported; specs registered before that are checked then.
_codec_styles: "Optional[Callable[[], Iterable[str]]]" = None


def style_key(style: Optional[str]) -> str:
    """The canonical form of a tool-call style name (the default when empty)."""
    return str(style or DEFAULT_TOOL_CALL_STYLE).strip().lower()


def _check_codec_style(spec: ModelSpec) -> None:
    if _codec_styles is None:
        return
    known = set(_codec_styles())
    if style_key(spec.tool_call_style) not in known:
        raise ValueError(
            f"Spec {spec.key!r} names tool_call_style {spec.tool_call_style!r}, which has no codec. "
            f"Known styles: {', '.join(sorted(known))}. Register a codec first with "
            "evalrx.models.toolcodec.register_codec(style, factory)."
        )


def bind_codec_styles(known_styles: "Callable[[], Iterable[str]]") -> None:
    """Check every spec's `tool_call_style` against `known_styles()` from now on, and now.

    Called by `evalrx.models.toolcodec` when it is imported.

    Raises:
        ValueError: an already-registered spec names a style without a codec.
    """
    global _codec_styles
    _codec_styles = known_styles
    for spec in REGISTRY.values():
        _check_codec_style(spec)


def register_spec(spec: ModelSpec, *, replace: bool = False) -> ModelSpec:
    """Add a spec to the registry (users may add their own models).

    Raises:
        ValueError: the key is taken and `replace` is False, or no codec reads the
            spec's `tool_call_style`.
    """
    key = spec.key.lower()
    if key in REGISTRY and not replace:
        raise ValueError(f"Spec {key!r} is already registered; pass replace=True to override it.")
    _check_codec_style(spec)
    if spec.key != key:
        from dataclasses import replace as _replace

        spec = _replace(spec, key=key)
    REGISTRY[key] = spec
    return spec


def get_spec(key: str) -> ModelSpec:
    """Return the spec for a canonical key; the error lists the known keys."""
    try:
        return REGISTRY[key.lower()]
    except KeyError:
        raise ValueError(f"Unknown model {key!r}. Known specs: {', '.join(sorted(REGISTRY))}.") from None


# The bundled demo model ships inside the package; its path is computed, not imported (no torch).
DEMO_MODEL_DIR = str(Path(__file__).resolve().parent / "demo" / "model")

_BUILTIN = [
    ModelSpec(
        "evalrx-tiny", "qwen2", DEMO_MODEL_DIR, tool_call_style="hermes", context_length=768,
        notes="bundled demo: tiny Qwen2 trained by `python -m evalrx.demo.train` to call calculator and lookup",
        tags=("demo", "local"),
    ),
    ModelSpec("qwen2.5-0.5b-instruct", "qwen2", "Qwen/Qwen2.5-0.5B-Instruct", notes="24 layers, tied embeddings"),
    ModelSpec("qwen2.5-1.5b-instruct", "qwen2", "Qwen/Qwen2.5-1.5B-Instruct", notes="28 layers"),
    ModelSpec("qwen2.5-3b-instruct", "qwen2", "Qwen/Qwen2.5-3B-Instruct", notes="36 layers"),
    ModelSpec("qwen2.5-7b-instruct", "qwen2", "Qwen/Qwen2.5-7B-Instruct", notes="28 layers, Hermes tool calls"),
    ModelSpec(
        "qwen2.5-vl-7b-instruct", "qwen2_5_vl", "Qwen/Qwen2.5-VL-7B-Instruct", vision=True,
        context_length=128000, notes="vision-language; image tokens in the prompt",
    ),
    ModelSpec(
        "llama-3.1-8b-instruct", "llama", "meta-llama/Llama-3.1-8B-Instruct", tool_call_style="llama3",
        context_length=131072, notes="tool calls as bare JSON with `parameters`",
    ),
    ModelSpec(
        "mistral-7b-instruct-v0.3", "mistral", "mistralai/Mistral-7B-Instruct-v0.3",
        tool_call_style="mistral", notes="[TOOL_CALLS] JSON list",
    ),
    ModelSpec(
        "gemma-2-9b-it", "gemma2", "google/gemma-2-9b-it", tool_call_style="hermes", context_length=8192,
        notes="final norm is (1 + weight); no native tool template, Hermes format in the prompt",
    ),
    ModelSpec(
        "phi-3-mini-4k-instruct", "phi3", "microsoft/Phi-3-mini-4k-instruct", tool_call_style="hermes",
        context_length=4096, notes="fused qkv and gate_up projections",
    ),
    ModelSpec("gpt-4o-mini", "openai", api_only=True, tool_call_style="openai", vision=True,
              context_length=128000, api_model="gpt-4o-mini", notes="API only"),
    ModelSpec("gpt-4.1", "openai", api_only=True, tool_call_style="openai", vision=True,
              context_length=1000000, api_model="gpt-4.1", notes="API only"),
]

for _spec in _BUILTIN:
    register_spec(_spec)
