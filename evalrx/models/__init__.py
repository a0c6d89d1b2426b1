"""Model construction: one engine, `compose(spec, backend)`.

`evalrx.specs` says which models exist; `models.backends` provides the runtimes.
`load` (by key) and `load_model` (by `ModelConfig`) both build through `compose`,
so the capability set always reflects the chosen backend. Nothing here imports
torch, transformers or openai at import time.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable

from evalrx.config import ModelConfig
from evalrx.core.capability import Capability
from evalrx.core.model import Model, WhiteBoxModel
from evalrx.core.tool import ChatTurn, Tool, ToolCall
from evalrx.models.agent import Agent, ToolExecutor, case_system, run_batch
from evalrx.models.backends import BACKENDS, RuntimeConfig, backends_for

# The API call budget a run config may set (the New run page checks it before queueing).
from evalrx.models.backends.api_http import MAX_RETRIES, MAX_TIMEOUT_S, check_call_budget
from evalrx.models.checkpoints import LOAD_HOW, CheckpointNotFoundError, checkpoint_error
from evalrx.models.compose import compose, negotiate
from evalrx.models.runtime_tuning import batch_threads
from evalrx.models.toolcodec import OpenAIToolCodec, QwenToolCodec, ToolCallCodec, codec_for

__all__ = [
    "MAX_RETRIES",
    "MAX_TIMEOUT_S",
    "backends_for",
    "batch_threads",
    "case_system",
    "check_call_budget",
    "Agent",
    "BACKENDS",
    "ChatTurn",
    "Model",
    "OpenAIToolCodec",
    "QwenToolCodec",
    "RuntimeConfig",
    "Tool",
    "ToolCall",
    "ToolCallCodec",
    "ToolExecutor",
    "codec_for",
    "compose",
    "load",
    "load_model",
    "resolve_spec_key",
    "run_batch",
    "weights_problem",
    "wrap",
    "CheckpointNotFoundError",
]

# Legacy names and short forms -> canonical spec keys.
_SPEC_ALIASES: dict[str, str] = {
    "qwen": "qwen2.5-7b-instruct",
    "qwen2.5-7b": "qwen2.5-7b-instruct",
    "tiny": "evalrx-tiny",
    "demo": "evalrx-tiny",
}


def resolve_spec_key(name: str) -> str:
    """Resolve a spec key or alias to a canonical key; the error lists what is known."""
    from evalrx.specs import REGISTRY

    key = name.strip().lower()
    if key in REGISTRY:
        return key
    if key in _SPEC_ALIASES:
        return _SPEC_ALIASES[key]
    raise ValueError(
        f"Unknown model {name!r}. Known specs: {', '.join(sorted(REGISTRY))}; "
        f"aliases: {', '.join(sorted(_SPEC_ALIASES))}. "
        "Register your own with evalrx.specs.register_spec(ModelSpec(...))."
    )


def _caps(want: Iterable) -> set[Capability]:
    return {Capability.parse(w) for w in want}


def load(
    key: str,
    *,
    backend: str = "hf_local",
    want: "Iterable[str | Capability]" = (),
    checkpoint: "str | None" = None,
    **runtime: Any,
) -> Model:
    """Build a model by spec key: `evalrx.load("qwen2.5-7b-instruct")`.

    Args:
        key: spec key or alias (see `resolve_spec_key`).
        backend: "hf_local" (internals), "api" or "vllm_offline"; forced to "api"
            for API-only specs.
        want: capabilities the backend must provide, checked before any weight or
            network access.
        checkpoint: a local directory, a GGUF file (converted once into a cached safetensors
            directory) or a hub id, overriding the spec's weights (`hf_repo` / `weights_package`).
        **runtime: forwarded to `RuntimeConfig` (device, dtype, base_url, ...).
    """
    from evalrx.specs import get_spec

    spec = get_spec(resolve_spec_key(key))
    if checkpoint:
        spec = replace(spec, hf_repo=str(checkpoint), weights_package=None)
    chosen = "api" if spec.api_only else backend
    return compose(spec, chosen, RuntimeConfig(**runtime), _caps(want))


def weights_problem(
    key: str, *, backend: str = "hf_local", checkpoint: "str | None" = None, how: str = LOAD_HOW
) -> "str | None":
    """Why `load(key, backend=backend, checkpoint=checkpoint)` would not find the weights on this machine, in one
    line whose fix gives a local directory `how` the caller takes one (a form's field, a flag); None when it
    would, and for the api backend. Asked before a run is queued: nothing is converted or downloaded.

    Raises:
        ValueError: an unknown spec.
    """
    from evalrx.specs import WeightsNotInstalledError, get_spec, resolve_weights

    spec = get_spec(resolve_spec_key(key))
    if spec.api_only or backend == "api":
        return None
    if checkpoint:
        repo: "str | None" = str(checkpoint)
    else:
        try:
            repo = resolve_weights(spec)
        except WeightsNotInstalledError as exc:
            return f"{exc} Or give a local directory holding the weights ({how})."
    error = checkpoint_error(repo)
    return None if error is None else str(error.with_fix(how))


def load_model(cfg: ModelConfig, **runtime: Any) -> Model:
    """Build a model from a `ModelConfig` through `load`; `runtime` adds `RuntimeConfig` settings."""
    placed = {k: v for k, v in (("device", cfg.device), ("dtype", cfg.dtype)) if v is not None}
    return load(cfg.name, backend=cfg.backend, want=cfg.want, checkpoint=cfg.checkpoint, **{**placed, **runtime})


def wrap(
    model: Any,
    tokenizer: Any = None,
    *,
    want: "Iterable[str | Capability]" = (),
    tool_call_style: "str | None" = None,
    **runtime: Any,
) -> WhiteBoxModel:
    """Wrap an already-loaded transformers causal LM and its tokenizer into an evalrx handle.

    The result is the same `HFLocalModel` that `load(...)` gives, so every analyzer
    works on it. Capabilities are read from the live model; wanting ATTENTION
    switches the model to eager attention when it can.

    Args:
        model: the transformers model.
        tokenizer: its tokenizer or processor (found next to the weights when None).
        want: capabilities the handle must provide.
        tool_call_style: the codec style (`evalrx.models.toolcodec.CODECS`); detected from
            the chat template and special tokens when None (see `codecs._detect`).
        **runtime: `RuntimeConfig` settings (max_new_tokens, temperature, ...).

    Raises:
        ValueError: `tool_call_style` names a style without a codec.
    """
    from evalrx.models.backends.hf_local import HFLocalModel
    from evalrx.models.codecs._detect import detect_style
    from evalrx.models.toolcodec import CODECS
    from evalrx.specs import style_key

    if tool_call_style is not None and style_key(tool_call_style) not in CODECS:
        raise ValueError(
            f"No tool-call codec for style {tool_call_style!r}. Known styles: {', '.join(sorted(CODECS))}. "
            "Register one with evalrx.models.toolcodec.register_codec."
        )
    caps = _caps(want)
    handle = HFLocalModel.from_loaded(model, tokenizer, runtime=RuntimeConfig(**runtime), want=caps)
    if tool_call_style is not None:
        style = style_key(tool_call_style)
    else:
        style = detect_style(handle.tokenizer, getattr(model, "config", None), handle.processor)
    handle.spec = replace(handle.spec, tool_call_style=style)
    return negotiate(handle, caps, model_id=handle.spec.key, where="wrap")
