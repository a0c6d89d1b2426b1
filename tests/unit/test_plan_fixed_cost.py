"""A white-box case's fixed cost on the demo model: each conversation prefix is rendered once (the generation's
renderings serve the analyses), and a turn the tokenizer would split otherwise than the model generated it is
planned on the generated tokens (so its captures serve it, with no teacher-forced forward)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import evalrx
from evalrx.analyzers import TrajectoryPlan, analyze
from evalrx.core import Step, StepRole, Trajectory
from evalrx.internals.passes import capture_problem, local_model
from evalrx.models.agent import Agent
from evalrx.suites import load_cases
from evalrx.tools import get_tools

ALL_FOUR = ["logit_lens", "tool_decision", "attention", "token_uncertainty"]


@pytest.fixture(scope="module")
def handle():
    return evalrx.load("evalrx-tiny")


def test_a_case_renders_each_prefix_once_and_encodes_what_the_template_tokenizes(handle, monkeypatch):
    tok = handle.tokenizer
    inner = tok.apply_chat_template
    rendered: list = []

    def spy(messages, *args, **kwargs):
        rendered.append(json.dumps([messages, kwargs.get("tools"), kwargs.get("add_generation_prompt")], default=str))
        return inner(messages, *args, **kwargs)

    monkeypatch.setattr(tok, "apply_chat_template", spy)
    case = load_cases("demo/lookup_easy")[0]
    tools = get_tools(["calculator", "lookup"], case=case)
    traj = Agent(handle, tools, chat_kwargs={"capture": True}).run(case)
    schemas = [t.to_openai() for t in tools]
    generation = len(rendered)
    results = analyze(handle, traj, ALL_FOUR, tools=schemas)
    assert set(results) == set(ALL_FOUR)
    assert generation == 2  # a call turn and an answer turn
    assert len(rendered) == len(set(rendered)), "a prefix was rendered twice"
    assert len(rendered) <= 6  # was 8: the plan rendered the generation's prompts again
    # The text model's prompt ids are its rendered text, tokenized: what the template's own tokenizing gives.
    msgs = [{"role": "user", "content": case.inputs.prompt}]
    ids = handle.encode_messages(msgs, schemas, add_generation_prompt=True)["input_ids"]
    assert (
        ids.tolist()
        == inner(msgs, tools=schemas, add_generation_prompt=True, return_tensors="pt")["input_ids"].tolist()
    )


def test_a_turn_generated_in_other_tokens_than_its_text_retokenizes_to_is_planned_on_the_generated_ones(handle):
    local = local_model(handle, "test")
    tok = handle.tokenizer
    answer = "The founding year of Drogai is 1124."
    traj = Trajectory(
        "t",
        "When was Drogai founded?",
        steps=[Step(0, StepRole.USER, "When was Drogai founded?"), Step(1, StepRole.ACTOR, answer)],
        final_answer=answer,
    )
    plain = TrajectoryPlan.build(local, traj)
    tf_pass = plain.passes[0]
    g0, g1 = tf_pass.turns[0].gen_tokens
    # The same text in one token per character: a split the tokenizer never makes, as a model may generate it.
    spelled = [i for ch in answer for i in tok(ch, add_special_tokens=False)["input_ids"]]
    assert spelled != tf_pass.ids[g0 : g1 - 1] and tok.decode(spelled) == answer
    n_layers = local.parts.num_layers
    cap = SimpleNamespace(
        model_ref=id(local.hf),
        prompt_ids=tf_pass.ids[:g0],
        generated_ids=spelled,  # cut at its token limit: no end-of-turn token generated
        hidden=torch.zeros(n_layers + 1, len(spelled) + 1, 8),
        attention=None,
        notes=[],
        fed_ids=spelled,
        n_positions=len(spelled) + 1,
    )
    assert "differs from the generated tokens" in capture_problem(plain, 0, {1: cap}, hidden=True)
    plan = TrajectoryPlan.build(local, traj, captures={1: cap})
    got = plan.passes[0]
    assert got.ids[g0:] == spelled + [tf_pass.ids[g1 - 1]]  # the generated tokens, then the end-of-turn token
    assert got.turns[0].gen_tokens == (g0, len(got.ids))
    assert [got.text[s:e] for s, e in got.offsets[g0:-1]] == [tok.decode([i]) for i in spelled]
    assert capture_problem(plan, 0, {1: cap}, hidden=True) is None
    points = [got.text[slice(*p.char_span)] for p in plan.decisions(0) if p.kind == "answer"]
    assert "".join(points) == "TDrogai1124"  # the answer's values, on the generated tokens
