"""The reference source: compare a failed trajectory with its case's reference calls and expected answer,
or, in a conversation whose user turns say what each answer should be, with those answers turn by turn.

Calls are judged by what they return: a call is right when its observation equals the one a
reference call gets (so `582 + 347` is as good as `347 + 582`). Without the tools, calls are
compared by name and arguments. The first thing that went wrong is the diagnosis.
"""

from __future__ import annotations

from typing import Any, Optional

from evalrx.core.case import FailureCase, Label, StepRole, Termination, Trajectory
from evalrx.core.failures import Diagnosis
from evalrx.diagnosis._evidence import (
    Call,
    answer_step,
    arg_diff,
    arg_values,
    calls_of,
    garbles,
    quote,
    values_in,
)
from evalrx.diagnosis.rules import from_rules
from evalrx.diagnosis.writes import applies, effect_lookup, from_writes
from evalrx.grade import ends_at_calls, extract_numbers, grade_calls, grade_state, turn_grades

CONFIDENCE = 0.95


def reference_calls(case: Optional[FailureCase]) -> list:
    """The case's reference calls as `{"name", "arguments"}` dicts ([] when it has none)."""
    if case is None:
        return []
    refs = (case.meta or {}).get("reference_calls") or []
    return [r for r in refs if isinstance(r, dict) and r.get("name")]


def reference_of(case: Optional[FailureCase]) -> Optional[str]:
    """What a case gives the reference source to compare a run with: "calls" (its reference calls, or the calls
    it is graded by), "state" (ground-truth calls replayed turn by turn), "turns" (each user turn's expected
    answer), "answer" (one expected answer: it grades the run but names no step), or None."""
    if case is None:
        return None
    kind = case.grader.get("kind") if isinstance(case.grader, dict) else None
    if kind == "state":
        return "state"
    if kind == "calls" or isinstance((case.meta or {}).get("reference_calls"), list):
        return "calls"
    turns = (case.meta or {}).get("turns")
    if isinstance(turns, list) and any(isinstance(t, dict) and "expected" in t for t in turns):
        return "turns"
    return "answer" if case.expected is not None else None


def _observe(name: str, args: dict, tools: Optional[dict]) -> Optional[str]:
    tool = (tools or {}).get(name)
    # Only the project's own tools are run again: a server's or a user's function may act on the world.
    if tool is None or tool.fn is None or getattr(tool, "source", "builtin") != "builtin":
        return None
    try:
        return str(tool.fn(**(args or {})))
    except Exception as exc:  # a reference call the tool refuses still has an observation
        return f"bad arguments: {exc}"


def _same_observation(a: Optional[str], b: Optional[str]) -> bool:
    # Two lookups that both find nothing are equally right, whatever words they used.
    if a is None or b is None:
        return False
    if a.startswith("no results") and b.startswith("no results"):
        return True
    return a == b


def _make(kind: str, step: Optional[int], text: str, **evidence: Any) -> Diagnosis:
    return Diagnosis(
        kind=kind, first_wrong_step=step, evidence={"text": text, **evidence}, confidence=CONFIDENCE, source="reference"
    )


def _bad_call(call: Call, ref: dict, earlier: "list[str]") -> Diagnosis:
    """Right tool, wrong arguments: a misread when an argument garbles a value of an earlier observation."""
    expected = {"name": ref["name"], "args": ref.get("arguments") or {}}
    actual = {"name": call.name, "args": call.args}
    diff = arg_diff(expected["args"], call.args)
    seen = [v for text in earlier for v in values_in(text)]
    for value in arg_values(call.args):
        source = garbles(value, seen)
        if source is not None:
            return _make(
                "misread_observation",
                call.step,
                f"{call.name} got {value!r} where an earlier observation said {source!r}",
                expected=expected,
                actual=actual,
                diff=diff,
                observation=quote(source),
            )
    return _make(
        "bad_arguments",
        call.step,
        f"{call.show()} instead of {Call(call.step, ref['name'], expected['args']).show()}",
        expected=expected,
        actual=actual,
        diff=diff,
    )


def _from_expected_calls(traj: Trajectory, case: FailureCase) -> Optional[Diagnosis]:
    """A case graded by its calls (BFCL's): the grade's own verdict, at the turn that called (or answered)."""
    check = grade_calls(traj, case)
    if check.ok or not check.kind:
        return None
    actors = [s for s in traj.steps if s.role is StepRole.ACTOR]
    turn = next((s for s in actors if s.tool_calls or s.parse_error), actors[0] if actors else None)
    evidence: dict = {}
    if turn is not None and check.call is not None and check.call < len(turn.tool_calls):
        call = turn.tool_calls[check.call]
        evidence["actual"] = {"name": call.name, "args": call.args}
    if check.kind == "no_tool_call" and traj.final_answer is not None:
        evidence["answer"] = quote(traj.final_answer)
    return _make(check.kind, turn.idx if turn is not None else None, check.reason, **evidence)


def _from_state(traj: Trajectory, case: FailureCase) -> Optional[Diagnosis]:
    """A conversation graded by state (BFCL multi-turn): the grade's verdict, at the step it blames."""
    check = grade_state(traj, case)
    if check.ok or not check.kind:
        return None
    evidence: dict = {}
    if check.turn is not None:
        evidence["user_turn"] = check.turn
    if check.diff:
        evidence["diff"] = check.diff
    return _make(check.kind, check.step, check.reason, **evidence)


def _turn_steps(traj: Trajectory, turn: int) -> list:
    """The steps of user turn `turn` (0-based): its USER step up to the next one; the last turn reached when the
    conversation ended before `turn`."""
    starts = [i for i, s in enumerate(traj.steps) if s.role is StepRole.USER] or [0]
    k = min(turn, len(starts) - 1)
    end = starts[k + 1] if k + 1 < len(starts) else len(traj.steps)
    return traj.steps[starts[k] : end]


def _from_turns(traj: Trajectory, case: FailureCase, marks: Optional[dict]) -> Optional[Diagnosis]:
    """A conversation graded turn by turn: the first user turn whose answer fails its expected one, and in that
    turn the first sign the model-free rules see (else its answer, or the lack of one, is the wrong step)."""
    failed = next((t for t in turn_grades(traj, case) if t.outcome is Label.FAIL), None)
    if failed is None:
        return None
    steps = _turn_steps(traj, failed.turn)
    within = {s.idx for s in steps}
    evidence: dict = {"user_turn": failed.turn, "expected_answer": quote(failed.expected)}
    if failed.answer is not None:
        evidence["answer"] = quote(failed.answer)
    signs = [
        d
        for d in from_rules(traj, system=(case.meta or {}).get("system"), marks=marks)
        if d.kind != "wrong_final_answer" and d.first_wrong_step in within
    ]
    if signs:
        sign = min(signs, key=lambda d: (d.first_wrong_step, -d.confidence))
        return Diagnosis(
            kind=sign.kind,
            first_wrong_step=sign.first_wrong_step,
            evidence={**sign.evidence, **evidence, "text": f"{failed.reason()}; {sign.summary}"},
            confidence=sign.confidence,  # the turn is known; the kind is the rule's reading of it
            source="reference",
        )
    actors = [s.idx for s in steps if s.role is StepRole.ACTOR]
    step = actors[-1] if actors else steps[0].idx if steps else None
    kind = "no_final_answer" if failed.answer is None else "wrong_final_answer"
    return _make(kind, step, failed.reason(), **evidence)


def from_reference(
    traj: Trajectory, case: Optional[FailureCase], tools: Optional[dict] = None, marks: Optional[dict] = None
) -> Optional[Diagnosis]:
    """Diagnose a failed trajectory against `case`'s reference calls and expected answer.

    Args:
        traj: the trajectory (graded fail).
        case: its case; None, or a case with neither a `reference_calls` list, calls or state to be graded
            by, nor user turns with expected answers, gives None.
        tools: name -> Tool, to judge calls by their observations (None: by name and arguments).
        marks: people's marks of what tools do (name -> "read" / "write", `evalrx.store.tool_marks`).

    Returns:
        The first thing that went wrong, or None when the case carries no reference.
    """
    if case is not None and traj.terminated != Termination.ERROR:
        if ends_at_calls(case):
            return _from_expected_calls(traj, case)
        if isinstance(case.grader, dict) and case.grader.get("kind") == "state":
            return _from_state(traj, case)
        if reference_of(case) == "turns":
            return _from_turns(traj, case, marks)
    # An empty list means "needs no tool"; no list at all means the calls are unknown (an import).
    if case is None or not isinstance((case.meta or {}).get("reference_calls"), list):
        return None
    refs = reference_calls(case)
    if traj.terminated == Termination.ERROR:
        return _make("infra_error", answer_step(traj), quote(traj.metrics.get("error") or "the run raised"))
    if applies(traj, refs, effect_lookup(traj, case, marks)):
        return from_writes(traj, case, refs, marks)
    actors = [s for s in traj.steps if s.role is StepRole.ACTOR]
    bad = next((s for s in actors if s.parse_error), None)
    if bad is not None:
        return _make("malformed_call", bad.idx, quote(bad.parse_error), actual=quote(bad.content))
    calls = calls_of(traj)
    final = answer_step(traj)
    expected_calls = [{"name": r["name"], "args": r.get("arguments") or {}} for r in refs]
    if refs and not calls:
        first = actors[0].idx if actors else None
        return _make(
            "no_tool_call",
            first,
            f"answered without calling {refs[0]['name']}",
            expected=expected_calls[0],
            answer=quote(traj.final_answer),
        )
    if not refs and calls:
        return _make(
            "unneeded_tool_call",
            calls[0].step,
            f"called {calls[0].show()}; the case needs no tool",
            actual={"name": calls[0].name, "args": calls[0].args},
        )
    # The calls before the first unchanged repeat are judged first: a wrong call made twice went wrong the first time.
    repeat = next((i for i in range(1, len(calls)) if calls[i].signature == calls[i - 1].signature), None)
    ref_obs = [(r["name"], _observe(r["name"], r.get("arguments") or {}, tools)) for r in refs]
    for i, call in enumerate(calls[: min(len(refs), repeat if repeat is not None else len(calls))]):
        ref = refs[i]
        expected = expected_calls[i]
        actual = {"name": call.name, "args": call.args}
        if tools:
            obs = _observe(call.name, call.args, tools) if call.name in tools else None
            same = any(n == call.name and _same_observation(obs, o) for n, o in ref_obs)
            if call.name not in tools:
                return _make(
                    "unknown_tool",
                    call.step,
                    f"called {call.name!r}, which does not exist",
                    expected=expected,
                    actual=actual,
                )
        else:
            same = any(call.name == e["name"] and call.args == e["args"] for e in expected_calls)
        # Another tool than this reference step's: wrong unless it gets what a reference call of that tool gets.
        if call.name != ref["name"] and (not same or not any(n == call.name for n, _ in ref_obs)):
            return _make(
                "wrong_tool",
                call.step,
                f"called {call.name} where {ref['name']} was needed",
                expected=expected,
                actual=actual,
            )
        if not same:
            earlier = [c.observation for c in calls[:i] if c.observation]
            return _bad_call(call, ref, earlier)
    if repeat is not None:
        call = calls[repeat]
        return _make(
            "repeated_calls",
            call.step,
            f"{call.show()} again, unchanged",
            actual={"name": call.name, "args": call.args},
        )
    if traj.final_answer is None:
        return _make("no_final_answer", final, f"the run ended ({traj.terminated or 'unknown'}) without an answer")
    if len(calls) < len(refs):
        missing = expected_calls[len(calls)]
        return _make(
            "no_tool_call",
            final,
            f"answered before calling {missing['name']}",
            expected=missing,
            answer=quote(traj.final_answer),
        )
    if len(calls) > len(refs):
        extra = calls[len(refs)]
        sigs = [c.signature for c in calls]
        kind = "repeated_calls" if len(set(sigs)) < len(sigs) else "unneeded_tool_call"
        return _make(
            kind,
            extra.step,
            f"{extra.show()} after the calls the case needs",
            actual={"name": extra.name, "args": extra.args},
        )
    answer = traj.final_answer or ""
    if refs:
        last = ref_obs[-1][1] if ref_obs[-1][1] is not None else (calls[-1].observation or "")
        numbers = extract_numbers(last)
        missed = (numbers and not any(abs(x - numbers[-1]) < 1e-6 for x in extract_numbers(answer))) or (
            not numbers and last.split() and last.split()[-1].strip(".'").lower() not in answer.lower()
        )
        if missed:
            return _make(
                "misread_observation",
                final,
                "the answer does not carry the last observation's value",
                answer=quote(answer),
                observation=quote(last),
            )
    return _make(
        "wrong_final_answer",
        final,
        f"answered {quote(answer, 80)!r}; expected {quote(case.expected, 80)!r}",
        answer=quote(answer),
        expected_answer=quote(case.expected),
    )
