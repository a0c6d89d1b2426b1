"""Tool codecs on tricky model outputs: what is a call, what is an error, what is the answer."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from evalrx.core.capability import Capability, CapabilityError
from evalrx.core.tool import ChatTurn, Tool, ToolCall
from evalrx.models.toolcodec import (
    CODECS,
    Llama3ToolCodec,
    MistralToolCodec,
    OpenAIToolCodec,
    QwenToolCodec,
    ToolCallCodec,
    codec_for,
    missing_codec,
    register_codec,
    strip_think,
)
from evalrx.specs import REGISTRY, ModelSpec, bind_codec_styles, get_spec, register_spec


def qwen(text: str):
    return QwenToolCodec().parse(ChatTurn(text=text))


def block(payload: str) -> str:
    return f"<tool_call>\n{payload}\n</tool_call>"


# --- Hermes / Qwen ---------------------------------------------------------------------------


def test_qwen_single_call_with_object_arguments():
    p = qwen(block('{"name": "calculator", "arguments": {"expression": "3*4"}}'))
    assert p.errors == []
    assert [(c.name, c.args) for c in p.calls] == [("calculator", {"expression": "3*4"})]
    assert p.calls[0].raw.startswith("<tool_call>") and p.calls[0].raw.endswith("</tool_call>")
    assert p.text == ""


def test_qwen_parallel_calls_keep_order():
    text = block('{"name": "a", "arguments": {"x": 1}}') + "\n" + block('{"name": "b", "arguments": {"y": 2}}')
    p = qwen(text)
    assert [c.name for c in p.calls] == ["a", "b"]
    assert p.calls[1].args == {"y": 2}


def test_qwen_arguments_as_json_string_are_decoded():
    payload = json.dumps({"name": "search", "arguments": json.dumps({"q": "cats", "k": 3})})
    p = qwen(block(payload))
    assert p.errors == []
    assert p.calls[0].args == {"q": "cats", "k": 3}


def test_qwen_parameters_is_a_synonym_for_arguments():
    p = qwen(block('{"name": "search", "parameters": {"q": "dogs"}}'))
    assert p.calls[0].args == {"q": "dogs"}


def test_qwen_braces_quotes_and_escaped_newlines_inside_strings():
    args = {"code": 'def f():\n    return {"a": "}"}\n', "note": 'say "hi" {not json}'}
    p = qwen(block(json.dumps({"name": "python", "arguments": args})))
    assert p.errors == []
    assert p.calls[0].args == args


def test_qwen_call_inside_think_is_not_a_call():
    text = "<think>maybe " + block('{"name": "calculator", "arguments": {}}') + " no</think>The answer is 7."
    p = qwen(text)
    assert p.calls == [] and p.errors == []
    assert p.text == "The answer is 7."


def test_qwen_unclosed_think_hides_everything_after_it():
    p = qwen("Sure. <think>I could call " + block('{"name": "x", "arguments": {}}'))
    assert p.calls == [] and p.errors == []
    assert p.text == "Sure."


def test_qwen_text_around_calls_is_the_answer_text():
    text = "Let me compute.\n" + block('{"name": "calculator", "arguments": {"expression": "1+1"}}') + "\nDone."
    p = qwen(text)
    assert len(p.calls) == 1
    assert p.text == "Let me compute.\n\nDone."


def test_qwen_unclosed_call_at_end_is_a_truncation_error():
    text = "ok " + '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*'
    p = qwen(text)
    assert p.calls == []
    assert len(p.errors) == 1
    assert "unclosed <tool_call>" in p.errors[0] and "12*" in p.errors[0]
    assert p.text == "ok"


def test_qwen_valid_call_then_truncated_call_keeps_the_valid_one():
    text = block('{"name": "a", "arguments": {}}') + '<tool_call>{"name": "b", "argu'
    p = qwen(text)
    assert [c.name for c in p.calls] == ["a"]
    assert len(p.errors) == 1 and "call #2" in p.errors[0]


@pytest.mark.parametrize(
    "payload",
    [
        '{"name": "calculator", "arguments": {"expression": "3*4",}}',  # trailing comma
        "{'name': 'calculator', 'arguments': {'expression': '3*4'}}",  # single quotes
        '{"name": "calculator", "arguments": {"expression": "3*4"}',  # missing closing brace
    ],
    ids=["trailing_comma", "single_quotes", "missing_brace"],
)
def test_qwen_malformed_json_is_an_error_with_reason_and_snippet(payload):
    p = qwen(block(payload))
    assert p.calls == []
    assert len(p.errors) == 1
    err = p.errors[0]
    assert err.startswith("call #1: invalid JSON (")
    assert "calculator" in err  # the offending snippet is quoted


def test_qwen_error_snippet_is_truncated():
    payload = '{"name": "calculator", "arguments": {"expression": "' + "9" * 5000 + '",}}'
    p = qwen(block(payload))
    assert len(p.errors) == 1
    assert len(p.errors[0]) < 400
    assert "..." in p.errors[0]


@pytest.mark.parametrize(
    "payload, fragment",
    [
        ('{"arguments": {"x": 1}}', 'missing "name"'),
        ('{"name": 42, "arguments": {}}', '"name" must be a non-empty string'),
        ('{"name": "", "arguments": {}}', '"name" must be a non-empty string'),
        ('{"name": "f", "arguments": [1, 2]}', "arguments must be an object"),
        ('{"name": "f", "arguments": "{bad json"}', "arguments are not valid JSON"),
        ('{"name": "f", "arguments": "[1]"}', "arguments must be a JSON object"),
        ('["f", {}]', "expected a JSON object"),
        ('{"name": "f", "arguments": {}} trailing words', "extra text after the JSON object"),
        ("", "empty <tool_call> block"),
    ],
)
def test_qwen_structurally_wrong_calls_are_errors(payload, fragment):
    p = qwen(block(payload))
    assert p.calls == []
    assert len(p.errors) == 1
    assert fragment in p.errors[0]


def test_qwen_bare_json_without_markup_is_an_answer_not_a_call():
    text = '{"name": "calculator", "arguments": {"expression": "3*4"}}'
    p = qwen(text)
    assert p.calls == [] and p.errors == []
    assert p.text == text


def test_qwen_stray_closing_tag_is_an_error():
    p = qwen('{"name": "calculator", "arguments": {}}\n</tool_call>')
    assert p.calls == []
    assert len(p.errors) == 1 and "stray </tool_call>" in p.errors[0]
    assert "</tool_call>" not in p.text


def test_qwen_missing_arguments_means_no_arguments():
    p = qwen(block('{"name": "get_time"}'))
    assert p.errors == []
    assert p.calls[0].args == {}


def test_qwen_code_fence_inside_block_is_tolerated():
    p = qwen('<tool_call>\n```json\n{"name": "f", "arguments": {"a": 1}}\n```\n</tool_call>')
    assert p.errors == []
    assert p.calls[0].args == {"a": 1}


def test_qwen_decode_and_final_text():
    codec = QwenToolCodec()
    chat = ChatTurn(text="<think>hmm</think>" + block('{"name": "a", "arguments": {}}') + block('{"name": "b"}'))
    assert codec.decode(chat).name == "a"
    assert codec.decode(ChatTurn(text="just text")) is None
    assert codec.final_text(ChatTurn(text="<think>r</think>\n  42 ")) == "42"


def test_qwen_assistant_message_keeps_raw_text_verbatim():
    raw = "<think>plan</think>" + block('{"name": "a", "arguments": {}}')
    chat = ChatTurn(text=raw)
    codec = QwenToolCodec()
    msg = codec.assistant_message(chat, codec.parse(chat).calls)
    assert msg == {"role": "assistant", "content": raw}
    tool = codec.tool_message(ToolCall(name="a", args={}), "12")
    assert tool["role"] == "tool" and tool["content"] == "12" and tool["name"] == "a"
    assert codec.parse_error_message(["call #1: bad"])["role"] == "tool"
    assert "call #1: bad" in codec.parse_error_message(["call #1: bad"])["content"]


def test_strip_think_handles_a_template_opened_think_block():
    assert strip_think("reasoning here</think>\nAnswer") == "\nAnswer"
    assert strip_think("no markup") == "no markup"


# --- OpenAI ---------------------------------------------------------------------------------


def wire(name, arguments, id=None):
    d = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if id is not None:
        d["id"] = id
    return d


def test_openai_reads_wire_calls_and_preserves_ids():
    chat = ChatTurn(
        text="",
        tool_calls=[wire("calculator", '{"expression": "3*4"}', "call_abc"), wire("search", '{"q": "x"}', "call_def")],
    )
    p = OpenAIToolCodec().parse(chat)
    assert p.errors == []
    assert [(c.name, c.args, c.id) for c in p.calls] == [
        ("calculator", {"expression": "3*4"}, "call_abc"),
        ("search", {"q": "x"}, "call_def"),
    ]
    assert p.calls[0].raw == '{"expression": "3*4"}'


def test_openai_generates_unique_ids_when_absent():
    codec = OpenAIToolCodec()
    first = codec.parse(ChatTurn(tool_calls=[wire("a", "{}"), wire("b", "{}")])).calls
    second = codec.parse(ChatTurn(tool_calls=[wire("c", "{}")])).calls
    ids = [c.id for c in first + second]
    assert all(i.startswith("call_") for i in ids)
    assert len(set(ids)) == 3


def test_openai_malformed_arguments_are_an_error_and_other_calls_survive():
    chat = ChatTurn(tool_calls=[wire("a", '{"x": 1,}', "c1"), wire("b", '{"y": 2}', "c2")])
    p = OpenAIToolCodec().parse(chat)
    assert [c.id for c in p.calls] == ["c2"]
    assert len(p.errors) == 1 and "call #1 (a)" in p.errors[0] and "not valid JSON" in p.errors[0]


def test_openai_empty_or_dict_arguments_and_missing_name():
    chat = ChatTurn(tool_calls=[wire("a", "", "c1"), wire("b", {"k": 1}, "c2"), wire(None, "{}", "c3")])
    p = OpenAIToolCodec().parse(chat)
    assert [(c.name, c.args) for c in p.calls] == [("a", {}), ("b", {"k": 1})]
    assert len(p.errors) == 1 and "name" in p.errors[0]


def test_openai_accepts_sdk_style_objects():
    obj = SimpleNamespace(id="c9", function=SimpleNamespace(name="f", arguments='{"z": 3}'))
    p = OpenAIToolCodec().parse(ChatTurn(tool_calls=[obj]))
    assert (p.calls[0].name, p.calls[0].args, p.calls[0].id) == ("f", {"z": 3}, "c9")


def test_openai_text_markup_is_not_parsed_as_calls():
    chat = ChatTurn(text="<think>x</think>" + block('{"name": "a", "arguments": {}}'))
    p = OpenAIToolCodec().parse(chat)
    assert p.calls == [] and p.errors == []


def test_openai_messages_carry_ids_and_dict_arguments():
    codec = OpenAIToolCodec()
    call = ToolCall(name="calculator", args={"expression": "1"}, id="call_1")
    msg = codec.assistant_message(ChatTurn(text="thinking aloud"), [call])
    assert msg == {
        "role": "assistant",
        "content": "thinking aloud",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "1"}}}
        ],
    }
    assert "tool_calls" not in codec.assistant_message(ChatTurn(text="done"), [])
    tm = codec.tool_message(call, "1")
    assert tm["tool_call_id"] == "call_1" and tm["role"] == "tool"
    assert codec.parse_error_message(["bad"])["role"] == "user"  # no call id to answer


def test_encode_gives_openai_schemas():
    tools = [Tool("calculator", "math", {"type": "object", "properties": {"expression": {"type": "string"}}})]
    for codec in (QwenToolCodec(), OpenAIToolCodec()):
        assert codec.encode(tools) == [tools[0].to_openai()]


# --- selection and registry -----------------------------------------------------------------


def handle(backend: str, style: str):
    return SimpleNamespace(backend=backend, spec=ModelSpec("m", "fam", tool_call_style=style))


def test_codec_for_picks_by_backend_then_style():
    assert isinstance(codec_for(handle("api", "hermes")), OpenAIToolCodec)
    assert isinstance(codec_for(handle("hf_local", "hermes")), QwenToolCodec)
    assert isinstance(codec_for(handle("vllm_offline", "openai")), OpenAIToolCodec)


def test_codec_for_unknown_style_names_the_known_styles():
    with pytest.raises(ValueError) as info:
        codec_for(handle("hf_local", "klingon"))
    msg = str(info.value)
    assert "klingon" in msg and "hermes" in msg and "openai" in msg


def test_register_codec_lets_users_add_a_style():
    class Upper(ToolCallCodec):
        name = "upper"

    try:
        register_codec("upper-style", Upper)
        assert isinstance(codec_for(handle("hf_local", "upper-style")), Upper)
        with pytest.raises(ValueError):
            register_codec("upper-style", Upper)
    finally:
        CODECS.pop("upper-style", None)


# --- the spec registry and the codec registry check each other ------------------------------


def test_every_registered_spec_names_a_style_with_a_codec():
    for spec in REGISTRY.values():
        assert missing_codec(spec, "hf_local") is None, spec.key
    assert (
        type(codec_for(SimpleNamespace(backend="hf_local", spec=get_spec("llama-3.1-8b-instruct")))) is Llama3ToolCodec
    )
    assert (
        type(codec_for(SimpleNamespace(backend="hf_local", spec=get_spec("mistral-7b-instruct-v0.3"))))
        is MistralToolCodec
    )


def test_register_spec_refuses_a_style_without_a_codec():
    with pytest.raises(ValueError) as info:
        register_spec(ModelSpec("no-codec-model", "llama", tool_call_style="klingon"))
    msg = str(info.value)
    assert "klingon" in msg and "llama3" in msg and "mistral" in msg and "register_codec" in msg
    assert "no-codec-model" not in REGISTRY


def test_a_spec_may_name_a_style_once_its_codec_is_registered():
    class Upper(ToolCallCodec):
        name = "upper"

    try:
        register_codec("upper-style", Upper)
        spec = register_spec(ModelSpec("upper-model", "llama", tool_call_style=" Upper-Style "))
        assert isinstance(codec_for(SimpleNamespace(backend="hf_local", spec=spec)), Upper)
    finally:
        REGISTRY.pop("upper-model", None)
        CODECS.pop("upper-style", None)


def test_binding_the_codec_registry_checks_specs_registered_before_it():
    REGISTRY["stale-model"] = ModelSpec("stale-model", "llama", tool_call_style="gone")
    try:
        with pytest.raises(ValueError, match="'gone', which has no codec"):
            bind_codec_styles(lambda: CODECS)
    finally:
        REGISTRY.pop("stale-model")
        bind_codec_styles(lambda: CODECS)


def test_the_check_is_active_whichever_module_is_imported_first():
    code = (
        "import sys, evalrx.specs as s\n"
        "try:\n"
        "    s.register_spec(s.ModelSpec('x', 'y', tool_call_style='nope'))\n"
        "except ValueError as e:\n"
        "    print('refused' if 'Known styles' in str(e) else e)\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["refused", "[]"]


def test_compose_refuses_tool_calls_when_no_codec_reads_the_style():
    from evalrx.models import backends
    from evalrx.models.compose import compose

    built = []
    backends.register_backend(
        backends.BackendInfo(
            name="probe-codec",
            description="records builds",
            provides=lambda spec: frozenset(Capability) - {Capability.VISION},
            build=lambda spec, rt, want: built.append(spec.key) or SimpleNamespace(capabilities=frozenset(Capability)),
        )
    )
    try:
        odd = ModelSpec("odd-model", "llama", "/nonexistent", tool_call_style="klingon")  # never registered
        with pytest.raises(CapabilityError) as info:
            compose(odd, "probe-codec", want={Capability.TOOL_CALLS})
        msg = str(info.value)
        assert "tool_calls" in msg and "klingon" in msg and "llama3" in msg
        assert built == []  # refused before anything was built
        compose(odd, "probe-codec", want={Capability.HIDDEN_STATES})  # internals need no codec
        for key in ("llama-3.1-8b-instruct", "mistral-7b-instruct-v0.3"):
            compose(get_spec(key), "probe-codec", want={Capability.TOOL_CALLS})
        assert built == ["odd-model", "llama-3.1-8b-instruct", "mistral-7b-instruct-v0.3"]
    finally:
        backends.BACKENDS.pop("probe-codec")
