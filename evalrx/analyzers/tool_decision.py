"""Tool-decision alternatives: how close the model came to calling another tool, by layer.

At each tool call, every available tool name is written into the model's turn in
place of the chosen one and tokenized; the first token where a name's tokens differ
from the chosen name's is where that alternative would have split off. The
alternative's log-probability is the teacher-forced probability of the shared
tokens up to there plus the probability of its own token at the split (an upper
bound on the whole name, exact for the event "the model leaves the chosen name
here for this one"); the chosen tool's is the probability of all its tokens through
the last split point. The margin is chosen minus the best alternative, in nats, per
layer of the logit lens (the final layer is the model itself).

An argument value is decided token by token: each of its tokens (up to
`MAX_VALUE_TOKENS`) is read as the chosen token's log-prob against the best other
token, and the one with the smallest margin at the model's output is the value's
decision (in "length of Zestos" the near miss may be "Z" against "Sh", not the first
word). String arguments whose schema lists an `enum` get the enum values as
alternatives instead, like tool names. Each decision names the token it was
measured at: its text and its index within the name or value (`token`, `piece`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence

import numpy as np

from evalrx.analyzers._base import AnalysisResult, model_id, register_analyzer, register_result
from evalrx.analyzers._pass_analyzer import PassAnalyzer
from evalrx.core.capability import Capability
from evalrx.core.model import Model
from evalrx.core.tool import normalize_call
from evalrx.internals.passes import (
    MAX_VALUE_TOKENS,
    LensRequest,
    PassRequest,
    PassResult,
    TrajectoryPlan,
    checked_precision,
    find_call_spans,
    normalize_tools,
    token_at_char,
    tokenize_with_offsets,
    tokens_overlapping,
    tool_names,
)

__all__ = ["RUNNER_UP", "ToolDecisionAnalyzer", "ToolDecisionResult"]

# The alternative of an argument value without an enum: the best token other than the chosen one.
RUNNER_UP = "(best other token)"


@dataclass
class _Decision:
    """One decision being assembled: where it is, its candidates and the positions it reads."""

    step: int
    call: int
    kind: str  # "tool_name" | "arg_value"
    arg: str
    chosen: str
    candidates: list  # chosen first
    decision_index: int  # token index of the decided token
    chosen_path: list = field(default_factory=list)  # token indices summed for the chosen candidate
    alt_paths: list = field(default_factory=list)  # per alternative: (shared token indices, split index, token id)
    pass_index: int = 0
    tokens: list = field(default_factory=list)  # token indices of the whole name or value (for `piece`)
    # Token indices each read against the best other token; the smallest margin there is the decision.
    each_token: list = field(default_factory=list)
    token_id: int = -1  # the decided token's id, set when scored


def _escape(value: str) -> str:
    """A string as it appears between JSON quotes."""
    return json.dumps(value, ensure_ascii=False)[1:-1]


def _splits(
    tokenizer: Any,
    text: str,
    region: "tuple[int, int]",
    span: "tuple[int, int]",
    ids: Sequence[int],
    offsets: Sequence[tuple],
    alternatives: Sequence[str],
) -> list:
    """For each alternative string written over `text[span]`, `(split_index, token_id)` or None.

    `split_index` is the token index (in `ids`) of the first token where the
    alternative's tokenization differs from the text's; None when it cannot be
    mapped onto the pass's tokens.
    """
    r0, r1 = region
    base_ids, base_off = tokenize_with_offsets(tokenizer, text[r0:r1])
    out: "list[Optional[tuple[int, int]]]" = []
    for alt in alternatives:
        alt_text = text[r0 : span[0]] + _escape(alt) + text[span[1] : r1]
        alt_ids, _ = tokenize_with_offsets(tokenizer, alt_text)
        d = 0
        while d < len(base_ids) and d < len(alt_ids) and base_ids[d] == alt_ids[d]:
            d += 1
        if d >= len(base_ids) or d >= len(alt_ids):
            out.append(None)
            continue
        ctx = token_at_char(offsets, base_off[d][0] + r0)
        if ctx < 1 or ids[ctx] != base_ids[d]:  # standalone tokens do not line up with the pass
            out.append(None)
            continue
        out.append((ctx, int(alt_ids[d])))
    return out


def _name_decision(tokenizer, text, region, cs, ids, offsets, names, step, pass_index) -> Optional[_Decision]:
    alts = [n for n in names if n != cs.name]
    name_tokens = tokens_overlapping(offsets, *cs.name_span)
    if not name_tokens:
        return None
    splits = _splits(tokenizer, text, region, cs.name_span, ids, offsets, alts)
    kept = [(a, s) for a, s in zip(alts, splits) if s is not None]
    # Past the last split no candidate is left to compete, so the chosen path stops there.
    first = min(s[0] for _, s in kept) if kept else name_tokens[0]
    last = max(s[0] for _, s in kept) if kept else name_tokens[0]
    dec = _Decision(step, cs.call, "tool_name", "", cs.name, [cs.name] + [a for a, _ in kept], first)
    dec.chosen_path = list(range(first, last + 1))
    dec.alt_paths = [(list(range(first, s[0])), s[0], s[1]) for _, s in kept]
    dec.pass_index = pass_index
    dec.tokens = name_tokens
    return dec


def _arg_decisions(tokenizer, text, region, cs, ids, offsets, schemas, step, pass_index) -> list:
    props = ((schemas.get(cs.name) or {}).get("properties") or {}) if schemas else {}
    out = []
    for key, vspan, value in cs.args:
        toks = tokens_overlapping(offsets, *vspan)
        if not toks or toks[0] < 1:
            continue
        first = toks[0]
        enum = (props.get(key) or {}).get("enum") if isinstance(props.get(key), dict) else None
        if isinstance(value, str) and isinstance(enum, list) and value in enum:
            alts = [str(e) for e in enum if isinstance(e, str) and e != value]
            splits = _splits(tokenizer, text, region, vspan, ids, offsets, alts)
            kept = [(a, s) for a, s in zip(alts, splits) if s is not None]
            lo = min(s[0] for _, s in kept) if kept else first
            hi = max(s[0] for _, s in kept) if kept else first
            dec = _Decision(step, cs.call, "arg_value", str(key), value, [value] + [a for a, _ in kept], lo)
            dec.chosen_path = list(range(lo, hi + 1))
            dec.alt_paths = [(list(range(lo, s[0])), s[0], s[1]) for _, s in kept]
        else:
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            # Read token by token: the first candidate becomes the decided token's text (`_result`).
            dec = _Decision(step, cs.call, "arg_value", str(key), shown, [shown, RUNNER_UP], first)
            dec.chosen_path = [first]
            dec.each_token = toks[:MAX_VALUE_TOKENS]
        dec.pass_index = pass_index
        dec.tokens = toks
        out.append(dec)
    return out


@register_result
class ToolDecisionResult(AnalysisResult):
    """Alternatives and margins at each tool-name and argument-value decision, per lens layer.

    Arrays (D decisions, `layers` = L + 1, C = most candidates):
        cand_logprob `[D, layers, C]`: log-prob of each candidate (index 0 = chosen; NaN padding).
        decision_logprob `[D, layers, C]`: log-prob of each candidate's token at the decision token.
        margin `[D, layers]`: chosen minus best alternative, nats (positive: the chosen one led).
        chosen_rank, entropy `[D, layers]`: at the decision token.
        runner_up_id `[D, layers]`: the best token other than the chosen one there.
    `decisions` (meta) describes each row: step, call, kind, arg, chosen (the name or whole value written),
    candidates (chosen first: names or enum values; for an argument without an enum the decided token
    and `RUNNER_UP`), token_index (the decided token in its pass), token (its text) and piece (its index
    within the name or value). Results stored before `token` and `piece` lack them: their arguments were
    measured at the value's first token, and their first candidate is the whole value.
    """

    result_type = "tool_decision"

    def __init__(
        self,
        decisions,
        cand_logprob,
        decision_logprob,
        margin,
        chosen_rank,
        entropy,
        runner_up_id,
        info=None,
        vocab=None,
    ):
        self.decisions = list(decisions)
        self.cand_logprob = np.asarray(cand_logprob, dtype=np.float32)
        self.decision_logprob = np.asarray(decision_logprob, dtype=np.float32)
        self.margin = np.asarray(margin, dtype=np.float32)
        self.chosen_rank = np.asarray(chosen_rank, dtype=np.int32)
        self.entropy = np.asarray(entropy, dtype=np.float32)
        self.runner_up_id = np.asarray(runner_up_id, dtype=np.int32)
        self.info = dict(info or {})
        self.vocab = dict(vocab or {})

    @property
    def final_margin(self) -> np.ndarray:
        """Margin under the model's own output (last layer), per decision."""
        return self.margin[:, -1] if len(self.decisions) else np.zeros(0, dtype=np.float32)

    def probabilities(self, index: int, layer: int = -1) -> dict:
        """`{candidate: probability}` of decision `index` at `layer` (default: the model's output)."""
        d = self.decisions[index]
        row = self.cand_logprob[index, layer]
        return {c: float(np.exp(row[i])) for i, c in enumerate(d["candidates"]) if not np.isnan(row[i])}

    def alternative(self, index: int, layer: int = -1) -> "tuple[str, Optional[float]]":
        """The strongest candidate other than the chosen one of decision `index` at `layer`, and its log-prob.

        `RUNNER_UP` is named by its token's text where the vocabulary has it; `("", None)` when nothing competed.
        """
        cands = list(self.decisions[index].get("candidates") or [])
        row = self.cand_logprob[index, layer] if index < len(self.cand_logprob) else []
        scored = [(float(v), i) for i, v in enumerate(row[1 : len(cands)], start=1) if not np.isnan(v)]
        if not scored:
            return "", None
        lp, best = max(scored, key=lambda s: s[0])  # ties: the first listed
        name = str(cands[best])
        runner = int(self.runner_up_id[index, layer]) if index < len(self.runner_up_id) else -1
        if name == RUNNER_UP and str(runner) in self.vocab:
            name = self.vocab[str(runner)]
        return name, lp

    def for_step(self, step: int) -> list:
        """Indices of the decisions of one trajectory step."""
        return [i for i, d in enumerate(self.decisions) if d["step"] == step]

    def margin_rows(self) -> "list[tuple[int, dict, list[float]]]":
        """Each decision that has margins: its index, itself, and its margin per lens layer as floats (the last:
        the model's output).

        The one reader of `margin` by decision: the white-box diagnosis and the indexed score read it here.
        """
        margin = self.margin
        return [
            (i, d, [float(x) for x in margin[i]])
            for i, d in enumerate(self.decisions)
            if i < len(margin) and np.ndim(margin[i]) and len(margin[i])
        ]

    def min_tool_margin(self) -> Optional[float]:
        """The smallest final-layer margin over the tool-name decisions (None: no tool-name decision, or all NaN)."""
        values = [row[-1] for _, d, row in self.margin_rows() if d.get("kind") == "tool_name"]
        values = [v for v in values if not np.isnan(v)]
        return min(values) if values else None

    def to_arrays(self) -> dict:
        return {
            "cand_logprob": self.cand_logprob,
            "decision_logprob": self.decision_logprob,
            "margin": self.margin,
            "chosen_rank": self.chosen_rank,
            "entropy": self.entropy,
            "runner_up_id": self.runner_up_id,
        }

    @property
    def meta(self) -> dict:
        return {
            "result_type": self.result_type,
            "analyzer": ToolDecisionAnalyzer.name,
            "decisions": self.decisions,
            "info": self.info,
            "vocab": self.vocab,
        }

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict) -> "ToolDecisionResult":
        """Rebuild a stored result. `margin` is required (KeyError without it); an array a record lacks
        (one kept with its margins only) comes back empty: no candidates, NaN entropy, rank and id -1."""
        margin = np.asarray(arrays["margin"], dtype=np.float32)
        shape = margin.shape if margin.ndim == 2 else (len(margin), 0)

        def get(name: str, fill: float, extra: tuple = ()) -> Any:
            return arrays[name] if name in arrays else np.full(shape + extra, fill)

        return cls(
            meta.get("decisions") or [],
            get("cand_logprob", np.nan, (0,)),
            get("decision_logprob", np.nan, (0,)),
            margin,
            get("chosen_rank", -1),
            get("entropy", np.nan),
            get("runner_up_id", -1),
            info=meta.get("info"),
            vocab=meta.get("vocab"),
        )


def _wanted(ids: Sequence[int], decisions: Sequence[_Decision], *, each_token: bool = True) -> "tuple[list, list]":
    """The token indices the decisions read, in order, and per index the token ids whose log-probs they need.

    `each_token=False` leaves out the value tokens read only for their final margin (once decided).
    """
    wanted: "dict[int, set]" = {}
    for d in decisions:
        for idx in d.chosen_path + (d.each_token if each_token else []):
            wanted.setdefault(idx, set()).add(int(ids[idx]))
        for shared, split, tok in d.alt_paths:
            for idx in shared:
                wanted.setdefault(idx, set()).add(int(ids[idx]))
            wanted.setdefault(split, set()).add(int(tok))
        wanted.setdefault(d.decision_index, set()).add(int(ids[d.decision_index]))
    order = sorted(wanted)
    return order, [sorted(wanted[i]) for i in order]


def _score(
    local: Any,
    ids: Sequence[int],
    decisions: Sequence[_Decision],
    order: list,
    logits: Any,
    hidden: Any,
    top_k: int,
    precision: str = "exact",
    lens: Any = None,
) -> list:
    """Fill the arrays of `decisions` (all from one pass) from its `logits` at `order - 1` (`_wanted`) and
    `hidden` states (through `lens`, the pass's shared `PassResult.lens_stats`, when given).

    A value read token by token is first decided on the model's own logits alone (`final_margins`); the
    lens then runs only at the tokens the decided decisions read.
    """
    from evalrx.internals.passes import final_margins, lens_stats

    at_row = {idx: r for r, idx in enumerate(order)}
    spread = sorted({i for d in decisions if len(d.each_token) > 1 for i in d.each_token})
    finals = {}
    if spread:
        rows = [at_row[i] for i in spread]
        finals = dict(zip(spread, final_margins(logits, rows, [int(ids[i]) for i in spread])))

    def decided(d: _Decision) -> _Decision:
        """`d` at its decided token: for a value read token by token, the one with the smallest final margin."""
        if len(d.each_token) < 2:
            return replace(d, token_id=int(ids[d.decision_index]))
        at = min(d.each_token, key=lambda i: finals[i])  # ties: the earliest token
        return replace(d, decision_index=at, chosen_path=[at], token_id=int(ids[at]))

    decisions = [decided(d) for d in decisions]
    order, gather = _wanted(ids, decisions, each_token=False)
    if len(order) < len(at_row):
        import torch

        keep = torch.tensor([at_row[i] for i in order], dtype=torch.long, device=logits.device)
        logits = logits.index_select(0, keep)
    positions = [i - 1 for i in order]
    targets = [int(ids[i]) for i in order]
    if lens is not None:
        stats = lens(positions, targets, max(2, top_k), gather, precision=precision)
    else:
        stats = lens_stats(local, hidden, logits, positions, targets, max(2, top_k), gather, precision=precision)
    row = {idx: r for r, idx in enumerate(order)}
    gathered = stats.gathered
    assert gathered is not None  # lens_stats was given `gather`

    def lp(idx: int, tok: int) -> np.ndarray:
        r = row[idx]
        return gathered[:, r, gather[r].index(int(tok))]

    def runner_up(r: int, chosen_tok: int) -> "tuple[np.ndarray, np.ndarray]":
        """Per layer, the best token other than the chosen one at row `r`, and its log-prob."""
        top, top_lp = stats.topk_ids[:, r, :], stats.topk_logprobs[:, r, :]
        first_is_chosen = top[:, 0] == chosen_tok
        return np.where(first_is_chosen, top[:, 1], top[:, 0]).astype(np.int32), np.where(
            first_is_chosen, top_lp[:, 1], top_lp[:, 0]
        )

    out = []
    n_out = stats.topk_ids.shape[0]
    for d in decisions:
        n_c = len(d.candidates)
        cand = np.full((n_out, n_c), np.nan, dtype=np.float32)
        at_dec = np.full((n_out, n_c), np.nan, dtype=np.float32)
        r = row[d.decision_index]
        chosen_tok = int(ids[d.decision_index])
        runner, runner_lp = runner_up(r, chosen_tok)
        cand[:, 0] = sum(lp(i, ids[i]) for i in d.chosen_path)
        at_dec[:, 0] = lp(d.decision_index, chosen_tok)
        if d.alt_paths:
            for c, (shared, split, tok) in enumerate(d.alt_paths, start=1):
                cand[:, c] = sum((lp(i, ids[i]) for i in shared), np.zeros(n_out, np.float32)) + lp(split, tok)
                at_dec[:, c] = lp(split, tok) if split == d.decision_index else lp(d.decision_index, chosen_tok)
        elif n_c == 2:  # argument without an enum: the best other token is the alternative
            cand[:, 1] = runner_lp
            at_dec[:, 1] = runner_lp
        if n_c > 1:
            margin = cand[:, 0] - np.nanmax(cand[:, 1:], axis=1)
        else:
            margin = np.full(n_out, np.inf, dtype=np.float32)
        out.append((d, cand, at_dec, margin, stats.target_rank[:, r], stats.entropy[:, r], runner))
    return out


@register_analyzer
class ToolDecisionAnalyzer(PassAnalyzer):
    """Probability of every available tool where the tool name is decided, and argument margins, by layer.

    Args:
        top_k: top tokens read at each decision position (at least 2, for the runner-up).
        mode: "auto" or "per_step" (see `LogitLensAnalyzer`).
        arguments: also analyse each argument value, at its least certain token (up to `MAX_VALUE_TOKENS`).
        precision: "exact" (default) or a cheaper lens precision ("bfloat16"; see `LogitLensAnalyzer`).
    """

    name = "tool_decision"
    requires = frozenset({Capability.HIDDEN_STATES, Capability.LOGITS})
    generation_capture = frozenset({"hidden_states"})

    def __init__(self, top_k: int = 5, *, mode: str = "auto", arguments: bool = True, precision: str = "exact") -> None:
        self.top_k = max(2, int(top_k))
        self.precision = checked_precision(precision)
        self.mode = mode
        self.arguments = arguments

    def _collect(self, local, text, ids, offsets, turns, names, schemas, pass_index) -> list:
        decisions = []
        for step, chars, calls in turns:
            for cs in find_call_spans(text, chars[0], chars[1], calls):
                dec = _name_decision(local.tokenizer, text, chars, cs, ids, offsets, names, step, pass_index)
                if dec is not None:
                    decisions.append(dec)
                if self.arguments:
                    decisions.extend(
                        _arg_decisions(local.tokenizer, text, chars, cs, ids, offsets, schemas, step, pass_index)
                    )
        return decisions

    def _result(self, local, scored, info) -> ToolDecisionResult:
        from evalrx.internals.passes import decode_pieces

        n_out = local.parts.num_layers + 1
        n_c = max((len(d.candidates) for d, *_ in scored), default=1)
        n = len(scored)
        cand = np.full((n, n_out, n_c), np.nan, dtype=np.float32)
        at_dec = np.full((n, n_out, n_c), np.nan, dtype=np.float32)
        margin = np.zeros((n, n_out), dtype=np.float32)
        rank = np.zeros((n, n_out), dtype=np.int32)
        ent = np.zeros((n, n_out), dtype=np.float32)
        runner = np.zeros((n, n_out), dtype=np.int32)
        for i, (d, c, a, m, r, e, ru) in enumerate(scored):
            cand[i, :, : c.shape[1]] = c
            at_dec[i, :, : a.shape[1]] = a
            margin[i], rank[i], ent[i], runner[i] = m, r, e, ru
        decided = decode_pieces(local.tokenizer, [d.token_id for d, *_ in scored])
        records = []
        for d, *_ in scored:
            token = decided.get(str(d.token_id), "")
            records.append(
                {
                    "step": d.step,
                    "call": d.call,
                    "kind": d.kind,
                    "arg": d.arg,
                    "chosen": d.chosen,
                    # Read token by token, the candidates are the decided token and the best other one.
                    "candidates": [token, *d.candidates[1:]] if d.each_token else d.candidates,
                    "token_index": d.decision_index,
                    "token": token,
                    "piece": d.tokens.index(d.decision_index) if d.decision_index in d.tokens else -1,
                    "pass": d.pass_index,
                }
            )
        vocab = decode_pieces(local.tokenizer, runner.ravel())
        return ToolDecisionResult(records, cand, at_dec, margin, rank, ent, runner, info=info, vocab=vocab)

    def run(self, model: Model, text: str, *, tools: Optional[list] = None) -> ToolDecisionResult:
        """Analyse the Hermes `<tool_call>` blocks inside a rendered conversation `text`.

        Args:
            model: a local handle.
            text: rendered text holding one or more `<tool_call>{...}</tool_call>` blocks.
            tools: the available tools (names are the candidates); the called names otherwise.
        """
        from evalrx.internals.passes import forward, local_model

        self.check(model)
        local = local_model(model, type(self).__name__)
        ids, offsets = tokenize_with_offsets(local.tokenizer, text)
        calls = []
        for m in re.finditer(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL):
            try:
                calls.append(normalize_call(json.loads(m.group(1), strict=False)))
            except (json.JSONDecodeError, AttributeError):
                continue
        names = tool_names(tools) or list(dict.fromkeys(c["name"] for c in calls))
        schemas = _schemas(normalize_tools(tools))
        decisions = self._collect(local, text, ids, offsets, [(0, (0, len(text)), calls)], names, schemas, 0)
        scored = []
        if decisions:
            order, _ = _wanted(ids, decisions)
            logits, hidden = forward(local, ids, [i - 1 for i in order])
            scored = _score(local, ids, decisions, order, logits, hidden, self.top_k, self.precision)
        info = {"model": model_id(model), "source": "text", "tools": names, **self._cheaper()}
        return self._result(local, scored, info)

    def _cheaper(self) -> dict:
        """What `info` says of a cheaper setting (nothing when exact)."""
        return {} if self.precision == "exact" else {"precision": self.precision}

    def _names(self, plan: TrajectoryPlan) -> list:
        """The candidate tool names: the tools offered, or without them the names the trajectory called."""
        called = (c["name"] for t in plan.conversation.turns for c in t.calls)
        return tool_names(plan.tools) or list(dict.fromkeys(called))

    def requests(self, plan: TrajectoryPlan) -> list:
        """Per pass with tool calls, the logits and hidden states where its decisions are read."""
        names = self._names(plan)
        schemas = _schemas(plan.conversation.tools)
        out: list = []
        for i, p in enumerate(plan.passes):
            turns = [(t.step_idx, t.gen_chars, t.turn.calls) for t in p.turns if t.turn.calls]
            decisions = self._collect(plan.local, p.text, p.ids, p.offsets, turns, names, schemas, i)
            if not decisions:
                out.append(None)
                continue
            order, gather = _wanted(p.ids, decisions)
            positions = [j - 1 for j in order]
            lens = LensRequest(positions, self.top_k, self.precision, dict(zip(positions, gather)))
            out.append(PassRequest(logits=positions, hidden=True, state=(decisions, order), lens=lens))
        return out

    def read(self, plan: TrajectoryPlan, request: PassRequest, result: PassResult) -> list:
        decisions, order = request.state
        logits = result.logits_at(request.logits)
        hidden = result.hidden_states
        return _score(
            plan.local, result.ids, decisions, order, logits, hidden, self.top_k, self.precision, result.lens_stats
        )

    def finish(self, plan: TrajectoryPlan, parts: list) -> ToolDecisionResult:
        """Every tool call of the trajectory; without `tools`, the candidates are the names it called."""
        scored = [row for part in parts if part for row in part]
        info = plan.info(tools=self._names(plan), **self._cheaper())
        return self._result(plan.local, scored, info)


def _schemas(tools: Optional[list]) -> dict:
    """`{tool name: parameters schema}` from OpenAI tool dicts."""
    out = {}
    for t in tools or []:
        fn = t.get("function", t)
        if fn.get("name"):
            out[fn["name"]] = fn.get("parameters") or {}
    return out
