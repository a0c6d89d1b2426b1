"""The logit lens over a pass: every layer's residual stream through the model's own final norm and
unembedding, reduced to top-k, entropy and target statistics in fp32; and the lens' precisions by name.

Torch is imported inside the functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from evalrx.internals.passes.compute import LocalModel, all_layer_rows

__all__ = [
    "LENS_DTYPES",
    "MAX_BLOCK_ELEMS",
    "PRECISIONS",
    "LensRequest",
    "LensStats",
    "SharedLens",
    "checked_precision",
    "final_margins",
    "final_stats",
    "lens_stats",
]

# Per precision, the torch dtype of the lens' unembedding product: "exact" (None: the model's own dtype) or a
# named cheaper setting.
LENS_DTYPES = {"exact": None, "bfloat16": "bfloat16"}
PRECISIONS = tuple(LENS_DTYPES)


def checked_precision(value: Any) -> str:
    """A lens precision's name ("exact" when None), checked against `PRECISIONS`.

    Raises:
        ValueError: another name (the message lists the known ones).
    """
    name = str(value or "exact").strip().lower()
    if name not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return name


# Bound on floats in one [layers, positions, vocab] block of the lens (~64 MB of fp32; the softmax and the
# comparisons make a few temporaries of its size). Smaller blocks cost no speed down to ~5 positions of
# SmolLM2 (16-18 ms a position either way on 2 cores) and halve a white-box case's peak memory.
MAX_BLOCK_ELEMS = 1 << 24


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


@dataclass
class LensRequest:
    """Where an analyzer may read the lens on a pass, declared before the pass runs so that analyzers at the
    same positions share one unembedding (`SharedLens`).

    Attributes:
        positions: predicting positions.
        top_k: top tokens it reads per layer and position.
        precision: a name of `PRECISIONS`.
        gather: `{position: token ids}` whose log-probs it may read there.
    """

    positions: Sequence[int]
    top_k: int
    precision: str = "exact"
    gather: Optional[dict] = None


class SharedLens:
    """The lens of one pass for every analyzer that declared a `LensRequest` on it: where two or more declared
    the same precision, one `lens_stats` over the union of their positions (the largest top-k, every gather
    id) serves them all, each reading its rows; otherwise each call runs its own.

    Args:
        local: the model.
        ids: the pass's token ids.
        hidden_states: the pass's hidden states.
        logits_at: `positions -> [P, V]` the model's own logits there.
        requests: the declared requests of the analyzers reading the pass.
    """

    def __init__(self, local: Any, ids: Sequence[int], hidden_states: Any, logits_at: Any, requests: Sequence[Any]):
        self.local, self.ids, self.hidden_states, self.logits_at = local, ids, hidden_states, logits_at
        self.requests = [r for r in requests if r is not None]
        self._shared: dict = {}  # precision -> (row by position, targets, gather lists, LensStats)

    def stats(
        self,
        positions: Sequence[int],
        targets: Sequence[int],
        top_k: int,
        gather_ids: Optional[Sequence[Sequence[int]]] = None,
        precision: str = "exact",
        final_logits: Any = None,
    ) -> LensStats:
        """`lens_stats` at `positions` (the same numbers, read from the shared unembedding where it covers them)."""
        precision = checked_precision(precision)
        shared = self._union(precision)
        if shared is not None:
            row, union_targets, union_gather, stats = shared
            rows = [row.get(int(p), -1) for p in positions]
            if int(top_k) <= stats.topk_ids.shape[-1] and all(
                r >= 0 and union_targets[r] == int(t) for r, t in zip(rows, targets)
            ):
                taken = _take(stats, rows, int(top_k), union_gather, gather_ids)
                if taken is not None:
                    return taken
        logits = final_logits if final_logits is not None else self.logits_at(positions)
        return lens_stats(self.local, self.hidden_states, logits, positions, targets, top_k, gather_ids, precision)

    def _union(self, precision: str) -> Any:
        if precision in self._shared:
            return self._shared[precision]
        same = [r for r in self.requests if checked_precision(r.precision) == precision]
        if len(same) < 2:
            self._shared[precision] = None
            return None
        positions = sorted({int(p) for r in same for p in r.positions})
        gather: dict = {}
        for r in same:
            for p, ids in (r.gather or {}).items():
                gather.setdefault(int(p), set()).update(int(i) for i in ids)
        lists = [sorted(gather.get(p, ())) for p in positions]
        logits = self.logits_at(positions)
        n = len(self.ids)
        top1 = logits.float().argmax(-1).tolist()
        targets = [int(self.ids[p + 1]) if p + 1 < n else int(top1[i]) for i, p in enumerate(positions)]
        k = max(int(r.top_k) for r in same)
        stats = lens_stats(
            self.local, self.hidden_states, logits, positions, targets, k, lists if any(lists) else None, precision
        )
        self._shared[precision] = ({p: i for i, p in enumerate(positions)}, targets, lists, stats)
        return self._shared[precision]


def _take(
    stats: LensStats, rows: list, top_k: int, lists: list, gather_ids: Optional[Sequence[Sequence[int]]]
) -> Optional[LensStats]:
    """The rows `rows` of a shared `stats`, with `top_k` tokens and the gathered log-probs of `gather_ids`
    (None when one of those ids was not gathered)."""
    k = max(1, int(top_k))
    gathered = None
    if gather_ids is not None:
        width = max((len(g) for g in gather_ids), default=0)
        gathered = np.full((stats.topk_ids.shape[0], len(rows), width), np.nan, dtype=np.float32)
        for j, (r, ids) in enumerate(zip(rows, gather_ids)):
            for c, tok in enumerate(ids):
                if int(tok) < 0:
                    continue
                if stats.gathered is None or int(tok) not in lists[r]:
                    return None
                gathered[:, j, c] = stats.gathered[:, r, lists[r].index(int(tok))]
    return LensStats(
        stats.topk_ids[:, rows, :k],
        stats.topk_logprobs[:, rows, :k],
        stats.entropy[:, rows],
        stats.target_logprob[:, rows],
        stats.target_rank[:, rows],
        stats.hidden_norm[:, rows],
        gathered,
    )


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


# Below this many nats under a row's maximum a logit's exp is clamped to e**-80 (a normal float): the true value
# would be a denormal, which adds nothing a float32 sum can hold and makes exp and products several times slower.
_EXP_FLOOR = -80.0
# Width of the column chunks `_topk` screens by their maxima (a wider vocabulary than 4 chunks per kept token).
_TOPK_CHUNK = 64


def _block_stats(x: Any, targets: Any, k: int, gather: Any = None) -> tuple:
    """fp32 statistics of a `[n, P, V]` logit block, in few passes over it.

    logsumexp and entropy come from e = exp(x - max) (floored at `_EXP_FLOOR`, in one buffer):
    lse = max + log sum(e), entropy = lse - sum(e * x) / sum(e). Top-k and ranks are read on the logits
    (same order as the log-probs). Returns numpy arrays `(entropy, topk_logprobs, topk_ids,
    target_logprob, target_rank[, gathered])`; targets < 0 give NaN / -1, gather ids < 0 NaN.
    """
    import torch

    n, p, v = x.shape
    vals, idx = _topk(x, k)
    top = vals[..., :1]
    e = torch.sub(x, top).clamp_(min=_EXP_FLOOR).exp_()
    total = e.sum(-1)
    lse = top.squeeze(-1) + total.log()
    ent = lse - e.mul_(x).sum(-1) / total
    del e
    if not torch.isfinite(ent).all():  # -inf logits (masked tokens) make 0 * -inf: take the safe way
        ent = torch.special.entr(torch.softmax(x, dim=-1)).sum(-1)
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


def _topk(x: Any, k: int) -> tuple:
    """`x.topk(k)` over the last dimension of `[n, P, V]` (values, ids), screened by column chunks.

    Each of the top k logits lies in one of the k chunks of `_TOPK_CHUNK` columns with the largest
    maxima (a chunk outside them has k chunks above it, each holding a larger logit), so the top k
    are taken among those chunks' columns: the same values and ids (an exact tie may name another
    id of the same logit), ~6x faster than a top-k over a 49k vocabulary.
    """
    import torch

    n, p, v = x.shape
    k = min(int(k), v)
    if v < 4 * _TOPK_CHUNK * k:
        return x.topk(k, dim=-1)
    rows = x.reshape(n * p, v)
    whole = v // _TOPK_CHUNK * _TOPK_CHUNK
    chunk_max = rows[:, :whole].view(n * p, -1, _TOPK_CHUNK).amax(-1)
    chunks = chunk_max.topk(k, dim=-1).indices
    cols = (chunks.unsqueeze(-1) * _TOPK_CHUNK + torch.arange(_TOPK_CHUNK, device=x.device)).reshape(n * p, -1)
    if whole < v:  # the columns past the last whole chunk are always candidates
        cols = torch.cat([cols, torch.arange(whole, v, device=x.device).expand(n * p, -1)], dim=-1)
    vals, at = rows.gather(-1, cols).topk(k, dim=-1)
    return vals.view(n, p, k), cols.gather(-1, at).view(n, p, k)


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
