"""Replay: re-score a stored trajectory, from any backend, teacher-forced on a local model.

A trajectory produced by an API model carries OpenAI-format calls; the local model's
chat template writes them in its own format (see `evalrx.internals.passes.conversation`), so a black-box run
gets white-box evidence: how likely the local model finds each turn, where its tool
decision would have gone, what its layers predicted. The part analyzers run together
through `analyze`, so they share one teacher-forced pass per planned pass. Nothing
here imports torch at module level.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, cast

import numpy as np

from evalrx.analyzers._base import AnalysisResult, Analyzer, model_id, register_analyzer, register_result
from evalrx.core.capability import Capability
from evalrx.core.case import Trajectory

__all__ = ["ReplayAnalyzer", "ReplayResult"]


@register_result
class ReplayResult(AnalysisResult):
    """A trajectory re-scored on a local model: per-turn summaries plus the analyses asked for.

    Attributes:
        step: trajectory step index per model turn.
        n_tokens: generated tokens re-scored per turn.
        sum_logprob / mean_logprob / min_logprob: teacher-forced log-probs of each turn's tokens.
        parts: the sub-results by analyzer name (token_uncertainty, tool_decision, logit_lens, ...).
        source_model / scoring_model: who produced the trajectory, who re-scored it.
    """

    result_type = "replay"

    def __init__(self, step, n_tokens, sum_logprob, mean_logprob, min_logprob, parts, source_model, scoring_model):
        self.step = np.asarray(step, dtype=np.int32)
        self.n_tokens = np.asarray(n_tokens, dtype=np.int32)
        self.sum_logprob = np.asarray(sum_logprob, dtype=np.float32)
        self.mean_logprob = np.asarray(mean_logprob, dtype=np.float32)
        self.min_logprob = np.asarray(min_logprob, dtype=np.float32)
        self.parts = dict(parts)
        self.source_model = source_model
        self.scoring_model = scoring_model

    def to_arrays(self) -> dict:
        arrays = {
            "step": self.step,
            "n_tokens": self.n_tokens,
            "sum_logprob": self.sum_logprob,
            "mean_logprob": self.mean_logprob,
            "min_logprob": self.min_logprob,
        }
        for name, part in self.parts.items():
            for key, value in part.to_arrays().items():
                arrays[f"{name}/{key}"] = value
        return arrays

    @property
    def meta(self) -> dict:
        return {
            "result_type": self.result_type,
            "analyzer": ReplayAnalyzer.name,
            "source_model": self.source_model,
            "scoring_model": self.scoring_model,
            "parts": {name: part.meta for name, part in self.parts.items()},
        }

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict) -> "ReplayResult":
        from evalrx.analyzers._base import result_from_arrays

        parts = {}
        for name, part_meta in (meta.get("parts") or {}).items():
            prefix = f"{name}/"
            sub = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
            parts[name] = result_from_arrays(sub, part_meta)
        return cls(
            arrays["step"],
            arrays["n_tokens"],
            arrays["sum_logprob"],
            arrays["mean_logprob"],
            arrays["min_logprob"],
            parts,
            meta.get("source_model"),
            meta.get("scoring_model"),
        )

    def turn_summary(self) -> list:
        """One dict per model turn: step, tokens and log-prob statistics."""
        return [
            {
                "step": int(s),
                "n_tokens": int(n),
                "sum_logprob": float(a),
                "mean_logprob": float(m),
                "min_logprob": float(lo),
            }
            for s, n, a, m, lo in zip(self.step, self.n_tokens, self.sum_logprob, self.mean_logprob, self.min_logprob)
        ]


@register_analyzer
class ReplayAnalyzer(Analyzer):
    """Re-score a stored trajectory teacher-forced on a local model.

    Works on trajectories from any backend: API turns with native calls are written
    in the local model's own call format by its chat template, so a black-box run
    gets white-box evidence (how likely the local model finds each turn, where its
    tool decision would have gone, what its layers predicted).

    Args:
        parts: the analyzers to run on the local model, by registry name.
        source_model: recorded as who produced the trajectory (e.g. "gpt-4o-mini on api").
        **options: keyword arguments for the part analyzers keyed by name,
            e.g. `logit_lens={"top_k": 5}`.
    """

    name = "replay"
    requires = frozenset({Capability.LOGITS})
    api_hint = (
        "Pass the local model to score on (evalrx.load(..., backend='hf_local') or evalrx.wrap(model, tokenizer)); "
        "the trajectory itself may come from any backend."
    )

    def __init__(
        self,
        parts: Sequence[str] = ("token_uncertainty", "tool_decision"),
        *,
        source_model: Optional[str] = None,
        mode: str = "auto",
        **options: Any,
    ) -> None:
        self.parts = tuple(parts)
        self.source_model = source_model
        self.mode = mode
        self.options = options

    def check(self, model: Any) -> None:
        from evalrx.analyzers._base import get_analyzer

        super().check(model)
        for name in self.parts:
            get_analyzer(name, **self.options.get(name, {})).check(model)

    def run_trajectory(
        self,
        model: Any,
        trajectory: Trajectory,
        *,
        tools: Optional[list] = None,
        system: Optional[str] = None,
        images: Optional[dict] = None,
    ) -> ReplayResult:
        """Re-score `trajectory` on `model` (a local handle) and run the part analyzers.

        Raises:
            CapabilityError: `model` lacks what a part needs (an API handle cannot score).
        """
        from evalrx.analyzers._base import get_analyzer
        from evalrx.analyzers._pass_analyzer import analyze
        from evalrx.analyzers.uncertainty import TokenUncertaintyResult

        self.check(model)
        analyzers = {}
        for name in dict.fromkeys(("token_uncertainty",) + self.parts):
            analyzer = get_analyzer(name, **dict(self.options.get(name, {})))
            if hasattr(analyzer, "mode"):
                analyzer.mode = self.mode
            analyzers[name] = analyzer
        # One teacher-forced pass per planned pass, read by every part.
        results = analyze(model, trajectory, list(analyzers.values()), tools=tools, system=system, images=images)
        parts = {name: results[analyzer.name.strip().lower()] for name, analyzer in analyzers.items()}
        unc = cast(TokenUncertaintyResult, parts["token_uncertainty"])
        steps, n, total, mean, low = [], [], [], [], []
        for step in unc.steps():
            lp = unc.logprob[unc.step == step]
            steps.append(step)
            n.append(len(lp))
            total.append(float(lp.sum()) if len(lp) else 0.0)
            mean.append(float(lp.mean()) if len(lp) else float("nan"))
            low.append(float(lp.min()) if len(lp) else float("nan"))
        if "token_uncertainty" not in self.parts:
            parts.pop("token_uncertainty")
        source = self.source_model or trajectory.metrics.get("model")
        return ReplayResult(steps, n, total, mean, low, parts, source, model_id(model))
