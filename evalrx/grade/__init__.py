"""Automatic graders: a final answer against a case's expected answer (`answers`), a turn's tool calls
against the expected calls by BFCL's AST rules (`calls`), or a conversation by the state its calls leave (`state`).

from evalrx.grade import grade, grade_trajectory, grade_calls
grade("The answer is 7.", 7)                 # Label.PASS (numeric)
grade_trajectory(traj, case)                 # PASS / FAIL / ERROR, for either kind of case
grade_calls(traj, case).reason               # why a case graded by its calls failed, in one line
grade_state(traj, case)                      # StateCheck: the failing user turn, the kind, the step, the diff
turn_grades(traj, case)                      # [TurnGrade]: each user turn graded by its own expected answer

A low layer: imports `evalrx.core`, and `evalrx.tools` for the environments a state grade replays calls on.
"""

from evalrx.grade.answers import (
    GRADER_KINDS,
    TurnGrade,
    check_grader,
    default_grader,
    extract_numbers,
    grade,
    grade_explanation,
    grade_trajectory,
    normalize_text,
    turn_answers,
    turn_grades,
)
from evalrx.grade.calls import CallCheck, check_calls, ends_at_calls, grade_calls, standardize
from evalrx.grade.state import StateCheck, grade_state

__all__ = [
    "GRADER_KINDS",
    "CallCheck",
    "StateCheck",
    "TurnGrade",
    "check_calls",
    "check_grader",
    "default_grader",
    "ends_at_calls",
    "extract_numbers",
    "grade",
    "grade_calls",
    "grade_explanation",
    "grade_state",
    "grade_trajectory",
    "normalize_text",
    "standardize",
    "turn_answers",
    "turn_grades",
]
