"""Analyzers on stored trajectories: one teacher-forced pass vs per-step passes, decision
positions, tool-decision alternatives, attention by segment, token uncertainty, replay of
API runs, the rebuilt conversation, and compact storage. Tiny random models, demo template."""

from __future__ import annotations

import copy
import io
import json

import numpy as np
import pytest
import torch  # noqa: E402  (the local extra is part of `make test`; a missing torch must fail)
from tiny_models import make_tiny_model, tiny_tokenizer  # noqa: E402

import evalrx  # noqa: E402
from evalrx.analyzers import (  # noqa: E402
    AttentionAnalyzer,
    LogitLensAnalyzer,
    ReplayAnalyzer,
    TokenUncertaintyAnalyzer,
    ToolDecisionAnalyzer,
    conversation_from_trajectory,
    plan_passes,
    result_from_arrays,
    uncertainty_from_logprobs,
)
from evalrx.core import Capability, ChatTurn, Step, StepRole, Tool, Trajectory  # noqa: E402
from evalrx.internals.passes import tokenize_with_offsets, tokens_overlapping  # noqa: E402
from evalrx.specs import ModelSpec  # noqa: E402

SYSTEM = "You are a helpful assistant."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    },
]
CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>'
ANSWER = "The answer is 12."


def _hermes_trajectory(name: str = "calculator") -> Trajectory:
    call = CALL.replace("calculator", name)
    return Trajectory(
        "case-1",
        "What is 3*4?",
        steps=[
            Step(0, StepRole.USER, "What is 3*4?", span={"has_image": False}),
            Step(1, StepRole.ACTOR, call, tool_calls=[{"name": name, "args": {"expression": "3*4"}, "raw": call}]),
            Step(2, StepRole.TOOL, name, observation="12", span={"call": 0}),
            Step(3, StepRole.ACTOR, ANSWER),
        ],
        final_answer=ANSWER,
        metrics={"terminated": "final"},
    )


def _api_trajectory() -> Trajectory:
    return Trajectory(
        "case-1",
        "What is 3*4?",
        steps=[
            Step(0, StepRole.USER, "What is 3*4?"),
            Step(
                1,
                StepRole.ACTOR,
                "",
                tool_calls=[{"name": "calculator", "args": {"expression": "3*4"}, "id": "call_7"}],
            ),
            Step(2, StepRole.TOOL, "calculator", observation="12", span={"call": 0}),
            Step(3, StepRole.ACTOR, ANSWER),
        ],
        final_answer=ANSWER,
        metrics={"terminated": "final", "model": "gpt-4o-mini on api"},
    )


def _handle(arch: str = "qwen2", **overrides):
    return evalrx.wrap(make_tiny_model(arch, **overrides), tiny_tokenizer())


def _full_ids(handle, traj) -> list:
    conv = conversation_from_trajectory(traj, SYSTEM, TOOLS)
    return tokenize_with_offsets(handle.tokenizer, handle.render(conv.messages, TOOLS))[0]


def _log_softmax(handle, ids):
    with torch.no_grad():
        return torch.log_softmax(handle.model(input_ids=torch.tensor([ids])).logits[0].float(), -1)


LENS_FIELDS = ("topk_logprobs", "entropy", "target_logprob", "hidden_norm")


@pytest.mark.parametrize("arch", ["qwen2", "llama", "gemma", "gpt2"])
def test_one_pass_lens_equals_per_step_passes(arch):
    handle = _handle(arch)
    traj = _hermes_trajectory()
    one = LogitLensAnalyzer(top_k=5).run_trajectory(handle, traj, tools=TOOLS, system=SYSTEM)
    per = LogitLensAnalyzer(top_k=5, mode="per_step").run_trajectory(handle, traj, tools=TOOLS, system=SYSTEM)
    assert one.info["plan"]["mode"] == "one_pass" and len(one.info["plan"]["passes"]) == 1
    assert per.info["plan"]["mode"] == "per_step" and len(per.info["plan"]["passes"]) == 2
    assert one.positions.tolist() == per.positions.tolist() and len(one.positions) > 5
    for name in LENS_FIELDS:
        np.testing.assert_allclose(getattr(one, name), getattr(per, name), atol=1e-4, err_msg=name)
    np.testing.assert_array_equal(one.topk_ids, per.topk_ids)
    np.testing.assert_array_equal(one.target_rank, per.target_rank)


def test_decision_positions_are_the_name_the_argument_value_and_the_answer():
    handle = _handle()
    lens = LogitLensAnalyzer(top_k=3).run_trajectory(handle, _hermes_trajectory(), tools=TOOLS, system=SYSTEM)
    tok = handle.tokenizer

    def text(kind, step):
        ids = [
            int(t) for t, k, s in zip(lens.target_ids, lens.kinds, lens.labels["label_step"]) if k == kind and s == step
        ]
        return tok.decode(ids)

    assert text("tool_name", 1) == "calculator"
    assert text("arg_value", 1) == "3*4"
    assert text("answer", 3) == "The12"  # the answer's first token and its value
    every = LogitLensAnalyzer(top_k=3, answer_points="all").run_trajectory(
        handle, _hermes_trajectory(), tools=TOOLS, system=SYSTEM
    )
    assert every.info["answer_points"] == "all" and lens.info["answer_points"] == "values"
    answer_ids = [int(t) for t, k in zip(every.target_ids, every.kinds) if k == "answer"]
    assert tok.decode(answer_ids) == ANSWER
    assert text("turn_start", 1) == "<tool_call>"
    args = {a for a, k in zip(lens.labels["label_arg"], lens.kinds) if k == "arg_value"}
    assert args == {"expression"}
    # The lens position predicts the decided token: target = token at position + 1 of the pass.
    ids = _full_ids(handle, _hermes_trajectory())
    assert [ids[p + 1] for p in lens.positions] == lens.target_ids.tolist()
    step1 = lens.for_step(1)
    assert set(step1.labels["label_step"].tolist()) == {1} and len(step1.positions) == 5


def test_template_that_rewrites_history_falls_back_to_a_pass_per_rewritten_turn():
    tok = copy.deepcopy(tiny_tokenizer())
    marker = "render_content(message.content) + '<|im_end|>\\n'"
    assert tok.chat_template.count(marker) == 1
    # Like templates that drop earlier reasoning: every assistant turn but the last is replaced.
    tok.chat_template = tok.chat_template.replace(
        marker,
        "(('[earlier turn]') if (message.role == 'assistant' and not loop.last) else render_content(message.content))"
        " + '<|im_end|>\\n'",
    )
    handle = evalrx.wrap(make_tiny_model("qwen2"), tok)
    traj = _hermes_trajectory()
    auto = LogitLensAnalyzer(top_k=4).run_trajectory(handle, traj, tools=TOOLS, system=SYSTEM)
    per = LogitLensAnalyzer(top_k=4, mode="per_step").run_trajectory(handle, traj, tools=TOOLS, system=SYSTEM)
    plan = auto.info["plan"]
    assert plan["mode"] == "mixed"
    assert [p["steps"] for p in plan["passes"]] == [[3], [1]]
    name_ids = [int(t) for t, k in zip(auto.target_ids, auto.kinds) if k == "tool_name"]
    assert tok.decode(name_ids) == "calculator"  # read from the turn as generated, not the rewritten one
    order_a = np.lexsort((auto.positions, auto.labels["label_step"]))
    order_p = np.lexsort((per.positions, per.labels["label_step"]))
    for name in LENS_FIELDS:
        np.testing.assert_allclose(getattr(auto, name)[:, order_a], getattr(per, name)[:, order_p], atol=1e-4)


def test_forced_final_turn_is_rendered_without_tools_after_the_nudge():
    from evalrx.models.agent import FINAL_NUDGE

    traj = _hermes_trajectory()
    traj.steps[3].span = {"forced_final": True}
    conv = conversation_from_trajectory(traj, SYSTEM, TOOLS)
    assert conv.messages[-2] == {"role": "user", "content": FINAL_NUDGE}
    assert conv.turns[-1].tools is None and conv.turns[0].tools == TOOLS
    passes = plan_passes(tiny_tokenizer(), conv)
    assert [p.steps for p in passes] == [[1], [3]]
    assert "# Tools" in passes[0].text and "# Tools" not in passes[1].text


class _Scripted:
    """A handle whose replies are scripted; it records what the agent loop sent."""

    capabilities = frozenset({Capability.GENERATE, Capability.TOOL_CALLS})

    def __init__(self, replies, backend="hf_local"):
        self.backend = backend
        self.spec = ModelSpec("scripted", "test", tool_call_style="hermes")
        self.replies = list(replies)
        self.sent = []

    def chat(self, messages, tools=None, **kw):
        self.sent.append((copy.deepcopy(messages), copy.deepcopy(tools)))
        return self.replies.pop(0)


def _calc(expression: str) -> str:
    if "/0" in expression:
        raise ZeroDivisionError("division by zero")
    return "12"


def test_rebuilt_conversation_is_exactly_what_the_agent_sent_hermes():
    bad = '<tool_call>\n{"name": "calculator", "arguments": {"expression": }\n</tool_call>'
    div = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1/0"}}\n</tool_call>'
    replies = [ChatTurn(text=CALL), ChatTurn(text=bad), ChatTurn(text=div), ChatTurn(text=div), ChatTurn(text=ANSWER)]
    handle = _Scripted(replies)
    tools = [
        Tool("calculator", "Evaluate.", {"type": "object", "properties": {"expression": {"type": "string"}}}, _calc)
    ]
    agent = evalrx.Agent(handle, tools, max_turns=4, system=SYSTEM, block_repeat_calls=True, force_final_answer=True)
    traj = evalrx.Trajectory.from_dict(json.loads(agent.run("What is 3*4?").to_json()))  # as stored
    conv = conversation_from_trajectory(traj, SYSTEM, tools)
    assert conv.style == "hermes" and len(conv.turns) == len(handle.sent) == 5
    for turn, (messages, sent_tools) in zip(conv.turns, handle.sent):
        assert conv.messages[: turn.message_index] == messages
        assert turn.tools == sent_tools
    kinds = [m["kind"] for m in conv.message_info]
    assert kinds == [
        "system",
        "prompt",
        "assistant",
        "tool",
        "assistant",
        "parse_error",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "nudge",
        "assistant",
    ]


def test_rebuilt_conversation_is_exactly_what_the_agent_sent_openai():
    wire = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "3*4"}'},
    }
    handle = _Scripted([ChatTurn(text="", tool_calls=[wire]), ChatTurn(text=ANSWER)], backend="api")
    tools = [
        Tool("calculator", "Evaluate.", {"type": "object", "properties": {"expression": {"type": "string"}}}, _calc)
    ]
    traj = evalrx.Agent(handle, tools, system=SYSTEM).run("What is 3*4?")
    conv = conversation_from_trajectory(traj, SYSTEM, tools)
    assert conv.style == "openai"
    for turn, (messages, _) in zip(conv.turns, handle.sent):
        assert conv.messages[: turn.message_index] == messages


def test_tool_alternative_probability_matches_a_forward_pass_on_the_alternative():
    handle = _handle()
    chosen, alt = _hermes_trajectory("calculator"), _hermes_trajectory("search")
    res = ToolDecisionAnalyzer().run_trajectory(handle, chosen, tools=TOOLS, system=SYSTEM)
    i = next(k for k, d in enumerate(res.decisions) if d["kind"] == "tool_name")
    d = res.decisions[i]
    assert d["candidates"] == ["calculator", "search"] and d["step"] == 1
    ids_c, ids_a = _full_ids(handle, chosen), _full_ids(handle, alt)
    split = next(j for j, (a, b) in enumerate(zip(ids_c, ids_a)) if a != b)
    start = d["token_index"]
    assert start == split  # two names: they part at the first differing token
    lp_c, lp_a = _log_softmax(handle, ids_c), _log_softmax(handle, ids_a)
    want_c = sum(lp_c[j - 1, ids_c[j]].item() for j in range(start, split + 1))
    want_a = sum(lp_a[j - 1, ids_a[j]].item() for j in range(start, split + 1))
    np.testing.assert_allclose(res.cand_logprob[i, -1], [want_c, want_a], atol=1e-4)
    np.testing.assert_allclose(res.margin[i, -1], want_c - want_a, atol=1e-4)
    assert sum(res.probabilities(i).values()) <= 1.0 + 1e-6
    assert res.cand_logprob.shape[1] == 3  # embeddings + 2 layers
    arg = next(k for k, d in enumerate(res.decisions) if d["kind"] == "arg_value")
    # Argument: measured at the value token with the smallest margin (its token against the best other one).
    text = handle.render(conversation_from_trajectory(chosen, SYSTEM, TOOLS).messages, TOOLS)
    _, offsets = tokenize_with_offsets(handle.tokenizer, text)
    v0 = text.index('"3*4"') + 1
    value = tokens_overlapping(offsets, v0, v0 + 3)
    margins = []
    for j in value:
        row = lp_c[j - 1].clone()
        own = row[ids_c[j]].item()
        row[ids_c[j]] = -float("inf")
        margins.append((own - row.max().item(), own, row.max().item()))
    piece = int(np.argmin([m for m, _, _ in margins]))
    assert len(value) > 1 and piece > 0  # the near miss is past the first token: where the first-token reading missed
    d = res.decisions[arg]
    assert (d["token_index"], d["piece"], d["chosen"]) == (value[piece], piece, "3*4")
    assert d["token"] == handle.tokenizer.decode([ids_c[value[piece]]]) and d["candidates"][0] == d["token"]
    np.testing.assert_allclose(res.cand_logprob[arg, -1, :2], margins[piece][1:], atol=1e-5)
    np.testing.assert_allclose(res.margin[arg, -1], margins[piece][0], atol=1e-4)
    assert res.alternative(arg)[0] == handle.tokenizer.decode([int(res.runner_up_id[arg, -1])])
    name = res.decisions[i]  # a tool name is measured where the names part, and says so too
    assert (name["piece"], name["token"]) == (0, handle.tokenizer.decode([ids_c[split]]))


def test_enum_argument_values_are_candidates_like_tool_names():
    tools = copy.deepcopy(TOOLS)
    tools[0]["function"]["parameters"]["properties"]["expression"]["enum"] = ["3*4", "7+1"]
    res = ToolDecisionAnalyzer().run_trajectory(_handle(), _hermes_trajectory(), tools=tools, system=SYSTEM)
    arg = next(d for d in res.decisions if d["kind"] == "arg_value")
    assert arg["candidates"] == ["3*4", "7+1"] and arg["arg"] == "expression"


def test_attention_rows_sum_to_one_respect_causality_and_match_eager_weights():
    handle = _handle("llama")
    traj = _hermes_trajectory()
    res = AttentionAnalyzer().run_trajectory(handle, traj, tools=TOOLS, system=SYSTEM)
    assert handle.model.config._attn_implementation == "sdpa"  # the rows were rebuilt: the kernel never changed
    np.testing.assert_allclose(res.mass.sum(-1), 1.0, atol=1e-5)
    labels = [s["label"] for s in res.segments]
    assert labels == ["system", "prompt@0", "turn@1", "observation@2", "turn@3"]
    steps = res.labels["label_step"]
    first = [i for i, s in enumerate(steps) if s == 1]
    assert first and np.all(res.mass[first][:, :, labels.index("observation@2")] == 0)  # causal
    kinds, by_kind = res.by_kind()
    assert by_kind[first][:, :, kinds.index("current")].min() > 0
    # Independent check: eager attention weights summed over the user turn's tokens.
    conv = conversation_from_trajectory(traj, SYSTEM, TOOLS)
    text = handle.render(conv.messages, TOOLS)
    ids, offsets = tokenize_with_offsets(handle.tokenizer, text)
    user = tokens_overlapping(offsets, text.index("<|im_start|>user"), text.index("<|im_start|>assistant"))
    eager = make_tiny_model("llama", attn_implementation="eager")
    with torch.no_grad():
        att = eager(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    p = int(res.positions[first[0]])
    for layer in range(len(att)):
        want = att[layer][0, :, p, user].mean(0).sum().item()
        assert res.mass[first[0], layer, labels.index("prompt@0")] == pytest.approx(want, abs=1e-5)


def test_token_uncertainty_is_teacher_forced_on_the_generated_tokens():
    handle = _handle("gemma")
    traj = _hermes_trajectory()
    res = TokenUncertaintyAnalyzer().run_trajectory(handle, traj, tools=TOOLS, system=SYSTEM)
    assert res.steps() == [1, 3]
    assert "".join(res.for_step(1)["tokens"]) == CALL + "<|im_end|>"
    assert "".join(res.for_step(3)["tokens"]) == ANSWER + "<|im_end|>"
    ids = _full_ids(handle, traj)
    lp = _log_softmax(handle, ids)
    pos = torch.tensor(res.position.tolist())
    want = lp[pos - 1, torch.tensor(ids)[pos]]
    np.testing.assert_allclose(res.logprob, want.numpy(), atol=1e-5)
    logits = handle.model(input_ids=torch.tensor([ids])).logits[0].detach()[pos - 1]
    ranks = (logits > logits.gather(-1, torch.tensor(ids)[pos][:, None])).sum(-1).numpy()  # ties: by logit
    np.testing.assert_array_equal(res.rank, ranks)
    ent = -(lp[pos - 1].exp() * lp[pos - 1]).sum(-1).numpy()
    np.testing.assert_allclose(res.entropy, ent, atol=1e-4)


def test_uncertainty_reads_api_logprobs_when_there_is_no_local_model():
    traj = _api_trajectory()
    traj.steps[3].span["logprobs"] = [
        {
            "token": "The",
            "logprob": -0.1,
            "top_logprobs": [{"token": "The", "logprob": -0.1}, {"token": "A", "logprob": -2.5}],
        },
        {
            "token": " answer",
            "logprob": -1.2,
            "top_logprobs": [{"token": " result", "logprob": -0.5}, {"token": " answer", "logprob": -1.2}],
        },
        {"token": " is", "logprob": -0.3},
    ]
    api = evalrx.load("gpt-4o-mini", backend="api", base_url="http://127.0.0.1:9", api_key="unused")
    for res in (
        TokenUncertaintyAnalyzer().run_trajectory(None, traj),
        TokenUncertaintyAnalyzer().run_trajectory(api, traj),
    ):
        assert res.source == "api_logprobs" and res.tokens == ["The", " answer", " is"]
        np.testing.assert_allclose(res.logprob, [-0.1, -1.2, -0.3], atol=1e-6)
        assert res.rank.tolist() == [0, 1, -1] and res.step.tolist() == [3, 3, 3]
        p = np.exp([-0.1, -2.5])
        rest = 1 - p.sum()
        assert res.entropy[0] == pytest.approx(-(p * np.log(p)).sum() - rest * np.log(rest), rel=1e-5)
        assert np.isnan(res.entropy[2])
    assert uncertainty_from_logprobs(_api_trajectory()).logprob.size == 0


def test_replay_of_an_api_trajectory_scores_the_local_models_own_rendering():
    handle = _handle()
    replay = ReplayAnalyzer(parts=("token_uncertainty", "tool_decision")).run_trajectory(
        handle, _api_trajectory(), tools=TOOLS, system=SYSTEM
    )
    assert replay.source_model == "gpt-4o-mini on api" and "hf_local" in replay.scoring_model
    unc = replay.parts["token_uncertainty"]
    # The demo template writes the native call as a Hermes block: the same tokens a Hermes run produced.
    assert "".join(unc.for_step(1)["tokens"]) == CALL + "<|im_end|>"
    own = TokenUncertaintyAnalyzer().run_trajectory(handle, _hermes_trajectory(), tools=TOOLS, system=SYSTEM)
    np.testing.assert_allclose(unc.logprob, own.logprob, atol=1e-5)
    assert replay.step.tolist() == [1, 3]
    np.testing.assert_allclose(replay.sum_logprob[0], unc.for_step(1)["logprob"].sum(), rtol=1e-5)
    names = [d["chosen"] for d in replay.parts["tool_decision"].decisions if d["kind"] == "tool_name"]
    assert names == ["calculator"]


def _store_round_trip(result):
    buf = io.BytesIO()
    np.savez(buf, **result.to_arrays())
    buf.seek(0)
    return result_from_arrays(dict(np.load(buf, allow_pickle=False)), json.loads(json.dumps(result.meta)))


def test_every_trajectory_result_survives_a_store_round_trip():
    handle = _handle()
    traj = _hermes_trajectory()
    results = [
        LogitLensAnalyzer(top_k=4).run_trajectory(handle, traj, tools=TOOLS, system=SYSTEM),
        ToolDecisionAnalyzer().run_trajectory(handle, traj, tools=TOOLS, system=SYSTEM),
        AttentionAnalyzer().run_trajectory(handle, traj, tools=TOOLS, system=SYSTEM),
        TokenUncertaintyAnalyzer().run_trajectory(handle, traj, tools=TOOLS, system=SYSTEM),
        ReplayAnalyzer(parts=("token_uncertainty", "logit_lens")).run_trajectory(
            handle, traj, tools=TOOLS, system=SYSTEM
        ),
    ]
    for res in results:
        back = _store_round_trip(res)
        assert type(back) is type(res)
        a, b = res.to_arrays(), back.to_arrays()
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{res.result_type}:{key}")
            assert a[key].dtype == b[key].dtype
        assert back.meta == json.loads(json.dumps(res.meta))
    lens = _store_round_trip(results[0])
    assert lens.kinds == results[0].kinds and lens.labels["label_arg"] == results[0].labels["label_arg"]


def test_stored_lens_is_at_most_a_fiftieth_of_a_full_vocabulary_lens():
    handle = evalrx.wrap(make_tiny_model("qwen2", vocab_size=4096), tiny_tokenizer())
    lens = LogitLensAnalyzer(top_k=10).run_trajectory(handle, _hermes_trajectory(), tools=TOOLS, system=SYSTEM)
    full_fp32 = lens.topk_ids.shape[0] * len(lens.positions) * 4096 * 4
    assert lens.stored_nbytes() * 50 <= full_fp32
    assert all(a.dtype.itemsize <= 4 for a in lens.to_arrays().values())
