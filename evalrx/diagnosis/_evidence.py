"""What the diagnosis sources read from a trajectory: its calls by step, observations, values and near-misses."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any, Optional

from evalrx.core.case import StepRole, Trajectory
from evalrx.core.effects import name_words
from evalrx.core.names import is_name
from evalrx.core.observation import observation_text
from evalrx.grade import extract_numbers

# A garbled copy is close to the original but not equal (0.896154 -> 0.891654, Krevumus -> Krevom);
# 42 -> 24 is not close (ratio 0.5): that answer ignored the value rather than misread it.
GARBLE_RATIO = 0.6
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]+")
_QUOTE = 160


@dataclass
class Call:
    """One tool call of a trajectory: the actor step that made it and what its tool step returned."""

    step: int
    name: str
    args: dict
    observation: Optional[str] = None  # None: no tool step answered it
    error: bool = False

    @property
    def signature(self) -> str:
        return json.dumps([self.name, self.args], sort_keys=True, default=str)

    def show(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in sorted(self.args.items()))})"


def quote(text: Any, limit: int = _QUOTE) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_tool_error(step: Any) -> bool:
    text = observation_text(step.observation).lstrip()
    return bool(step.span.get("tool_error")) or text.startswith("[tool error") or text.lower().startswith("error:")


def calls_of(traj: Trajectory) -> "list[Call]":
    """Every parsed tool call in order, paired with the observation its tool step recorded."""
    out: list = []
    pending: list = []
    for s in traj.steps:
        if s.role is StepRole.ACTOR:
            pending = []
            for c in s.tool_calls:
                call = Call(s.idx, c.name, c.args)
                out.append(call)
                pending.append(call)
        elif s.role is StepRole.TOOL and not s.span.get("parse_error"):
            i = s.span_int("call")
            if i < len(pending) and pending[i].observation is None:
                pending[i].observation = observation_text(s.observation)
                pending[i].error = is_tool_error(s)
            elif pending:  # imports may not number their tool results: first unanswered call
                free = next((c for c in pending if c.observation is None), None)
                if free is not None:
                    free.observation, free.error = observation_text(s.observation), is_tool_error(s)
    return out


def answer_step(traj: Trajectory) -> Optional[int]:
    """The step that gave the final answer (the last model turn), None when there is no model turn."""
    actors = [s.idx for s in traj.steps if s.role is StepRole.ACTOR]
    return actors[-1] if actors else None


def values_in(text: Any) -> "list[str]":
    """The values a text states: its numbers (as written, commas dropped) and its capitalised words."""
    text = str(text or "")
    nums = [_num_key(x) for x in extract_numbers(text)]
    # A capital at the start of a sentence says nothing; elsewhere it marks a name.
    words = [m.group() for m in _WORD.finditer(text) if is_name(text[: m.start()], m.group())]
    return nums + words


def _num_key(x: float) -> str:
    return repr(int(x)) if float(x).is_integer() else repr(x)


def arg_values(args: dict) -> "list[str]":
    """Numbers and words of an argument dict's values (every word: a query's words are its values)."""
    out: list = []
    for k, v in args.items():
        if is_prose(v, k):  # a thought or a summary states no value of its own
            continue
        if isinstance(v, (dict, list)):
            v = json.dumps(v, default=str)
        text = str(v)
        out += [_num_key(x) for x in extract_numbers(text)]
        out += _WORD.findall(text)
    return out


def known_values(texts: "list[str]") -> "tuple[set, set]":
    """(numbers, lower-cased words) stated in `texts`."""
    nums: set = set()
    words: set = set()
    for text in texts:
        nums.update(_num_key(x) for x in extract_numbers(text))
        words.update(w.lower() for w in _WORD.findall(str(text)))
    return nums, words


# Parameters that hold free text for a reader (a thought, a summary handed to a person), not values to check.
FREE_TEXT_NAMES = frozenset(
    "thought thoughts summary reason reasoning note notes message comment comments description explanation "
    "text body content instructions details feedback plan".split()
)
# A string this long is prose whatever its parameter is called.
PROSE_WORDS = 25


def is_prose(value: Any, key: Any = None) -> bool:
    """Free text rather than a value: a string of `PROSE_WORDS` words or more, or of four or more under a
    parameter whose name says free text (`thought`, `summary`, ...). A search query is a value: its words count."""
    if not isinstance(value, str):
        return False
    words = len(value.split())
    if words >= PROSE_WORDS:
        return True
    return words >= 4 and key is not None and bool(FREE_TEXT_NAMES.intersection(name_words(str(key))))


def is_number(value: str) -> bool:
    try:
        float(value)
        return True
    except ValueError:
        return False


def garbles(value: str, candidates: "list[str]") -> Optional[str]:
    """The candidate that `value` is a close but unequal copy of (None: none is)."""
    v = value.lower()
    best, best_ratio = None, 0.0
    for c in candidates:
        cl = c.lower()
        if cl == v or len(cl) < 3 or is_number(cl) != is_number(v):
            continue
        ratio = difflib.SequenceMatcher(None, v, cl).ratio()
        if ratio > best_ratio:
            best, best_ratio = c, ratio
    return best if best_ratio >= GARBLE_RATIO else None


def arg_diff(expected: dict, actual: dict) -> "list[dict]":
    """Argument differences: one `{arg, expected, actual}` per key that differs (missing: None)."""
    out = []
    for key in sorted(set(expected) | set(actual), key=str):
        if expected.get(key) != actual.get(key):
            out.append({"arg": key, "expected": expected.get(key), "actual": actual.get(key)})
    return out
