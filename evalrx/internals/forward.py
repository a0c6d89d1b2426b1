"""The teacher-forced forward pass of evalrx (`teacher_forced_forward`, `ForwardOutput`) and what it relies on.

`HFLocalModel.forward` and every analyzer run this one pass. torch is imported inside functions.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from evalrx.internals.discover import discover
from evalrx.internals.hidden_states import recording_hidden_states


@dataclass
class ForwardOutput:
    """One teacher-forced forward pass.

    Attributes:
        input_ids: ``[1, T]`` token ids that were run.
        logits: ``[1, T, V]`` model logits.
        hidden_states: ``L + 1`` tensors ``[1, T, H]``; ``[0]`` is the embedding output,
            ``[i]`` the output of layer ``i - 1``, ``[-1]`` already after the final norm.
            ``None`` when not requested.
        attentions: ``L`` tensors ``[1, heads, T, T]`` when requested, else ``None``.
        cache: the pass's KV cache when requested (what `rebuilt_attention_rows` reads), else ``None``.
    """

    input_ids: Any
    logits: Any
    hidden_states: Optional[tuple] = None
    attentions: Optional[tuple] = None
    cache: Any = None


def output_cache(out: Any) -> Any:
    """The KV cache a transformers forward or generate call returned (None when it kept none)."""
    return getattr(out, "cache", None) or getattr(out, "past_key_values", None)


def takes_argument(model: Any, name: str) -> bool:
    """Whether the model's `forward` has a parameter `name`."""
    import inspect

    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - exotic wrappers
        return False


def cache_argument(model: Any) -> str:
    """The name the model's `forward` takes a KV cache under: ``cache`` or ``past_key_values``."""
    return "cache" if takes_argument(model, "cache") else "past_key_values"


def teacher_forced_forward(
    model: Any,
    input_ids: Any,
    *,
    keep: Optional[Iterable[int]] = None,
    output_hidden_states: bool = True,
    output_attentions: bool = False,
    inputs: Optional[dict] = None,
    parts: Any = None,
    cache: bool = False,
) -> ForwardOutput:
    """The one teacher-forced pass of evalrx: `HFLocalModel.forward` and every analyzer run it.

    Args:
        model: a transformers model.
        input_ids: ``[1, T]`` token ids on the model's device.
        keep: positions whose logits are needed (all when None); passed as `logits_to_keep`
            when the model takes it, so the vocabulary projection runs only there.
        output_hidden_states: return the residual stream of every layer.
        output_attentions: return attention maps (the model must run eager attention).
        inputs: further model inputs (a VLM's pixel values).
        parts: the model's `ModelParts` (discovered when None): the hidden states are recorded
            with `recording_hidden_states`; a model whose parts cannot be found returns them
            through `output_hidden_states`.
        cache: also return the pass's KV cache (`ForwardOutput.cache`).

    Returns:
        `ForwardOutput`, its logits ``[1, len(keep) or T, V]`` in the model's dtype.
    """
    import torch

    kwargs: dict = {"input_ids": input_ids, "use_cache": bool(cache), "return_dict": True, **(inputs or {})}
    if output_attentions:
        kwargs["output_attentions"] = True
    recording: Any = contextlib.nullcontext()
    if output_hidden_states:
        if parts is None:
            try:
                parts = discover(model)
            except Exception:  # an unknown layout: transformers collects them
                kwargs["output_hidden_states"] = True
        if parts is not None:
            recording = recording_hidden_states(parts)
    keep = None if keep is None else torch.tensor(list(keep), dtype=torch.long, device=input_ids.device)
    sliced = keep is not None and takes_argument(model, "logits_to_keep")
    if sliced:
        kwargs["logits_to_keep"] = keep
    with torch.no_grad(), recording as states:
        out = model(**kwargs)
    logits = out.logits
    if keep is not None and not sliced:
        logits = logits[:, keep.to(logits.device)]
    hidden = None
    if states is not None:
        hidden = tuple(kept[-1] for kept in states)
    elif output_hidden_states and getattr(out, "hidden_states", None) is not None:
        hidden = tuple(out.hidden_states)
    attn = tuple(out.attentions) if output_attentions and out.attentions else None
    return ForwardOutput(
        input_ids=input_ids,
        logits=logits,
        hidden_states=hidden,
        attentions=attn,
        cache=output_cache(out) if cache else None,
    )


__all__ = ["ForwardOutput", "cache_argument", "output_cache", "takes_argument", "teacher_forced_forward"]
