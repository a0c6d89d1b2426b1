"""Model-free rules: failure signs read from the steps alone, with no reference and no model.

These carry imported trajectories (Inspect logs, OpenAI chat JSONL), which have neither. Each
rule proposes a kind at the step where the sign first shows; `benchmarks/diagnosis_eval.py`
records each rule's precision on the demo run against the reference source.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

from evalrx.core.case import Label, StepRole, Termination, Trajectory
from evalrx.core.effects import ToolEffect, is_handoff
from evalrx.core.failures import Diagnosis
from evalrx.core.observation import observation_text
from evalrx.diagnosis._evidence import (
    answer_step,
    arg_values,
    calls_of,
    garbles,
    is_number,
    known_values,
    quote,
    values_in,
)
from evalrx.diagnosis.prose import count_misread, parsed_json
from evalrx.diagnosis.writes import effect_lookup

# How much each sign is worth on its own (a malformed call is certain; an unexplained argument less so).
CONFIDENCE = {
    "infra_error": 1.0,
    "malformed_call": 0.9,
    "unknown_tool": 0.9,
    "no_final_answer": 0.9,
    "repeated_calls": 0.7,
    "ignored_tool_error": 0.6,
    "ignored_observation": 0.6,
    "misread_observation": 0.6,
    "bad_arguments": 0.5,
    "policy_violation": 0.5,
    "no_tool_call": 0.5,
    "wrong_final_answer": 0.2,
}
REFUSED_CONFIDENCE = 0.6
# A question that names the work a tool does, or is plain arithmetic on numbers it states.
_TOOL_WORDS = re.compile(r"\b(look ?up|search|calculate|compute|evaluate)\b", re.I)
_ARITHMETIC = re.compile(r"\d\s*(?:[-+*/×÷^%]|\b(?:plus|minus|times|divided by|multiplied by|percent|of)\b)\s*\d", re.I)
_ERROR_WORDS = re.compile(r"\b(error|failed|fail|could not|couldn't|cannot|can't|unable|sorry)\b", re.I)
# A policy that asks for the user's confirmation before an action (general English, any domain).
_ASKS_CONFIRMATION = re.compile(r"\b(confirm\w*|explicit\w* (yes|consent|approval|agreement))\b", re.I)
# A user turn that agrees to what the agent proposed.
_AGREES = re.compile(
    r"\b(yes|yeah|yep|yup|confirm\w*|go ahead|proceed|please do|sure|ok|okay|correct|do it|sounds good|"
    r"that works|agreed|approve\w*)\b",
    re.I,
)
RULES = (
    "infra_error",
    "malformed_call",
    "unknown_tool",
    "repeated_calls",
    "policy_violation",
    "ignored_tool_error",
    "bad_arguments",
    "misread_observation",
    "ignored_observation",
    "no_tool_call",
    "no_final_answer",
    "wrong_final_answer",
)


def _make(kind: str, step: Optional[int], text: str, **evidence: object) -> Diagnosis:
    return Diagnosis(
        kind=kind,
        first_wrong_step=step,
        evidence={"text": text, **evidence},
        confidence=CONFIDENCE[kind],
        source="heuristic",
    )


def from_rules(traj: Trajectory, system: Optional[str] = None, marks: Optional[dict] = None) -> "list[Diagnosis]":
    """Every model-free sign of failure in `traj`, at most one per kind (the earliest), unranked.

    `system` is the system prompt or policy the agent had (a rule reads whether it asks for confirmations);
    `marks` people's marks of what tools do (name -> "read" / "write").

    A trajectory graded fail with no sign at all gets `wrong_final_answer` at its answer step,
    so every failure has a diagnosis and a first wrong step.
    """
    out: list = []
    final = answer_step(traj)
    if traj.terminated == Termination.ERROR:
        return [_make("infra_error", final, quote(traj.metrics.get("error") or "the run raised"))]
    actors = [s for s in traj.steps if s.role is StepRole.ACTOR]
    bad = next((s for s in actors if s.parse_error), None)
    if bad is not None:
        out.append(_make("malformed_call", bad.idx, quote(bad.parse_error), actual=quote(bad.content)))
    calls = calls_of(traj)
    unknown = next((c for c in calls if c.error and "unknown tool" in (c.observation or "")), None)
    if unknown is not None:
        out.append(
            _make(
                "unknown_tool",
                unknown.step,
                f"called {unknown.name!r}, which does not exist",
                observation=quote(unknown.observation),
            )
        )
    effect = effect_lookup(traj, None, marks)
    repeat = _repeated(traj, calls, effect)
    if repeat is not None:
        out.append(repeat)
    answer = traj.final_answer
    rejected = next((c for c in calls if c.error and c is not unknown and c.observation), None)
    went_on = rejected is not None and (rejected is not calls[-1] or _ERROR_WORDS.search(str(answer or "")))
    if rejected is not None and went_on:
        # A call the tool refused, that the agent then worked around or reported: the call was wrong. (Refused
        # last and answered as if it had worked is `ignored_tool_error`, below.)
        refused = _make(
            "bad_arguments",
            rejected.step,
            f"the tool refused {rejected.show()}: {quote(rejected.observation, 100)}",
            actual={"name": rejected.name, "args": rejected.args},
            observation=quote(rejected.observation),
        )
        refused.confidence = REFUSED_CONFIDENCE  # the tool's own word outweighs a value found nowhere
        out.append(refused)
    unconfirmed = _unconfirmed_action(traj, calls, system, effect)
    if unconfirmed is not None:
        out.append(unconfirmed)
    out += _prose_misreads(traj)
    answer = traj.final_answer
    has_answer = answer is not None and bool(str(answer).strip())
    last_call = calls[-1] if calls else None
    if (
        last_call is not None
        and last_call.error
        and has_answer
        and final is not None
        and final > last_call.step
        and unknown is not last_call
        and not _ERROR_WORDS.search(str(answer))
    ):
        out.append(
            _make(
                "ignored_tool_error",
                final,
                "answered as if the call had succeeded",
                answer=quote(answer),
                observation=quote(last_call.observation),
            )
        )
    out += _argument_signs(traj, calls)
    # The value a plain observation reports is its last number or name; a JSON one holds many.
    if (
        has_answer
        and last_call is not None
        and not last_call.error
        and last_call.observation
        and parsed_json(last_call.observation) is None
    ):
        sign = _answer_vs_observation(str(answer), last_call.observation, final)
        if sign is not None:
            out.append(sign)
    if (
        not calls
        and not bad
        and has_answer
        and (_TOOL_WORDS.search(traj.goal or "") or _ARITHMETIC.search(traj.goal or ""))
    ):
        out.append(
            _make(
                "no_tool_call",
                actors[0].idx if actors else final,
                "answered a question that needs a tool without calling one",
                answer=quote(answer),
            )
        )
    # A case graded by its calls ends at them; a conversation handed to a person ended normally.
    if not has_answer and traj.terminated not in (Termination.CALLS, Termination.HANDOFF):
        out.append(_make("no_final_answer", final, f"the run ended ({traj.terminated or 'unknown'}) without an answer"))
    if not out and traj.outcome is Label.FAIL:
        out.append(
            _make(
                "wrong_final_answer",
                final,
                "graded wrong; no step shows why",
                answer=quote(answer),
                expected_answer=quote(traj.ground_truth),
            )
        )
    return out


def _repeated(traj: Trajectory, calls: list, effect: Callable[[str], ToolEffect]) -> Optional[Diagnosis]:
    """The same call again with nothing new between: no user turn (a re-fetch after the user asked about
    something else is not a repeat) and no call that changed state (a re-read after a change is a check)."""
    users = [s.idx for s in traj.steps if s.role is StepRole.USER]
    seen: dict = {}
    for c in calls:
        first = seen.get(c.signature)
        if first is not None:
            between = [d for d in calls if first < d.step < c.step]
            news = any(first < u < c.step for u in users) or any(
                not d.error and not effect(d.name).reads_only for d in between
            )
            if not news:
                return _make(
                    "repeated_calls",
                    c.step,
                    f"{c.show()} again (first at step {first})",
                    actual={"name": c.name, "args": c.args},
                )
        seen[c.signature] = c.step
    return None


def _unconfirmed_action(
    traj: Trajectory, calls: list, system: Optional[str], effect: Callable[[str], ToolEffect]
) -> Optional[Diagnosis]:
    """A state-changing call with no agreeing user turn since the last one, where the system prompt or policy
    asks for the user's confirmation before acting."""
    if not _ASKS_CONFIRMATION.search(system or ""):
        return None
    since = -1
    for c in calls:
        if not effect(c.name).changes_state or is_handoff(c.name):
            continue
        agreed = [s for s in traj.steps if s.role is StepRole.USER and since < s.idx < c.step]
        if not agreed or not _AGREES.search(str(agreed[-1].content or "")):
            said = quote(agreed[-1].content, 80) if agreed else "nothing"
            return _make(
                "policy_violation",
                c.step,
                f"{c.show()} changes state without the user's confirmation the policy asks for (the user said: {said})",
                actual={"name": c.name, "args": c.args},
            )
        since = c.step
    return None


def _prose_misreads(traj: Trajectory) -> "list[Diagnosis]":
    """The first agent message that states a count its observations contradict (`prose.count_misread`)."""
    observations: list = []
    for s in traj.steps:
        if s.role is StepRole.USER:
            observations = []  # a new question: what the agent says next rests on what it reads next
        elif s.role is StepRole.TOOL:
            data = parsed_json(observation_text(s.observation))
            if data is not None:
                observations.append(data)
        elif s.role is StepRole.ACTOR and s.content and observations:
            found = count_misread(str(s.content), observations)
            if found is not None:
                return [
                    _make("misread_observation", s.idx, found["text"], answer=quote(s.content), **found["evidence"])
                ]
    return []


def _argument_signs(traj: Trajectory, calls: list) -> "list[Diagnosis]":
    """The first call with an argument value found nowhere before it: misread if it garbles an observation's value."""
    context = [traj.goal or ""]
    user = [observation_text(s.content) for s in traj.steps if s.role is StepRole.USER]
    context += user
    observations: list = []
    for c in calls:
        nums, words = known_values(context + observations)
        for value in arg_values(c.args):
            found = value in nums if is_number(value) else value.lower() in words
            if found or not _is_value(value):
                continue
            source = garbles(value, [v for o in observations for v in values_in(o)])
            actual = {"name": c.name, "args": c.args}
            if source is not None:
                return [
                    _make(
                        "misread_observation",
                        c.step,
                        f"{c.name} got {value!r} where an earlier observation said {source!r}",
                        actual=actual,
                        observation=quote(source),
                    )
                ]
            return [
                _make(
                    "bad_arguments",
                    c.step,
                    f"{c.name} got {value!r}, which neither the question nor an earlier observation states",
                    actual=actual,
                )
            ]
        if c.observation and not c.error:
            observations.append(c.observation)
    return []


def _is_value(value: str) -> bool:
    # Numbers and names are values; plain lower-case words of a query may be the model's own phrasing.
    return is_number(value) or value[:1].isupper()


def _answer_vs_observation(answer: str, observation: str, step: Optional[int]) -> Optional[Diagnosis]:
    """The answer against the last observation: a garbled copy (misread) or a contradiction (ignored)."""
    obs_values = values_in(observation)
    if not obs_values:
        return None
    ans_values = values_in(answer)
    ans_lower = {v.lower() for v in ans_values}
    obs_nums = [v for v in obs_values if is_number(v)]
    ans_nums = [v for v in ans_values if is_number(v)]
    # The value an observation reports is its last number, or else its last name.
    key = obs_nums[-1] if obs_nums else obs_values[-1]
    if key.lower() in ans_lower or (key not in obs_nums and key.lower() in answer.lower()):
        return None
    near = next((v for v in ans_values if garbles(v, [key])), None)
    if near is not None:
        return _make(
            "misread_observation",
            step,
            f"the answer says {near!r} where the observation said {key!r}",
            answer=quote(answer),
            observation=quote(observation),
        )
    if obs_nums and ans_nums or (not obs_nums and ans_values):
        return _make(
            "ignored_observation",
            step,
            f"the answer says {quote(', '.join(ans_nums or ans_values), 60)!r}; the last observation said {key!r}",
            answer=quote(answer),
            observation=quote(observation),
        )
    return None


__all__ = ["CONFIDENCE", "RULES", "from_rules"]
