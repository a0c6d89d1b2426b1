"""The logit lens: what each layer would predict, at the positions where the model decided.

Layer 0 is the embedding output, layer L the final layer. Layers 0..L-1 are read
through the model's own final norm module and unembedding (so Gemma's `1 + weight`
norm and Gemma-2's logit softcap are honoured); layer L is the model's own logits,
never normed twice. All layers at all analysed positions are stacked into one
matrix product per block; softmax, entropy and ranks are fp32.

On a trajectory, one teacher-forced pass over the final conversation gives the
hidden states of every turn's prefix (causal attention, prefix-stable template);
turns whose template rewrites history get a pass of their own. The lens reads those
passes through `PassAnalyzer`, so `analyze` shares them with the other analyzers.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from evalrx.analyzers._base import AnalysisResult, model_id, register_analyzer, register_result
from evalrx.analyzers._pass_analyzer import PassAnalyzer
from evalrx.core.capability import Capability
from evalrx.core.model import Model
from evalrx.internals.passes import (
    KINDS,
    LensRequest,
    PassRequest,
    PassResult,
    TrajectoryPlan,
    checked_answer_points,
    checked_precision,
)

__all__ = ["LensResult", "LogitLensAnalyzer", "checked_precision", "settle_layer"]


def settle_layer(top1: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per position, the first layer from which `target` is top-1 at every later layer (-1: never).

    Args:
        top1: `[layers, positions]` top-1 token ids.
        target: `[positions]` token ids (-1 for none).
    """
    hit = top1 == target[None, :]
    n_layers = hit.shape[0]
    out = np.full(hit.shape[1], -1, dtype=np.int32)
    for p in range(hit.shape[1]):
        if target[p] < 0 or not hit[-1, p]:
            continue
        layer = n_layers - 1
        while layer > 0 and hit[layer - 1, p]:
            layer -= 1
        out[p] = layer
    return out


_ARRAY_FIELDS: "tuple[tuple[str, Any], ...]" = (
    ("positions", np.int32),
    ("token_ids", np.int32),
    ("target_ids", np.int32),
    ("target_is_actual", np.bool_),
    ("topk_ids", np.int32),
    ("topk_logprobs", np.float32),
    ("entropy", np.float32),
    ("target_logprob", np.float32),
    ("target_rank", np.int32),
    ("hidden_norm", np.float32),
)
# Arrays shaped [layers, positions, ...]; the others are [positions].
_PER_LAYER = frozenset({"topk_ids", "topk_logprobs", "entropy", "target_logprob", "target_rank", "hidden_norm"})
_LABEL_FIELDS: "tuple[tuple[str, Any], ...]" = (
    ("label_step", np.int32),
    ("label_kind", np.int8),
    ("label_call", np.int16),
    ("label_piece", np.int16),
    ("label_pass", np.int16),
    ("label_token_index", np.int32),
)


@register_result
class LensResult(AnalysisResult):
    """Logit-lens statistics, `[layers, positions, ...]`, layer 0 = embeddings, layer L = final.

    Attributes:
        positions: predicting positions `[P]` (in their pass).
        token_ids: the input token at each position.
        target_ids: the token each position chose: the next actual token, or the final
            layer's top-1 where there is none (`target_is_actual` tells which).
        topk_ids, topk_logprobs: `[layers, P, k]`, natural-log, fp32.
        entropy: `[layers, P]` in nats.
        target_logprob, target_rank: the chosen token's log-prob and rank (0 = top-1) per layer.
        hidden_norm: L2 norm of the residual stream per layer (layer L: after the final norm).
        labels: per position (trajectories), arrays `label_step`, `label_kind` (index into
            `KINDS`), `label_call`, `label_piece`, `label_pass`, `label_token_index`, and
            `label_arg` (argument names).
        info: JSON-safe details (model, passes, top_k, ...).
        vocab: `{str(id): text}` for every id in `token_ids`, `target_ids`, `topk_ids`.
    """

    result_type = "logit_lens"
    positions: np.ndarray
    token_ids: np.ndarray
    target_ids: np.ndarray
    target_is_actual: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    entropy: np.ndarray
    target_logprob: np.ndarray
    target_rank: np.ndarray
    hidden_norm: np.ndarray
    labels: "dict[str, Any]"

    def __init__(
        self,
        *,
        labels: Optional[dict] = None,
        info: Optional[dict] = None,
        vocab: Optional[dict] = None,
        kind_names: Optional[Sequence[str]] = None,
        **arrays: Any,
    ) -> None:
        for name, dtype in _ARRAY_FIELDS:
            setattr(self, name, np.asarray(arrays[name], dtype=dtype))
        self.labels = {}
        if labels:
            for name, dtype in _LABEL_FIELDS:
                self.labels[name] = np.asarray(labels[name], dtype=dtype)
            self.labels["label_arg"] = list(labels.get("label_arg") or [""] * len(self.positions))
        self.info = dict(info or {})
        self.vocab = dict(vocab or {})
        # The names `label_kind` indexes, as stored with the result (a later KINDS may differ).
        self.kind_names = list(kind_names or KINDS)

    # -- views -------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        """Decoder layers L (the arrays have L + 1 rows)."""
        return int(self.topk_ids.shape[0]) - 1

    @property
    def layers(self) -> np.ndarray:
        """Layer indices 0 (embedding output) .. L (final layer)."""
        return np.arange(self.topk_ids.shape[0])

    @property
    def top_k(self) -> int:
        return int(self.topk_ids.shape[-1])

    @property
    def chosen_logprob(self) -> np.ndarray:
        """Alias of `target_logprob`."""
        return self.target_logprob

    @property
    def chosen_rank(self) -> np.ndarray:
        """Alias of `target_rank`."""
        return self.target_rank

    @property
    def settles_at(self) -> np.ndarray:
        """Per position, the layer at which the finally chosen token becomes and stays top-1 (-1: never)."""
        return settle_layer(self.topk_ids[:, :, 0], self.target_ids)

    @property
    def kinds(self) -> list:
        """Decision kind per position ("" for single-prompt results)."""
        if not self.labels:
            return [""] * len(self.positions)
        names = self.kind_names
        return [names[int(i)] if 0 <= int(i) < len(names) else "" for i in self.labels["label_kind"]]

    def token_text(self, token_id: int) -> str:
        """The decoded text of a token id seen in this result."""
        return self.vocab.get(str(int(token_id)), f"<{int(token_id)}>")

    def select(self, mask: np.ndarray) -> "LensResult":
        """A result holding only the positions where `mask` is true."""
        mask = np.asarray(mask, dtype=bool)
        arrays = {}
        for name, _ in _ARRAY_FIELDS:
            value = getattr(self, name)
            arrays[name] = value[:, mask] if name in _PER_LAYER else value[mask]
        labels = None
        if self.labels:
            labels = {n: self.labels[n][mask] for n, _ in _LABEL_FIELDS}
            labels["label_arg"] = [a for a, m in zip(self.labels["label_arg"], mask) if m]
        return LensResult(labels=labels, info=self.info, vocab=self.vocab, kind_names=self.kind_names, **arrays)

    def for_step(self, step: int) -> "LensResult":
        """The positions of one trajectory step."""
        if not self.labels:
            raise ValueError("this result has no trajectory labels")
        return self.select(self.labels["label_step"] == int(step))

    def steps(self) -> list:
        """Trajectory steps present, in order."""
        if not self.labels:
            return []
        return sorted({int(s) for s in self.labels["label_step"]})

    # -- storage -----------------------------------------------------------------------
    def to_arrays(self) -> dict:
        arrays = {name: getattr(self, name) for name, _ in _ARRAY_FIELDS}
        for name, _ in _LABEL_FIELDS:
            if self.labels:
                arrays[name] = self.labels[name]
        return arrays

    @property
    def meta(self) -> dict:
        meta = {
            "result_type": self.result_type,
            "analyzer": LogitLensAnalyzer.name,
            "kinds": list(KINDS),
            "info": self.info,
            "vocab": self.vocab,
        }
        if self.labels:
            meta["label_arg"] = list(self.labels["label_arg"])
        return meta

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict) -> "LensResult":
        """A stored result. One written before some arrays existed (or a partial record) gets the missing
        ones filled: statistics with zeros, label fields with -1 (unknown); the top-k and targets are needed.

        Raises:
            KeyError: no `topk_ids`, `topk_logprobs` or `target_ids`.
        """
        missing = [n for n in ("topk_ids", "topk_logprobs", "target_ids") if n not in arrays]
        if missing:
            raise KeyError(f"a logit-lens result needs {', '.join(missing)}")
        n_layers, n_pos = np.shape(arrays["topk_ids"])[:2]

        def filled(name: str, fill: Any) -> Any:
            if name in arrays:
                return arrays[name]
            if name == "positions":
                return np.arange(n_pos)
            return np.full((n_layers, n_pos) if name in _PER_LAYER else (n_pos,), fill)

        labels = None
        if "label_step" in arrays and "label_kind" in arrays:
            labels = {name: filled(name, -1) for name, _ in _LABEL_FIELDS}
            labels["label_arg"] = meta.get("label_arg")
        fields = {name: filled(name, 0) for name, _ in _ARRAY_FIELDS}
        return cls(
            labels=labels, info=meta.get("info"), vocab=meta.get("vocab"), kind_names=meta.get("kinds"), **fields
        )

    @staticmethod
    def concat(results: Sequence["LensResult"], info: Optional[dict] = None) -> "LensResult":
        """Join results along positions (e.g. the passes of one trajectory)."""
        if len(results) == 1 and info is None:
            return results[0]
        arrays: "dict[str, Any]" = {}
        for name, _ in _ARRAY_FIELDS:
            axis = 1 if name in _PER_LAYER else 0
            arrays[name] = np.concatenate([getattr(r, name) for r in results], axis=axis)
        labels: "Optional[dict[str, Any]]" = None
        if all(r.labels for r in results) and results:
            labels = {n: np.concatenate([r.labels[n] for r in results]) for n, _ in _LABEL_FIELDS}
            labels["label_arg"] = [a for r in results for a in r.labels["label_arg"]]
        vocab: dict = {}
        for r in results:
            vocab.update(r.vocab)
        return LensResult(labels=labels, info=info if info is not None else results[0].info, vocab=vocab, **arrays)


def _build_result(local: Any, stats: Any, positions, token_ids, targets, actual, labels, info) -> LensResult:
    from evalrx.internals.passes import decode_pieces

    ids = np.concatenate([np.asarray(token_ids).ravel(), np.asarray(targets).ravel(), stats.topk_ids.ravel()])
    return LensResult(
        positions=positions,
        token_ids=token_ids,
        target_ids=targets,
        target_is_actual=actual,
        topk_ids=stats.topk_ids,
        topk_logprobs=stats.topk_logprobs,
        entropy=stats.entropy,
        target_logprob=stats.target_logprob,
        target_rank=stats.target_rank,
        hidden_norm=stats.hidden_norm,
        labels=labels,
        info=info,
        vocab=decode_pieces(local.tokenizer, ids),
    )


def lens_on_ids(
    local: Any,
    ids: Sequence[int],
    positions: Sequence[int],
    top_k: int,
    *,
    labels: Optional[dict] = None,
    info: Optional[dict] = None,
    precision: str = "exact",
) -> "tuple[LensResult, Any]":
    """One pass over `ids` and the lens at `positions`; returns the result and the raw stats."""
    from evalrx.internals.passes import forward

    positions = [int(p) for p in positions]
    logits, hidden = forward(local, ids, positions)
    return lens_at(local, ids, logits, hidden, positions, top_k, labels=labels, info=info, precision=precision)


def lens_at(
    local: Any,
    ids: Sequence[int],
    logits: Any,
    hidden: Any,
    positions: Sequence[int],
    top_k: int,
    *,
    labels: Optional[dict] = None,
    info: Optional[dict] = None,
    precision: str = "exact",
    lens: Any = None,
) -> "tuple[LensResult, Any]":
    """The lens at `positions` of a pass over `ids` that gave `logits` there and `hidden` states.

    `lens` is what computes the statistics (`PassResult.lens_stats`, shared with the pass's other readers);
    `lens_stats` on `hidden` and `logits` when None.
    """
    from evalrx.internals.passes import lens_stats

    n = len(ids)
    actual = np.array([p + 1 < n for p in positions], dtype=bool)
    top1 = logits.float().argmax(-1).tolist() if positions else []
    targets = [int(ids[p + 1]) if p + 1 < n else int(top1[i]) for i, p in enumerate(positions)]
    if lens is not None:
        stats = lens(positions, targets, top_k, precision=precision)
    else:
        stats = lens_stats(local, hidden, logits, positions, targets, top_k, precision=precision)
    token_ids = [int(ids[p]) for p in positions]
    result = _build_result(local, stats, positions, token_ids, targets, actual, labels, info)
    return result, stats


def _labels_for(points: Sequence[Any], pass_index: int) -> dict:
    return {
        "label_step": [p.step for p in points],
        "label_kind": [KINDS.index(p.kind) for p in points],
        "label_call": [p.call for p in points],
        "label_piece": [p.piece for p in points],
        "label_pass": [pass_index] * len(points),
        "label_token_index": [p.token_index for p in points],
        "label_arg": [p.arg for p in points],
    }


@register_analyzer
class LogitLensAnalyzer(PassAnalyzer):
    """Logit lens over all layers, on a prompt or at a trajectory's decision positions.

    Args:
        top_k: top tokens kept per layer and position.
        mode: "auto" (one pass for prefix-stable turns) or "per_step" (one pass per turn).
        kinds: which decision kinds to analyse on trajectories (default: all of `KINDS`).
        max_value_tokens: tokens kept per argument value.
        max_answer_tokens: tokens kept of a final answer.
        answer_points: which tokens of a final answer are read: "values" (default: its first token and its
            values: numbers, ids, quoted strings, the words it shares with the expected answer, the
            observations and the calls' arguments; JSON answers' values) or "all" (every token, up to
            `max_answer_tokens`). `info["answer_points"]` says which.
        precision: "exact" (default: the unembedding in the model's own dtype, statistics fp32), or
            "bfloat16", a named cheaper setting: layers 0..L-1 unembedded in bfloat16 (the product
            ~4x faster on CPUs with bf16 instructions; on SmolLM2-135M log-probs differ by a median
            0.02 nats, up to ~0.4, and the top-1 token agrees at ~98% of layer-positions), layer L
            still the model's own logits. `info["precision"]` says so and the pages show it.
    """

    name = "logit_lens"
    requires = frozenset({Capability.HIDDEN_STATES, Capability.LOGITS})
    generation_capture = frozenset({"hidden_states"})

    def __init__(
        self,
        top_k: int = 10,
        *,
        mode: str = "auto",
        kinds: Sequence[str] = KINDS,
        max_value_tokens: int = 16,
        max_answer_tokens: int = 64,
        answer_points: str = "values",
        precision: str = "exact",
    ) -> None:
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown decision kinds {sorted(unknown)}; known: {list(KINDS)}")
        self.top_k = int(top_k)
        self.mode = mode
        self.kinds = tuple(kinds)
        self.max_value_tokens = max_value_tokens
        self.max_answer_tokens = max_answer_tokens
        self.answer_points = checked_answer_points(answer_points)
        self.precision = checked_precision(precision)

    def _cheaper(self) -> dict:
        """What `info` says of a cheaper setting (nothing when exact, so exact results stay as they were)."""
        return {} if self.precision == "exact" else {"precision": self.precision}

    def run(self, model: Model, text: str, *, positions: "Sequence[int] | str | None" = None) -> LensResult:
        """Lens over one prompt.

        Args:
            model: a local handle (`evalrx.load` / `evalrx.wrap`).
            text: raw text, tokenized with the tokenizer's usual special tokens (no chat template).
            positions: positions to analyse: all (None), "last", or explicit indices
                (negative ones count from the end).

        Returns:
            A `LensResult`; at the last position the chosen token is the final layer's top-1.
        """
        from evalrx.internals.passes import local_model

        self.check(model)
        local = local_model(model, type(self).__name__)
        ids = list(local.text_tokenizer(text)["input_ids"])
        if not ids:
            raise ValueError("text tokenizes to nothing")
        n = len(ids)
        if positions is None:
            pos = list(range(n))
        elif positions == "last":
            pos = [n - 1]
        elif isinstance(positions, str):
            raise ValueError(f'positions must be "last" or a list of indices, not {positions!r}')
        else:
            pos = [p + n if p < 0 else p for p in positions]
            bad = [p for p in pos if not 0 <= p < n]
            if bad:
                raise IndexError(f"positions {bad} out of range for {n} tokens")
        info = {"model": model_id(model), "top_k": self.top_k, "n_tokens": n, "source": "text", **self._cheaper()}
        from evalrx.models import batch_threads

        with batch_threads(model):
            result, _ = lens_on_ids(local, ids, pos, self.top_k, info=info, precision=self.precision)
        return result

    def requests(self, plan: TrajectoryPlan) -> list:
        """Per pass, the logits and hidden states at the decision positions of the kinds analysed."""
        out: list = []
        for i in range(len(plan.passes)):
            points = plan.decisions(
                i,
                max_value_tokens=self.max_value_tokens,
                max_answer_tokens=self.max_answer_tokens,
                answer_points=self.answer_points,
            )
            points = [p for p in points if p.kind in self.kinds]
            positions = [p.position for p in points]
            lens = LensRequest(positions, self.top_k, self.precision)
            out.append(PassRequest(logits=positions, hidden=True, state=points, lens=lens) if points else None)
        return out

    def read(self, plan: TrajectoryPlan, request: PassRequest, result: PassResult) -> LensResult:
        points = request.state
        positions = [int(p.position) for p in points]
        lens, _ = lens_at(
            plan.local,
            result.ids,
            result.logits_at(positions),
            result.hidden_states,
            positions,
            self.top_k,
            labels=_labels_for(points, result.index),
            precision=self.precision,
            lens=result.lens_stats,
        )
        return lens

    def finish(self, plan: TrajectoryPlan, parts: list) -> LensResult:
        """All passes' positions in one result; `info["plan"]` tells whether one pass sufficed."""
        # `mark_source` adds where the passes came from.
        info = plan.info(top_k=self.top_k, answer_points=self.answer_points, **self._cheaper())
        results = [part for part in parts if part is not None]
        if not results:
            return _empty_result(plan.local, self.top_k, info)
        return LensResult.concat(results, info=info)


def _empty_result(local: Any, top_k: int, info: dict) -> LensResult:
    n_out = local.parts.num_layers + 1
    empty_i = np.zeros(0, dtype=np.int32)
    return LensResult(
        positions=empty_i,
        token_ids=empty_i,
        target_ids=empty_i,
        target_is_actual=np.zeros(0, dtype=bool),
        topk_ids=np.zeros((n_out, 0, top_k), dtype=np.int32),
        topk_logprobs=np.zeros((n_out, 0, top_k), dtype=np.float32),
        entropy=np.zeros((n_out, 0), dtype=np.float32),
        target_logprob=np.zeros((n_out, 0), dtype=np.float32),
        target_rank=np.zeros((n_out, 0), dtype=np.int32),
        hidden_norm=np.zeros((n_out, 0), dtype=np.float32),
        labels={name: np.zeros(0) for name, _ in _LABEL_FIELDS} | {"label_arg": []},
        info=info,
    )
