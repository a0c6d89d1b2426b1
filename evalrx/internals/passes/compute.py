"""Reach a local model and run teacher-forced passes over it (the lens applied to them is `lens`).

Torch is imported inside the functions, so importing this module (and `evalrx.analyzers`) never imports torch.

transformers 5 facts this relies on (checked on Qwen2, Llama, Gemma, Gemma2, Phi-3,
Mistral and GPT-2): `hidden_states[0]` is the embedding output, `hidden_states[i]`
the output of decoder layer i-1, and `hidden_states[-1]` is already after the
final norm, so the last layer's lens is the model's own logits and is never normed
again. `logits_to_keep` accepts a tensor of positions, so a pass computes the
vocabulary projection only where it is analysed.

Attention rows: on a Llama-shaped model (`HFLocalModel.attention_rows_rebuildable`) `teacher_forced`
runs the model's own kernel with a KV cache and rebuilds the head-averaged rows at the
requested query positions from the residual streams and cached keys
(`evalrx.internals.rebuilt_attention_rows`), so no `[heads, T, T]` map is ever made. Other
models are switched to eager attention for that pass, and back afterwards, and each
layer's weights are reduced to those rows inside a hook, so the maps of all layers are
never held at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from evalrx.core.model import Model, model_id
from evalrx.internals import (
    attention_modules,
    cached_keys,
    discover,
    rebuilt_attention_rows,
    teacher_forced_forward,
    using_attention_implementation,
)

__all__ = ["LocalModel", "all_layer_rows", "forward", "local_model", "teacher_forced"]


@dataclass
class LocalModel:
    """The pieces of a local handle an analyzer uses."""

    handle: Any
    hf: Any
    tokenizer: Any
    _parts: Any = None

    @property
    def parts(self) -> Any:
        """Decoder layers, final norm and unembedding, discovered once from the live model."""
        if self._parts is None:
            parts = getattr(self.handle, "parts", None)  # hf_local caches its discovery
            if parts is None or not hasattr(parts, "lens_logits"):
                parts = discover(self.hf)
            self._parts = parts
        return self._parts

    @property
    def renderer(self) -> Any:
        """What renders the chat template: the handle (its `render` is what `chat` used) or the tokenizer."""
        return self.handle if callable(getattr(self.handle, "render", None)) else self.tokenizer

    @property
    def device(self) -> Any:
        try:
            return next(self.hf.parameters()).device
        except StopIteration:  # pragma: no cover - a model without parameters
            import torch

            return torch.device("cpu")

    @property
    def text_tokenizer(self) -> Any:
        return getattr(self.tokenizer, "tokenizer", self.tokenizer)


def local_model(handle: Model, analyzer: str) -> LocalModel:
    """The transformers model and tokenizer behind a local handle.

    Raises:
        TypeError: the handle exposes no `.model` and `.tokenizer` (not a local backend).
    """
    hf = getattr(handle, "model", None)
    tok = getattr(handle, "tokenizer", None) or getattr(handle, "processor", None)
    if hf is None or tok is None or not callable(hf):
        raise TypeError(
            f"{analyzer} needs a local model handle with `.model` and `.tokenizer` "
            f"(evalrx.load(..., backend='hf_local') or evalrx.wrap(model, tokenizer)); got {model_id(handle)}."
        )
    return LocalModel(handle, hf, tok)


def forward(
    local: LocalModel,
    ids: Sequence[int],
    keep: Optional[Sequence[int]] = None,
    *,
    hidden: bool = True,
    inputs: Optional[dict] = None,
) -> "tuple[Any, Any]":
    """One teacher-forced pass over `ids`: `teacher_forced_forward`, the pass `HFLocalModel.forward` runs.

    Args:
        local: the model.
        ids: token ids of the whole sequence.
        keep: positions whose logits are needed (all when None); passed as
            `logits_to_keep` when the model takes it, so the vocabulary projection
            runs only there.
        hidden: also return every layer's hidden states.
        inputs: further model inputs (a VLM pass's pixel values, `TrajectoryPlan.inputs`).

    Returns:
        `(logits, hidden_states)`: logits `[len(keep) or T, V]` in the model's dtype,
        hidden states a tuple of `[1, T, D]` tensors (None when `hidden` is False).
    """
    import torch

    input_ids = torch.tensor([list(ids)], dtype=torch.long, device=local.device)
    with torch.inference_mode():  # the analyzers only read the pass: no autograd bookkeeping at all
        out = teacher_forced_forward(
            local.hf, input_ids, keep=keep, output_hidden_states=hidden, parts=local.parts, inputs=inputs
        )
    return out.logits[0], out.hidden_states


def teacher_forced(
    local: LocalModel,
    ids: Sequence[int],
    keep: Optional[Sequence[int]] = None,
    *,
    hidden: bool = True,
    attention: Optional[Sequence[int]] = None,
    inputs: Optional[dict] = None,
) -> "tuple[Any, Any, Any]":
    """One teacher-forced pass, with every layer's attention rows at `attention` when asked.

    Args:
        local: the model.
        ids: token ids of the whole sequence.
        keep: positions whose logits are needed (see `forward`).
        hidden: also return every layer's hidden states.
        attention: query positions whose attention rows are wanted: rebuilt from the pass's
            KV cache where the model allows it, else the pass runs with eager attention
            (switched back afterwards).
        inputs: further model inputs (a VLM pass's pixel values).

    Returns:
        `(logits, hidden_states, attention_rows)`: as `forward`, plus `[L, P, T]` fp32
        rows averaged over heads (None without `attention`).
    """
    if not attention:
        logits, states = forward(local, ids, keep, hidden=hidden, inputs=inputs)
        return logits, states, None
    import torch

    if not inputs and getattr(local.handle, "attention_rows_rebuildable", False) is True:
        rebuilt = _rebuilt_rows_pass(local, ids, keep, attention)
        if rebuilt is not None:
            logits, states, rows = rebuilt
            return logits, states if hidden else None, rows

    mods = attention_modules(local.parts.layers)
    pos = torch.tensor(list(attention), dtype=torch.long, device=local.device)
    rows = [None] * len(mods)

    def hook(layer: int):
        def fn(module: Any, args: Any, output: Any) -> None:
            weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if weights is not None:
                rows[layer] = weights[0].index_select(1, pos.to(weights.device)).float().mean(0)  # [P, T]

        return fn

    handles = [m.register_forward_hook(hook(i)) for i, m in enumerate(mods)]
    try:
        with using_attention_implementation(local.hf, "eager"):
            logits, states = forward(local, ids, keep, hidden=hidden, inputs=inputs)
    finally:
        for h in handles:
            h.remove()
    missing = sum(r is None for r in rows)
    if missing:
        raise RuntimeError(
            f"attention weights were not returned by {missing} of {len(mods)} layers even with eager attention"
        )
    return logits, states, torch.stack([r.to(local.device) for r in rows])


def _rebuilt_rows_pass(local: LocalModel, ids: Sequence[int], keep: Optional[Sequence[int]], attention: Sequence[int]):
    """`teacher_forced` on the model's own attention kernel, the rows rebuilt at `attention` from the pass's
    residual streams and KV cache (`rebuilt_attention_rows`): no eager `[heads, T, T]` maps.
    None when the cache does not hold every position."""
    import torch

    input_ids = torch.tensor([list(ids)], dtype=torch.long, device=local.device)
    with torch.inference_mode():
        out = teacher_forced_forward(local.hf, input_ids, keep=keep, parts=local.parts, cache=True)
        keys = cached_keys(out.cache, len(ids))
        if keys is None or out.hidden_states is None:
            return None
        pos = torch.tensor(list(attention), dtype=torch.long, device=local.device)
        states = all_layer_rows(out.hidden_states, pos)[:-1]  # the residual stream entering each layer
        rows = rebuilt_attention_rows(local.hf, local.parts.layers, states, keys, pos)
    return out.logits[0], out.hidden_states, rows


def all_layer_rows(hidden_states: Any, positions: Any) -> Any:
    """`[L + 1, len(positions), D]`: every hidden state at `positions`, from a forward's `[1, T, D]` tensors
    or a pass's `CapturedStates`."""
    import torch

    rows = getattr(hidden_states, "all_rows", None)
    if callable(rows):
        return rows(positions)
    return torch.stack([h[0].index_select(0, positions) for h in hidden_states])
