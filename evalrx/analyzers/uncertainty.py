"""Token uncertainty: log-prob, entropy and rank of every token the model generated.

On a local model the trajectory is teacher-forced (one pass for prefix-stable
templates), or read from the run's own generation when the agent captured it, and each
generated token is scored under the model's own output distribution, in fp32. For API models the log-probs the server returned with each
turn (stored on the step's span by the agent loop) are read back instead: the
token's log-prob always, and when the server sent `top_logprobs`, its rank within
them and a lower bound on the entropy (the mass outside the top list counted as
one outcome).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from evalrx.analyzers._base import AnalysisResult, model_id, register_analyzer, register_result
from evalrx.analyzers._pass_analyzer import PassAnalyzer
from evalrx.core.capability import Capability
from evalrx.core.case import StepRole
from evalrx.core.model import Model
from evalrx.internals.passes import PassRequest, PassResult, TrajectoryPlan

__all__ = ["TokenUncertaintyAnalyzer", "TokenUncertaintyResult", "uncertainty_from_logprobs"]


@register_result
class TokenUncertaintyResult(AnalysisResult):
    """Per generated token: id, log-prob, entropy, rank, its step and position.

    Attributes:
        token_ids: `[N]` (-1 where an API reported only text).
        logprob: natural-log probability of the token.
        entropy: of the distribution it was drawn from, nats (NaN when unknown).
        rank: 0 = the most likely token (-1 when unknown).
        step: trajectory step per token (-1 for a single prompt).
        position: index of the token in its pass (-1 for API log-probs).
        tokens: decoded text per token (what a page shades).
        source: "teacher_forced", "generation" (read from the run's own generate calls),
            "mixed" (some passes each way) or "api_logprobs".
    """

    result_type = "token_uncertainty"

    def __init__(self, token_ids, logprob, entropy, rank, step, position, tokens, source, info=None) -> None:
        self.token_ids = np.asarray(token_ids, dtype=np.int32)
        self.logprob = np.asarray(logprob, dtype=np.float32)
        self.entropy = np.asarray(entropy, dtype=np.float32)
        self.rank = np.asarray(rank, dtype=np.int32)
        self.step = np.asarray(step, dtype=np.int32)
        self.position = np.asarray(position, dtype=np.int32)
        self.tokens = list(tokens)
        self.source = source
        self.info = dict(info or {})

    def steps(self) -> list:
        """Steps present, in order."""
        return sorted({int(s) for s in self.step})

    def for_step(self, step: int) -> dict:
        """The arrays and token texts of one step."""
        mask = self.step == int(step)
        return {
            "token_ids": self.token_ids[mask],
            "logprob": self.logprob[mask],
            "entropy": self.entropy[mask],
            "rank": self.rank[mask],
            "tokens": [t for t, m in zip(self.tokens, mask) if m],
        }

    def to_arrays(self) -> dict:
        return {
            "token_ids": self.token_ids,
            "logprob": self.logprob,
            "entropy": self.entropy,
            "rank": self.rank,
            "step": self.step,
            "position": self.position,
        }

    @property
    def meta(self) -> dict:
        return {
            "result_type": self.result_type,
            "analyzer": TokenUncertaintyAnalyzer.name,
            "source": self.source,
            "tokens": self.tokens,
            "info": self.info,
        }

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict) -> "TokenUncertaintyResult":
        return cls(
            arrays["token_ids"],
            arrays["logprob"],
            arrays["entropy"],
            arrays["rank"],
            arrays["step"],
            arrays["position"],
            meta.get("tokens") or [],
            meta.get("source", ""),
            meta.get("info"),
        )


def _field(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def _api_token(entry: Any) -> "tuple[int, str, float, float, int]":
    """`(token_id, text, logprob, entropy, rank)` from one OpenAI-style log-prob entry."""
    lp = float(_field(entry, "logprob"))
    token = str(_field(entry, "token") or "")
    tid = _field(entry, "token_id")
    top = _field(entry, "top_logprobs") or []
    entropy, rank = float("nan"), -1
    if top:
        tops = [float(_field(t, "logprob")) for t in top]
        rank = sum(1 for v in tops if v > lp + 1e-9)
        probs = [math.exp(v) for v in tops]
        rest = max(0.0, 1.0 - sum(probs))
        entropy = -sum(p * math.log(p) for p in probs if p > 0) - (rest * math.log(rest) if rest > 0 else 0.0)
    return (int(tid) if tid is not None else -1), token, lp, entropy, rank


def uncertainty_from_logprobs(trajectory: Any) -> TokenUncertaintyResult:
    """Token uncertainty from the log-probs stored on a trajectory's model turns (no model needed).

    Reads `step.span["logprobs"]` (the agent loop stores `ChatTurn.logprobs` there):
    entries with `token`, `logprob` and optionally `token_id` and `top_logprobs`.
    """
    ids, texts, lps, ents, ranks, steps = [], [], [], [], [], []
    for s in trajectory.steps:
        if s.role is not StepRole.ACTOR:
            continue
        for entry in s.span.get("logprobs") or []:
            tid, text, lp, ent, rank = _api_token(entry)
            ids.append(tid)
            texts.append(text)
            lps.append(lp)
            ents.append(ent)
            ranks.append(rank)
            steps.append(s.idx)
    info = {"sample_id": getattr(trajectory, "sample_id", None), "entropy": "lower bound from top_logprobs"}
    return TokenUncertaintyResult(ids, lps, ents, ranks, steps, [-1] * len(ids), texts, "api_logprobs", info)


def _has_logprobs(trajectory: Any) -> bool:
    return any(s.role is StepRole.ACTOR and s.span.get("logprobs") for s in trajectory.steps)


@register_analyzer
class TokenUncertaintyAnalyzer(PassAnalyzer):
    """Log-prob, entropy and rank of each generated token (teacher-forced, or from API log-probs).

    Args:
        mode: "auto" or "per_step" (see `LogitLensAnalyzer`).
    """

    name = "token_uncertainty"
    requires = frozenset({Capability.LOGITS})
    generation_capture = frozenset({"hidden_states"})  # its logits are the unembedding of the captured last layer

    def __init__(self, *, mode: str = "auto") -> None:
        self.mode = mode

    def run(self, model: Model, text: str) -> TokenUncertaintyResult:
        """Score every token of `text` after the first under the model (tokenizer's usual special tokens)."""
        from evalrx.internals.passes import final_stats, forward, local_model

        self.check(model)
        local = local_model(model, type(self).__name__)
        ids = list(local.text_tokenizer(text)["input_ids"])
        if len(ids) < 2:
            raise ValueError("need at least two tokens to score")
        pos = list(range(len(ids) - 1))
        logits, _ = forward(local, ids, pos, hidden=False)
        targets = ids[1:]
        lp, rank, ent = final_stats(logits, targets)
        tokens = local.text_tokenizer.batch_decode([[t] for t in targets])
        info = {"model": model_id(model), "source": "text"}
        return TokenUncertaintyResult(
            targets, lp, ent, rank, [-1] * len(targets), [p + 1 for p in pos], tokens, "teacher_forced", info
        )

    def reads_passes(self, model: Any, trajectory: Any) -> bool:
        """False without a model, or for a model without logits on a trajectory that stored log-probs."""
        caps = frozenset(getattr(model, "capabilities", frozenset()) or frozenset())
        return not (model is None or (Capability.LOGITS not in caps and _has_logprobs(trajectory)))

    def without_passes(self, trajectory: Any) -> TokenUncertaintyResult:
        """The log-probs the trajectory stored: with `model=None`, or a model without logits on a trajectory that
        carries them (otherwise the turns are scored teacher-forced)."""
        return uncertainty_from_logprobs(trajectory)

    def requests(self, plan: TrajectoryPlan) -> list:
        """Per pass, the logits that predict each generated token."""
        out: list = []
        for tf_pass in plan.passes:
            index: list = []
            owner: list = []
            for pt in tf_pass.turns:
                g0, g1 = pt.gen_tokens
                for i in range(max(1, g0), g1):
                    index.append(i)
                    owner.append(pt.step_idx)
            out.append(PassRequest(logits=[i - 1 for i in index], state=(index, owner)) if index else None)
        return out

    def read(self, plan: TrajectoryPlan, request: PassRequest, result: PassResult) -> tuple:
        from evalrx.internals.passes import final_stats

        index, owner = request.state
        targets = [result.ids[i] for i in index]
        lp, rank, ent = final_stats(result.logits_at(request.logits), targets)
        return targets, lp.tolist(), ent.tolist(), rank.tolist(), owner, index

    def finish(self, plan: TrajectoryPlan, parts: list) -> TokenUncertaintyResult:
        """The passes' tokens in step and position order."""
        cols: list = [[], [], [], [], [], []]  # ids, logprob, entropy, rank, step, position
        for part in parts:
            if part is not None:
                for col, values in zip(cols, part):
                    col.extend(values)
        ids_all, lps, ents, ranks, steps, positions = cols
        order = sorted(range(len(steps)), key=lambda i: (steps[i], positions[i]))  # passes come in plan order
        ids_all, lps, ents, ranks, steps, positions = ([col[i] for i in order] for col in cols)
        tokens = plan.local.text_tokenizer.batch_decode([[t] for t in ids_all]) if ids_all else []
        info = plan.info()
        return TokenUncertaintyResult(ids_all, lps, ents, ranks, steps, positions, tokens, "teacher_forced", info)
