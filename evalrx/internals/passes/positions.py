"""Decision positions: where in a rendered conversation a model decided something that matters.

For each model turn of a trajectory the decisions are the tokens of each tool name,
the tokens of each argument value, the tokens of the final answer, and the first
token of the turn (call or answer). They are found by character offsets from the
tokenizer on the rendered conversation, so they work for any chat template that
writes calls as JSON objects with a `"name"` and `"arguments"` (or `"parameters"`)
field, which covers Hermes/Qwen2.5, Llama 3.1 and OpenAI-style calls rendered by a
template. Pure Python: nothing here imports torch.

A decision about token ``i`` is made at position ``i - 1`` (the hidden state there
predicts token ``i``); `DecisionPoint.position` gives that predicting position.
Beside them, the tokenizer's side: ids and character offsets of a text, and each id's text (`decode_pieces`).
"""

from __future__ import annotations

import json
import re
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from evalrx.core.names import is_name

__all__ = [
    "CallSpan",
    "DecisionPoint",
    "ANSWER_POINTS",
    "KINDS",
    "MAX_VALUE_TOKENS",
    "answer_span",
    "answer_value_spans",
    "checked_answer_points",
    "decode_pieces",
    "find_call_spans",
    "find_decision_points",
    "first_token_at",
    "known_words",
    "token_at_char",
    "tokenize_with_offsets",
    "tokens_overlapping",
]

# Order matters: when two kinds claim the same token, the first listed keeps it.
KINDS = ("tool_name", "arg_value", "answer", "turn_start")
# Tokens read per argument value: a long value's later tokens are mostly copied, and each costs a lens row.
MAX_VALUE_TOKENS = 16

# Which tokens of a final answer are decision points: "values" (its values and its first token; the default)
# or "all" (every answer token, up to `max_answer_tokens`).
ANSWER_POINTS = ("values", "all")

_NAME_FIELD = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGS_FIELD = re.compile(r'"(?:arguments|parameters)"\s*:\s*')
_WS = " \t\r\n"


@dataclass
class DecisionPoint:
    """One decided token.

    Attributes:
        step: the trajectory step (model turn) it belongs to.
        kind: one of `KINDS`.
        token_index: index of the decided token in its pass's token sequence.
        call: index of the tool call within the turn (-1 when not a call token).
        arg: the argument name for `arg_value` points ("" otherwise).
        char_span: the characters of the token in the rendered text.
        piece: 0 for the first token of a name/value/answer, 1 for the next, ...
    """

    step: int
    kind: str
    token_index: int
    call: int = -1
    arg: str = ""
    char_span: tuple = (0, 0)
    piece: int = 0

    @property
    def position(self) -> int:
        """The position whose output predicts this token."""
        return self.token_index - 1

    def label(self) -> dict:
        """JSON-safe description (what stores and pages show)."""
        return {
            "step": self.step,
            "kind": self.kind,
            "call": self.call,
            "arg": self.arg,
            "piece": self.piece,
            "token_index": self.token_index,
        }


@dataclass
class CallSpan:
    """Where one tool call's name and argument values sit in the text (absolute char offsets).

    `name_span` excludes the quotes. Each entry of `args` is `(key, (start, end), value)`;
    string values span their content without quotes (the quotes when the string is empty).
    """

    call: int
    name: str
    name_span: tuple
    args: list = field(default_factory=list)


def tokenize_with_offsets(tokenizer: Any, text: str) -> "tuple[list[int], list[tuple[int, int]]]":
    """Token ids and character offsets of `text`, adding no special tokens (templates write them).

    Fast tokenizers report offsets directly; for slow ones they are rebuilt by decoding
    growing prefixes (slower, but exact for what the tokenizer can decode).
    """
    tok = getattr(tokenizer, "tokenizer", tokenizer)  # processors wrap a tokenizer
    if getattr(tok, "is_fast", False):
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    ids = list(tok(text, add_special_tokens=False)["input_ids"])
    offsets: list = []
    prev = 0
    for i in range(len(ids)):
        cur = len(tok.decode(ids[: i + 1]))
        offsets.append((min(prev, len(text)), min(cur, len(text))))
        prev = cur
    return ids, offsets


def tokens_overlapping(offsets: "Sequence[tuple[int, int]]", start: int, end: int) -> "list[int]":
    """Indices of the tokens whose characters overlap `[start, end)`."""
    out = []
    for i, (s, e) in enumerate(offsets):
        if e > s and s < end and e > start:
            out.append(i)
    return out


def token_at_char(offsets: "Sequence[tuple[int, int]]", char: int) -> int:
    """Index of the token covering character `char`, or -1."""
    for i, (s, e) in enumerate(offsets):
        if s <= char < e:
            return i
    return -1


def first_token_at(offsets: "Sequence[tuple[int, int]]", char: int) -> int:
    """Index of the first token that starts at or after `char` (len(offsets) when none)."""
    for i, (s, e) in enumerate(offsets):
        if s >= char and e > s:
            return i
    return len(offsets)


def _skip_ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def _object_value_spans(s: str, i: int) -> list:
    """Walk the JSON object starting at `s[i] == "{"`; return `(key, vstart, vend, value)` per member.

    Stops quietly at the first thing that is not valid JSON: a half-written call still
    yields the arguments it has.
    """
    decoder = json.JSONDecoder(strict=False)
    out: list = []
    if i >= len(s) or s[i] != "{":
        return out
    i = _skip_ws(s, i + 1)
    if i < len(s) and s[i] == "}":
        return out
    while i < len(s):
        try:
            key, i = decoder.raw_decode(s, i)
        except json.JSONDecodeError:
            return out
        if not isinstance(key, str):
            return out
        i = _skip_ws(s, i)
        if i >= len(s) or s[i] != ":":
            return out
        i = _skip_ws(s, i + 1)
        vstart = i
        try:
            value, i = decoder.raw_decode(s, i)
        except json.JSONDecodeError:
            return out
        out.append((key, vstart, i, value))
        i = _skip_ws(s, i)
        if i < len(s) and s[i] == ",":
            i = _skip_ws(s, i + 1)
            continue
        return out
    return out


def find_call_spans(text: str, start: int, end: int, calls: "Sequence[dict]") -> "list[CallSpan]":
    """Locate each call's name and argument values inside `text[start:end]`, in order.

    Args:
        text: the rendered conversation.
        start: first character of the model turn.
        end: end of the model turn.
        calls: the turn's calls as dicts with `name` and `args` (see `normalize_call`).

    Returns:
        One `CallSpan` per call that could be found; calls written in a way the
        JSON scanner cannot read (double-encoded arguments, other formats) are skipped.
    """
    spans: list = []
    cursor = start
    for index, call in enumerate(calls):
        name = call.get("name")
        if not name:
            continue
        found = None
        for m in _NAME_FIELD.finditer(text, cursor, end):
            try:
                value = json.loads(f'"{m.group(1)}"')
            except json.JSONDecodeError:
                continue
            if value == name:
                found = m
                break
        if found is None:
            continue
        span = CallSpan(call=index, name=name, name_span=(found.start(1), found.end(1)))
        # The arguments usually follow the name; a model may write them first, so fall back
        # to the stretch between this call's opening brace and its name.
        next_name = _NAME_FIELD.search(text, found.end(), end)
        limit = next_name.start() if next_name else end
        m_args = _ARGS_FIELD.search(text, found.end(), limit)
        if m_args is None:
            obj_start = text.rfind("{", cursor, found.start())
            if obj_start >= 0:
                m_args = _ARGS_FIELD.search(text, obj_start, found.start())
        cursor = found.end()
        if m_args is not None:
            for key, vstart, vend, value in _object_value_spans(text[:end], m_args.end()):
                if isinstance(value, str) and vend - vstart > 2:
                    vspan = (vstart + 1, vend - 1)
                else:
                    vspan = (vstart, vend)
                span.args.append((key, vspan, value))
                cursor = max(cursor, vend)
        spans.append(span)
    return spans


_THINK_END = "</think>"


def answer_span(text: str, start: int, end: int) -> "tuple[int, int]":
    """The answer characters of a final turn in `text[start:end]`: after any think block, stripped."""
    body = text[start:end]
    offset = 0
    if _THINK_END in body:
        offset = body.rindex(_THINK_END) + len(_THINK_END)
    s = start + offset
    while s < end and text[s] in _WS:
        s += 1
    e = end
    while e > s and text[e - 1] in _WS:
        e -= 1
    return s, e


def checked_answer_points(value: Any) -> str:
    """An answer-points setting's name ("values" when None), checked against `ANSWER_POINTS`.

    Raises:
        ValueError: another name (the message lists the known ones).
    """
    name = str(value or "values").strip().lower()
    if name not in ANSWER_POINTS:
        raise ValueError(f"answer_points must be one of {', '.join(ANSWER_POINTS)}, got {value!r}")
    return name


# A word of an answer: letters and digits, joined by the punctuation ids and numbers carry (ORD-17, 3.14, 1,000).
_WORD = re.compile(r"[#$\u20ac\u00a3]?\w+(?:[-_.,:/@]\w+)*%?")
_QUOTED = re.compile(r'"([^"\n]{1,200})"|\u201c([^\u201d\n]{1,200})\u201d|`([^`\n]{1,200})`')
# English function words: a word the answer shares with an observation decides nothing when it is one of these.
_FUNCTION_WORDS = frozenset(
    """a an the and or but nor so yet if then than that this these those there here is are was were be been being
    am do does did done has have had having will would shall should can could may might must of in on at to from by
    for with about as into onto over under between through during before after above below up down out off it its
    i me my we us our you your he him his she her they them their what which who whom whose when where why how not
    all any each every some such both either neither other another more most less least very too also just only own
    same again once further please let get got""".split()
)


def known_words(texts: "Sequence[Any]") -> frozenset:
    """The lower-cased words of `texts` (strings, or anything JSON writes) other than English function words:
    the words an answer may share with an expected answer, an observation or a call's arguments."""
    out: set = set()
    for text in _leaf_texts(texts):
        for m in _WORD.finditer(text):
            word = m.group(0).lower()
            if len(word) > 1 and word not in _FUNCTION_WORDS:
                out.add(word)
    return frozenset(out)


def _leaf_texts(items: Any, depth: int = 0) -> "list[str]":
    """The scalar values of `items` as text; a string that holds a JSON object or array gives its values
    (a field's name is no value)."""
    if depth > 32 or items is None:
        return []
    if isinstance(items, str):
        if items.lstrip()[:1] in ("{", "["):
            try:
                return _leaf_texts(json.loads(items), depth + 1)
            except ValueError:
                pass
        return [items]
    if isinstance(items, dict):
        return [t for v in items.values() for t in _leaf_texts(v, depth + 1)]
    if isinstance(items, (list, tuple, set, frozenset)):
        return [t for v in items for t in _leaf_texts(v, depth + 1)]
    return [str(items)]


def _json_leaves(s: str, i: int, out: list, depth: int = 0) -> int:
    """Append the `(start, end)` of each scalar value of the JSON at `s[i]` (strings without their quotes);
    return where it ends. Raises ValueError at the first thing that is not JSON (the leaves so far are kept)."""
    i = _skip_ws(s, i)
    if i >= len(s) or depth > 32:
        raise ValueError("no JSON value")
    if s[i] in "{[":
        close = "}" if s[i] == "{" else "]"
        i = _skip_ws(s, i + 1)
        if i < len(s) and s[i] == close:
            return i + 1
        while True:
            if close == "}":
                key, i = json.JSONDecoder(strict=False).raw_decode(s, i)
                i = _skip_ws(s, i)
                if not isinstance(key, str) or i >= len(s) or s[i] != ":":
                    raise ValueError("not a JSON object")
                i += 1
            i = _skip_ws(s, _json_leaves(s, i, out, depth + 1))
            if i < len(s) and s[i] == ",":
                i = _skip_ws(s, i + 1)
                continue
            if i < len(s) and s[i] == close:
                return i + 1
            raise ValueError("unterminated JSON")
    value, end = json.JSONDecoder(strict=False).raw_decode(s, i)
    quoted = isinstance(value, str) and end - i > 2
    out.append((i + 1, end - 1) if quoted else (i, end))
    return end


def answer_value_spans(text: str, start: int, end: int, known: "frozenset | set" = frozenset()) -> "list[tuple]":
    """The characters of the values in the answer `text[start:end]`, in order.

    A JSON answer (an object or array, fenced or not) has its scalar values. A prose answer has its
    numbers and ids (any word with a digit: 25, 3.14, #W123, ORD-17, a UUID), its quoted strings, its names
    (capitalised words inside a sentence: a misread name is a value no other text states), and the
    words it shares with `known` (`known_words` of the expected answer, the observations, the calls'
    arguments); the rest of the prose is filler.
    """
    spans: list = []
    body = text[start:end]
    lead = len(body) - len(body.lstrip())
    if body.lstrip().startswith("```"):
        nl = body.find("\n", lead)
        lead = nl + 1 if nl >= 0 else len(body)
    j = _skip_ws(text, start + lead)
    if j < end and text[j] in "{[":
        leaves: list = []
        try:
            _json_leaves(text[:end], j, leaves)
        except (ValueError, json.JSONDecodeError):
            pass
        if leaves:
            return leaves
    for m in _QUOTED.finditer(text, start, end):
        g = next(k for k in (1, 2, 3) if m.group(k) is not None)
        spans.append((m.start(g), m.end(g)))
    for m in _WORD.finditer(text, start, end):
        word = m.group(0)
        if any(c.isdigit() for c in word) or word.lower() in known or _is_name(text, start, m.start(), word):
            spans.append((m.start(), m.end()))
    return sorted(set(spans))


def _is_name(text: str, start: int, at: int, word: str) -> bool:
    """A name inside the answer `text[start:]` (`core.names.is_name`; "I" is none)."""
    return len(word) > 1 and is_name(text[start:at], word)


def find_decision_points(
    step: int,
    text: str,
    offsets: "Sequence[tuple[int, int]]",
    gen_chars: "tuple[int, int]",
    gen_tokens: "tuple[int, int]",
    calls: "Sequence[dict]",
    *,
    is_answer: bool,
    eos_text: Optional[str] = None,
    max_value_tokens: int = MAX_VALUE_TOKENS,
    max_answer_tokens: int = 64,
    answer_points: str = "values",
    known: "frozenset | set" = frozenset(),
) -> "list[DecisionPoint]":
    """Decision points of one model turn.

    Args:
        step: the trajectory step index of the turn.
        text: the rendered text of the pass.
        offsets: token character offsets of that text.
        gen_chars: `[start, end)` characters the model generated in this turn.
        gen_tokens: `[start, end)` token indices the model generated in this turn.
        calls: the turn's well-formed calls (dicts with `name` and `args`).
        is_answer: the turn is a final answer (its values, or all its tokens, are decisions).
        eos_text: the end-of-turn token's text, excluded from the answer span.
        max_value_tokens: cap on tokens per argument value.
        max_answer_tokens: cap on answer tokens.
        answer_points: "values" (the answer's first token and the tokens of its values,
            `answer_value_spans`) or "all" (every answer token).
        known: `known_words` the answer's values may share (the expected answer, the
            observations the model saw, the calls' arguments).

    Returns:
        Decision points ordered by token index, one per token (the first kind in
        `KINDS` wins when two claim a token); tokens at index 0 cannot be predicted
        and are left out.
    """
    g0, g1 = gen_tokens
    if g1 <= g0:
        return []
    points: "dict[int, DecisionPoint]" = {}

    def add(kind: str, idx: int, call: int = -1, arg: str = "", piece: int = 0) -> None:
        if idx <= 0 or idx < g0 or idx >= g1 or idx in points:
            return
        points[idx] = DecisionPoint(step, kind, idx, call, arg, tuple(offsets[idx]), piece)

    for cs in find_call_spans(text, gen_chars[0], gen_chars[1], calls):
        for piece, idx in enumerate(tokens_overlapping(offsets, *cs.name_span)):
            add("tool_name", idx, cs.call, "", piece)
        for key, vspan, _ in cs.args:
            for piece, idx in enumerate(tokens_overlapping(offsets, *vspan)[:max_value_tokens]):
                add("arg_value", idx, cs.call, str(key), piece)
    if is_answer:
        a0, a1 = answer_span(text, *gen_chars)
        if eos_text and text.endswith(eos_text, a0, a1):
            a1 -= len(eos_text)
            while a1 > a0 and text[a1 - 1] in _WS:
                a1 -= 1
        tokens = tokens_overlapping(offsets, a0, a1)
        chosen = tokens
        if checked_answer_points(answer_points) == "values":
            wanted = set(tokens[:1])
            for v0, v1 in answer_value_spans(text, a0, a1, known):
                wanted.update(i for i in tokens if offsets[i][0] < v1 and offsets[i][1] > v0)
            chosen = [i for i in tokens if i in wanted]
        piece_of = {idx: piece for piece, idx in enumerate(tokens)}  # a point's piece: its place in the answer
        for idx in chosen[:max_answer_tokens]:
            add("answer", idx, piece=piece_of[idx])
    add("turn_start", g0)
    return [points[i] for i in sorted(points)]


_PIECES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # tokenizer -> {id: text}, filled as ids appear


def decode_pieces(tokenizer: Any, ids: "Sequence[int] | np.ndarray") -> dict:
    """`{id: text}` for each distinct id (what a page shows; it never loads a tokenizer).

    A token's text never changes, so each tokenizer's pieces are decoded once per process.
    """
    tok = getattr(tokenizer, "tokenizer", tokenizer)
    flat = np.unique(np.asarray(ids, dtype=np.int64).ravel())
    uniq = [int(i) for i in flat[flat >= 0]]
    if not uniq:
        return {}
    try:
        known = _PIECES.setdefault(tok, {})
    except TypeError:  # a tokenizer that takes no weak reference: decode every time
        known = {}
    missing = [i for i in uniq if i not in known]
    if missing:
        backend = getattr(tok, "backend_tokenizer", None)
        if backend is not None:  # one call into the Rust tokenizer instead of a Python loop per id
            texts = backend.decode_batch([[i] for i in missing], skip_special_tokens=False)
        else:
            texts = tok.batch_decode([[i] for i in missing], skip_special_tokens=False)
        known.update(zip(missing, texts))
    return {str(i): known[i] for i in uniq}
