"""Tool-call codecs of the Llama 3 (JSON), Llama 3.2 / 4 (pythonic), Mistral and Qwen3 families.

Three layers, each on the family's own format:

* parsing real-format outputs: single and several calls, text around them, malformed
  calls recorded as parse errors with a snippet;
* message building: the roles, ids and fields each family's chat template expects;
* the real `Agent` loop end to end: driven by scripted model turns while every prompt
  is rendered by the family's chat template (`tests/tiny_models.py`), so the rendered
  conversation shows the call and the tool result in the family's format; and once on
  a tiny random model of each family through its real `chat`.
"""

from __future__ import annotations

import json

import pytest
from calc_tool import CALC  # noqa: E402

from evalrx.core.case import StepRole
from evalrx.core.tool import ChatTurn, ToolCall
from evalrx.models.agent import Agent
from evalrx.models.toolcodec import (
    Llama3ToolCodec,
    MistralToolCodec,
    PythonicToolCodec,
    Qwen3ToolCodec,
    QwenToolCodec,
    codec_for,
)
from evalrx.specs import ModelSpec


def parse(codec, text: str):
    return codec.parse(ChatTurn(text=text))


def named(calls) -> list:
    return [(c.name, c.args) for c in calls]


# --- Llama 3.1 / 3.2 JSON ---------------------------------------------------------------------


def llama(text: str):
    return parse(Llama3ToolCodec(), text)


def test_llama3_single_call_with_parameters():
    raw = '{"name": "calculator", "parameters": {"expression": "3*4"}}'
    p = llama(raw)
    assert p.errors == [] and p.text == ""
    assert named(p.calls) == [("calculator", {"expression": "3*4"})]
    assert p.calls[0].raw == raw


def test_llama3_arguments_key_and_json_string_arguments_are_accepted():
    p = llama('{"name": "search", "arguments": "{\\"q\\": \\"cats\\"}"}')
    assert p.errors == [] and named(p.calls) == [("search", {"q": "cats"})]


def test_llama3_python_tag_and_several_calls_separated_by_semicolons():
    text = (
        '<|python_tag|>{"name": "calculator", "parameters": {"expression": "1+1"}}; '
        '{"name": "calculator", "parameters": {"expression": "2+2"}}<|eom_id|>'
    )
    p = llama(text)
    assert p.errors == [] and p.text == ""
    assert [c.args["expression"] for c in p.calls] == ["1+1", "2+2"]


def test_llama3_text_around_the_call_is_the_answer_text():
    p = llama('Let me compute that.\n{"name": "calculator", "parameters": {"expression": "3*4"}}\nOne moment.')
    assert named(p.calls) == [("calculator", {"expression": "3*4"})]
    assert p.text == "Let me compute that.\nOne moment."


def test_llama3_json_data_in_an_answer_is_not_a_call():
    text = 'The record is {"name": "Bob", "age": 3} and {"a": {"name": "x"}}.'
    p = llama(text)
    assert p.calls == [] and p.errors == [] and p.text == text


def test_llama3_malformed_call_is_an_error_with_snippet_and_the_next_call_survives():
    bad = '{"name": "calculator", "parameters": {"expression": "3*4",}}'
    p = llama(bad + '; {"name": "calculator", "parameters": {"expression": "5"}}')
    assert named(p.calls) == [("calculator", {"expression": "5"})]
    assert len(p.errors) == 1
    assert p.errors[0].startswith("call #1: invalid JSON") and repr(bad) in p.errors[0]


def test_llama3_truncated_call_is_flagged():
    p = llama('{"name": "calculator", "parameters": {"expression": "3*')
    assert p.calls == [] and len(p.errors) == 1
    assert "generation truncated?" in p.errors[0] and '"calculator"' in p.errors[0]


@pytest.mark.parametrize(
    "payload, fragment",
    [
        ('{"name": 7, "parameters": {}}', '"name" must be a non-empty string'),
        ('{"name": "f", "parameters": [1]}', "arguments must be an object"),
        ('{"name": "f", "parameters": "{oops"}', "arguments are not valid JSON"),
    ],
)
def test_llama3_structurally_wrong_calls_are_errors(payload, fragment):
    p = llama(payload)
    assert p.calls == [] and len(p.errors) == 1 and fragment in p.errors[0]


def test_llama3_code_after_the_python_tag_is_an_error_not_an_answer():
    p = llama('<|python_tag|>brave_search.call(query="weather")')
    assert p.calls == [] and len(p.errors) == 1
    assert "expected a JSON call after <|python_tag|>" in p.errors[0] and "brave_search" in p.errors[0]


def test_llama3_plain_answer():
    p = llama("The answer is 12.<|eot_id|>")
    assert (p.calls, p.errors, p.text) == ([], [], "The answer is 12.")


def test_llama3_messages_use_the_ipython_role():
    codec = Llama3ToolCodec()
    raw = '{"name": "calculator", "parameters": {"expression": "3*4"}}'
    assert codec.assistant_message(ChatTurn(text=raw), codec.parse(ChatTurn(text=raw)).calls) == {
        "role": "assistant",
        "content": raw,
    }
    assert codec.tool_message(ToolCall("calculator", {}), "12") == {
        "role": "ipython",
        "name": "calculator",
        "content": "12",
    }
    feedback = codec.parse_error_message(["call #1: bad"])
    assert (
        feedback["role"] == "ipython"
        and "call #1: bad" in feedback["content"]
        and '"parameters"' in feedback["content"]
    )


# --- Mistral ----------------------------------------------------------------------------------


def test_mistral_v3_list_gets_nine_character_ids():
    codec = MistralToolCodec()
    p = parse(
        codec,
        '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "1+1"}}, '
        '{"name": "calculator", "arguments": {"expression": "2+2"}, "id": "a1B2c3D4e"}]',
    )
    assert p.errors == [] and p.text == ""
    assert [c.args["expression"] for c in p.calls] == ["1+1", "2+2"]
    first, second = (c.id for c in p.calls)
    assert len(first) == 9 and first.isalnum() and second == "a1B2c3D4e"  # the model's own valid id is kept
    assert p.calls[0].raw == '{"name": "calculator", "arguments": {"expression": "1+1"}}'
    again = parse(codec, '[TOOL_CALLS] [{"name": "calculator", "arguments": {}}]').calls[0].id
    assert again not in (first, second)


def test_mistral_list_without_the_marker_decoded_away_is_still_calls():
    p = parse(MistralToolCodec(), ' [{"name": "calculator", "arguments": {"expression": "3*4"}}]')
    assert named(p.calls) == [("calculator", {"expression": "3*4"})]


def test_mistral_v11_name_then_json_form():
    p = parse(
        MistralToolCodec(),
        'Checking.[TOOL_CALLS]calculator[ARGS]{"expression": "1+1"}'
        '[TOOL_CALLS]calculator[CALL_ID]Zz9Yy8Xx7[ARGS]{"expression": "2+2"}[TOOL_CALLS]get_time{}',
    )
    assert p.errors == [] and p.text == "Checking."
    assert named(p.calls) == [
        ("calculator", {"expression": "1+1"}),
        ("calculator", {"expression": "2+2"}),
        ("get_time", {}),
    ]
    assert p.calls[1].id == "Zz9Yy8Xx7"


def test_mistral_text_before_the_marker_is_the_answer_and_a_list_in_prose_is_not_a_call():
    assert parse(MistralToolCodec(), 'Sure. [TOOL_CALLS] [{"name": "f", "arguments": {}}]').text == "Sure."
    prose = 'Results: [{"name": "x"}]'
    p = parse(MistralToolCodec(), prose)
    assert p.calls == [] and p.errors == [] and p.text == prose


def test_mistral_malformed_item_is_an_error_and_earlier_items_survive():
    bad = '{"name": "calculator", "arguments": {"expression": 1,}}'
    p = parse(
        MistralToolCodec(), '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "2"}}, ' + bad + "]"
    )
    assert named(p.calls) == [("calculator", {"expression": "2"})]
    assert len(p.errors) == 1 and p.errors[0].startswith("call #2: invalid JSON") and '"expression": 1,' in p.errors[0]


@pytest.mark.parametrize(
    "text, fragment, shown, n_calls",
    [
        ('[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "3*', "generation truncated?", '"3*', 0),
        ('[TOOL_CALLS] [{"name": "calculator", "arguments": {}}', "not closed with ']'", '"calculator"', 1),
        ('[TOOL_CALLS] [{"arguments": {"x": 1}}]', 'missing "name"', '"x": 1', 0),
        ("[TOOL_CALLS]calculator[ARGS]{'expression': 1}", "arguments are not valid JSON", "'expression'", 0),
        ("[TOOL_CALLS]calculator", "no JSON arguments", "calculator", 0),
    ],
)
def test_mistral_malformed_calls_are_errors_with_snippets(text, fragment, shown, n_calls):
    p = parse(MistralToolCodec(), text)
    assert len(p.calls) == n_calls  # a complete call before the cut-off survives, as in the Hermes codec
    assert len(p.errors) == 1 and fragment in p.errors[0] and shown in p.errors[0]


def test_mistral_messages_carry_matching_ids():
    codec = MistralToolCodec()
    chat = ChatTurn(text='[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "3*4"}}]')
    calls = codec.parse(chat).calls
    msg = codec.assistant_message(chat, calls)
    assert msg == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": calls[0].id,
                "type": "function",
                "function": {"name": "calculator", "arguments": {"expression": "3*4"}},
            }
        ],
    }
    assert codec.tool_message(calls[0], "12") == {
        "role": "tool",
        "name": "calculator",
        "tool_call_id": calls[0].id,
        "content": "12",
    }
    # A call recorded elsewhere (an API id) maps to the same valid id in both messages.
    foreign = ToolCall("calculator", {"expression": "1"}, id="call_abc123")
    sent = codec.assistant_message(ChatTurn(text=""), [foreign])["tool_calls"][0]["id"]
    assert len(sent) == 9 and sent.isalnum() and codec.tool_message(foreign, "1")["tool_call_id"] == sent


def test_mistral_parse_error_feedback_keeps_the_template_alternation():
    codec = MistralToolCodec()
    # Only malformed calls: the assistant turn is plain text, so the feedback is a user turn.
    codec.assistant_message(ChatTurn(text="[TOOL_CALLS] [{oops"), [])
    assert codec.parse_error_message(["call #1: bad"])["role"] == "user"
    # Valid and malformed calls: after the tool results the feedback is one more tool result.
    codec.assistant_message(ChatTurn(text=""), [ToolCall("calculator", {}, id="abcdefghi")])
    feedback = codec.parse_error_message(["call #2: bad"])
    assert feedback["role"] == "tool" and len(feedback["tool_call_id"]) == 9 and "call #2: bad" in feedback["content"]


# --- pythonic (Llama 3.2 / 4) -----------------------------------------------------------------


def pythonic(text: str):
    return parse(PythonicToolCodec(), text)


def test_pythonic_several_calls_with_literal_values():
    p = pythonic('[calculator(expression="3*4"), lookup(keys=["a", "b"], limit=-2, opts={"deep": true, "x": None})]')
    assert p.errors == [] and p.text == ""
    assert named(p.calls) == [
        ("calculator", {"expression": "3*4"}),
        ("lookup", {"keys": ["a", "b"], "limit": -2, "opts": {"deep": True, "x": None}}),
    ]
    assert p.calls[0].raw == 'calculator(expression="3*4")'


def test_pythonic_llama4_markers_and_text_around():
    p = pythonic("Let me check. <|python_start|>[get_time()]<|python_end|> Back soon.")
    assert named(p.calls) == [("get_time", {})]
    assert p.text == "Let me check.\nBack soon."


def test_pythonic_markdown_and_prose_brackets_are_not_calls():
    text = "See [the docs](https://x.org) and [1, 2] (twice)."
    p = pythonic(text)
    assert p.calls == [] and p.errors == [] and p.text == text


def test_pythonic_never_evaluates_arguments(tmp_path):
    marker = tmp_path / "evaluated"
    code = f'[calculator(expression=open({str(marker)!r}, "w").write("x"))]'
    p = pythonic(code)
    assert p.calls == [] and len(p.errors) == 1
    assert "argument 'expression' is not a literal (Call)" in p.errors[0]
    assert not marker.exists()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("[calculator(expression=3*4)]", "argument 'expression' is not a literal (BinOp)"),
        ("[calculator(expression=x)]", "not a literal (variable 'x')"),
        ('[calculator("3*4")]', "positional arguments are not allowed"),
        ("[calculator(expression=1,,)]", "not a valid Python call list"),
        ('[calculator(expression="3*', "unclosed call list (generation truncated?)"),
        ("[calculator(x=1) for x in y]", "expected a function call, got ListComp"),
        ("[calculator(**opts)]", "**-unpacking is not allowed"),
    ],
)
def test_pythonic_malformed_calls_are_errors_with_snippets(text, fragment):
    p = pythonic(text)
    assert p.calls == [] and len(p.errors) == 1
    assert fragment in p.errors[0] and "calculator" in p.errors[0]


def test_pythonic_one_bad_call_does_not_drop_the_good_one():
    p = pythonic('[calculator(expression="1"), calculator(expression=two)]')
    assert named(p.calls) == [("calculator", {"expression": "1"})]
    assert len(p.errors) == 1 and p.errors[0].startswith("call #2 (calculator)")


def test_pythonic_messages_use_the_ipython_role():
    codec = PythonicToolCodec()
    assert codec.tool_message(ToolCall("calculator", {}), "12")["role"] == "ipython"
    assert codec.parse_error_message(["x"])["role"] == "ipython"
    assert codec.assistant_message(ChatTurn(text="[f()]"), [])["content"] == "[f()]"


# --- Qwen3 (Hermes with reasoning) ------------------------------------------------------------


def test_qwen3_reasoning_is_neither_a_call_nor_answer_text():
    text = (
        '<think>\nMaybe <tool_call>\n{"name": "wrong", "arguments": {}}\n</tool_call>\n</think>\n\n'
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>'
    )
    p = parse(Qwen3ToolCodec(), text)
    assert named(p.calls) == [("calculator", {"expression": "3*4"})] and p.errors == [] and p.text == ""
    answer = parse(Qwen3ToolCodec(), "<think>\nsum it\n</think>\n\nThe answer is 12.")
    assert (answer.calls, answer.text) == ([], "The answer is 12.")
    # Thinking disabled: the template opened and closed the block in the prompt.
    assert parse(Qwen3ToolCodec(), "The answer is 12.").text == "The answer is 12."


def test_qwen3_malformed_call_is_an_error_with_snippet():
    p = parse(
        Qwen3ToolCodec(),
        '<think>\nx\n</think>\n\n<tool_call>\n{"name": "calculator", "arguments": {"a": 1,}}\n</tool_call>',
    )
    assert p.calls == [] and len(p.errors) == 1 and "invalid JSON" in p.errors[0] and '"a": 1,' in p.errors[0]


def test_qwen3_assistant_message_splits_reasoning_as_the_template_does():
    codec = Qwen3ToolCodec()
    text = '<think>\nUse the tool.\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    assert codec.assistant_message(ChatTurn(text=text), []) == {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>',
        "reasoning_content": "Use the tool.",
    }
    assert codec.assistant_message(ChatTurn(text="12"), []) == {"role": "assistant", "content": "12"}


# --- the agent loop with each family's chat template -------------------------------------------

CALL = {
    "llama3": '{"name": "calculator", "parameters": {"expression": "3*4"}}',
    "pythonic": '[calculator(expression="3*4")]',
    "mistral": '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "3*4"}}]',
    "qwen3": (
        "<think>\nI should use the calculator.\n</think>\n\n"
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>'
    ),
}
TWO_CALLS = {
    "llama3": (
        '{"name": "calculator", "parameters": {"expression": "3*4"}}; '
        '{"name": "calculator", "parameters": {"expression": "5+5"}}'
    ),
    "pythonic": '[calculator(expression="3*4"), calculator(expression="5+5")]',
    "mistral": (
        '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "3*4"}}, '
        '{"name": "calculator", "arguments": {"expression": "5+5"}}]'
    ),
    "qwen3": (
        "<think>\nTwo sums.\n</think>\n\n"
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "5+5"}}\n</tool_call>'
    ),
}
# A valid call and a malformed one in the same turn.
MIXED = {
    "llama3": (
        '{"name": "calculator", "parameters": {"expression": "3*4"}}; '
        '{"name": "calculator", "parameters": {"expression": }}'
    ),
    "pythonic": '[calculator(expression="3*4"), calculator(expression=five)]',
    "mistral": (
        '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "3*4"}}, '
        '{"name": "calculator", "arguments": {"expression": 5,}}]'
    ),
    "qwen3": (
        "<think>\nTwo.\n</think>\n\n"
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": }}\n</tool_call>'
    ),
}
MALFORMED_ONLY = {
    "llama3": '{"name": "calculator", "parameters": {"expression": "3*4",}}',
    "pythonic": "[calculator(expression=3*4)]",
    "mistral": '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "3*4",}}]',
    "qwen3": '<think>\nx\n</think>\n\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4",}}\n</tool_call>',
}
ANSWER = {
    "llama3": "The answer is 12.",
    "pythonic": "The answer is 12.",
    "mistral": "The answer is 12.",
    "qwen3": "<think>\nThe tool said 12.\n</think>\n\nThe answer is 12.",
}
FAMILY_CODECS = {
    "llama3": Llama3ToolCodec,
    "pythonic": PythonicToolCodec,
    "mistral": MistralToolCodec,
    "qwen3": Qwen3ToolCodec,
}


def tool_result_rendering(style: str, call_id: "str | None", output: str) -> str:
    """How the family's template shows one tool result."""
    return {
        "llama3": f'<|start_header_id|>ipython<|end_header_id|>\n\n"{output}"<|eot_id|>',
        "pythonic": f'<|start_header_id|>ipython<|end_header_id|>\n\n{{"output": "{output}"}}<|eot_id|>',
        "mistral": f'[TOOL_RESULTS] {{"content": {output}, "call_id": "{call_id}"}}[/TOOL_RESULTS]',
        "qwen3": f"\n<tool_response>\n{output}\n</tool_response>",
    }[style]


def answer_rendering(style: str, text: str) -> str:
    """How the family's template shows the final assistant turn after the prompt."""
    from tiny_models import FAMILIES

    return (" " + text if style == "mistral" else text) + FAMILIES[style].end_of_turn


class TemplateScriptedHandle:
    """Replays scripted turns in a family's format; renders every prompt with the family's template.

    A random model will not emit calls, so the turns are scripted; the prompts are
    real: each `chat` call applies the family tokenizer's chat template to exactly the
    messages the agent loop built (a template error fails the run, as it would for the
    real model).
    """

    backend = "hf_local"

    def __init__(self, style: str, turns: list) -> None:
        from tiny_models import family_tokenizer

        from evalrx.core.capability import Capability

        self.tokenizer = family_tokenizer(style)
        self.spec = ModelSpec(f"tiny-{style}", style, tool_call_style=style)
        self.capabilities = frozenset({Capability.GENERATE, Capability.TOOL_CALLS})
        self._turns = list(turns)
        self.prompts: list = []
        self.seen: list = []

    def render(self, messages: list, tools: "list | None", add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def chat(self, messages: list, tools: "list | None" = None, **kw) -> ChatTurn:
        self.seen.append([dict(m) for m in messages])
        self.prompts.append(self.render(messages, tools, add_generation_prompt=True))
        return ChatTurn(text=self._turns.pop(0) if self._turns else "(script exhausted)")


FAMILY_STYLES = sorted(CALL)


@pytest.fixture(params=FAMILY_STYLES)
def style(request) -> str:
    pytest.importorskip("transformers")
    return request.param


def test_codec_for_picks_the_family_codec(style):
    handle = TemplateScriptedHandle(style, [])
    assert type(codec_for(handle)) is FAMILY_CODECS[style]


def test_agent_call_then_answer_renders_in_the_family_format(style):
    h = TemplateScriptedHandle(style, [CALL[style], ANSWER[style]])
    traj = Agent(h, [CALC]).run("What is 3*4?")

    assert [s.role for s in traj.steps] == [StepRole.USER, StepRole.ACTOR, StepRole.TOOL, StepRole.ACTOR]
    call = traj.steps[1].tool_calls[0]
    assert (call.name, call.args) == ("calculator", {"expression": "3*4"})
    assert traj.steps[1].parse_error is None
    assert traj.steps[2].observation.value == "12"
    assert traj.final_answer == "The answer is 12."
    assert traj.metrics["terminated"] == "final" and traj.metrics["n_tool_calls"] == 1

    first, second = h.prompts
    assert '"name": "calculator"' in first  # the tool schema is in the prompt, where the template puts it
    assert second.startswith(first)  # history is never rewritten within one query
    result = tool_result_rendering(style, call.id, "12")
    assert result in second
    if style == "mistral":  # the template writes the structured calls back, ids included
        assert (
            first
            + (
                '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "3*4"}, "id": "'
                + call.id
                + '"}]</s>'
                + result
            )
            == second
        )
    else:  # the model's own text comes back verbatim: teacher-forced replay sees the tokens it generated
        from tiny_models import FAMILIES

        assert second.startswith(first + CALL[style] + FAMILIES[style].end_of_turn)

    # The codec's rebuilt messages render the whole conversation: prompt, then the answer.
    messages = h.seen[-1] + [codec_for(h).assistant_message(ChatTurn(text=ANSWER[style]), [])]
    full = h.render(messages, [CALC.to_openai()], add_generation_prompt=False)
    assert full == second + answer_rendering(style, ANSWER[style])


def test_agent_parallel_calls_each_get_their_result(style):
    h = TemplateScriptedHandle(style, [TWO_CALLS[style], ANSWER[style]])
    traj = Agent(h, [CALC]).run("What are 3*4 and 5+5?")
    calls = traj.steps[1].tool_calls
    assert [c.args["expression"] for c in calls] == ["3*4", "5+5"]
    assert [s.observation.value for s in traj.steps if s.role is StepRole.TOOL] == ["12", "10"]
    second = h.prompts[1]
    first_result = tool_result_rendering(style, calls[0].id, "12")
    second_result = tool_result_rendering(style, calls[1].id, "10")
    assert first_result in second and second_result in second
    assert second.index(first_result) < second.index(second_result)
    if style == "mistral":
        assert calls[0].id != calls[1].id
    if style == "qwen3":  # consecutive results are folded into one user turn
        assert "<|im_start|>user" + first_result + second_result + "<|im_end|>" in second


@pytest.mark.parametrize("script", ["malformed_only", "mixed"])
def test_agent_malformed_calls_are_recorded_and_fed_back_through_the_template(style, script):
    text = MALFORMED_ONLY[style] if script == "malformed_only" else MIXED[style]
    h = TemplateScriptedHandle(style, [text, ANSWER[style]])
    traj = Agent(h, [CALC]).run("What is 3*4?")

    actor = traj.steps[1]
    assert actor.parse_error and "call #" in actor.parse_error and "calculator" in actor.parse_error
    n_valid = 0 if script == "malformed_only" else 1
    assert len(actor.tool_calls) == n_valid
    assert traj.metrics["n_parse_errors"] == 1 and traj.metrics["n_tool_calls"] == n_valid
    feedback = [s for s in traj.steps if s.span.get("parse_error")]
    assert len(feedback) == 1 and "could not be parsed" in feedback[0].observation.text
    # The feedback rendered through the family's template (no template error) and the model saw it.
    assert len(h.prompts) == 2 and "[tool call parse error]" in h.prompts[1]
    if n_valid:
        assert tool_result_rendering(style, actor.tool_calls[0].id, "12") in h.prompts[1]
    assert traj.final_answer == "The answer is 12." and traj.metrics["terminated"] == "final"


def test_mistral_system_prompt_and_tools_sit_in_the_last_user_turn():
    pytest.importorskip("transformers")
    h = TemplateScriptedHandle("mistral", ["The answer is 12."])
    Agent(h, [CALC], system="Be brief.").run("What is 3*4?")
    assert h.prompts[0].startswith("<s>[AVAILABLE_TOOLS] [")
    assert h.prompts[0].endswith("[/AVAILABLE_TOOLS][INST] Be brief.\n\nWhat is 3*4?[/INST]")


def test_llama3_tools_go_into_the_first_user_turn_and_results_are_json_encoded():
    pytest.importorskip("transformers")
    h = TemplateScriptedHandle("llama3", [CALL["llama3"], "12"])
    Agent(h, [CALC], system="Be brief.").run("What is 3*4?")
    first = h.prompts[0]
    user_turn = first.split("<|start_header_id|>user<|end_header_id|>\n\n", 1)[1]
    assert '"name": "calculator"' in user_turn and user_turn.rstrip().endswith(
        "What is 3*4?<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
    )
    assert "Be brief." in first.split("<|start_header_id|>user", 1)[0]


# --- a tiny random model of each family, through its real chat --------------------------------


@pytest.mark.parametrize("family", FAMILY_STYLES)
def test_agent_runs_on_a_tiny_random_model_of_each_family(family):
    pytest.importorskip("torch")
    from tiny_models import make_family_model

    import evalrx
    from evalrx.core.capability import Capability

    model, tok = make_family_model(family)
    handle = evalrx.wrap(model, tok, max_new_tokens=12)
    assert Capability.TOOL_CALLS in handle.capabilities
    assert handle.spec.tool_call_style == family  # detected from the family's tokenizer
    agent = Agent(handle, [CALC], max_turns=2)
    assert type(agent.codec) is FAMILY_CODECS[family]

    traj = agent.run("What is 3*4?")
    assert traj.metrics["terminated"] in ("final", "max_turns")
    assert traj.steps[1].role is StepRole.ACTOR and traj.steps[1].span["completion_tokens"] > 0
    first = [{"role": "user", "content": "What is 3*4?"}]
    assert '"calculator"' in handle.render(first, [CALC.to_openai()], True)  # the family template placed the tools
    # The model was prompted with exactly that rendering: the family template, tools included.
    ids = handle.tokenize(messages=first, tools=[CALC.to_openai()], add_generation_prompt=True)
    assert traj.steps[1].span["prompt_tokens"] == ids.shape[1]
    # Whatever the random model wrote, the turn was parsed into calls, errors or an answer.
    parsed = agent.codec.parse(ChatTurn(text=traj.steps[1].content))
    assert bool(parsed.calls or parsed.errors) == (traj.metrics["n_turns"] > 1)


# --- the forced final answer and the codec-built messages ---------------------------------------


@pytest.mark.parametrize("script", ["call", "malformed_only"])
def test_forced_final_answer_nudge_renders_through_the_family_template(style, script):
    first = CALL[style] if script == "call" else MALFORMED_ONLY[style]
    h = TemplateScriptedHandle(style, [first, ANSWER[style]])
    traj = Agent(h, [CALC], max_turns=1, force_final_answer=True).run("What is 3*4?")
    assert traj.metrics["terminated"] == "forced_final" and traj.final_answer == "The answer is 12."
    assert len(h.prompts) == 2 and h.seen[1][-1]["content"].startswith("You have used your entire tool budget")
    assert "You have used your entire tool budget" in h.prompts[1]  # rendered, no template error
    if style == "mistral":  # a user turn here would break [INST] alternation: the nudge is a tool result
        assert h.seen[1][-1]["role"] == "tool" and len(h.seen[1][-1]["tool_call_id"]) == 9
    else:
        assert h.seen[1][-1]["role"] == "user"


def test_mistral_nudge_is_a_user_turn_only_where_the_alternation_allows_one():
    codec = MistralToolCodec()
    user = {"role": "user", "content": "q"}
    calls = {"role": "assistant", "content": "", "tool_calls": [{"id": "abcdefghi"}]}
    result = {"role": "tool", "tool_call_id": "abcdefghi", "content": "12"}
    text = {"role": "assistant", "content": "hi"}
    system = {"role": "system", "content": "s"}
    assert codec.final_nudge_message([system, user, text], "go")["role"] == "user"
    after_results = codec.final_nudge_message([system, user, calls, result], "go")
    assert after_results["role"] == "tool" and after_results["content"] == "go"
    assert after_results["tool_call_id"] == codec.final_nudge_message([user, calls, result], "go")["tool_call_id"]
    assert codec.final_nudge_message([user, text, user], "go")["role"] == "tool"


@pytest.mark.parametrize(
    "codec_cls, role",
    [(QwenToolCodec, "tool"), (Qwen3ToolCodec, "tool"), (Llama3ToolCodec, "ipython"), (PythonicToolCodec, "ipython")],
)
def test_feedback_message_rebuilds_what_parse_error_message_sent(codec_cls, role):
    codec = codec_cls()
    sent = codec.parse_error_message(["call #1: bad"])
    assert sent["role"] == role and codec.feedback_message(sent["content"]) == sent
    assert codec.final_nudge_message([], "go") == {"role": "user", "content": "go"}


def test_mistral_feedback_id_follows_the_text_so_a_rebuilt_conversation_has_the_same_id():
    run, rebuilt = MistralToolCodec(), MistralToolCodec()
    call = ToolCall("calculator", {}, id="abcdefghi")
    run.parse(ChatTurn(text='[TOOL_CALLS] [{"name": "f", "arguments": {}}]'))  # the run's codec used ids already
    run.assistant_message(ChatTurn(text=""), [call])
    rebuilt.assistant_message(ChatTurn(text=""), [call])
    sent = run.parse_error_message(["call #2: bad"])
    assert sent["role"] == "tool" and rebuilt.feedback_message(sent["content"]) == sent


def test_structured_message_puts_native_calls_where_the_template_writes_them():
    call = ToolCall("calculator", {"expression": "3*4"}, id="call_7")
    for codec in (QwenToolCodec(), Llama3ToolCodec(), PythonicToolCodec(), Qwen3ToolCodec()):
        assert codec.structured_message(ChatTurn(text=""), [call]) == {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_7",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": {"expression": "3*4"}},
                }
            ],
        }
    mistral = MistralToolCodec().structured_message(ChatTurn(text=""), [call])["tool_calls"][0]["id"]
    assert len(mistral) == 9 and mistral.isalnum()


def test_codecs_name_the_control_tokens_a_backend_must_keep():
    assert "[TOOL_CALLS]" in MistralToolCodec.control_tokens
    assert "<|python_tag|>" in Llama3ToolCodec.control_tokens
    assert "<|python_tag|>" in PythonicToolCodec.control_tokens
    assert "<|eot_id|>" not in Llama3ToolCodec.control_tokens and "</s>" not in MistralToolCodec.control_tokens


# --- evalrx.wrap detects the family's style ------------------------------------------------------


@pytest.mark.parametrize("family", FAMILY_STYLES + ["hermes"])
def test_wrap_detects_the_tool_call_style_from_the_tokenizer(family):
    pytest.importorskip("torch")
    from tiny_models import make_family_model, make_tiny_model, tiny_tokenizer

    import evalrx

    model, tok = (make_tiny_model("qwen2"), tiny_tokenizer()) if family == "hermes" else make_family_model(family)
    handle = evalrx.wrap(model, tok)
    assert handle.spec.tool_call_style == family
    assert type(codec_for(handle)) is {**FAMILY_CODECS, "hermes": QwenToolCodec}[family]


def test_wrap_takes_an_explicit_style_and_refuses_an_unknown_one():
    pytest.importorskip("torch")
    from tiny_models import make_family_model

    import evalrx

    model, tok = make_family_model("llama3")
    assert evalrx.wrap(model, tok, tool_call_style="Pythonic").spec.tool_call_style == "pythonic"
    with pytest.raises(ValueError, match="No tool-call codec for style 'nope'.*llama3"):
        evalrx.wrap(model, tok, tool_call_style="nope")


def test_style_detection_reads_published_template_markers():
    from types import SimpleNamespace

    from evalrx.models.codecs._detect import detect_style

    def tok(template, specials=()):
        return SimpleNamespace(chat_template=template, all_special_tokens=list(specials))

    assert detect_style(tok("{{ bos_token }}[INST]", ["[TOOL_CALLS]"])) == "mistral"
    assert detect_style(tok("[INST] {{ m }} [/INST]"), SimpleNamespace(model_type="mistral")) == "mistral"
    assert detect_style(tok("<|start_header_id|>ipython<|end_header_id|>")) == "llama3"
    assert detect_style(tok("x", ["<|python_tag|>"])) == "llama3"
    assert detect_style(tok("respond with a python list of the calls", ["<|python_tag|>"])) == "pythonic"
    assert detect_style(tok("<tool_call>{{ x }}</tool_call><think>")) == "qwen3"
    assert detect_style(tok("<tool_call>{{ x }}</tool_call>")) == "hermes"
    assert detect_style(tok({"default": "<tool_call>", "tool_use": "<think>"})) == "qwen3"
    assert detect_style(tok(None)) == "hermes"


# --- any model output: never an exception --------------------------------------------------------

DEEP = 100_000  # far past Python's recursion limit


@pytest.mark.parametrize(
    "codec_cls, text",
    [
        (Llama3ToolCodec, '{"name": "f", "parameters": ' + "[" * DEEP),
        (Llama3ToolCodec, json.dumps({"name": "f", "arguments": "[" * DEEP})),
        (MistralToolCodec, "[TOOL_CALLS] [" + "[" * DEEP),
        (MistralToolCodec, "[TOOL_CALLS]f" + '{"a":' * DEEP),
        (PythonicToolCodec, "[f(a=" + "[" * DEEP + "]" * DEEP + ")]"),
        (QwenToolCodec, "<tool_call>" + "[" * DEEP + "</tool_call>"),
    ],
)
def test_absurdly_nested_output_is_a_parse_error_not_a_crash(codec_cls, text):
    p = parse(codec_cls(), text)
    assert p.calls == [] and len(p.errors) == 1 and "call #1" in p.errors[0]
    assert len(p.errors[0]) < 400
