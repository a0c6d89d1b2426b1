"""Grade a conversation by the state its calls leave, by the rules of BFCL's multi-turn checker.

A case graded by state (`{"kind": "state"}`) has `meta["environment"]` (an `evalrx.tools.environment`
spec) and `meta["turns"]`, each user turn with its ground-truth calls in Python syntax
(`"cd(folder='docs')"`). The agent's calls are replayed turn by turn on a fresh environment (as BFCL
re-executes a model's decoded calls: the run's own live environment is not needed), the ground truth's
on a second one; instances keep their state across turns. After each turn whose ground truth is not empty:

- the agent made some call in that turn;
- every public attribute of every ground-truth instance equals the agent instance's (BFCL's state check);
- every result of the turn's ground-truth calls is among the results of all the agent's calls so far,
  unordered, with multiplicity (BFCL's response check; results compared as text, `result_text`).

A turn whose ground truth is empty is not checked, but its calls still run. A run that ended before its
last user turn, or ran out of model turns in one, fails as BFCL fails a force-terminated entry.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from evalrx.core.case import LIMIT_PREFIX, FailureCase, Step, StepRole, Termination, Trajectory
from evalrx.core.observation import observation_text
from evalrx.tools.environment import Environment

_CUT = 80
_ITEMS = 20
_DEPTH = 4
# How a run ends that ran out of model turns in a user turn (so did, when stopped by a limit, an imported one).
_RAN_OUT = (Termination.MAX_TURNS.value, Termination.FORCED_FINAL.value)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


@dataclass(frozen=True)
class StateCheck:
    """The verdict on a conversation graded by state.

    `turn` is the failing user turn (0-based), `kind` a failure kind, `step` the trajectory step to blame
    (an actor step's `idx`), `reason` one line, `diff` {class: {attribute: {"agent", "ground_truth", "at"}}}
    with the values where the attribute first differs (`at`: the path there), JSON-safe and cut.
    All but `ok` and `reason` are None / empty when ok.
    """

    ok: bool
    turn: Optional[int] = None
    kind: Optional[str] = None
    step: Optional[int] = None
    reason: str = ""
    diff: dict = field(default_factory=dict)


def _cut(text: str, n: int = _CUT) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _json_safe(value: Any, depth: int = 0, path: tuple = ()) -> Any:
    """`value` as JSON (objects as their public attributes, a few levels deep; long strings and lists cut)."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return _cut(value)
    if depth >= _DEPTH or id(value) in path:
        return _cut(repr(value))
    path = path + (id(value),)
    if isinstance(value, dict):
        items = list(value.items())
        out = {str(k): _json_safe(v, depth + 1, path) for k, v in items[:_ITEMS]}
        if len(items) > _ITEMS:
            out["..."] = f"{len(items) - _ITEMS} more"
        return out
    if isinstance(value, (list, tuple, set)):
        seq = list(value)
        out_list = [_json_safe(v, depth + 1, path) for v in seq[:_ITEMS]]
        return out_list + ([f"... {len(seq) - _ITEMS} more"] if len(seq) > _ITEMS else [])
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict):
        # A back-reference (a child's parent, which holds the child) is left out rather than shown again.
        return {
            k: _json_safe(v, depth + 1, path)
            for k, v in attrs.items()
            if not k.startswith("_") and id(v) not in path and not _holds(v, value)
        }
    return _cut(repr(value))


def _holds(owner: Any, item: Any) -> bool:
    """Whether `owner` keeps `item` in one of its attributes, directly or in a dict or list there."""
    for v in (getattr(owner, "__dict__", None) or {}).values():
        if v is item:
            return True
        if isinstance(v, dict) and any(x is item for x in v.values()):
            return True
        if isinstance(v, (list, tuple)) and any(x is item for x in v):
            return True
    return False


def _show(value: Any) -> str:
    if value is _MISSING:
        return "<missing>"
    return _cut(json.dumps(_json_safe(value), ensure_ascii=False, default=str))


def _first_difference(a: Any, b: Any, at: str, path: tuple = ()) -> tuple[str, Any, Any]:
    """(path, a's value, b's value) where `a` and `b` first differ, looking into dicts, equal-length lists
    and objects' public attributes."""
    if type(a) is not type(b) or len(path) > 12:
        return at, a, b
    path = path + (id(a), id(b))
    if isinstance(a, dict):
        for key in list(a) + [k for k in b if k not in a]:
            here = f"{at}[{key!r}]"
            if key not in b or key not in a:
                return here, a.get(key, _MISSING), b.get(key, _MISSING)
            if a[key] != b[key]:
                return _first_difference(a[key], b[key], here, path)
        return at, a, b
    if isinstance(a, (list, tuple)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{at}[{i}]", path)
        return at, a, b
    attrs = getattr(a, "__dict__", None)
    if isinstance(attrs, dict) and not isinstance(a, type):
        for key, x in attrs.items():
            if key.startswith("_") or id(x) in path:  # a back-reference to an object already being compared
                continue
            y = getattr(b, key, _MISSING)
            if x != y:
                return _first_difference(x, y, f"{at}.{key}", path)
    return at, a, b


def _not_run(steps: list) -> set:
    """(actor step idx, call index) of the calls the live loop did not run: a repeat it blocked, or a name
    no offered tool had; replaying them would grade a state the agent never made."""
    out: set = set()
    actor: Optional[int] = None
    for step in steps:
        if step.role == StepRole.ACTOR:
            actor = step.idx
        elif step.role == StepRole.TOOL and actor is not None and not (step.span or {}).get("parse_error"):
            span = step.span or {}
            unknown = span.get("tool_error") and observation_text(step.observation).startswith(
                "[tool error: unknown tool"
            )
            if span.get("repeat_blocked") or unknown:
                out.add((actor, step.span_int("call")))
    return out


def _user_turns(steps: list) -> "dict[int, list[Step]]":
    """The steps of each user turn: those after its USER step up to the next (steps before any: turn 0)."""
    turns: dict = {0: []}
    current, seen_user = 0, False
    for step in steps:
        if step.role == StepRole.USER:
            mark = (step.span or {}).get("user_turn")
            if isinstance(mark, int) and not isinstance(mark, bool):
                current = mark
            elif seen_user:  # an unmarked USER step after the first: the next turn
                current += 1
            seen_user = True
            turns.setdefault(current, [])
            continue
        turns.setdefault(current, []).append(step)
    return turns


def _canonical(args: Any) -> str:
    return json.dumps(args, sort_keys=True, default=str)  # tuples and lists alike, key order ignored


def _call_text(name: str, args: dict) -> str:
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"


def _arg_difference(got: dict, want: dict) -> str:
    for key in list(want) + [k for k in got if k not in want]:
        if _canonical(got.get(key, _MISSING)) != _canonical(want.get(key, _MISSING)):
            shown = "missing" if key not in got else repr(got[key])
            wanted = "it omitted" if key not in want else repr(want[key])
            return _cut(f"`{key}`: got {shown}, want {wanted}")
    return "other arguments"


def _blame(calls: list, wanted: list) -> Optional[tuple[str, Optional[int], str]]:
    """(kind, step, clause) for a turn whose calls differ from its ground truth, or None when they are the same
    calls in the same order (the rule: `grade_state`)."""
    taken: set = set()
    missing = None
    for i, (name, want) in enumerate(wanted):
        hit = next(
            (
                j
                for j, (_, n, a) in enumerate(calls)
                if j not in taken and n == name and _canonical(a) == _canonical(want)
            ),
            None,
        )
        if hit is not None:
            taken.add(hit)
        elif missing is None:
            missing = i
    if missing is not None:
        name, want = wanted[missing]
        free = [j for j in range(len(calls)) if j not in taken]
        same = next((j for j in free if calls[j][1] == name), None)
        if same is not None:
            return "bad_arguments", calls[same][0], f"{name}: {_arg_difference(calls[same][2], want)}"
        if free:
            got = calls[free[0]]
            return "wrong_tool", got[0], _cut(f"called {got[1]}, want {_call_text(name, want)}")
        return "no_tool_call", None, _cut(f"no call {_call_text(name, want)}")
    left = [j for j in range(len(calls)) if j not in taken]
    if left:
        extra = calls[left[0]]
        return "unneeded_tool_call", extra[0], _cut(f"an extra call {_call_text(extra[1], extra[2])}")
    for j, ((step, name, args), (want_name, want)) in enumerate(zip(calls, wanted)):
        if name != want_name or _canonical(args) != _canonical(want):
            return "wrong_tool", step, _cut(f"call {j + 1} is {name}, want {want_name} (another order)")
    return None


def _spec(case: FailureCase) -> tuple[dict, list]:
    meta = case.meta or {}
    spec = meta.get("environment")
    if not isinstance(spec, dict):
        raise ValueError(
            f"case {case.id}: a state grader needs meta['environment'] (an environment spec, see "
            "evalrx.tools.environment); load BFCL's multi-turn suites with load_cases('bfcl/multi_turn_base')"
        )
    turns = meta.get("turns")
    if isinstance(turns, list) and all(isinstance(t, dict) for t in turns):
        expected = [list(t.get("expected") or []) for t in turns]
    elif isinstance(case.expected, list) and all(isinstance(t, list) for t in case.expected):
        expected = [list(t) for t in case.expected]
    else:
        raise ValueError(
            f"case {case.id}: a state grader needs meta['turns'] = [{{'prompt', 'expected': [call strings]}}, ...] "
            "or expected = a list of call-string lists per turn"
        )
    return spec, expected


def _fail(turn: int, kind: str, step: Optional[int], reason: str, diff: Optional[dict] = None) -> StateCheck:
    # Numbered from 1 in the line, as the pages number a conversation's user turns; `turn` stays 0-based.
    return StateCheck(False, turn, kind, step, f"user turn {turn + 1}: {reason}", diff or {})


def grade_state(traj: Trajectory, case: FailureCase) -> StateCheck:
    """Grade a run of a case graded by state (see the module doc) and say which turn failed and why.

    The kind, for the first turn that fails. A turn that made no call: `no_tool_call` (`malformed_call` when
    a call of it could not be parsed). Else its calls are set against its ground truth's (arguments by
    parameter name, defaults filled in): each ground-truth call, in order, takes the first untaken call of
    the same name and arguments; for the first one left without, an untaken call of its name is
    `bad_arguments`, else an untaken call of another name `wrong_tool`, else `no_tool_call` (`malformed_call`
    when the turn had a parse error). All taken, calls left over: the first is `unneeded_tool_call`; the
    same calls in another order: `wrong_tool` at the first out of place. Calls the same as the ground
    truth's: the latest earlier turn whose calls differ is blamed by the same rule (a call in a turn that
    wanted none: `unneeded_tool_call`). A run that ended before its last user turn, or ran out of model turns
    in it, is `no_final_answer` in the turn it ended in; a run that raised is `infra_error` (`grade_trajectory`
    makes it an ERROR). `step` is the blamed call's actor step (`Step.idx`), else the turn's first actor step.

    Raises:
        ValueError: the case has no environment spec or no per-turn ground truth, or a ground-truth call
            string cannot be run (the message says which).
    """
    if traj.terminated == Termination.ERROR:
        return StateCheck(False, None, "infra_error", None, "the run failed before its calls could be graded")
    spec, expected = _spec(case)
    agent_env, truth_env = Environment.from_spec(spec), Environment.from_spec(spec)
    by_turn = _user_turns(traj.steps)
    skipped = _not_run(traj.steps)
    reached = max(by_turn)
    agent_results: list = []
    history: list = []  # (turn, its actor steps, its calls, its ground truth's) for the turns replayed so far
    for k, truth_calls in enumerate(expected):
        if k > reached:
            how = traj.terminated or "it stopped"
            reason = f"the run ended in this turn ({how}), before user turn {k + 1} of {len(expected)}"
            return _fail(reached, "no_final_answer", _last_actor(by_turn.get(reached, [])), reason)
        steps = by_turn.get(k, [])
        actor = [s for s in steps if s.role == StepRole.ACTOR]
        calls = [
            (s.idx, c.name, c.args) for s in actor for i, c in enumerate(s.tool_calls) if (s.idx, i) not in skipped
        ]
        agent_results.extend(agent_env.call(name, kwargs=args) for _, name, args in calls)
        wanted, truth_results = [], []
        for text in truth_calls:
            name, args, kwargs = truth_env.parse_call_string(text)
            wanted.append((name, truth_env.bound_arguments(name, args, kwargs) or dict(kwargs)))
            truth_results.append(truth_env.call(name, args, kwargs))
        calls = [(idx, name, agent_env.bound_arguments(name, (), args) or args) for idx, name, args in calls]
        history.append((k, actor, calls, wanted))
        if not truth_calls:
            continue
        broken = next((s for s in actor if s.parse_error), None)
        first = actor[0].idx if actor else None
        if not calls:
            kind = "malformed_call" if broken else "no_tool_call"
            want = ", ".join(truth_calls)
            return _fail(k, kind, broken.idx if broken else first, _cut(f"no call, want {want}", 2 * _CUT))
        problem, diff = _state_difference(agent_env, truth_env)
        if problem is None:
            problem = _missing_result(agent_results, truth_results, truth_calls)
        if problem is not None:
            kind, step, clause = _blame_turns(history, broken)
            return _fail(k, kind, step if step is not None else first, f"{problem}; {clause}", diff)
    if traj.terminated in _RAN_OUT or traj.terminated.startswith(LIMIT_PREFIX):
        return _fail(
            reached, "no_final_answer", _last_actor(by_turn.get(reached, [])), "the run ran out of model turns"
        )
    return StateCheck(True, reason="every turn leaves the ground truth's state and results")


def _last_actor(steps: list) -> Optional[int]:
    actor = [s.idx for s in steps if s.role == StepRole.ACTOR]
    return actor[-1] if actor else None


def _state_difference(agent_env: Environment, truth_env: Environment) -> tuple[Optional[str], dict]:
    """BFCL's state check: (the first difference in one line, {class: {attr: values}}) or (None, {})."""
    diff: dict = {}
    first = None
    for class_name, truth in truth_env.instances.items():
        agent = agent_env.instances[class_name]
        for attr, want in vars(truth).items():
            if attr.startswith("_"):
                continue
            got = getattr(agent, attr, _MISSING)
            if not got != want:  # `!=` as BFCL's check has it
                continue
            at, got_at, want_at = _first_difference(got, want, attr)
            diff.setdefault(class_name, {})[attr] = {
                "agent": _json_safe(got_at) if got_at is not _MISSING else "<missing>",
                "ground_truth": _json_safe(want_at) if want_at is not _MISSING else "<missing>",
                "at": at,
            }
            if first is None:
                first = f"{class_name} differs in {at}: {_show(got_at)} (agent) vs {_show(want_at)} (ground truth)"
    return first, diff


def _missing_result(agent_results: list, truth_results: list, truth_calls: list) -> Optional[str]:
    """BFCL's response check: the first ground-truth result not among the agent's results so far, or None."""
    left = Counter(agent_results)
    for text, result in zip(truth_calls, truth_results):
        if left[result] > 0:
            left[result] -= 1
            continue
        return f"the agent's calls never returned {_show(result)} (the result of {_cut(text, 60)})"
    return None


def _blame_turns(history: list, broken: Any) -> tuple[str, Optional[int], str]:
    """(kind, step, clause): the failing turn's calls set against its ground truth, else the latest
    earlier turn whose calls differ from its own."""
    for k, actor, calls, wanted in reversed(history):
        verdict = _blame(calls, wanted)
        if verdict is None:
            continue
        kind, step, clause = verdict
        is_last = k == history[-1][0]
        if kind == "no_tool_call" and is_last and broken is not None:
            kind, step, clause = "malformed_call", broken.idx, f"a call could not be parsed; {clause}"
        if not is_last:
            clause = f"user turn {k + 1}'s calls differ: {clause}"
        if step is None and actor:
            step = actor[0].idx
        return kind, step, clause
    actor = history[-1][1]
    return "wrong_tool", actor[0].idx if actor else None, "the calls match the ground truth's, the results do not"


__all__ = ["StateCheck", "grade_state"]
