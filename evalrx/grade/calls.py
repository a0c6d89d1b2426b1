"""Grade a turn's tool calls against BFCL-style expected calls, by the rules of BFCL's AST checker.

An expected call is `{function_name: {param: [acceptable values]}}`; `""` among a parameter's values
means it may be omitted; an expected list `[]` means no call is wanted (BFCL's irrelevance). A call
passes as `bfcl_eval/eval_checker/ast_eval/ast_checker.py` has it:

- its name is the expected one (or the wire form BFCL accepts for it, `.` -> `_`);
- every required parameter is present, and none that the function does not declare or the expected call leaves out;
- each value has the declared type with Python's semantics (an int passes for a float, a bool is not an
  int, an array's items are checked one level deep), or the type of the acceptable values (BFCL's
  "variable" rule: the value then has to be one of them as it is);
- each value is one of the acceptable ones: strings after dropping spaces and `,./-_*^` and lower-casing
  both sides, lists item by item likewise, objects key by key against their own acceptable values,
  anything else by `==`;
- an omitted parameter passes only when `""` is among its values.

Parallel calls may come in any order: each expected call, in order, takes the first unmatched call that
passes it, as BFCL's no-order checker does; the number of calls must equal the number expected.

Tool documents may be JSON Schema (`object`, `number`, no type for BFCL's `any`, as `evalrx.suites.bfcl`
writes them) or BFCL's own dialect (`dict`, `float`, `tuple`, `any`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional

from evalrx.core import first_line
from evalrx.core.case import FailureCase, StepRole, Termination, Trajectory
from evalrx.core.words import counted

# BFCL's type names as Python types; "any" is a string to BFCL (anything else must match the answers' type).
_PY_TYPES: "dict[str, type[Any]]" = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
# JSON Schema's spellings of BFCL's types (the suites convert BFCL's documents to JSON Schema).
_FROM_JSON_SCHEMA = {"object": "dict", "number": "float"}
# The characters BFCL drops before comparing strings ("April 1, 2024" == "april 1 2024").
_IGNORED = re.compile(r"[ ,./\-_*^]")
_SHOWN_VALUES = 6


@dataclass(frozen=True)
class CallCheck:
    """The verdict on a turn's calls: `kind` is a failure kind (None when ok), `call` the index of the
    offending call in the turn's calls (None when no single call is to blame), `reason` one line."""

    ok: bool
    kind: Optional[str] = None
    call: Optional[int] = None
    reason: str = ""


_PASS = CallCheck(True, reason="the calls match the expected ones")


def standardize(text: str) -> str:
    """A string as BFCL compares it: spaces and `,./-_*^` dropped, lower-cased, `'` as `"`."""
    return _IGNORED.sub("", text).lower().replace("'", '"')


def _options(values: list) -> str:
    shown = ", ".join(repr(v) for v in values[:_SHOWN_VALUES])
    return shown + (", ..." if len(values) > _SHOWN_VALUES else "")


def _same_name(got: Any, want: str) -> bool:
    # BFCL accepts `math_factorial` for `math.factorial` from models whose API forbids dots in names; the
    # agent normally maps wire names back, so either spelling is taken whatever the model.
    return got == want or ("." in want and got == want.replace(".", "_"))


def _document(tools: list, name: str) -> Optional[dict]:
    for tool in tools or []:
        doc = tool.get("function", tool) if isinstance(tool, dict) else None  # OpenAI's {"type": "function", ...}
        if isinstance(doc, dict) and doc.get("name") == name:
            return doc
    return None


def _bfcl_type(schema: Any) -> Optional[str]:
    """The BFCL type name a parameter schema declares ("any" when it has none; None for one BFCL has no rule for)."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind is None:
        return "any"
    if not isinstance(kind, str):
        return None
    kind = _FROM_JSON_SCHEMA.get(kind, kind)
    return kind if kind in _PY_TYPES else None


def _answer_type(answers: list) -> Optional[type]:
    """The type of the first acceptable value that is not "may be omitted"."""
    return next((type(a) for a in answers if a != ""), None)


def _type_name(value: Any) -> str:
    return {str: "string", int: "integer", float: "float", bool: "boolean", list: "array", dict: "dict"}.get(
        type(value), type(value).__name__
    )


def _items_typed(value: list, answer: Any, item_type: type) -> bool:
    if not isinstance(answer, list):
        return True  # BFCL checks items only against list answers: a "" answer lets any items through
    fallback = _answer_type(answer)
    return all(type(item) is item_type or (fallback is not None and type(item) is fallback) for item in value)


def _std(value: Any) -> Any:
    return standardize(value) if isinstance(value, str) else value


def _dict_problem(label: str, value: dict, answers: list) -> Optional[str]:
    """Why `value` matches none of the acceptable dicts (keys must be expected ones; values compared as
    strings are, one level deep), or None."""
    problems = []
    for answer in answers:
        if answer == "" or not isinstance(answer, dict):
            continue
        problem = None
        for key, got in value.items():
            if key not in answer:
                problem = f"`{label}.{key}`: not an expected key"
                break
            wanted = list(answer[key]) if isinstance(answer[key], list) else [answer[key]]
            if _std(got) not in [_std(w) for w in wanted]:
                problem = f"`{label}.{key}`: got {got!r}, want one of {_options(wanted)}"
                break
        if problem is None:
            missing = [k for k, w in answer.items() if k not in value and "" not in w]
            problem = (
                f"`{label}.{missing[0]}`: missing, want one of {_options(answer[missing[0]])}" if missing else None
            )
        if problem is None:
            return None
        problems.append(problem)
    return problems[0] if problems else f"`{label}`: got {value!r}, want it omitted"


def _list_of_dicts_problem(label: str, value: list, answers: list) -> Optional[str]:
    """Why `value` matches none of the acceptable lists of dicts (same length, dict by dict in order), or None."""
    problems = []
    for answer in answers:
        answer = [] if answer == "" else answer  # BFCL reads a "" answer as an empty list
        if not isinstance(answer, list):
            continue
        if len(value) != len(answer):
            problems.append(f"`{label}`: {counted(len(value), 'item')}, want {len(answer)}")
            continue
        problem = None
        for i, (got, want) in enumerate(zip(value, answer)):
            if not isinstance(got, dict):
                problem = f"`{label}[{i}]`: got {_type_name(got)} {got!r}, want dict"
            else:
                problem = _dict_problem(f"{label}[{i}]", got, [want])
            if problem:
                break
        if problem is None:
            return None
        problems.append(problem)
    return problems[0] if problems else f"`{label}`: got {value!r}, want one of {_options(answers)}"


def _list_matches(value: list, answers: list) -> bool:
    got = [_std(v) for v in value]
    for answer in answers:
        answer = [] if answer == "" else answer  # BFCL reads a "" answer as an empty list
        if isinstance(answer, list) and got == [_std(a) for a in answer]:
            return True
    return False


def _value_problem(param: str, value: Any, schema: Any, answers: list) -> Optional[str]:
    """Why one argument fails its declared type or its acceptable values, or None."""
    kind = _bfcl_type(schema)
    declared = _PY_TYPES.get(kind) if kind else None
    if isinstance(value, tuple):
        value = list(value)  # BFCL reads tuples as lists (JSON has none)
    if kind == "float" and type(value) is int:
        value = float(value)  # Python would convert an int where a float is declared; BFCL does too
    if declared is None:  # a type BFCL has no rule for: the value has to be one of the answers as it is
        return None if value in answers else f"`{param}`: got {value!r}, want one of {_options(answers)}"
    answer_type = _answer_type(answers)
    variable = answer_type is not None and answer_type is not declared
    item_type = None
    if kind in ("array", "tuple"):
        items = schema.get("items") if isinstance(schema, dict) else None
        item_kind = _bfcl_type(items) if isinstance(items, dict) else None
        item_type = _PY_TYPES.get(item_kind) if item_kind else None
    if type(value) is declared:
        if item_type is not None and not any(_items_typed(value, a, item_type) for a in answers):
            return f"`{param}`: got {value!r}, want an array of {item_kind}"
    elif answer_type is not None and type(value) is answer_type:
        variable = True
    else:
        return f"`{param}`: got {_type_name(value)} {value!r}, want {kind}"
    if not variable:
        if declared is dict:
            return _dict_problem(param, value, answers)
        if declared is list and item_type is dict:
            return _list_of_dicts_problem(param, value, answers)
        if declared is str:
            ok = standardize(value) in [standardize(a) for a in answers if isinstance(a, str)]
            return None if ok else f"`{param}`: got {value!r}, want one of {_options(answers)}"
        if declared is list:
            return (
                None if _list_matches(value, answers) else f"`{param}`: got {value!r}, want one of {_options(answers)}"
            )
    return None if value in answers else f"`{param}`: got {value!r}, want one of {_options(answers)}"


def _well_formed(call: Any) -> bool:
    return isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("args") or {}, dict)


def _call_problem(call: Any, name: str, answers: dict, tools: list) -> Optional[tuple[str, str]]:
    """(kind, reason) for why `call` does not make the expected call `name` with `answers`, or None."""
    if not _well_formed(call):
        return "malformed_call", f"not a call with an argument object: {call!r}"
    if not _same_name(call.get("name"), name):
        return "wrong_tool", f"called {call.get('name')}, want {name}"
    args = call.get("args") or {}
    doc = _document(tools, name)
    params = (doc or {}).get("parameters") or {}
    # Without the function's document every parameter of the expected call counts as declared, of no known type.
    properties = params.get("properties") if doc is not None else dict.fromkeys(answers)
    properties = properties if isinstance(properties, dict) else {}
    for param in params.get("required") or []:
        if param not in args:
            return "bad_arguments", f"`{param}`: missing (required)"
    for param, value in args.items():
        if param not in properties:
            return "bad_arguments", f"`{param}`: not a parameter of {name}"
        if param not in answers:
            return "bad_arguments", f"`{param}`: got {value!r}, want it omitted"
        wanted = answers[param] if isinstance(answers[param], list) else [answers[param]]
        problem = _value_problem(param, value, properties[param], wanted)
        if problem:
            return "bad_arguments", problem
    for param, wanted in answers.items():
        wanted = wanted if isinstance(wanted, list) else [wanted]
        if param not in args and "" not in wanted:
            return "bad_arguments", f"`{param}`: missing, want one of {_options(wanted)}"
    return None


def _expected_calls(expected: Any) -> list[tuple[str, dict]]:
    out = []
    for entry in expected or []:
        for name, answers in (entry or {}).items():
            out.append((name, answers if isinstance(answers, dict) else {}))
    return out


def _match(calls: list, wanted: list, tools: list, *, stop: bool = True) -> tuple[dict, Optional[int]]:
    """Greedy matching as BFCL's: each expected call, in order, takes the first unmatched call that passes it.
    Returns {expected index: call index} and the first expected index left unmatched (None: all matched);
    `stop`: stop there (the matches so far explain the miss), else go on matching the rest."""
    matched: dict = {}
    missing = None
    for i, (name, answers) in enumerate(wanted):
        free = [j for j in range(len(calls)) if j not in matched.values()]
        hit = next((j for j in free if _call_problem(calls[j], name, answers, tools) is None), None)
        if hit is not None:
            matched[i] = hit
        elif missing is None:
            missing = i
            if stop:
                break
    return matched, missing


def _tool_names(tools: list) -> set:
    names = set()
    for tool in tools or []:
        doc = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(doc, dict) and isinstance(doc.get("name"), str):
            names.update({doc["name"], doc["name"].replace(".", "_")})
    return names


def _unmatched_problem(calls: list, wanted: list, matched: dict, missing: int, tools: list) -> CallCheck:
    """Why expected call `missing` found no call: what the first call of its name got wrong, or else the
    call whose name is one too many (a wrong or unknown tool)."""
    name, answers = wanted[missing]
    free = [j for j in range(len(calls)) if j not in matched.values()]
    for j in free:
        if _well_formed(calls[j]) and _same_name(calls[j]["name"], name):
            kind, reason = _call_problem(calls[j], name, answers, tools) or ("bad_arguments", "")
            return CallCheck(False, kind, j, reason)
    for j in free:
        if not _well_formed(calls[j]):
            kind, reason = _call_problem(calls[j], name, answers, tools) or ("malformed_call", "")
            return CallCheck(False, kind, j, reason)
    pending = [wanted[i][0] for i in range(len(wanted)) if i not in matched]
    surplus = Counter(calls[j].get("name") for j in free)
    for want in pending:
        for got in list(surplus):
            if surplus[got] > 0 and _same_name(got, want):
                surplus[got] -= 1
                break
    blamed = next(j for j in free if surplus[calls[j].get("name")] > 0)
    got = calls[blamed].get("name")
    kind = "wrong_tool" if got in _tool_names(tools) else "unknown_tool"
    uncalled = [w for w in dict.fromkeys(pending) if not any(_same_name(calls[j].get("name"), w) for j in free)]
    return CallCheck(False, kind, blamed, f"called {got}, want one of {', '.join(uncalled or pending)}")


def check_calls(calls: list, tools: list, expected: Any, *, category: Optional[str] = None) -> CallCheck:
    """Check one turn's calls against the expected calls by BFCL's AST rules (see the module doc).

    Args:
        calls: the turn's calls, `{"name": ..., "args": {...}}` dicts (BFCL's function names).
        tools: the function documents offered (JSON Schema or BFCL's dialect), to read declared types from.
        expected: BFCL's ground truth, a list of `{function_name: {param: [acceptable values]}}`; `[]`: no call wanted.
        category: the BFCL category, when known: an `irrelevance` one wants no call whatever `expected`
            says, a `relevance` one (not irrelevance) any call.

    Returns:
        A `CallCheck`: ok, or the failure kind, the offending call's index and a one-line reason.
    """
    calls = list(calls or [])
    category = category or ""
    wanted = _expected_calls(expected)
    if "irrelevance" in category or (not wanted and "relevance" not in category):
        if not calls:
            return CallCheck(True, reason="no call, as wanted")
        name = calls[0].get("name") if isinstance(calls[0], dict) else calls[0]
        return CallCheck(False, "unneeded_tool_call", 0, f"called {name}, want no call")
    if "relevance" in category:
        ok = bool(calls)
        return _PASS if ok else CallCheck(False, "no_tool_call", None, "no call, want one")
    names = ", ".join(dict.fromkeys(name for name, _ in wanted))
    if not calls:
        return CallCheck(False, "no_tool_call", None, f"no call, want {names}")
    if len(calls) != len(wanted):
        reason = f"{counted(len(calls), 'call')}, want {len(wanted)}"
        if len(calls) < len(wanted):
            # Too few calls: a call the task needed was not made.
            return CallCheck(False, "no_tool_call", None, reason)
        # Too many: a call the task did not need; blamed on the first one no expected call takes.
        matched, _ = _match(calls, wanted, tools, stop=False)
        extra = next(j for j in range(len(calls)) if j not in matched.values())
        return CallCheck(False, "unneeded_tool_call", extra, reason)
    matched, missing = _match(calls, wanted, tools)
    if missing is None:
        return _PASS
    return _unmatched_problem(calls, wanted, matched, missing, tools)


def ends_at_calls(case: Any) -> bool:
    """True for a case graded by its calls (`{"kind": "calls"}`): the agent stops at the model's first calling turn."""
    grader = getattr(case, "grader", None)
    return isinstance(grader, dict) and grader.get("kind") == "calls"


def grade_calls(traj: Trajectory, case: FailureCase) -> CallCheck:
    """Grade a run of a case graded by its calls: a call that could not be parsed fails (malformed_call);
    otherwise the calls of the first actor turn that made any are checked (`check_calls`), none at all
    being "no call". A run that raised gets kind `infra_error` (`grade_trajectory` makes it an ERROR)."""
    if traj.terminated == Termination.ERROR:
        return CallCheck(False, "infra_error", None, "the run failed before its calls could be graded")
    actor = [s for s in traj.steps if s.role == StepRole.ACTOR]
    for step in actor:
        if step.parse_error:
            return CallCheck(
                False, "malformed_call", None, f"a call could not be parsed: {first_line(step.parse_error)}"
            )
    # check_calls reads calls as dicts: it grades BFCL's own answers too, malformed ones included.
    calls = [c.to_dict() for c in next((s.tool_calls for s in actor if s.tool_calls), [])]
    meta = case.meta or {}
    tools = meta.get("tools") or traj.offered_tools
    return check_calls(calls, tools, case.expected, category=meta.get("task_type"))


__all__ = ["CallCheck", "check_calls", "ends_at_calls", "grade_calls", "standardize"]
