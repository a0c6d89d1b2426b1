"""Runtime discovery of the modules white-box analysis hooks: decoder layers, final norm, unembedding.

Dotted paths differ per architecture (``model.layers`` vs ``transformer.h``, a
language tower nested inside a VLM) and per transformers release, so nothing here
trusts a hard-coded path: the decoder-layer list is found in the live module tree
and the final norm is looked up next to it. torch is imported inside functions so
importing this module stays light.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

# Attribute names a decoder block uses for its attention module (GPT-2 uses `attn`).
_ATTN_ATTRS = ("self_attn", "attn", "attention", "self_attention")
_BLOCK_NAME_HINTS = ("DecoderLayer", "Block", "Layer")
_FINAL_NORM_ATTRS = ("norm", "final_layernorm", "ln_f", "final_norm", "norm_f")
# Branches of a multimodal model that are never the language tower.
_NON_TEXT_HINTS = ("vision", "visual", "image", "audio", "encoder", "projector")


class DiscoveryError(RuntimeError):
    """Raised when a module needed for white-box analysis cannot be found in the model."""


@dataclass
class ModelParts:
    """The modules a logit lens or a hook needs, found in one live model.

    Attributes:
        layers: the decoder-layer ``nn.ModuleList``.
        layers_path: its dotted path from the model root (``"model.layers"``, ``"transformer.h"``).
        final_norm: the norm applied after the last layer (its own module, so Gemma's
            ``1 + weight`` is honoured).
        unembed: the module mapping normed hidden states to vocabulary logits.
        num_layers: ``len(layers)``.
        logit_softcap: Gemma-2 style ``final_logit_softcapping`` (``None`` when the model has none).
    """

    layers: Any
    layers_path: str
    final_norm: Any
    unembed: Any
    num_layers: int
    logit_softcap: Optional[float] = None
    _casts: dict = field(default_factory=dict, repr=False, compare=False)  # the unembedding's weight per dtype

    def lens_logits(self, hidden: Any, dtype: Any = None) -> Any:
        """Logits for an intermediate residual stream: final norm, unembedding, softcap.

        Do not pass ``hidden_states[-1]`` of a transformers 5 forward: it is already normed.
        ``dtype`` (a torch dtype other than the weights'): the unembedding's product in that
        precision, from a copy of its weight made once (a cheaper, approximate lens).
        """
        normed = self.final_norm(hidden)
        weight = getattr(self.unembed, "weight", None)
        if dtype is None or weight is None or weight.dtype == dtype:
            logits = self.unembed(normed)
        else:
            import torch

            key = str(dtype)
            if key not in self._casts:
                self._casts[key] = weight.detach().to(dtype)
            bias = getattr(self.unembed, "bias", None)
            logits = torch.nn.functional.linear(
                normed.to(dtype), self._casts[key], None if bias is None else bias.to(dtype)
            )
        if self.logit_softcap:
            import torch

            logits = torch.tanh(logits / self.logit_softcap) * self.logit_softcap
        return logits


def _text_config(model: Any) -> Any:
    cfg = getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "get_text_config"):
        try:
            return cfg.get_text_config(decoder=True)
        except TypeError:  # older signature without `decoder`
            return cfg.get_text_config()
    return cfg


def _expected_layers(model: Any) -> Optional[int]:
    cfg = _text_config(model)
    for attr in ("num_hidden_layers", "n_layer", "num_layers"):
        value = getattr(cfg, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def attention_module(layer: Any) -> Any:
    """The attention module of one decoder layer (`self_attn`, GPT-2's `attn`, ...), or None when it has none.

    The one place a layer's attention is looked up: block discovery, the attention hooks and the
    capture recorder all go through it (`evalrx.internals.attention_modules` for every layer).
    """
    return next((getattr(layer, a) for a in _ATTN_ATTRS if hasattr(layer, a)), None)


def _looks_like_block(module: Any) -> bool:
    if attention_module(module) is not None:
        return True
    name = type(module).__name__
    return "norm" not in name.lower() and any(name.endswith(h) for h in _BLOCK_NAME_HINTS)


def find_decoder_layers(model: Any, num_hidden_layers: Optional[int] = None) -> tuple[Any, str]:
    """Find the decoder-layer ``ModuleList`` and its dotted path.

    Candidates are non-empty ``nn.ModuleList`` modules whose first child looks like
    a transformer block (has ``self_attn``/``attn`` or a ``*DecoderLayer``/``*Block``
    class name). With a known layer count (argument, else the text config) only lists
    of that length qualify. Lists under vision/audio/encoder branches lose to others,
    then the shallowest path wins, so a VLM yields its language tower.

    Args:
        model: a live ``torch.nn.Module``.
        num_hidden_layers: expected length; read from ``model.config`` when omitted.

    Returns:
        ``(layers, dotted_path)``.

    Raises:
        DiscoveryError: when no list qualifies; the message names what was seen.
    """
    import torch.nn as nn

    expected = num_hidden_layers if num_hidden_layers is not None else _expected_layers(model)
    blocks: list[tuple[str, Any]] = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) > 0 and _looks_like_block(mod[0]):
            blocks.append((name, mod))
    matching = [(n, m) for n, m in blocks if expected is None or len(m) == expected]
    if not matching:
        seen = ", ".join(f"{n or '<root>'}[{len(m)}]" for n, m in blocks) or "none"
        want = f" of length {expected}" if expected is not None else ""
        raise DiscoveryError(
            f"Could not find the decoder-layer ModuleList{want} in {type(model).__name__}; "
            f"block lists seen: {seen}; top-level children: {[n for n, _ in model.named_children()]}."
        )

    def rank(item: tuple[str, Any]) -> tuple[int, int]:
        path = item[0].lower()
        return (int(any(h in path for h in _NON_TEXT_HINTS)), path.count("."))

    name, layers = min(matching, key=rank)
    return layers, name


def resolve(model: Any, dotted: str) -> Any:
    """Resolve a dotted attribute path (``"model.layers.0"``) against ``model``.

    Raises:
        AttributeError: naming the path and the part where it broke.
    """
    obj = model
    if not dotted:
        return obj
    walked: list[str] = []
    for part in dotted.split("."):
        if not hasattr(obj, part):
            at = ".".join(walked) or "<root>"
            raise AttributeError(
                f"path {dotted!r} broke at {part!r}: {type(obj).__name__} at {at} has no such attribute"
            )
        obj = getattr(obj, part)
        walked.append(part)
    return obj


def get_final_norm(model: Any) -> Any:
    """Return the normalization module the model applies after its last decoder layer.

    Looked up on the module that owns the decoder-layer list (``norm``,
    ``final_layernorm``, ``ln_f``, ...; else its only other child whose class name
    contains "Norm"). The module itself is returned, so model-specific variants
    (Gemma's ``1 + weight``) are applied exactly as the model applies them.

    Raises:
        DiscoveryError: when the layers or a unique norm next to them cannot be found.
    """
    _, layers_path = find_decoder_layers(model)
    parent_path, _, layers_attr = layers_path.rpartition(".")
    parent = resolve(model, parent_path)
    for attr in _FINAL_NORM_ATTRS:
        mod = getattr(parent, attr, None)
        if mod is not None and _is_norm(mod):
            return mod
    norms = [(n, m) for n, m in parent.named_children() if n != layers_attr and _is_norm(m)]
    if len(norms) == 1:
        return norms[0][1]
    found = ", ".join(n for n, _ in norms) or "none"
    raise DiscoveryError(
        f"Could not identify the final norm next to {layers_path!r} in {type(model).__name__}: "
        f"norm-like children found: {found}."
    )


def _is_norm(module: Any) -> bool:
    return "norm" in type(module).__name__.lower()


def get_unembed(model: Any) -> Any:
    """Return the module mapping final hidden states to vocabulary logits.

    Uses ``get_output_embeddings()`` (``lm_head``; tied weights are shared by the model
    itself). A model without an output head but with input embeddings gets a small
    module computing ``h @ embedding.weight.T``.

    Raises:
        DiscoveryError: when neither is available.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        return head
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if emb is None or not hasattr(emb, "weight"):
        raise DiscoveryError(f"{type(model).__name__} has neither output nor input embeddings to unembed with.")
    import torch.nn as nn

    class TiedUnembed(nn.Module):
        """Unembedding through the (tied) input embedding matrix."""

        def __init__(self, embedding: Any) -> None:
            super().__init__()
            self.embedding = embedding

        def forward(self, hidden: Any) -> Any:
            return hidden @ self.embedding.weight.T

    return TiedUnembed(emb)


def discover(model: Any) -> ModelParts:
    """Find layers, final norm and unembedding of ``model`` in one call.

    Raises:
        DiscoveryError: when any of them cannot be found.
    """
    layers, path = find_decoder_layers(model)
    softcap = getattr(_text_config(model), "final_logit_softcapping", None)
    return ModelParts(
        layers=layers,
        layers_path=path,
        final_norm=get_final_norm(model),
        unembed=get_unembed(model),
        num_layers=len(layers),
        logit_softcap=float(softcap) if softcap else None,
    )


__all__ = [
    "DiscoveryError",
    "ModelParts",
    "attention_module",
    "discover",
    "find_decoder_layers",
    "get_final_norm",
    "get_unembed",
    "resolve",
]
