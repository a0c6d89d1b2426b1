"""The mechanism the white-box analyzers share: a stored trajectory's teacher-forced passes on a local model.

It stands above `evalrx.models` (it rebuilds the conversation with the agent loop's own builder and
codecs) and below `evalrx.analyzers`, which import it from here only; the hooks it runs on
(`evalrx.internals`' other modules) stand below `evalrx.models`, and `evalrx.internals` never imports
this package. Torch is imported inside functions, so importing it stays light.

* `conversation`: the conversation a trajectory came from (`conversation_from_trajectory`), rendered.
* `positions`: token offsets of a rendered text and its decision points (`find_decision_points`).
* `pictures`: a vision model's passes, each image's placeholder expanded to its tokens.
* `planning`: the teacher-forced passes over a conversation (`plan_passes`, `TrajectoryPlan`, `PassResult`).
* `compute`: a local model's forwards (`local_model`, `teacher_forced`).
* `lens`: the logit lens' statistics over a pass (`lens_stats`) and its precisions.
* `capture`: a pass built from the generation's own captures instead of a forward.
* `shared`: one forward per pass for every analyzer that reads it (`run_pass_analyzers`).
"""

from __future__ import annotations

from evalrx.internals.passes.capture import CapturedStates, capture_pass, capture_problem
from evalrx.internals.passes.compute import LocalModel, all_layer_rows, forward, local_model, teacher_forced
from evalrx.internals.passes.conversation import (
    ActorTurn,
    Conversation,
    conversation_from_trajectory,
    drop_pictures,
    messages_from_trajectory,
    normalize_tools,
    render_conversation,
    replay_style,
    tool_names,
)
from evalrx.internals.passes.lens import (
    LENS_DTYPES,
    PRECISIONS,
    LensRequest,
    LensStats,
    SharedLens,
    checked_precision,
    final_margins,
    final_stats,
    lens_stats,
)
from evalrx.internals.passes.pictures import ImageSpan, conversation_pictures, expand_pictures, pass_inputs
from evalrx.internals.passes.planning import (
    PassResult,
    PassTurn,
    TeacherForcedPass,
    TrajectoryPlan,
    describe_passes,
    plan_passes,
    plan_trajectory,
)
from evalrx.internals.passes.positions import (
    ANSWER_POINTS,
    KINDS,
    MAX_VALUE_TOKENS,
    CallSpan,
    DecisionPoint,
    answer_span,
    answer_value_spans,
    checked_answer_points,
    decode_pieces,
    find_call_spans,
    find_decision_points,
    first_token_at,
    known_words,
    token_at_char,
    tokenize_with_offsets,
    tokens_overlapping,
)
from evalrx.internals.passes.shared import PassReader, PassRequest, pass_result, run_pass, run_pass_analyzers

__all__ = [
    "ANSWER_POINTS",
    "KINDS",
    "LENS_DTYPES",
    "MAX_VALUE_TOKENS",
    "PRECISIONS",
    "ActorTurn",
    "CallSpan",
    "CapturedStates",
    "Conversation",
    "DecisionPoint",
    "ImageSpan",
    "LensRequest",
    "LensStats",
    "LocalModel",
    "PassReader",
    "PassRequest",
    "PassResult",
    "PassTurn",
    "SharedLens",
    "TeacherForcedPass",
    "TrajectoryPlan",
    "all_layer_rows",
    "answer_span",
    "answer_value_spans",
    "capture_pass",
    "capture_problem",
    "checked_answer_points",
    "checked_precision",
    "conversation_from_trajectory",
    "conversation_pictures",
    "decode_pieces",
    "describe_passes",
    "drop_pictures",
    "expand_pictures",
    "final_margins",
    "final_stats",
    "find_call_spans",
    "find_decision_points",
    "first_token_at",
    "forward",
    "known_words",
    "lens_stats",
    "local_model",
    "messages_from_trajectory",
    "normalize_tools",
    "pass_inputs",
    "pass_result",
    "plan_passes",
    "plan_trajectory",
    "render_conversation",
    "replay_style",
    "run_pass",
    "run_pass_analyzers",
    "teacher_forced",
    "tokenize_with_offsets",
    "token_at_char",
    "tokens_overlapping",
    "tool_names",
]
