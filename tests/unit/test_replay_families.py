"""Rebuilding a stored trajectory into the exact token ids each model family saw and generated.

The teacher-forced pass re-reads a run from its stored trajectory: the conversation is
rebuilt with the family's codec (`conversation_from_trajectory`, style from
`replay_style(handle)`) and planned into passes (`plan_passes`). These tests run the
real `Agent` on a tiny random model of each family through `hf_local`'s real `chat`
(chat template, `generate`, decoding) and compare, turn by turn, the ids the model was
given and generated with the ids the planned passes feed.

A random model would almost never write a well-formed call, so `Steered` overrides
the model's logits during generation to emit a scripted text's canonical token ids,
one `generate` call per turn; everything around it (templates, stopping, decoding,
parsing, storage, rebuilding) is the real code path. It also records the ids of each
prompt (the prefill) and of each generated turn.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from calc_tool import CALC  # noqa: E402
from tiny_models import FAMILIES, make_family_model, make_tiny_model, tiny_tokenizer  # noqa: E402

import evalrx  # noqa: E402
from evalrx.core.case import Step, StepRole, Trajectory  # noqa: E402
from evalrx.internals.passes import (  # noqa: E402
    conversation_from_trajectory,
    describe_passes,
    plan_passes,
    replay_style,
)
from evalrx.models.agent import FINAL_NUDGE, Agent  # noqa: E402

STYLES = ["hermes", *sorted(FAMILIES)]

# Each family's call as its model writes it, with the control tokens a backend must keep:
# Llama 3.1 may open a call with <|python_tag|>, Mistral always opens with [TOOL_CALLS].
CALL = {
    "hermes": '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>',
    "llama3": '<|python_tag|>{"name": "calculator", "parameters": {"expression": "3*4"}}',
    "pythonic": '[calculator(expression="3*4")]',
    # A v0.3 call carrying its own valid id renders back exactly as written.
    "mistral": '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "3*4"}, "id": "a1B2c3D4e"}]',
    "qwen3": (
        "<think>\nI should use the calculator.\n</think>\n\n"
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>'
    ),
}
BAD_CALL = {
    "hermes": '<tool_call>\n{"name": "calculator", "arguments": {"expression": }}\n</tool_call>',
    "llama3": '{"name": "calculator", "parameters": {"expression": }}',
    "pythonic": "[calculator(expression=3*4)]",
    "mistral": '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": }}]',
    "qwen3": '<think>\nx\n</think>\n\n<tool_call>\n{"name": "calculator", "arguments": {"expression": }}\n</tool_call>',
}
ANSWER = {
    "hermes": "The answer is 12.",
    "llama3": "The answer is 12.",
    "pythonic": "The answer is 12.",
    "mistral": " The answer is 12.",  # the template writes " " + answer: a model trained on it does too
    "qwen3": "<think>\nThe tool said 12.\n</think>\n\nThe answer is 12.",
}


def family_model(style: str):
    """A tiny random model of the family and its tokenizer (the Qwen2.5 demo template for hermes)."""
    if style == "hermes":
        return make_tiny_model("qwen2"), tiny_tokenizer()
    return make_family_model(style)


class Steered:
    """Makes a model generate scripted texts, one per `generate` call, through its real forward.

    A forward hook replaces the last position's logits so greedy decoding picks the next
    scripted id (the text's canonical token ids, then end of turn); once a script is spent
    (or none is left) the model ends its turn. Use as a context manager.

    Attributes:
        prompts: the ids of each prompt the model was given (each generate call's prefill).
        generated: the ids it generated for each prompt, end-of-turn token included.
    """

    def __init__(self, model, tokenizer, texts: list) -> None:
        self.model = model
        self.eos = tokenizer.eos_token_id
        self.scripts = [tokenizer(t, add_special_tokens=False)["input_ids"] + [self.eos] for t in texts]
        self.prompts: list = []
        self.generated: list = []
        self._script: list = []
        self._hook = None

    def __enter__(self) -> "Steered":
        self._hook = self.model.register_forward_hook(self._steer, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self._hook.remove()

    def _steer(self, module, args, kwargs, output):
        ids = kwargs["input_ids"]
        if ids.shape[1] > 1:  # the prefill: a new turn starts
            self.prompts.append(ids[0].tolist())
            self.generated.append([])
            self._script = self.scripts.pop(0) if self.scripts else [self.eos]
        step = len(self.generated[-1])
        target = self._script[step] if step < len(self._script) else self.eos
        self.generated[-1].append(target)
        output.logits[:, -1, :] = -1e4
        output.logits[:, -1, target] = 1e4
        return output


def run_family(style: str, texts: list, **agent_kwargs):
    """Run the agent on the family's tiny model steered through `texts`; returns (handle, trajectory, steered)."""
    model, tok = family_model(style)
    # Steered reads each turn's prompt from its prefill: every prompt prefilled whole, no prefix reused.
    handle = evalrx.wrap(model, tok, max_new_tokens=96, prefix_cache=False)
    with Steered(model, tok, texts) as steered:
        trajectory = Agent(handle, [CALC], **agent_kwargs).run("What is 3*4?")
    stored = Trajectory.from_dict(json.loads(trajectory.to_json()))
    return handle, stored, steered


def rebuild(handle, trajectory, system=None):
    return conversation_from_trajectory(trajectory, system, [CALC], style=replay_style(handle))


def assert_prompts_rebuilt(handle, conversation, steered) -> None:
    """Every model turn's rebuilt prompt tokenizes to exactly the ids the model was given."""
    assert len(conversation.turns) == len(steered.prompts)
    for turn, seen in zip(conversation.turns, steered.prompts):
        msgs = conversation.messages[: turn.message_index]
        ids = handle.tokenize(messages=msgs, tools=turn.tools, add_generation_prompt=True)[0].tolist()
        assert ids == seen, f"step {turn.step_idx}: rebuilt prompt differs from the prompt the model saw"


def assert_passes_feed_the_run(handle, conversation, steered, mode: str = "auto") -> list:
    """Every planned pass feeds, for each turn it covers, the turn's prompt ids then its generated ids."""
    passes = plan_passes(handle.tokenizer, conversation, mode=mode, renderer=handle)
    index = {t.step_idx: k for k, t in enumerate(conversation.turns)}
    covered = []
    for tf_pass in passes:
        for pt in tf_pass.turns:
            k = index[pt.step_idx]
            g0, g1 = pt.gen_tokens
            assert tf_pass.ids[:g0] == steered.prompts[k], f"step {pt.step_idx}: the pass's prefix is not its prompt"
            assert tf_pass.ids[g0:g1] == steered.generated[k], (
                f"step {pt.step_idx}: the pass's turn is not as generated"
            )
            covered.append(pt.step_idx)
    assert sorted(covered) == sorted(index)
    return passes


@pytest.mark.parametrize("style", STYLES)
def test_one_pass_feeds_exactly_the_ids_each_turn_was_given_and_generated(style):
    handle, traj, steered = run_family(style, [CALL[style], ANSWER[style]])
    assert handle.spec.tool_call_style == style  # detected by wrap from the tokenizer
    assert traj.metrics["terminated"] == "final" and traj.metrics["n_tool_calls"] == 1
    assert traj.steps[2].observation.value == "12"

    conv = rebuild(handle, traj)
    assert conv.style == style
    assert_prompts_rebuilt(handle, conv, steered)
    passes = assert_passes_feed_the_run(handle, conv, steered)
    # Prefix-stable within one query: both turns are read from one pass.
    assert describe_passes(passes)["mode"] == "one_pass"
    assert passes[0].ids == steered.prompts[1] + steered.generated[1]
    # Per-step passes feed the same ids.
    assert_passes_feed_the_run(handle, conv, steered, mode="per_step")


@pytest.mark.parametrize("style", STYLES)
def test_parse_errors_and_the_forced_final_turn_rebuild_into_the_prompts_the_model_saw(style):
    # Malformed call -> feedback; a good call -> result; budget spent -> the forced final turn.
    handle, traj, steered = run_family(
        style, [BAD_CALL[style], CALL[style], ANSWER[style]], max_turns=2, force_final_answer=True, system="Be brief."
    )
    assert traj.metrics["terminated"] == "forced_final" and traj.metrics["n_parse_errors"] == 1
    conv = rebuild(handle, traj, system="Be brief.")
    assert_prompts_rebuilt(handle, conv, steered)
    assert [m["kind"] for m in conv.message_info].count("nudge") == 1


@pytest.mark.parametrize("style", STYLES)
def test_auto_style_reads_the_family_from_the_stored_turns(style):
    handle, traj, _ = run_family(style, [CALL[style], ANSWER[style]])
    auto = conversation_from_trajectory(traj, None, [CALC])
    assert auto.style == style and auto.messages == rebuild(handle, traj).messages


@pytest.mark.parametrize("style, marker", [("llama3", "<|python_tag|>"), ("mistral", "[TOOL_CALLS]")])
def test_tool_call_control_tokens_survive_decoding_so_the_turn_retokenizes_to_its_ids(style, marker):
    handle, traj, steered = run_family(style, [CALL[style], ANSWER[style]])
    call_turn, answer_turn = traj.steps[1], traj.steps[3]
    assert call_turn.content.startswith(marker) and call_turn.tool_calls
    tok = handle.tokenizer
    assert tok(call_turn.content, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] == steered.generated[0]
    assert tok.eos_token not in answer_turn.content  # end of turn is still dropped
    passes = plan_passes(tok, rebuild(handle, traj), renderer=handle)
    g0, g1 = passes[0].turns[0].gen_tokens
    assert passes[0].ids[g0:g1] == steered.generated[0]


def test_qwen3_forced_final_rewrites_history_so_each_turn_gets_its_own_pass():
    # The nudge is a new user query: Qwen3's template then drops the reasoning of earlier turns.
    handle, traj, steered = run_family("qwen3", [CALL["qwen3"], ANSWER["qwen3"]], max_turns=1, force_final_answer=True)
    assert traj.metrics["terminated"] == "forced_final"
    conv = rebuild(handle, traj)
    full = handle.render(conv.messages, conv.tools)
    assert "I should use the calculator." not in full  # rewritten: the first turn's reasoning is gone
    assert_prompts_rebuilt(handle, conv, steered)
    passes = assert_passes_feed_the_run(handle, conv, steered)
    assert describe_passes(passes)["mode"] == "per_step" and [p.steps for p in passes] == [[1], [3]]


@pytest.mark.parametrize("first", ["call", "malformed"])
def test_mistral_forced_final_answer_keeps_the_template_alternation(first):
    # After tool results (or user feedback) a user nudge would break [INST] alternation and the template raises.
    text = CALL["mistral"] if first == "call" else BAD_CALL["mistral"]
    handle, traj, steered = run_family("mistral", [text, ANSWER["mistral"]], max_turns=1, force_final_answer=True)
    assert traj.metrics["terminated"] == "forced_final" and traj.final_answer == "The answer is 12."
    last_prompt = handle.tokenizer.decode(steered.prompts[-1])
    assert f'[TOOL_RESULTS] {{"content": {FINAL_NUDGE}, "call_id": "' in last_prompt
    assert last_prompt.endswith("[/TOOL_RESULTS]")
    conv = rebuild(handle, traj)
    assert conv.message_info[-2]["kind"] == "nudge" and conv.messages[-2]["role"] == "tool"
    assert_prompts_rebuilt(handle, conv, steered)


@pytest.mark.parametrize(
    "style, text",
    [
        # v0.3 call without an id: the template writes one in.
        ("mistral", '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "3*4"}}]'),
        # reasoning closed with one newline: the template normalises it to two.
        ("qwen3", "<think>\nsum\n</think>\n" + CALL["hermes"]),
    ],
    ids=["mistral-call-without-id", "qwen3-reasoning-closed-with-one-newline"],
)
def test_a_turn_the_template_renders_otherwise_is_scored_as_the_model_wrote_it(style, text):
    handle, traj, steered = run_family(style, [text, ANSWER[style]])
    assert traj.metrics["n_tool_calls"] == 1
    conv = rebuild(handle, traj)
    assert_prompts_rebuilt(handle, conv, steered)  # later prompts hold the template's rendering
    assert_passes_feed_the_run(handle, conv, steered)


# --- a run from another backend, replayed on each family ----------------------------------------


def api_trajectory() -> Trajectory:
    return Trajectory(
        "case-1",
        "What is 3*4?",
        steps=[
            Step(0, StepRole.USER, "What is 3*4?"),
            Step(1, StepRole.ACTOR, "", tool_calls=[{"name": "calculator", "args": {"expression": "3*4"}, "id": "c7"}]),
            Step(2, StepRole.TOOL, "calculator", observation="12", span={"call": 0}),
            Step(3, StepRole.ACTOR, "The answer is 12."),
        ],
        final_answer="The answer is 12.",
        metrics={"terminated": "final"},
    )


NATIVE_RENDERING = {
    "hermes": '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>',
    "llama3": '{"name": "calculator", "parameters": {"expression": "3*4"}}<|eot_id|>',
    "pythonic": "[calculator(expression=3*4)]<|eot_id|>",  # the published template prints strings unquoted
    "mistral": '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "3*4"}, "id": "',
    "qwen3": '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>',
}


@pytest.mark.parametrize("style", STYLES)
def test_native_calls_from_an_api_run_are_written_in_the_scoring_familys_format(style):
    model, tok = family_model(style)
    handle = evalrx.wrap(model, tok)
    conv = rebuild(handle, api_trajectory())
    assert conv.style == style and conv.turns[0].verbatim is False and conv.turns[1].verbatim is True
    text = handle.render(conv.messages, conv.tools)  # the family's template accepts the messages
    assert NATIVE_RENDERING[style] in text
    if style == "mistral":  # the API id is mapped to a valid 9-character id, the same in the call and its result
        call_id = conv.messages[1]["tool_calls"][0]["id"]
        assert len(call_id) == 9 and call_id.isalnum() and conv.messages[2]["tool_call_id"] == call_id
    passes = plan_passes(handle.tokenizer, conv, renderer=handle)
    assert sorted(s for p in passes for s in p.steps) == [1, 3]
