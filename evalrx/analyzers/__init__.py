"""Analyzers: what a model's layers did at the steps where an agent went wrong.

Every analyzer declares the capabilities it needs (checked before it runs, with a
`CapabilityError` naming the analyzer, the model and what is missing), runs on one
prompt (`run(model, text)`) or on a stored trajectory (`run_trajectory(model,
trajectory, tools=..., system=...)`), and returns a result that a store keeps
compactly (`to_arrays()` + `meta`, rebuilt with `result_from_arrays`).

    from evalrx.analyzers import LogitLensAnalyzer
    lens = LogitLensAnalyzer(top_k=10).run(handle, "The capital of France is")
    lens.topk_ids.shape        # [layers, positions, k]; layer 0 = embeddings, L = final

Several analyzers of one trajectory share its teacher-forced passes: `analyze` runs
ONE forward per planned pass and hands the same pass result to each of them.

    from evalrx.analyzers import analyze
    results = analyze(handle, trajectory, ["logit_lens", "tool_decision", "attention"], tools=schemas)

When the run captured its own generation (hf_local `chat(..., capture=...)`, kept on the
trajectory by the agent loop: `Agent(..., chat_kwargs={"capture": True})`), `analyze` builds
each pass the captures cover from them with no forward at all, and falls back to the
teacher-forced pass where they do not; `result.info["source"]` says which.

Built in: `logit_lens`, `tool_decision`, `attention`, `token_uncertainty`, `replay`. One registry,
`ANALYZERS`, holds them, any added with `register_analyzer`, and the worker hooks of
`evalrx.runner.register_hook` (`HookAnalyzer`); `known_analyzers()` lists every name.
Each analyzer module holds what its analysis computes and its result class; `_pass_analyzer` holds
`PassAnalyzer` and `analyze`. The mechanism they share (rebuild the conversation a trajectory came from,
plan the teacher-forced passes over it, run each pass once for every analyzer that reads it or build it
from the generation captures instead, the forwards and the lens, the decision positions) is
`evalrx.internals.passes`, which they import from its front door only.
`panel_rows` turns each result into the rows the Trajectory page's panels draw, one turn at a time.
Failure signs read from the steps alone are `evalrx.diagnosis`. Importing this package does not import torch.
"""

from evalrx.analyzers._base import (
    ANALYZERS,
    RESULT_TYPES,
    AnalysisResult,
    Analyzer,
    HookAnalyzer,
    analyzer_class,
    get_analyzer,
    known_analyzers,
    model_id,
    register_analyzer,
    register_result,
    result_from_arrays,
)
from evalrx.analyzers._pass_analyzer import PassAnalyzer, analyze
from evalrx.analyzers.attention import SEGMENT_KINDS, AttentionAnalyzer, AttentionResult
from evalrx.analyzers.logit_lens import LensResult, LogitLensAnalyzer, settle_layer
from evalrx.analyzers.panel_rows import (
    attention_rows,
    decision_rows,
    diagnosed_token,
    lens_rows,
    picture_choices,
    pictures_before,
    uncertainty_rows,
)
from evalrx.analyzers.replay import ReplayAnalyzer, ReplayResult
from evalrx.analyzers.scores import analysis_scores, min_tool_margin
from evalrx.analyzers.tool_decision import RUNNER_UP, ToolDecisionAnalyzer, ToolDecisionResult
from evalrx.analyzers.uncertainty import TokenUncertaintyAnalyzer, TokenUncertaintyResult, uncertainty_from_logprobs
from evalrx.internals.passes import (  # the mechanism's names the analyzers' users read, kept here
    KINDS,
    Conversation,
    DecisionPoint,
    PassRequest,
    PassResult,
    TeacherForcedPass,
    TrajectoryPlan,
    conversation_from_trajectory,
    find_decision_points,
    messages_from_trajectory,
    plan_passes,
    plan_trajectory,
)

__all__ = [
    "analysis_scores",
    "min_tool_margin",
    "ANALYZERS",
    "KINDS",
    "RESULT_TYPES",
    "RUNNER_UP",
    "SEGMENT_KINDS",
    "AnalysisResult",
    "Analyzer",
    "AttentionAnalyzer",
    "AttentionResult",
    "Conversation",
    "DecisionPoint",
    "HookAnalyzer",
    "LensResult",
    "LogitLensAnalyzer",
    "PassAnalyzer",
    "PassRequest",
    "PassResult",
    "ReplayAnalyzer",
    "ReplayResult",
    "TeacherForcedPass",
    "TokenUncertaintyAnalyzer",
    "TokenUncertaintyResult",
    "ToolDecisionAnalyzer",
    "ToolDecisionResult",
    "TrajectoryPlan",
    "analyze",
    "attention_rows",
    "decision_rows",
    "diagnosed_token",
    "lens_rows",
    "picture_choices",
    "pictures_before",
    "uncertainty_rows",
    "analyzer_class",
    "conversation_from_trajectory",
    "find_decision_points",
    "get_analyzer",
    "known_analyzers",
    "messages_from_trajectory",
    "model_id",
    "plan_passes",
    "plan_trajectory",
    "register_analyzer",
    "register_result",
    "result_from_arrays",
    "settle_layer",
    "uncertainty_from_logprobs",
]
