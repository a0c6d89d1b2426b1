"""The headline numbers of an analysis result that the store indexes for filters and the predictors table.

Their names are `evalrx.core.scores`; the worker reads them from the result objects it holds and puts
them on each `AnalysisRecord` (`scores`), so the store writes them without decoding anything.
"""

from __future__ import annotations

from typing import Any, Optional

from evalrx.analyzers._base import result_from_arrays
from evalrx.core.scores import ENTROPY_SCORE, LENS_SETTLE_SCORE, MARGIN_SCORE, OBS_ATTENTION_SCORE


def min_tool_margin(meta: dict, arrays: dict) -> Optional[float]:
    """The smallest final-layer margin over a stored tool-decision result's tool-name decisions (None: no calls).

    Decoded by `ToolDecisionResult` (`min_tool_margin`), the one reader of its margins.
    """
    from evalrx.analyzers.tool_decision import ToolDecisionResult

    if arrays.get("margin") is None or not meta.get("decisions"):
        return None
    return ToolDecisionResult.from_arrays(arrays, meta).min_tool_margin()


def _lens_scores(result: Any) -> dict:
    """The latest layer at which a chosen tool name settles as top-1 (never: layers + 1), and the mean
    final-layer entropy at the decision tokens (tool names and argument values)."""
    import numpy as np

    kinds = np.array(result.kinds)
    out: dict = {}
    tool = kinds == "tool_name"
    if tool.any():
        settle = result.settles_at[tool]
        out[LENS_SETTLE_SCORE] = float(np.where(settle < 0, result.num_layers + 1, settle).max())
    decision = np.isin(kinds, ["tool_name", "arg_value"])
    if decision.any():
        out[ENTROPY_SCORE] = float(np.nanmean(result.entropy[-1][decision]))
    return out


def _attention_scores(result: Any) -> dict:
    """At the decision tokens, the final layer's attention share on the latest tool observation before them."""
    import numpy as np

    steps = result.labels.get("label_step")
    if steps is None or not len(result.positions):
        return {}
    shares = []
    for p, step in enumerate(steps):
        seen = [
            i
            for i, seg in enumerate(result.segments)
            if seg["kind"] == "observation" and seg.get("step") is not None and seg["step"] < int(step)
        ]
        if seen:
            shares.append(float(result.mass[p, -1, max(seen, key=lambda i: result.segments[i]["step"])]))
    return {OBS_ATTENTION_SCORE: float(np.mean(shares))} if shares else {}


def analysis_scores(analyzer: str, meta: dict, arrays: dict, result: Any = None) -> dict:
    """The numbers of one stored result that the list filters on and the predictors table reads.

    `result` is the result object when the caller still has it (the worker does); otherwise it is
    decoded from `arrays` with the result classes, as the pages decode it.
    """
    if meta.get("error"):
        return {}
    kind = meta.get("result_type") or analyzer
    if kind == "tool_decision":
        from evalrx.analyzers.tool_decision import ToolDecisionResult

        value = result.min_tool_margin() if isinstance(result, ToolDecisionResult) else min_tool_margin(meta, arrays)
        return {} if value is None else {MARGIN_SCORE: value}
    if kind not in ("logit_lens", "attention"):
        return {}
    if result is None:
        result = result_from_arrays(arrays, meta)  # one decoder for stored results, as the pages use
    return _lens_scores(result) if kind == "logit_lens" else _attention_scores(result)
