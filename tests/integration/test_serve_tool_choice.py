"""`evalrx serve` honours `tool_choice` "required" and a named function, through the real `openai` client.

The bundled demo model is served as a real process on loopback. It answers a greeting in prose
when it may choose; forced, the reply is prefilled with the Hermes codec's call prefix and the
model writes the rest, which comes back as native `tool_calls`. Invalid choices are 400s with
OpenAI's wording, and the model is not called for them.
"""

from __future__ import annotations

import json

import pytest
from servehelpers import serving

from evalrx.tools import get_tools

openai = pytest.importorskip("openai")

SPEC = "evalrx-tiny"
TOOLS = [t.to_openai() for t in get_tools(["calculator", "lookup"])]
HELLO = [{"role": "user", "content": "Hello!"}]  # the demo model greets back, no call, when it may choose


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "stderr.log"
    with serving(SPEC, log, max_new_tokens=64) as url:
        yield openai.OpenAI(base_url=url, api_key="sk-local", max_retries=0, timeout=60)


def _ask(client, **kwargs):
    return client.chat.completions.create(model=SPEC, messages=HELLO, tools=TOOLS, **kwargs)


def test_auto_answers_a_greeting_in_prose(client):
    reply = _ask(client)
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    assert not choice.message.tool_calls
    assert "Hello" in choice.message.content


def test_required_forces_a_call(client):
    reply = _ask(client, tool_choice="required")
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls, choice.message.content
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert call.function.name in {"calculator", "lookup"}
    assert isinstance(json.loads(call.function.arguments), dict)
    assert reply.usage.completion_tokens > 5  # the prefilled call prefix counts as completion


@pytest.mark.parametrize("name", ["calculator", "lookup"])
def test_a_named_function_is_the_one_called(client, name):
    reply = _ask(client, tool_choice={"type": "function", "function": {"name": name}})
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [c.function.name for c in choice.message.tool_calls][:1] == [name]
    assert isinstance(json.loads(choice.message.tool_calls[0].function.arguments), dict)


def test_none_shows_no_tools(client):
    """ "none" hides the tools from the model (the demo model, trained with them always shown, rambles)."""
    reply = _ask(client, tool_choice="none")
    assert not reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason in {"stop", "length"}
    assert reply.usage.prompt_tokens < _ask(client).usage.prompt_tokens


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"tool_choice": {"type": "function", "function": {"name": "weather"}}},
            "Tool choice 'weather' not found in 'tools' parameter.",
        ),
        (
            {"tool_choice": "always"},
            "Invalid value: 'always'. Supported values are: 'none', 'auto', and 'required'.",
        ),
        ({"tool_choice": {"type": "function"}}, "Invalid value for 'tool_choice': expected"),
        ({"tool_choice": {"type": "function", "function": {"name": ""}}}, "Invalid value for 'tool_choice': expected"),
        ({"tool_choice": ["required"]}, "Invalid value for 'tool_choice': expected"),
        (
            {"tool_choice": {"type": "custom", "custom": {"name": "lookup"}}},
            "Invalid value for 'tool_choice': expected",
        ),
    ],
)
def test_invalid_choices_are_400s(client, kwargs, message):
    with pytest.raises(openai.BadRequestError) as err:
        _ask(client, **kwargs)
    assert err.value.status_code == 400
    body = err.value.body
    assert body["message"].startswith(message), body
    assert "\n" not in body["message"]
    assert body["param"] == "tool_choice"


def test_a_forced_call_needs_tools(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=SPEC, messages=HELLO, tool_choice="required")
    assert err.value.body["message"] == (
        "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
    )


def test_streaming_is_refused_cleanly(client):
    """serve does not stream: a streamed forced call is a 400, not a broken stream."""
    with pytest.raises(openai.BadRequestError) as err:
        _ask(client, tool_choice="required", stream=True)
    assert "stream" in err.value.body["message"].lower()


# What a model writes after each codec's call prefix: (style, after the bare prefix, after the named prefix).
_REST = [
    (
        "hermes",
        ' "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>',
        ' {"expression": "2+2"}}\n</tool_call>',
    ),
    (
        "qwen3",
        ' "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>',
        ' {"expression": "2+2"}}\n</tool_call>',
    ),
    ("llama3", ' "calculator", "parameters": {"expression": "2+2"}}', ' {"expression": "2+2"}}'),
    ("mistral", ' "calculator", "arguments": {"expression": "2+2"}}]', ' {"expression": "2+2"}}]'),
    ("pythonic", 'calculator(expression="2+2")]', 'expression="2+2")]'),
]


@pytest.mark.parametrize("style, rest, named_rest", _REST)
def test_each_codec_reads_its_own_call_prefix_back(style, rest, named_rest):
    """A reply forced through a codec's call prefix parses as that codec's call (no server needed)."""
    from evalrx.core.tool import ChatTurn
    from evalrx.models.toolcodec import CODECS

    codec = CODECS[style]()
    for text in (codec.call_prefix() + rest, codec.call_prefix("calculator") + named_rest):
        parsed = codec.parse(ChatTurn(text=text))
        assert not parsed.errors, (style, text, parsed.errors)
        assert [(c.name, c.args) for c in parsed.calls] == [("calculator", {"expression": "2+2"})], (style, text)
    assert CODECS["openai"]().call_prefix() is None  # native calls: nothing to prefill


def test_the_prefilled_call_counts_against_max_tokens(client):
    """The forced prefix is part of the completion: max_tokens bounds it with what the model wrote."""
    reply = _ask(client, tool_choice="required", max_tokens=8)
    choice = reply.choices[0]
    assert reply.usage.completion_tokens == 8
    assert choice.finish_reason == "length"
    assert not choice.message.tool_calls  # a call cut off is no call; its text is kept as evidence
    assert choice.message.content.startswith("<tool_call>")
