"""Every tool-call codec: any reply parses into calls and one-line errors, never an exception; and what a
codec writes for generated calls it reads back as the same calls."""

from __future__ import annotations

import json
import keyword
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mutate import AWKWARD, json_values, ran

from evalrx.core.tool import ChatTurn, ToolCall
from evalrx.demo.episodes import call_text
from evalrx.models.toolcodec import CODECS

TEXT_STYLES = sorted(s for s in CODECS if s != "openai")
# Real replies of each format (the demo model's Hermes text, the codecs' own call prefixes), to mutate.
REPLIES = [
    call_text("lookup", {"query": "length of Shestos"}) + "\n" + call_text("calculator", {"expression": "1 + 2"}),
    '<think>need a tool</think>\n<tool_call>\n{"name": "lookup", "arguments": "{\\"q\\": 1}"}\n</tool_call>',
    '<|python_tag|>{"name": "lookup", "parameters": {"query": "a"}}; {"name": "calculator", "parameters": {}}<|eom_id|>',
    '[TOOL_CALLS] [{"name": "lookup", "arguments": {"query": "a"}}, {"name": "calc", "arguments": {"x": [1, {}]}}]',
    '[TOOL_CALLS]lookup[ARGS]{"query": "a"}[TOOL_CALLS]calc[CALL_ID]abcdefghi[ARGS]{}',
    '[lookup(query="a"), calculator(expression="1 + 2", exact=True, n=None, xs=[1, -2.5, {"k": "v"}])]',
    "The answer is 7.",
]


@st.composite
def mutated_reply(draw: Any) -> str:
    text = draw(st.sampled_from(REPLIES))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "cut", "drop"]))
        if op == "insert":
            text = text[:at] + draw(st.sampled_from(AWKWARD) | st.text(max_size=6)) + text[at:]
        elif op == "cut":
            text = text[:at]
        else:
            text = text[:at] + text[at + draw(st.integers(1, 8)) :]
    return text


def check_parsed(parsed: Any) -> None:
    for call in parsed.calls:
        assert isinstance(call, ToolCall) and isinstance(call.name, str) and call.name
        assert isinstance(call.args, dict)
    for error in parsed.errors:
        assert isinstance(error, str) and error.strip() and "\n" not in error, repr(error)
    assert isinstance(parsed.text, str)


@pytest.mark.parametrize("style", TEXT_STYLES)
@given(text=mutated_reply() | st.text(max_size=300))
def test_any_reply_parses_into_calls_and_one_line_errors(style, text):
    ran(f"codec parse {style}")
    check_parsed(CODECS[style]().parse(ChatTurn(text=text)))


wire_calls = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "id": json_values,
            "type": json_values,
            "function": st.fixed_dictionaries({}, optional={"name": json_values, "arguments": json_values})
            | json_values,
        },
    )
    | json_values,
    max_size=4,
)


@given(calls=wire_calls, text=st.text(max_size=40))
def test_any_native_calls_parse_into_calls_and_one_line_errors(calls, text):
    ran("codec parse openai")
    check_parsed(CODECS["openai"]().parse(ChatTurn(text=text, tool_calls=calls)))


# ---------------------------------------------------------------- round trip

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}(\.[A-Za-z_][A-Za-z0-9_]{0,7})?", fullmatch=True).filter(
    lambda n: not any(keyword.iskeyword(p) for p in n.split("."))  # pythonic: a keyword is no function name
)
# Markup a family reads out of any text (a think block, call tags, control tokens) cannot appear in what it
# carries: these formats have no escape for it.
MARKUP = ("think>", "tool_call>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<|", "</s>")
plain_text = st.text(st.characters(codec="utf-8"), max_size=20).filter(lambda s: not any(m in s for m in MARKUP))
arg_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | plain_text
    | st.sampled_from(['say "hi"', "a\nb", "{not json}", "it's", "back\\slash", "", "日本語", "🙂"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(plain_text, inner, max_size=3),
    max_leaves=8,
)
# Pythonic calls pass arguments as keywords: their names must be identifiers (and not keywords).
identifier_keys = names.filter(lambda n: "." not in n)
# A name is read trimmed (models pad them); any other text is a name a JSON call can carry.
json_names = names | plain_text.filter(lambda s: s.strip() == s and s)
calls_of = {
    "json": st.lists(
        st.tuples(json_names, st.dictionaries(plain_text, arg_values, max_size=4)), min_size=1, max_size=3
    ),
    "pythonic": st.lists(
        st.tuples(names, st.dictionaries(identifier_keys, arg_values, max_size=4)), min_size=1, max_size=3
    ),
}


def written(style: str, calls: list) -> ChatTurn:
    """The turn a model of this family writes for `calls` (the format the codec's call prefix starts)."""
    codec = CODECS[style]()
    if style in ("hermes", "qwen", "qwen3"):
        return ChatTurn(
            text="\n".join(codec.call_prefix(n) + " " + json.dumps(a) + "}\n</tool_call>" for n, a in calls)
        )
    if style == "llama3":
        return ChatTurn(text="; ".join(codec.call_prefix(n) + " " + json.dumps(a) + "}" for n, a in calls))
    if style == "mistral":
        return ChatTurn(text="[TOOL_CALLS] " + json.dumps([{"name": n, "arguments": a} for n, a in calls]))
    if style == "pythonic":
        return ChatTurn(
            text="[" + ", ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in calls) + "]"
        )
    message = codec.structured_message(ChatTurn(), [ToolCall(name=n, args=a) for n, a in calls])
    wire = [
        dict(c, function=dict(c["function"], arguments=json.dumps(c["function"]["arguments"])))
        for c in message["tool_calls"]
    ]
    return ChatTurn(tool_calls=wire)


@pytest.mark.parametrize("style", sorted(CODECS))
@given(data=st.data())
def test_written_calls_read_back_as_the_same_calls(style, data):
    ran(f"codec round trip {style}")
    calls = data.draw(calls_of["pythonic" if style == "pythonic" else "json"])
    parsed = CODECS[style]().parse(written(style, calls))
    assert parsed.errors == []
    assert [(c.name, c.args) for c in parsed.calls] == [(n, a) for n, a in calls]
