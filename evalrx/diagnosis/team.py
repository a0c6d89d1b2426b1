"""Which agent of a team broke the run, at which step: model-free signs read from a team's log.

A team's trajectory has steps naming their agents (`Step.agent`). The signs, each general to teams of
agents and to any framework (none names an agent, a tool or a data set's phrase):

- an execution the team never recovered from: a step reporting a failed run (a non-zero exit code, a
  traceback, an HTTP error) with no later run of the same executor succeeding; the agent to blame is the
  one whose step asked for it (the last step of another agent before the report);
- the team's answer against the reference (when the case has one): the step where the wrong value the team
  ended with first appeared (blaming whoever wrote it, or whoever asked for the run that printed it);
- a loop: an agent taking the same action again (the same tool calls, or the same code to run);
- what the team says about itself: a step saying the work is stuck or makes no progress blames the step
  before it.

`from_team` gives these as `Diagnosis` candidates naming an agent; `blame` names the agent of any
diagnosis that points at a step of a team's log.
"""

from __future__ import annotations

import re
from typing import Optional

from evalrx.core.case import Step, StepRole, Trajectory
from evalrx.core.failures import Diagnosis
from evalrx.diagnosis._evidence import quote

# A run that failed, as executors and HTTP clients report it.
_FAILED_RUN = re.compile(
    r"(exit ?code:?\s*[1-9]\d*|exit status [1-9]|Traceback \(most recent call last\)|\b[A-Z][A-Za-z]*(?:Error|Exception):"
    r"|\bHTTP(?: error)?:? ?[45]\d\d\b|status(?: code)?:? ?[45]\d\d\b)",
)
# A run that went through (an executor's report of success).
_RAN_OK = re.compile(r"(exit ?code:?\s*0\b|exit status 0\b|execution succeeded)", re.I)
# A team saying it is not getting anywhere (plain English, any framework's ledger or chat).
_STUCK = re.compile(r"\b(no progress|not making progress|stuck|in a loop|going in circles|keeps? failing)\b", re.I)
_VALUE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
CONFIDENCE = {"unrecovered_run": 0.7, "wrong_value_origin": 0.6, "loop": 0.55, "stuck": 0.4, "first_turn": 0.25}


def is_team(traj: Trajectory) -> bool:
    """Whether the trajectory is a team's: two or more agents took its steps."""
    return len({s.agent for s in traj.steps if s.agent}) >= 2


def blame(traj: Trajectory, diagnosis: Diagnosis) -> Diagnosis:
    """The diagnosis naming the agent of the step it points at (a team's log only; unchanged otherwise)."""
    if diagnosis.agent is not None or diagnosis.first_wrong_step is None or not is_team(traj):
        return diagnosis
    step = next((s for s in traj.steps if s.idx == diagnosis.first_wrong_step), None)
    if step is not None and step.agent:
        diagnosis.agent = step.agent
    return diagnosis


def _asker(traj: Trajectory, at: int) -> Optional[int]:
    """The step that asked for what step `at` reports: the last earlier model turn of another agent."""
    me = traj.steps[at].agent
    return next(
        (s.idx for s in reversed(traj.steps[:at]) if s.role is StepRole.ACTOR and s.agent and s.agent != me), None
    )


def _make(kind: str, traj: Trajectory, step: int, sign: str, text: str, **evidence: object) -> Diagnosis:
    return Diagnosis(
        kind=kind,
        first_wrong_step=step,
        evidence={"text": text, "sign": sign, **evidence},
        confidence=CONFIDENCE[sign],
        source="heuristic",
        agent=traj.steps[step].agent,
    )


def _unrecovered_run(traj: Trajectory) -> Optional[Diagnosis]:
    """The first failed run no later run of the same executor made good."""
    steps = traj.steps
    for s in steps:
        if not s.agent or not _FAILED_RUN.search(s.content or ""):
            continue
        later = [x for x in steps[s.idx + 1 :] if x.agent == s.agent]
        if any(_RAN_OK.search(x.content or "") and not _FAILED_RUN.search(x.content or "") for x in later):
            continue
        asker = _asker(traj, s.idx)
        at = asker if asker is not None else s.idx
        return _make(
            "ignored_tool_error",
            traj,
            at,
            "unrecovered_run",
            f"a run it asked for failed and the team never ran it successfully: {quote(s.content, 100)}",
            failed_at=s.idx,
        )
    return None


def _values(text: str) -> "list[str]":
    return [v.replace(",", "") for v in _VALUE.findall(text or "")]


def _wrong_value_origin(traj: Trajectory, expected: object) -> Optional[Diagnosis]:
    """Where the wrong value the team ended with first appeared (a reference answer is needed)."""
    if expected is None:
        return None
    truth = set(_values(str(expected)))
    said = [s for s in traj.steps if s.role is StepRole.ACTOR and s.agent and _values(s.content)]
    if not truth or not said:
        return None
    ending = [v for v in _values(said[-1].content) if v not in truth]
    if not ending or any(v in truth for v in _values(said[-1].content)):
        return None  # the last word holds the right value, or no value to follow
    value = ending[-1]
    first = next((s for s in traj.steps if s.agent and value in _values(s.content)), None)
    if first is None:
        return None
    at = first.idx
    printed = (first.role is StepRole.ACTOR and _RAN_OK.search(first.content or "")) or _FAILED_RUN.search(
        first.content or ""
    )
    if printed:  # a run printed it: the step that asked for the run wrote it
        asker = _asker(traj, first.idx)
        at = asker if asker is not None else at
    return _make(
        "wrong_final_answer",
        traj,
        at,
        "wrong_value_origin",
        f"the team ended with {value}, which first appears here; the reference is {quote(expected, 60)}",
        value=value,
    )


_CODE = re.compile(r"```[^\n]*\n(.*?)```", re.S)


def _action(step: Step) -> Optional[str]:
    """What a model turn does, as comparable text: its tool calls, else the code it gives to run; None when it
    only talks (saying the same words again, an acknowledgement or a sign-off, is not a loop)."""
    calls = step.tool_calls
    if calls:
        return repr(sorted((c.name, repr(c.args)) for c in calls))
    code = _CODE.findall(step.content or "")
    return " ".join(" ".join(code).split()) or None


def _loop(traj: Trajectory) -> Optional[Diagnosis]:
    """An agent taking the same action it took before."""
    seen: dict = {}
    for s in traj.steps:
        if s.role is not StepRole.ACTOR or not s.agent:
            continue
        action = _action(s)
        if action is None:
            continue
        if (s.agent, action) in seen:
            first = seen[(s.agent, action)]
            return _make("repeated_calls", traj, first, "loop", f"{s.agent} took the same action again at step {s.idx}")
        seen[(s.agent, action)] = s.idx
    return None


def _stuck(traj: Trajectory) -> Optional[Diagnosis]:
    """A step saying the team is stuck blames the step before it (of another agent)."""
    for s in traj.steps:
        if s.agent and _STUCK.search(s.content or ""):
            before = _asker(traj, s.idx)
            if before is not None:
                return _make("repeated_calls", traj, before, "stuck", f"the team said it was stuck at step {s.idx}")
    return None


def from_team(traj: Trajectory, expected: object = None) -> "list[Diagnosis]":
    """The team signs of a failed team's log, each naming a step and an agent ([] for one agent)."""
    if not is_team(traj):
        return []
    found = [d for d in (_unrecovered_run(traj), _wrong_value_origin(traj, expected), _loop(traj), _stuck(traj)) if d]
    if not found:  # no sign: the team's first turn, where the approach was set (a weak guess)
        first = next((s for s in traj.steps if s.role is StepRole.ACTOR and s.agent), None)
        if first is not None:
            found.append(
                _make(
                    "wrong_final_answer", traj, first.idx, "first_turn", "no step shows why; the approach was set here"
                )
            )
    return found
