"""The agent loop and run_batch, driven by a scripted model handle.

`ScriptedHandle` is a real implementation of the handle protocol that replays
prepared `ChatTurn`s, so these tests pin the loop's own logic; the real backends
are tested in their own modules.
"""

from __future__ import annotations

import json
import threading
import time
import warnings

import pytest
from calc_tool import CALC, calculator

from evalrx.core.capability import Capability, CapabilityError
from evalrx.core.case import FailureCase, Inputs, StepRole, Trajectory
from evalrx.core.tool import ChatTurn, Tool, ToolResult
from evalrx.models.agent import Agent, ToolExecutor, run_batch
from evalrx.models.toolcodec import OpenAIToolCodec, QwenToolCodec
from evalrx.specs import ModelSpec

FULL = frozenset({Capability.GENERATE, Capability.TOOL_CALLS})


class ScriptedHandle:
    """Replays scripted turns; records every conversation and tool list it was sent."""

    def __init__(self, turns, *, backend="hf_local", style="hermes", capabilities=FULL, delay=0.0):
        self.spec = ModelSpec("scripted", "test", tool_call_style=style)
        self.capabilities = frozenset(capabilities)
        self.backend = backend
        self._turns = list(turns)
        self._lock = threading.Lock()
        self.delay = delay
        self.seen: list = []
        self.tools_seen: list = []
        self.kwargs_seen: list = []

    def chat(self, messages, tools=None, **kw):
        with self._lock:
            self.seen.append([dict(m) for m in messages])
            self.tools_seen.append(tools)
            self.kwargs_seen.append(kw)
            turn = self._turns.pop(0) if self._turns else ChatTurn(text="(script exhausted)")
        if self.delay:
            time.sleep(self.delay)
        return turn(messages) if callable(turn) else turn


def call(name, **args):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def test_tool_call_then_final_answer():
    h = ScriptedHandle(
        [
            ChatTurn(text=call("calculator", expression="3*4"), usage={"prompt_tokens": 20, "completion_tokens": 9}),
            ChatTurn(text="<think>easy</think>The answer is 12.", usage={"prompt_tokens": 40, "completion_tokens": 6}),
        ]
    )
    traj = Agent(h, [CALC], system="be brief").run(FailureCase.from_prompt("What is 3*4?", expected="12"))

    assert [s.role for s in traj.steps] == [StepRole.USER, StepRole.ACTOR, StepRole.TOOL, StepRole.ACTOR]
    assert traj.final_answer == "The answer is 12."
    assert traj.ground_truth == "12"
    assert [c.to_dict() for c in traj.steps[1].tool_calls] == [
        {"name": "calculator", "args": {"expression": "3*4"}, "raw": call("calculator", expression="3*4")}
    ]
    assert traj.steps[2].content == "calculator" and traj.steps[2].observation.value == "12"
    assert traj.steps[1].span["prompt_tokens"] == 20 and "latency_ms" in traj.steps[1].span
    assert "latency_ms" in traj.steps[2].span
    m = traj.metrics
    assert (m["terminated"], m["n_turns"], m["n_tool_calls"], m["n_parse_errors"]) == ("final", 2, 1, 0)
    assert (m["total_prompt_tokens"], m["total_completion_tokens"]) == (60, 15)
    # Second model call saw: system, user, raw assistant text, the tool observation.
    second = h.seen[1]
    assert [x["role"] for x in second] == ["system", "user", "assistant", "tool"]
    assert second[2]["content"] == call("calculator", expression="3*4")
    assert second[3]["content"] == "12"
    assert h.tools_seen[0] == [CALC.to_openai()]


def test_parallel_calls_run_in_order_one_tool_step_each():
    order = []

    def note(x: str) -> str:
        order.append(x)
        return x.upper()

    tool = Tool("note", "record", fn=note)
    h = ScriptedHandle(
        [ChatTurn(text=call("note", x="a") + call("note", x="b") + call("note", x="c")), ChatTurn(text="ok")]
    )
    traj = Agent(h, [tool]).run("go")
    assert order == ["a", "b", "c"]
    assert [c.args["x"] for c in traj.steps[1].tool_calls] == ["a", "b", "c"]
    tools = [s for s in traj.steps if s.role is StepRole.TOOL]
    assert [s.observation.value for s in tools] == ["A", "B", "C"]
    assert [s.span["call"] for s in tools] == [0, 1, 2]
    assert traj.metrics["n_tool_calls"] == 3 and traj.metrics["n_turns"] == 2
    assert [m["content"] for m in h.seen[1][-3:]] == ["A", "B", "C"]


def test_parse_error_is_recorded_fed_back_and_the_loop_continues():
    bad = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4",}}\n</tool_call>'
    h = ScriptedHandle([ChatTurn(text=bad), ChatTurn(text=call("calculator", expression="3*4")), ChatTurn(text="12")])
    traj = Agent(h, [CALC]).run("3*4?")

    actor = [s for s in traj.steps if s.role is StepRole.ACTOR]
    assert "invalid JSON" in actor[0].parse_error and actor[0].tool_calls == []
    assert actor[1].parse_error is None
    err_step = traj.steps[2]
    assert err_step.role is StepRole.TOOL and err_step.span["parse_error"] is True
    assert "could not be parsed and were not executed" in err_step.observation.text
    # The model was told about the error before its retry.
    feedback = h.seen[1][-1]
    assert feedback["role"] == "tool" and "invalid JSON" in feedback["content"]
    assert traj.final_answer == "12"
    assert traj.metrics["n_parse_errors"] == 1 and traj.metrics["n_turns"] == 3
    assert traj.metrics["terminated"] == "final"


def test_valid_and_malformed_calls_in_one_turn():
    text = call("calculator", expression="1+1") + '<tool_call>{"name": "calculator", "argu'
    h = ScriptedHandle([ChatTurn(text=text, finish_reason="length"), ChatTurn(text="2")])
    traj = Agent(h, [CALC]).run("1+1")
    assert traj.steps[1].span["finish_reason"] == "length"
    assert "unclosed <tool_call>" in traj.steps[1].parse_error
    assert [s.observation.value for s in traj.steps if s.role is StepRole.TOOL][0] == "2"
    assert traj.steps[3].span.get("parse_error") is True
    assert traj.metrics["n_tool_calls"] == 1 and traj.metrics["n_parse_errors"] == 1


def test_unknown_tool_observation_names_the_available_tools():
    h = ScriptedHandle([ChatTurn(text=call("calc", expression="1")), ChatTurn(text="sorry")])
    traj = Agent(h, [CALC]).run("1")
    obs = traj.steps[2].observation.text
    assert "unknown tool 'calc'" in obs and "calculator" in obs
    assert traj.steps[2].span["tool_error"] is True
    assert traj.metrics["n_tool_errors"] == 1


def test_block_repeat_calls_blocks_only_the_immediate_repeat():
    calls = []

    def counted(expression: str) -> str:
        calls.append(expression)
        return calculator(expression)

    tool = Tool("calculator", "math", fn=counted)
    same = ChatTurn(text=call("calculator", expression="2*2"))
    script = [same, same, ChatTurn(text=call("calculator", expression="3")), same, ChatTurn(text="4")]
    traj = Agent(ScriptedHandle(script), [tool], block_repeat_calls=True).run("2*2")
    tools = [s for s in traj.steps if s.role is StepRole.TOOL]
    assert [s.span.get("repeat_blocked", False) for s in tools] == [False, True, False, False]
    assert "[repeat blocked]" in tools[1].observation.text
    assert calls == ["2*2", "3", "2*2"]
    assert traj.metrics["n_repeat_blocked"] == 1

    # Off by default: the same script executes every call.
    calls.clear()
    traj = Agent(ScriptedHandle(script), [tool]).run("2*2")
    assert calls == ["2*2", "2*2", "3", "2*2"] and traj.metrics["n_repeat_blocked"] == 0


def test_max_turns_terminates_without_answer():
    h = ScriptedHandle([ChatTurn(text=call("calculator", expression=str(i))) for i in range(10)])
    traj = Agent(h, [CALC], max_turns=3).run("loop")
    assert traj.final_answer is None
    assert traj.metrics["terminated"] == "max_turns" and traj.metrics["n_turns"] == 3
    assert len(h.seen) == 3


def test_force_final_answer_asks_once_without_tools():
    script = [ChatTurn(text=call("calculator", expression="1")) for _ in range(2)] + [ChatTurn(text="Final: 1")]
    h = ScriptedHandle(script)
    traj = Agent(h, [CALC], max_turns=2, force_final_answer=True).run("1")
    assert traj.metrics["terminated"] == "forced_final"
    assert traj.final_answer == "Final: 1"
    last = traj.steps[-1]
    assert last.role is StepRole.ACTOR and last.span["forced_final"] is True
    assert h.tools_seen[-1] is None
    assert "tool budget" in h.seen[-1][-1]["content"]


def test_force_final_answer_is_not_used_when_the_model_answers():
    h = ScriptedHandle([ChatTurn(text="42")])
    traj = Agent(h, [CALC], force_final_answer=True).run("?")
    assert traj.metrics["terminated"] == "final" and len(h.seen) == 1


def test_tool_exceptions_and_bad_arguments_become_observations():
    def boom(expression: str) -> str:
        raise RuntimeError("disk on fire")

    def inner_type_error(expression: str) -> str:
        return expression + 1  # a TypeError inside the tool, not a bad call

    tools = [Tool("boom", "", fn=boom), Tool("inner", "", fn=inner_type_error), CALC]
    script = [
        ChatTurn(text=call("boom", expression="1") + call("calculator", nope="1") + call("inner", expression="x")),
        ChatTurn(text="gave up"),
    ]
    traj = Agent(ScriptedHandle(script), tools).run("x")
    obs = [s.observation.text for s in traj.steps if s.role is StepRole.TOOL]
    assert obs[0] == "[tool error in 'boom': RuntimeError: disk on fire]"
    assert obs[1].startswith("[tool error in 'calculator': bad arguments: unexpected argument(s) 'nope';")
    assert "expression" in obs[1]
    assert obs[2].startswith("[tool error in 'inner': TypeError:")
    assert traj.metrics["terminated"] == "final" and traj.metrics["n_tool_errors"] == 3


def test_executor_without_implementation():
    ex = ToolExecutor([Tool("ghost", "no fn")])
    from evalrx.core.tool import ToolCall

    assert "no implementation" in ex.execute(ToolCall("ghost", {}))


def test_images_in_first_message_and_tool_results_are_reinjected():
    img_in, img_out = object(), object()

    def zoom(region: str) -> ToolResult:
        return ToolResult(text=f"zoomed {region}", images=[img_out], meta={"box": [0, 0, 5, 5]})

    tool = Tool("zoom", "crop", fn=zoom)
    h = ScriptedHandle(
        [ChatTurn(text=call("zoom", region="top") + call("zoom", region="left")), ChatTurn(text="a cat")]
    )
    traj = Agent(h, [tool]).run(FailureCase(inputs=Inputs(prompt="What is it?", image=img_in)))

    first_user = h.seen[0][0]
    assert first_user["content"][0] == {"type": "image", "image": img_in}
    assert first_user["content"][1]["text"] == "What is it?"
    assert traj.steps[0].span["has_image"] is True
    convo = h.seen[1]
    # Both tool replies come straight after the assistant turn; image messages follow them.
    assert [m["role"] for m in convo[1:]] == ["assistant", "tool", "tool", "user", "user"]
    assert convo[2]["content"] == "zoomed top"
    assert convo[4]["content"][0] == {"type": "image", "image": img_out}
    assert "'zoom'" in convo[4]["content"][-1]["text"]
    assert traj.steps[2].observation.value == {"text": "zoomed top", "n_images": 1, "meta": {"box": [0, 0, 5, 5]}}


def test_openai_codec_path_uses_native_calls_and_ids():
    wire = [
        {"id": "call_x", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "6/2"}'}}
    ]
    h = ScriptedHandle([ChatTurn(text="", tool_calls=wire), ChatTurn(text="3.0")], backend="api")
    traj = Agent(h, [CALC]).run("6/2")
    assert traj.steps[1].tool_calls[0].id == "call_x"
    convo = h.seen[1]
    assert convo[-2]["tool_calls"][0]["function"]["arguments"] == {"expression": "6/2"}
    assert convo[-1] == {"role": "tool", "name": "calculator", "content": "3.0", "tool_call_id": "call_x"}


def test_openai_malformed_call_feedback_is_a_user_message():
    wire = [{"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{oops"}}]
    h = ScriptedHandle([ChatTurn(tool_calls=wire), ChatTurn(text="fine")], backend="api")
    traj = Agent(h, [CALC], codec=OpenAIToolCodec()).run("?")
    assert traj.steps[1].parse_error and traj.steps[2].span["parse_error"] is True
    assert "tool_calls" not in h.seen[1][-2]  # no unanswered call id left in the history
    assert h.seen[1][-1]["role"] == "user"


def test_capabilities_are_checked_up_front():
    h = ScriptedHandle([], capabilities={Capability.GENERATE})
    with pytest.raises(CapabilityError) as info:
        Agent(h, [CALC])
    assert "tool_calls" in str(info.value)


def test_run_rejects_unknown_input_types_and_accepts_inputs():
    h = ScriptedHandle([ChatTurn(text="hi")])
    agent = Agent(h, [])
    assert agent.run(Inputs(prompt="hello")).goal == "hello"
    with pytest.raises(TypeError):
        agent.run(123)


def test_chat_kwargs_are_forwarded_and_logprobs_kept():
    lp = [{"token": "hi", "token_id": 5, "logprob": -0.1}]
    h = ScriptedHandle([ChatTurn(text="hi", logprobs=lp)])
    traj = Agent(h, [], chat_kwargs={"logprobs": True}).run("x")
    assert h.kwargs_seen == [{"logprobs": True}]
    assert traj.steps[1].span["logprobs"] == lp


def test_trajectory_round_trips_through_json():
    def zoom(region: str) -> ToolResult:
        return ToolResult(text="z", images=[object()], meta={"k": 1})

    script = [
        ChatTurn(
            text=call("zoom", region="a") + call("calculator", expression="2+2"),
            usage={"prompt_tokens": 3, "completion_tokens": 4},
        ),
        ChatTurn(text="<tool_call>{bad}</tool_call>"),
        ChatTurn(text=call("nope")),
        ChatTurn(text="done"),
    ]
    traj = Agent(ScriptedHandle(script), [CALC, Tool("zoom", "", fn=zoom)]).run(
        FailureCase.from_prompt("p", expected=4)
    )
    back = Trajectory.from_dict(json.loads(traj.to_json()))
    assert back == traj
    assert len(traj.steps) == 9


def test_qwen_conversation_replays_the_models_exact_text():
    # The assistant content is the raw generation, so re-rendering reproduces the model's tokens.
    raw = "<think>use the tool</think>" + call("calculator", expression="2")
    h = ScriptedHandle([ChatTurn(text=raw), ChatTurn(text="2")])
    Agent(h, [CALC], codec=QwenToolCodec()).run("2")
    assistant = h.seen[1][1]
    assert assistant == {"role": "assistant", "content": raw}


# --- run_batch --------------------------------------------------------------------------------


def prompt_echo(messages):
    return ChatTurn(text=f"answer to {messages[0]['content']}")


def test_run_batch_keeps_order_and_stubs_crashing_cases():
    cases = ["a", "b", "c", "d"]

    def factory(case):
        if case.inputs.prompt == "c":
            raise RuntimeError("tool setup failed")
        return [CALC]

    seen = []
    h = ScriptedHandle([prompt_echo] * 3)
    out = run_batch(h, cases, tools_factory=factory, on_result=lambda c, t: seen.append(c.inputs.prompt))
    assert [t.goal for t in out] == cases
    assert [t.final_answer for t in out] == ["answer to a", "answer to b", None, "answer to d"]
    assert out[2].metrics == {"terminated": "error", "error": "RuntimeError: tool setup failed"}
    assert out[2].steps[0].content == "c"
    assert sorted(seen) == cases


def _tracking_overlap(h):
    """Counts the handle's calls in flight at once (`["max"]`)."""
    active = {"now": 0, "max": 0}
    original = h.chat

    def tracking(messages, tools=None, **kw):
        active["now"] += 1
        active["max"] = max(active["max"], active["now"])
        try:
            return original(messages, tools, **kw)
        finally:
            active["now"] -= 1

    h.chat = tracking
    return active


def test_run_batch_runs_a_local_handle_one_case_at_a_time_without_a_warning():
    h = ScriptedHandle([prompt_echo] * 4, backend="hf_local", delay=0.01)
    active = _tracking_overlap(h)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an ordinary local run asked for no parallelism: nothing to warn about
        out = run_batch(h, ["1", "2", "3", "4"], tools_factory=lambda c: [])
    assert active["max"] == 1
    assert [t.final_answer for t in out] == ["answer to 1", "answer to 2", "answer to 3", "answer to 4"]


def test_run_batch_warns_when_asked_for_threads_a_local_handle_cannot_take():
    h = ScriptedHandle([prompt_echo] * 4, backend="hf_local", delay=0.01)
    active = _tracking_overlap(h)
    with pytest.warns(UserWarning, match="one at a time"):
        out = run_batch(h, ["1", "2", "3", "4"], tools_factory=lambda c: [], concurrency=4)
    assert active["max"] == 1
    assert [t.final_answer for t in out] == ["answer to 1", "answer to 2", "answer to 3", "answer to 4"]


@pytest.mark.parametrize("concurrency", [4, None], ids=["asked", "default"])
def test_run_batch_runs_api_handles_concurrently_in_order(concurrency):
    h = ScriptedHandle([prompt_echo] * 8, backend="api", delay=0.05)
    threads = set()
    original = h.chat

    def tracking(messages, tools=None, **kw):
        threads.add(threading.get_ident())
        return original(messages, tools, **kw)

    h.chat = tracking
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an API handle must not trigger the sequential warning
        t0 = time.perf_counter()
        out = run_batch(h, [str(i) for i in range(8)], tools_factory=lambda c: [], concurrency=concurrency)
        elapsed = time.perf_counter() - t0
    assert [t.goal for t in out] == [str(i) for i in range(8)]
    assert all(t.final_answer == f"answer to {t.goal}" for t in out)
    assert len(threads) > 1
    assert elapsed < 8 * 0.05  # sequential would take at least 0.4 s


def test_run_batch_passes_agent_kwargs():
    same = ChatTurn(text=call("calculator", expression="1"))
    h = ScriptedHandle([same, same, ChatTurn(text="1")])
    out = run_batch(
        h,
        ["x"],
        tools_factory=lambda c: [CALC],
        concurrency=1,
        max_turns=5,
        agent_kwargs={"block_repeat_calls": True},
    )
    assert out[0].metrics["n_repeat_blocked"] == 1
