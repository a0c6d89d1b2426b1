"""Attention internals: which kernel a model runs and switching it, the registered last-row kernel,
each layer's attention module, and attention rows rebuilt from a KV cache.

Every switch of a model's attention implementation goes through `set_attention_implementation`
(for good) or `using_attention_implementation` (for a block); every lookup of a layer's attention
module through `attention_modules` (one layer: `evalrx.internals.discover.attention_module`).
torch and transformers are imported inside functions.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

from evalrx.internals.discover import attention_module

LAST_ROW_ATTENTION = "evalrx_last_row"


def attention_modules(layers: Any) -> list:
    """The attention module of each decoder layer (what the attention hooks sit on).

    Raises:
        RuntimeError: a layer has no attention module.
    """
    mods = []
    for i, layer in enumerate(layers):
        mod = attention_module(layer)
        if mod is None:
            raise RuntimeError(f"decoder layer {i} ({type(layer).__name__}) has no attention module to hook")
        mods.append(mod)
    return mods


def attention_implementation_of(model: Any) -> Optional[str]:
    """The attention implementation the model's language layers run (``eager``, ``sdpa``, ...)."""
    cfg: Any = getattr(model, "config", None)
    impl = getattr(cfg, "_attn_implementation", None)
    text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    text_impl = getattr(text_cfg, "_attn_implementation", impl)
    # A VLM is eager for our purpose only when its language tower is.
    return impl if impl == text_impl else text_impl


def _language_configs(model: Any) -> list:
    """The model's config and its text config (one entry when they are the same object)."""
    cfg: Any = getattr(model, "config", None)
    text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else None
    return list({id(c): c for c in (cfg, text_cfg) if c is not None}.values())


def set_attention_implementation(model: Any, impl: str, *, checked: bool = True) -> None:
    """Switch the model's attention implementation to `impl`, in place.

    Args:
        model: a transformers model.
        impl: ``"eager"``, ``"sdpa"``, a registered kernel (`LAST_ROW_ATTENTION`), ...
        checked: go through transformers' `set_attn_implementation` (it checks the kernel can run
            and reaches every sub-model) when the model has it. Otherwise, and always with
            ``checked=False``, `_attn_implementation` is written on the config and the text config,
            what the layers dispatch on at each forward (no checks: cheap enough for every call).
    """
    if checked and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(impl)
        return
    for cfg in _language_configs(model):
        cfg._attn_implementation = impl


@contextlib.contextmanager
def using_attention_implementation(model: Any, impl: str, *, checked: bool = True) -> Iterator[None]:
    """Run the block with the model on attention implementation `impl`, then switch back.

    Args:
        model: a transformers model.
        impl: the implementation for the block.
        checked: True (an analyzer's eager pass): nothing happens when the model already runs `impl`;
            else it is switched with `set_attn_implementation` and back the same way (a kernel that
            cannot be re-selected afterwards is a warning). False (a kernel registered for one
            generate call): the configs' `_attn_implementation` are written, then restored as they were.

    Raises:
        RuntimeError: ``checked`` and the model cannot switch (it has no `set_attn_implementation`).
    """
    if not checked:
        configs = _language_configs(model)
        before = [getattr(c, "_attn_implementation", None) for c in configs]
        set_attention_implementation(model, impl, checked=False)
        try:
            yield
        finally:
            for cfg, was in zip(configs, before):
                cfg._attn_implementation = was
        return
    current = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if current == impl:
        yield
        return
    if not hasattr(model, "set_attn_implementation"):
        raise RuntimeError(
            f"{type(model).__name__} uses {current!r} attention and cannot switch to {impl}; "
            f"load it with attn_implementation={impl!r} to capture attention."
        )
    set_attention_implementation(model, impl)
    try:
        yield
    finally:
        if current is not None:
            try:
                set_attention_implementation(model, current)
            except (ValueError, ImportError) as exc:  # the kernel it had cannot be re-selected here
                import warnings

                warnings.warn(f"could not restore {current!r} attention after running {impl!r}: {exc}", stacklevel=3)


def _last_row_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    **kwargs: Any,
) -> tuple:
    """sdpa's output, plus the softmax weights of the newest query position only (`[b, heads, 1, kv]`).

    What a capturing generate needs: eager attention would build every `[heads, P, P]` map of the
    prefill to keep its last row. The row is computed as eager computes it (scaled q.k, the mask's
    last row, an fp32 softmax).
    """
    import torch
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    out, _ = sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
    )
    keys = repeat_kv(key, getattr(module, "num_key_value_groups", 1))
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query[:, :, -1:], keys.transpose(2, 3)) * scale
    if attention_mask is not None:  # None: causal, and the newest position sees every key
        row = attention_mask[:, :, -1:, : keys.shape[-2]]
        scores = scores.masked_fill(~row, float("-inf")) if row.dtype == torch.bool else scores + row
    return out, torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)


def register_last_row_attention() -> None:
    """Make `LAST_ROW_ATTENTION` an attention implementation transformers dispatches to (sdpa's masks)."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if LAST_ROW_ATTENTION not in ALL_ATTENTION_FUNCTIONS:
        ALL_ATTENTION_FUNCTIONS.register(LAST_ROW_ATTENTION, _last_row_attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(LAST_ROW_ATTENTION, sdpa_mask)


def _decoder(model: Any) -> Any:
    return model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)


def rows_rebuildable(model: Any, layers: Any, *, multimodal: bool = False) -> bool:
    """Whether `rebuilt_attention_rows` can rebuild this model's attention rows: a text decoder (not
    `multimodal`) on one device whose `layers` attend the Llama way (input norm, q projection, optional
    q norm, rotary; no sliding window, no logit softcap), all with the same head layout, with a rotary
    embedding on the decoder."""
    import sys

    if multimodal:
        return False
    if len(set((getattr(model, "hf_device_map", None) or {}).values())) > 1:  # layers spread over devices
        return False
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(cfg, "attn_logit_softcapping", None) or (
        getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True) is not False
    ):
        return False
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or ())):
        return False
    decoder = _decoder(model)
    if decoder is None or not hasattr(decoder, "rotary_emb"):
        return False
    shapes = set()
    for layer in layers:
        attn = getattr(layer, "self_attn", None)
        if (
            attn is None
            or not hasattr(layer, "input_layernorm")
            or not all(hasattr(attn, a) for a in ("q_proj", "head_dim", "scaling", "num_key_value_groups"))
        ):
            return False
        if not hasattr(sys.modules.get(type(attn).__module__), "apply_rotary_pos_emb"):
            return False
        shapes.add((type(attn), attn.head_dim, float(attn.scaling), attn.num_key_value_groups))
    return len(shapes) == 1  # the rows of every layer are computed in one batch


def cached_keys(cache: Any, width: int) -> Optional[list]:
    """Each layer's cached keys when the cache holds `width` positions of every layer, else None."""
    cached = getattr(cache, "layers", None)
    if not cached or any(int(layer.keys.shape[-2]) < width for layer in cached):
        return None
    return [layer.keys[:, :, :width] for layer in cached]


def rebuilt_attention_rows(model: Any, layers: Any, states: Any, keys: list, positions: Any) -> Any:
    """``[L, P, W]`` fp32 head-averaged attention rows at query `positions` (``[P]``, any order), as the model's
    attention computed them, rebuilt from the residual streams entering each layer there (`states`,
    ``[L (+ 1), P, D]``) and each layer's cached keys (`keys`, ``[1, kv heads, W, head_dim]``, rotary applied).

    Each layer's queries are built as its attention builds them (input norm, q projection, q norm, rotary),
    then one batched product serves every layer. Only for a model where `rows_rebuildable` holds.
    """
    import sys

    import torch
    from transformers.integrations.sdpa_attention import repeat_kv

    decoder = _decoder(model)
    n, width = int(positions.shape[0]), int(keys[0].shape[-2])
    with torch.inference_mode():
        queries = []
        for i, layer in enumerate(layers):
            attn = layer.self_attn
            x = layer.input_layernorm(states[i])  # the residual stream entering layer i
            q = attn.q_proj(x).view(n, -1, attn.head_dim)
            if getattr(attn, "q_norm", None) is not None:
                q = attn.q_norm(q)
            queries.append(q.transpose(0, 1))  # [heads, n, head_dim]
        # Every layer has the same shape (checked once per handle): the rest is one batch over layers.
        attn = layers[0].self_attn
        q = torch.stack(queries)  # [L, heads, n, head_dim]
        cos, sin = decoder.rotary_emb(states[:1], positions.unsqueeze(0))
        q, _ = sys.modules[type(attn).__module__].apply_rotary_pos_emb(q, q[:, :1], cos, sin)
        scores = torch.matmul(q * attn.scaling, repeat_kv(torch.cat(keys), attn.num_key_value_groups).transpose(2, 3))
        # Causal: a query sees every key up to its own position, so only columns past the earliest query can be masked.
        lo = int(positions.min()) + 1
        if lo < width:
            future = torch.arange(lo, width, device=scores.device)[None, :] > positions.to(scores.device)[:, None]
            scores[..., lo:].masked_fill_(future, float("-inf"))
        return torch.softmax(scores, dim=-1, dtype=torch.float32).mean(1)


__all__ = [
    "LAST_ROW_ATTENTION",
    "attention_implementation_of",
    "attention_modules",
    "cached_keys",
    "rebuilt_attention_rows",
    "register_last_row_attention",
    "rows_rebuildable",
    "set_attention_implementation",
    "using_attention_implementation",
]
