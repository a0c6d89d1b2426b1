"""Automatic graders: turn a final answer into PASS or FAIL against a case's expected answer.

Grader specs are plain dicts stored with each case (`{"kind": "numeric", "rel_tol": 1e-4}`):

- `exact`: the stripped answer equals the expected text (`case_sensitive`, default True).
- `normalized`: equal after lower-casing and dropping punctuation, articles and extra spaces.
- `numeric`: the last number in the answer is within `abs_tol` (alias `tol`) or `rel_tol` of
  the expected number; `"which": "any"` accepts any number in the answer.
- `contains`: the normalised answer contains the normalised expected text (a list: all of them).
- `regex`: `re.search(pattern, answer)` succeeds (`pattern` defaults to the expected text).
- `calls`: the case is graded by the calls of the model's first calling turn, not by an answer
  (BFCL's AST rules, `evalrx.grade.calls`); its expected value is a list of expected calls.
- `state`: a conversation is graded by the state its calls leave in a stateful environment, turn by
  turn (BFCL's multi-turn checker, `evalrx.grade.state`); it needs `meta["environment"]` and `meta["turns"]`.

A grader's `value` key, when present, replaces the case's `expected` for that grader.
A human label later overrides whatever these return.
"""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass
from typing import Any, Optional

from evalrx.core.case import FailureCase, Label, StepRole, Termination, Trajectory
from evalrx.grade.calls import grade_calls
from evalrx.grade.state import grade_state

GRADER_KINDS = ("exact", "normalized", "numeric", "contains", "regex", "calls", "state")

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation})
# Thousands separators (1,234,567) or plain digits, optional sign and decimals, optional exponent.
_NUMBER = re.compile(r"(?<![\w.])[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|(?<![\w.])[-+]?\.\d+")


def normalize_text(text: Any) -> str:
    """Lower-case, drop punctuation and the articles a/an/the, collapse whitespace."""
    lowered = str(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", lowered).split())


def extract_numbers(text: Any) -> list[float]:
    """Every number in `text`, in order (`1,234.5` -> 1234.5; a leading minus is kept)."""
    out = []
    for match in _NUMBER.findall(str(text)):
        token = match.replace(",", "").replace("−", "-")
        try:
            out.append(float(token))
        except ValueError:  # pragma: no cover - the pattern only matches numbers
            continue
    return out


def _as_float(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    numbers = extract_numbers(value) if value is not None else []
    return numbers[-1] if len(numbers) == 1 else None


def default_grader(expected: Any) -> dict:
    """The grader used when a case has none: numeric for numbers, normalised text otherwise."""
    if _as_float(expected) is not None and not isinstance(expected, str):
        return {"kind": "numeric"}
    return {"kind": "normalized"}


def check_grader(grader: Any) -> Optional[str]:
    """Return what is wrong with a grader spec, or None when it is usable."""
    if grader is None:
        return None
    if not isinstance(grader, dict):
        return f'grader must be an object like {{"kind": "exact"}}, got {type(grader).__name__}'
    kind = grader.get("kind")
    if kind not in GRADER_KINDS:
        return f"unknown grader kind {kind!r}; use one of {', '.join(GRADER_KINDS)}"
    for key in ("tol", "abs_tol", "rel_tol"):
        if key in grader and (
            isinstance(grader[key], bool) or not isinstance(grader[key], (int, float)) or grader[key] < 0
        ):
            return f"grader {key} must be a non-negative number, got {grader[key]!r}"
    if kind == "regex" and "pattern" in grader:
        try:
            re.compile(grader["pattern"])
        except (re.error, TypeError) as exc:
            return f"grader pattern {grader['pattern']!r} is not a valid regex ({exc})"
    return None


def grade(answer: Optional[str], expected: Any, grader: Optional[dict] = None) -> Label:
    """Grade one final answer.

    Args:
        answer: the agent's final answer text (None: there was none).
        expected: the case's expected answer.
        grader: a grader spec (see the module doc); None picks `default_grader(expected)`.

    Returns:
        `Label.PASS` or `Label.FAIL`.

    Raises:
        ValueError: for an unknown grader kind or a malformed spec, or a `calls` or `state` grader (they
            grade calls, not an answer: see `grade_trajectory`).
    """
    grader = grader or default_grader(expected)
    problem = check_grader(grader)
    if problem:
        raise ValueError(problem)
    if grader["kind"] == "calls":
        raise ValueError("a calls grader grades the model's calls, not an answer: use grade_trajectory or grade_calls")
    if grader["kind"] == "state":
        raise ValueError(
            "a state grader grades a conversation's calls, not an answer: use grade_trajectory or grade_state"
        )
    if answer is None:
        return Label.FAIL
    answer = str(answer)
    target = grader.get("value", expected)
    kind = grader["kind"]
    if kind == "exact":
        if grader.get("case_sensitive", True):
            ok = answer.strip() == str(target).strip()
        else:
            ok = answer.strip().lower() == str(target).strip().lower()
    elif kind == "normalized":
        ok = normalize_text(answer) == normalize_text(target)
    elif kind == "numeric":
        want = _as_float(target)
        if want is None:
            raise ValueError(f"numeric grader needs a number to compare with, got {target!r}")
        numbers = extract_numbers(answer)
        candidates = numbers if grader.get("which") == "any" else numbers[-1:]
        abs_tol = float(grader.get("abs_tol", grader.get("tol", 1e-9)))
        rel_tol = float(grader.get("rel_tol", 1e-9))
        ok = any(math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol) for got in candidates)
    elif kind == "contains":
        needles = target if isinstance(target, (list, tuple)) else [target]
        hay = f" {normalize_text(answer)} "
        ok = all(f" {normalize_text(n)} " in hay for n in needles if normalize_text(n))
    else:  # regex
        ok = re.search(grader.get("pattern", str(target)), answer) is not None
    return Label.PASS if ok else Label.FAIL


def grade_trajectory(traj: Trajectory, case: FailureCase) -> Label:
    """Grade a whole run: no final answer (ran out of turns) is a FAIL; a run that raised (the
    server or the harness failed, `terminated == "error"`) is an ERROR, not a verdict on the model.
    A case graded by its calls is graded by `grade_calls` (why it failed: `grade_calls(...).reason`), one
    graded by state by `grade_state`."""
    if traj.terminated == Termination.ERROR:
        return Label.ERROR
    if isinstance(case.grader, dict) and case.grader.get("kind") == "calls":
        return Label.PASS if grade_calls(traj, case).ok else Label.FAIL
    if isinstance(case.grader, dict) and case.grader.get("kind") == "state":
        return Label.PASS if grade_state(traj, case).ok else Label.FAIL
    turns = turn_grades(traj, case)
    if turns:  # a conversation whose turns say what each answer should be: every such answer must pass
        return Label.FAIL if any(t.outcome is Label.FAIL for t in turns) else Label.PASS
    if traj.final_answer is None:
        return Label.FAIL
    return grade(traj.final_answer, case.expected, case.grader)


def grade_explanation(traj: Trajectory, case: FailureCase) -> "Optional[dict]":
    """Why a case graded by its calls, by state or turn by turn failed: `{"reason": one line, "turn"?, "diff"?}`
    (`turn`: the failing user turn, 0-based); None for a case graded by its one answer (the answer and the
    expected one say it), or one that passed."""
    kind = case.grader.get("kind") if isinstance(case.grader, dict) else None
    failed = next((t for t in turn_grades(traj, case) if t.outcome is Label.FAIL), None)
    if failed is not None:
        return {"reason": failed.reason(), "turn": failed.turn}
    if kind == "calls":
        check = grade_calls(traj, case)
        return None if check.ok else {"reason": check.reason}
    if kind == "state":
        state = grade_state(traj, case)
        if state.ok:
            return None
        out: dict = {"reason": state.reason}
        if state.turn is not None:
            out["turn"] = state.turn
        if state.diff:
            out["diff"] = state.diff
        return out
    return None


def turn_answers(traj: Trajectory) -> list:
    """The answer that ended each user turn of a conversation, in order (None: the turn got none); a
    trajectory of one user turn has one. User turns begin at USER steps (`span["user_turn"]`)."""
    answers: list = []
    for step in traj.steps:
        if step.role is StepRole.USER:
            answers.append(None)
        elif step.role is StepRole.ACTOR and not step.tool_calls and not step.parse_error and answers:
            answers[-1] = step.span.get("answer", step.content)  # the codec's reading, where it differs
    return answers


@dataclass(frozen=True)
class TurnGrade:
    """One user turn of a conversation graded by its own expected answer: `turn` is 0-based (the pages say
    `turn + 1`); `answer` is None when the turn got none."""

    turn: int
    expected: Any
    answer: Optional[str]
    outcome: Label

    def reason(self) -> str:
        """Why it failed, in one line ("turn 2: answered 'It is 48.', expected 50")."""
        got = "got no answer" if self.answer is None else f"answered {_clip(self.answer)}"
        return f"turn {self.turn + 1}: {got}, expected {_clip(self.expected)}"


def _clip(value: Any, limit: int = 80) -> str:
    """A value for a one-line reason: text quoted, numbers and lists as written, cut at `limit` characters."""
    text = " ".join(str(value).split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return repr(text) if isinstance(value, str) else text


def turn_grades(traj: Trajectory, case: FailureCase) -> "list[TurnGrade]":
    """Each user turn of a conversation case that says what its answer should be (`meta["turns"][k]
    ["expected"]`), graded on its own; [] for a case without such turns or graded by its calls or by state."""
    turns = (case.meta or {}).get("turns")
    kind = case.grader.get("kind") if isinstance(case.grader, dict) else None
    if not isinstance(turns, list) or kind in ("calls", "state"):
        return []
    answers = turn_answers(traj)
    out: list = []
    for k, turn in enumerate(turns):
        if not isinstance(turn, dict) or "expected" not in turn:
            continue
        answer = answers[k] if k < len(answers) else None
        if k == len(answers) - 1 and traj.final_answer is not None:
            answer = traj.final_answer  # the loop's reading of the last answer (a one-turn case has no span's)
        ok = answer is not None and grade(answer, turn["expected"], turn.get("grader")) is Label.PASS
        out.append(TurnGrade(k, turn["expected"], answer, Label.PASS if ok else Label.FAIL))
    return out


__all__ = [
    "GRADER_KINDS",
    "check_grader",
    "default_grader",
    "extract_numbers",
    "grade",
    "grade_trajectory",
    "normalize_text",
    "turn_grades",
]
