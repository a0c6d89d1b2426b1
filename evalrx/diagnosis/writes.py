"""Reference calls read as people read them: what must match is what changed the world.

Look-ups (calls that only read) may come in any order, repeat or be extra. The divergence is the
first state-changing call the reference does not have (or has with other arguments), or a
state-changing call of the reference that the run never made. From there the source traces back to
the step the evidence blames: a wrong argument value first stated by the user is the user's error,
one first written by the agent (or taken from an earlier observation) is wrong where it first
appeared, not at the call. Whether a call changes state comes from `evalrx.core.effects`.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from evalrx.core.case import FailureCase, StepRole, Trajectory
from evalrx.core.effects import ToolEffect, tool_documents, tool_effect
from evalrx.core.failures import Diagnosis
from evalrx.core.observation import observation_text
from evalrx.diagnosis._evidence import Call, answer_step, calls_of, is_prose, quote

CONFIDENCE = 0.9


def effect_lookup(
    traj: Trajectory, case: Optional[FailureCase], marks: Optional[dict] = None
) -> Callable[[str], ToolEffect]:
    """name -> its effect: a person's mark (`marks`, name -> read/write), the documents the run was offered (or
    its case carries), else the name."""
    docs = tool_documents((case.meta or {}).get("tools") if case is not None else None)
    docs.update(tool_documents(traj.offered_tools))
    marked = dict(marks or {})
    cache: dict = {}

    def effect(name: str) -> ToolEffect:
        if name not in cache:
            cache[name] = tool_effect(name, docs.get(name), marked.get(name))
        return cache[name]

    return effect


def applies(traj: Trajectory, refs: list, effect: Callable[[str], ToolEffect]) -> bool:
    """Matching by effect is for references with a state-changing call, and for conversations (more than one
    user turn), where look-ups come wherever the talk needs them."""
    users = sum(1 for s in traj.steps if s.role is StepRole.USER)
    return users > 1 or any(effect(r["name"]).changes_state for r in refs)


def _norm(value: Any, key: Any = None) -> Any:
    """An argument value as people compare it: lists of plain values in any order, prose not compared."""
    if is_prose(value, key):
        return "<prose>"
    if isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) or v is None for v in value):
        return sorted((json.dumps(v) for v in value))
    if isinstance(value, dict):
        return {k: _norm(v, k) for k, v in value.items()}
    return value


def same_args(a: dict, b: dict) -> bool:
    return _norm(a or {}) == _norm(b or {})


def _differing(expected: dict, actual: dict) -> "list[dict]":
    out = []
    for key in sorted(set(expected) | set(actual), key=str):
        if _norm(expected.get(key), key) != _norm(actual.get(key), key):
            out.append({"arg": key, "expected": expected.get(key), "actual": actual.get(key)})
    return out


def _scalars(value: Any, key: Any = None) -> "list[str]":
    """The plain values inside an argument (list items and object fields too), as text; prose left out."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _scalars(v, k)]
    if isinstance(value, list):
        return [s for v in value for s in _scalars(v, key)]
    if value is None or isinstance(value, bool) or is_prose(value, key) or not str(value).strip():
        return []
    return [str(value)]


def _step_texts(step: Any, calls: bool = True) -> str:
    """What a step states: a user's or the agent's words, an observation; with `calls`, the agent's call
    arguments too."""
    if step.role is StepRole.TOOL:
        return observation_text(step.observation)
    text = str(step.content or "")
    if step.role is StepRole.ACTOR and calls:
        text += " " + json.dumps([c.args for c in step.tool_calls], default=str)
    return text


def _wrong_values(diff: "list[dict]") -> "list[str]":
    """The values the run used that the reference does not (a list's extra items, a field's other value)."""
    out: list = []
    for d in diff:
        expected = set(_scalars(d["expected"]))
        out += [v for v in _scalars(d["actual"]) if v not in expected and len(v) >= 2]
    return out


def _trace_back(traj: Trajectory, call: Call, values: "list[str]") -> tuple[int, str, Optional[str]]:
    """(step, role of its source, the value) where a wrong value came from before the call: the user's last
    words that named it (the user chose it, whatever the agent had listed), else the agent's words to the user
    that first named it, or an observation (then the agent's words that first used it). A look-up's
    arguments state nothing: reading the wrong order is not yet acting on it."""
    before = [s for s in traj.steps if s.idx < call.step]
    for s in reversed(before):  # the user's last word on it before the call is the one the agent acted on
        hit = next((v for v in values if v in _step_texts(s)), None) if s.role is StepRole.USER else None
        if hit is not None:
            return s.idx, "user", hit
    chosen = _chosen_by_user(before, values)
    if chosen is not None:
        return chosen
    observed: Optional[str] = None
    for s in before:
        text = _step_texts(s, calls=False)
        hit = next((v for v in values if v in text), None)
        if hit is None or s.role is StepRole.USER:
            continue
        if s.role is StepRole.ACTOR:
            return s.idx, "observation" if observed == hit else "actor", hit
        observed = observed or hit
    return call.step, "observation" if observed else "call", observed


def _record_words(data: Any, value: str) -> "set[str]":
    """The words of the JSON record (an object) that holds `value` as one of its own fields: what a person
    would call that record by (a variant's colour and size, an order's items)."""
    found: set = set()
    if isinstance(data, dict):
        if any(isinstance(v, (str, int)) and str(v) == value for v in data.values()):
            found |= {w.lower() for w in _scalars(data) if not any(ch.isdigit() for ch in w)}
        for v in data.values():
            found |= _record_words(v, value)
    elif isinstance(data, list):
        for v in data:
            found |= _record_words(v, value)
    return found


def _chosen_by_user(before: list, values: "list[str]") -> Optional[tuple[int, str, Optional[str]]]:
    """A user turn that named the wrong record by its words rather than its id: it names more of the words only
    that record has (in the observations before it) than any other record's."""
    from evalrx.diagnosis.prose import parsed_json

    observations = [parsed_json(observation_text(s.observation)) for s in before if s.role is StepRole.TOOL]
    observations = [o for o in observations if o is not None]
    for value in values:
        mine = set().union(*(_record_words(o, value) for o in observations)) if observations else set()
        if not mine:
            continue
        others: set = set()
        for o in observations:
            for records in _records(o):
                for r in records:
                    words = {w.lower() for w in _scalars(r) if not any(ch.isdigit() for ch in w)}
                    if words != mine:
                        others |= words
        own = {w for w in mine - others if len(w) >= 3} or {w for w in mine if len(w) >= 3}
        for s in reversed(before):
            if s.role is StepRole.USER:
                said = str(s.content or "").lower()
                if len([w for w in own if w in said]) >= max(1, min(2, len(own))):
                    return s.idx, "user", value
    return None


def _records(data: Any) -> Any:
    from evalrx.diagnosis.prose import collections

    return collections(data)


def _ids(ref: dict) -> "set[str]":
    """The id-like values of a call's arguments (a string with a digit, 4 characters or more)."""
    return {v for v in _scalars(ref.get("arguments") or {}) if len(v) >= 4 and any(ch.isdigit() for ch in v)}


def _shared_ids(a: dict, b: dict) -> "list[str]":
    return sorted(_ids(a) & _ids(b))


def _earlier_on_same_object(ref_writes: list, open_refs: list, j: int) -> Optional[int]:
    """An open reference write listed before write `j` that acts on the same object (shares an id with it):
    the order of two changes to one thing can matter, so the reference's order holds there."""
    return next((i for i in open_refs if i < j and _shared_ids(ref_writes[i], ref_writes[j])), None)


def _ready_step(traj: Trajectory, ref: dict, after: int) -> Optional[int]:
    """The first agent turn after `after` at which every plain value of a missing call had been stated (by the
    user, an observation or the agent): where the call could first have been made."""
    needed = set(_scalars(ref.get("arguments") or {}))
    seen = ""
    for s in traj.steps:
        if s.idx > after and s.role is StepRole.ACTOR and all(v in seen for v in needed):
            return s.idx
        seen += " " + _step_texts(s)
    return None


def from_writes(
    traj: Trajectory, case: Optional[FailureCase], refs: list, marks: Optional[dict] = None
) -> Optional[Diagnosis]:
    """The first divergence of the run's state-changing calls from the reference's, or None when they agree."""
    effect = effect_lookup(traj, case, marks)
    calls = calls_of(traj)
    ref_writes = [r for r in refs if not effect(r["name"]).reads_only]
    open_refs = list(range(len(ref_writes)))
    last_matched = -1
    for n, c in enumerate(calls):
        eff = effect(c.name)
        if eff.reads_only:
            continue
        exact = next(
            (
                i
                for i in open_refs
                if ref_writes[i]["name"] == c.name and same_args(ref_writes[i].get("arguments"), c.args)
            ),
            None,
        )
        if c.error and (exact is not None or any(d.name == c.name and not d.error for d in calls[n + 1 :])):
            continue  # refused, and tried again later: the later call is the one judged
        if exact is not None and not c.error:
            before = _earlier_on_same_object(ref_writes, open_refs, exact)
            if before is not None:
                want = ref_writes[before]
                return _make(
                    "wrong_tool",
                    c.step,
                    f"{c.name} before {want['name']}, which the reference does first on the same "
                    f"{_shared_ids(want, ref_writes[exact])[0]!r}",
                    expected={"name": want["name"], "args": want.get("arguments") or {}},
                    actual={"name": c.name, "args": c.args},
                    effect=eff.why,
                )
            open_refs.remove(exact)
            last_matched = c.step
            continue
        actual = {"name": c.name, "args": c.args}
        named = [i for i in open_refs if ref_writes[i]["name"] == c.name]
        if named:
            ref = ref_writes[min(named, key=lambda i: len(_differing(ref_writes[i].get("arguments") or {}, c.args)))]
            return _wrong_arguments(traj, c, ref, eff)
        if eff.effect is None and not any(r["name"] == c.name for r in refs):
            # Not known to change anything and not in the reference: an extra call, perhaps a look-up.
            continue
        if open_refs:
            want = ref_writes[open_refs[0]]
            expected = {"name": want["name"], "args": want.get("arguments") or {}}
            return _make(
                "wrong_tool",
                c.step,
                f"{c.show()} where the reference changes state with {want['name']} ({eff.why})",
                expected=expected,
                actual=actual,
                effect=eff.why,
            )
        if any(r["name"] == c.name for r in refs):
            continue  # the reference makes this call too (as a look-up it counted already)
        return _make(
            "unneeded_tool_call",
            c.step,
            f"{c.show()} changes state and the reference does not ({eff.why})",
            actual=actual,
            effect=eff.why,
        )
    if open_refs:
        want = ref_writes[open_refs[0]]
        expected = {"name": want["name"], "args": want.get("arguments") or {}}
        actors = [s.idx for s in traj.steps if s.role is StepRole.ACTOR]
        # Where the call could first have been made; if never (its values never came up), where the agent
        # closed without it: its last message to the user.
        step = _ready_step(traj, want, last_matched)
        if step is None:
            step = answer_step(traj) if traj.final_answer is not None else (actors[-1] if actors else None)
        return _make(
            "no_tool_call",
            step,
            f"never called {Call(-1, want['name'], expected['args']).show()} ({effect(want['name']).why})",
            expected=expected,
        )
    return None


def _wrong_arguments(traj: Trajectory, call: Call, ref: dict, eff: ToolEffect) -> Diagnosis:
    expected = {"name": ref["name"], "args": ref.get("arguments") or {}}
    actual = {"name": call.name, "args": call.args}
    diff = _differing(expected["args"], call.args)
    values = _wrong_values(diff)
    step, source, value = _trace_back(traj, call, values)
    shown = f"{call.name} got {value!r}" if value else call.show()
    evidence = dict(expected=expected, actual=actual, diff=diff, effect=eff.why)
    if source == "user":
        return _make("user_error", step, f"{shown}, as the user said at step {step}", **evidence)
    if source == "observation":
        text = f"{shown}, taken from an earlier observation where the reference has other values"
        return _make("misread_observation", step, text, **evidence)
    if source == "actor" and step != call.step:
        return _make("bad_arguments", step, f"{shown}: first stated by the agent at step {step}", **evidence)
    return _make(
        "bad_arguments",
        call.step,
        f"{call.show()} instead of {Call(-1, ref['name'], expected['args']).show()}",
        **evidence,
    )


def _make(kind: str, step: Optional[int], text: str, **evidence: Any) -> Diagnosis:
    return Diagnosis(
        kind=kind,
        first_wrong_step=step,
        evidence={"text": quote(text, 240), **evidence},
        confidence=CONFIDENCE,
        source="reference",
    )


__all__ = ["applies", "effect_lookup", "from_writes", "same_args"]
