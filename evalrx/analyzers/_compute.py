"""The torch side of the analyzers: reach a local model, run teacher-forced passes, apply the lens.

Only imported inside analyzer methods, so `import evalrx.analyzers` never imports torch.

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

import weakref
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from evalrx.analyzers._base import model_id
from evalrx.analyzers._precision import LENS_DTYPES, checked_precision
from evalrx.core.model import Model
from evalrx.internals import (
    attention_modules,
    cached_keys,
    discover,
    rebuilt_attention_rows,
    teacher_forced_forward,
    using_attention_implementation,
)

# Bound on floats in one [layers, positions, vocab] block of the lens (~64 MB of fp32; the softmax and the
# comparisons make a few temporaries of its size). Smaller blocks cost no speed down to ~5 positions of
# SmolLM2 (16-18 ms a position either way on 2 cores) and halve a white-box case's peak memory.
MAX_BLOCK_ELEMS = 1 << 24


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


@dataclass
class LensStats:
    """Per layer (0 = embeddings ... L = final) and position: top-k, entropy, target statistics.

    `gathered` holds the log-probs of extra token ids per position (`[layers, P, C]`,
    NaN where the id was padding).
    """

    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    entropy: np.ndarray
    target_logprob: np.ndarray
    target_rank: np.ndarray
    hidden_norm: np.ndarray
    gathered: Optional[np.ndarray] = None


def lens_stats(
    local: LocalModel,
    hidden_states: Any,
    final_logits: Any,
    positions: Sequence[int],
    targets: Sequence[int],
    top_k: int,
    gather_ids: Optional[Sequence[Sequence[int]]] = None,
    precision: str = "exact",
) -> LensStats:
    """Apply the logit lens at `positions` over every layer, in stacked matrix products.

    Layers 0..L-1 go through the model's own final norm and unembedding (and the
    model's logit softcap, when it has one); layer L is `final_logits`, the model's
    own output at those positions. Softmax, entropy and ranks are computed in fp32.

    Args:
        local: the model.
        hidden_states: the pass's hidden states (`L + 1` tensors `[1, T, D]`, or the
            `CapturedStates` of a pass built from the generation).
        final_logits: the model's logits at `positions` (`[P, V]`).
        positions: predicting positions.
        targets: per position the token id whose log-prob and rank are reported (-1: none).
        top_k: how many top tokens to keep.
        gather_ids: optional extra token ids per position whose log-probs are wanted
            (ragged; padded internally).
        precision: "exact", or a cheaper name of `PRECISIONS` for layers 0..L-1
            (layer L, the model's own logits, stays exact).

    Returns:
        `LensStats` with arrays shaped `[L + 1, P, ...]`.
    """
    import torch

    parts = local.parts
    cast = LENS_DTYPES[checked_precision(precision)]
    n_layers = parts.num_layers
    if len(hidden_states) != n_layers + 1:
        raise RuntimeError(
            f"expected {n_layers + 1} hidden states (embeddings + {n_layers} layers), got {len(hidden_states)}"
        )
    n_pos = len(positions)
    vocab = int(final_logits.shape[-1])
    k = max(1, min(int(top_k), vocab))
    dev = hidden_states.device if hasattr(hidden_states, "rows") else hidden_states[0].device
    pos = torch.tensor(list(positions), dtype=torch.long, device=dev)
    tgt_all = torch.tensor(list(targets), dtype=torch.long, device=dev)
    n_gather = max((len(g) for g in gather_ids), default=0) if gather_ids is not None else 0
    if n_gather:
        padded = [list(g) + [-1] * (n_gather - len(g)) for g in gather_ids or []]
        gat_all = torch.tensor(padded, dtype=torch.long, device=dev)

    n_out = n_layers + 1
    topk_ids = np.zeros((n_out, n_pos, k), dtype=np.int32)
    topk_lp = np.zeros((n_out, n_pos, k), dtype=np.float32)
    entropy = np.zeros((n_out, n_pos), dtype=np.float32)
    t_lp = np.full((n_out, n_pos), np.nan, dtype=np.float32)
    t_rank = np.full((n_out, n_pos), -1, dtype=np.int32)
    norms = np.zeros((n_out, n_pos), dtype=np.float32)
    gathered = np.full((n_out, n_pos, n_gather), np.nan, dtype=np.float32) if n_gather else None
    if n_pos == 0:
        return LensStats(topk_ids, topk_lp, entropy, t_lp, t_rank, norms, gathered)

    with torch.inference_mode():
        # [L + 1, P, D]: the residual stream of every layer at the chosen positions.
        stacked = all_layer_rows(hidden_states, pos)
        norms[:] = stacked.float().norm(dim=-1).cpu().numpy()
        # A block holds the lens logits and, beside them, the model's own last layer: twice the elements.
        chunk = max(1, MAX_BLOCK_ELEMS // (2 * n_out * vocab))
        for c0 in range(0, n_pos, chunk):
            c1 = min(n_pos, c0 + chunk)
            # A 2-D contiguous input keeps the unembedding one matrix product (a strided 3-D slice
            # makes torch batch it and copy the weight per layer).
            flat = stacked[:n_layers, c0:c1].reshape(n_layers * (c1 - c0), stacked.shape[-1])
            lens = parts.lens_logits(flat, getattr(torch, cast) if cast else None).view(n_layers, c1 - c0, -1).float()
            # The lens layers and the model's own last layer are reduced in one block (few, larger operations).
            block = torch.cat([lens, final_logits[c0:c1].float().to(lens.device).unsqueeze(0)])
            gat = gat_all[c0:c1].to(block.device) if n_gather else None
            st = _block_stats(block, tgt_all[c0:c1].to(block.device), k, gat)
            entropy[:, c0:c1], topk_lp[:, c0:c1], topk_ids[:, c0:c1] = st[0], st[1], st[2]
            t_lp[:, c0:c1], t_rank[:, c0:c1] = st[3], st[4]
            if gathered is not None:
                gathered[:, c0:c1] = st[5]
    return LensStats(topk_ids, topk_lp, entropy, t_lp, t_rank, norms, gathered)


def _block_stats(x: Any, targets: Any, k: int, gather: Any = None) -> tuple:
    """fp32 statistics of a `[n, P, V]` logit block, in few passes over it.

    One fused softmax gives p; logsumexp = max - log p(argmax); entropy = logsumexp - sum(p * x)
    (a batched dot product, no temporary); top-k and ranks are read on the logits (same order
    as the log-probs). Returns numpy arrays `(entropy, topk_logprobs, topk_ids,
    target_logprob, target_rank[, gathered])`; targets < 0 give NaN / -1, gather ids < 0 NaN.
    """
    import torch

    n, p, v = x.shape
    vals, idx = x.topk(k, dim=-1)
    prob = torch.softmax(x, dim=-1)
    lse = vals[..., 0] - prob.gather(-1, idx[..., :1]).squeeze(-1).log()
    dot = torch.bmm(prob.view(n * p, 1, v), x.reshape(n * p, v, 1)).view(n, p)
    ent = lse - dot
    if not torch.isfinite(ent).all():  # -inf logits (masked tokens) make 0 * -inf: take the safe way
        ent = torch.special.entr(prob).sum(-1)
    del prob
    valid = targets >= 0
    chosen = x.gather(-1, targets.clamp(min=0).view(1, -1, 1).expand(n, -1, 1)).squeeze(-1)
    rank = _ranks(x, vals, idx, targets.clamp(min=0), chosen)
    lp_chosen = torch.where(valid.unsqueeze(0), chosen - lse, torch.full_like(chosen, float("nan")))
    rank = torch.where(valid.unsqueeze(0), rank, torch.full_like(rank, -1))
    out = [
        ent.cpu().numpy(),
        (vals - lse.unsqueeze(-1)).cpu().numpy(),
        idx.to(torch.int32).cpu().numpy(),
        lp_chosen.cpu().numpy(),
        rank.cpu().numpy(),
    ]
    if gather is not None:
        got = x.gather(-1, gather.clamp(min=0).unsqueeze(0).expand(n, -1, -1)) - lse.unsqueeze(-1)
        got = torch.where((gather >= 0).unsqueeze(0), got, torch.full_like(got, float("nan")))
        out.append(got.cpu().numpy())
    return tuple(out)


def _ranks(x: Any, vals: Any, idx: Any, targets: Any, chosen: Any) -> Any:
    """`[n, P]` int32: how many logits of each row beat its target's (0 = top-1).

    Where the target is among the row's top-k, everything that beats it is too, so the top-k
    values say it; only the other rows are compared over the whole vocabulary."""
    import torch

    n, p, v = x.shape
    rank = (vals > chosen.unsqueeze(-1)).sum(-1, dtype=torch.int32)
    outside = ~(idx == targets.view(1, -1, 1)).any(-1)
    if bool(outside.any()):
        rows = outside.reshape(-1).nonzero().squeeze(-1)
        beat = (x.reshape(n * p, v).index_select(0, rows) > chosen.reshape(-1, 1).index_select(0, rows)).sum(
            -1, dtype=torch.int32
        )
        rank.view(-1).index_copy_(0, rows, beat)
    return rank


def final_stats(final_logits: Any, targets: Sequence[int]) -> "tuple[np.ndarray, np.ndarray, np.ndarray]":
    """Log-prob, rank and entropy of `targets` under the model's own logits (fp32), per row."""
    import torch

    with torch.inference_mode():
        tgt = torch.tensor(list(targets), dtype=torch.long, device=final_logits.device)
        ent, _, _, lp, rank = _block_stats(final_logits.float().unsqueeze(0), tgt, 1)
    return lp[0].astype(np.float32), rank[0].astype(np.int32), ent[0].astype(np.float32)


def final_margins(final_logits: Any, rows: Sequence[int], targets: Sequence[int]) -> np.ndarray:
    """At each of `rows` of the model's own logits, `targets`' log-prob minus the best other token's (fp32, nats)."""
    import torch

    with torch.inference_mode():
        index = torch.tensor(list(rows), dtype=torch.long, device=final_logits.device)
        lp = torch.log_softmax(final_logits.index_select(0, index).float(), dim=-1)
        tgt = torch.tensor(list(targets), dtype=torch.long, device=lp.device).view(-1, 1)
        own = lp.gather(-1, tgt).squeeze(-1)
        other = lp.scatter(-1, tgt, float("-inf")).max(-1).values
    return (own - other).cpu().numpy().astype(np.float32)


_PIECES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # tokenizer -> {id: text}, filled as ids appear


def decode_pieces(tokenizer: Any, ids: "Sequence[int] | np.ndarray") -> dict:
    """`{id: text}` for each distinct id (what a page shows; it never loads a tokenizer).

    A token's text never changes, so each tokenizer's pieces are decoded once per process.
    """
    tok = getattr(tokenizer, "tokenizer", tokenizer)
    flat = np.unique(np.asarray(ids, dtype=np.int64).ravel())
    uniq = [int(i) for i in flat[flat >= 0]]
    if not uniq:
        return {}
    try:
        known = _PIECES.setdefault(tok, {})
    except TypeError:  # a tokenizer that takes no weak reference: decode every time
        known = {}
    missing = [i for i in uniq if i not in known]
    if missing:
        backend = getattr(tok, "backend_tokenizer", None)
        if backend is not None:  # one call into the Rust tokenizer instead of a Python loop per id
            texts = backend.decode_batch([[i] for i in missing], skip_special_tokens=False)
        else:
            texts = tok.batch_decode([[i] for i in missing], skip_special_tokens=False)
        known.update(zip(missing, texts))
    return {str(i): known[i] for i in uniq}
