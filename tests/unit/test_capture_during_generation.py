"""Capture during generation: the white-box analyzers read the agent's own generate calls.

Real bundled demo model (`evalrx-tiny`, fp32, greedy), real agent runs of demo cases with
`chat_kwargs={"capture": ...}`: every array `analyze` builds from the captures must equal the
teacher-forced `analyze` of the same trajectory within 1e-4 (and the integer arrays exactly),
with no forward run for a pass the captures cover; a capture that does not match the rebuilt
conversation, another model's capture, a stored trajectory, all fall back to the teacher-forced
pass and say so in the result's meta. Under sdpa the attention rows come from a kernel that adds
the newest position's softmax row to sdpa's output: the same rows eager attention gives."""

from __future__ import annotations

import numpy as np
import pytest
import torch  # noqa: E402  (the local extra is part of `make test`; a missing torch must fail)

import evalrx  # noqa: E402
from evalrx.analyzers import TrajectoryPlan, analyze  # noqa: E402
from evalrx.config import ModelConfig, RunConfig  # noqa: E402
from evalrx.core.case import Trajectory  # noqa: E402
from evalrx.internals import RebuiltAttention  # noqa: E402
from evalrx.internals.passes import local_model  # noqa: E402
from evalrx.models.agent import Agent, drop_generation_captures, generation_captures  # noqa: E402
from evalrx.runner import analysis  # noqa: E402
from evalrx.suites import load_cases  # noqa: E402
from evalrx.tools import get_tools  # noqa: E402

ALL_FOUR = ["logit_lens", "tool_decision", "attention", "token_uncertainty"]
TENSORS = ["logit_lens", "tool_decision", "token_uncertainty"]  # what the hidden states serve


def dense(rows):
    """A capture's attention rows as one tensor (a `RebuiltAttention` rebuilds them all)."""
    return rows.full() if isinstance(rows, RebuiltAttention) else rows


@pytest.fixture(scope="module")
def sdpa():
    return evalrx.load("evalrx-tiny")  # as the worker loads it: generation runs sdpa attention


@pytest.fixture(scope="module")
def eager():
    return evalrx.load("evalrx-tiny", want=["attention"])


def _run(handle, suite: str, index: int, capture=True, **agent_kwargs) -> tuple:
    case = load_cases(suite)[index]
    tools = get_tools(["calculator", "lookup"], case=case)
    agent_kwargs.setdefault("max_turns", 4)
    traj = Agent(handle, tools, chat_kwargs={"capture": capture}, **agent_kwargs).run(case)
    return traj, [t.to_openai() for t in tools]


def _runs(handle) -> list:
    """Lookups and two-step lookups (one shared pass each) and a forced final answer (a pass of its own)."""
    runs = [_run(handle, "demo/lookup_easy", i) for i in range(3)]
    runs += [_run(handle, "demo/two_step", i) for i in range(2)]
    runs.append(_run(handle, "demo/two_step", 0, max_turns=1, force_final_answer=True))
    return runs


@pytest.fixture(scope="module")
def sdpa_runs(sdpa):
    return _runs(sdpa)


@pytest.fixture(scope="module")
def eager_runs(eager):
    return _runs(eager)


def _assert_close(tf, gen, atol=1e-4) -> None:
    """Every array equal within `atol` (integers exactly), NaN where the other has NaN."""
    assert type(tf) is type(gen)
    a, b = tf.to_arrays(), gen.to_arrays()
    assert a.keys() == b.keys() and a
    for key in a:
        msg = f"{tf.result_type}:{key}"
        assert a[key].shape == b[key].shape and a[key].dtype == b[key].dtype, msg
        if a[key].dtype.kind == "f":
            np.testing.assert_allclose(b[key], a[key], atol=atol, rtol=0, err_msg=msg)
        else:
            np.testing.assert_array_equal(b[key], a[key], err_msg=msg)


def _count_forwards(model):
    calls: list = []
    return calls, model.register_forward_hook(lambda *args: calls.append(1))


def _fully_captured(handle, traj, tools) -> bool:
    """Whether every turn's capture lines up with the rebuilt conversation (a re-tokenized turn does not)."""
    plan = TrajectoryPlan.build(local_model(handle, "test"), traj, tools=tools)
    caps = generation_captures(traj)
    for p in plan.passes:
        for pt in p.turns:
            cap = caps[pt.step_idx]
            g0 = pt.gen_tokens[0]
            if p.ids[:g0] != cap.prompt_ids or p.ids[g0 : g0 + len(cap.fed_ids)] != cap.fed_ids:
                return False
    return True


# ---------------------------------------------------------------- the backend's capture


def test_chat_captures_the_hidden_states_a_teacher_forced_forward_has_at_the_generated_positions(sdpa):
    case = load_cases("demo/lookup_easy")[0]
    tools = [t.to_openai() for t in get_tools(["calculator", "lookup"], case=case)]
    messages = [{"role": "user", "content": case.inputs.prompt}]
    plain = sdpa.chat(messages, tools)
    turn = sdpa.chat(messages, tools, capture=True)
    assert plain.capture is None and turn.text == plain.text  # opt-in, and it does not change generation
    cap = turn.capture
    assert turn.finish_reason == "stop" and cap.generated_ids[-1] == sdpa.tokenizer.eos_token_id
    n_layers = sdpa.model.config.num_hidden_layers
    # One row per position that predicts a generated token: the prompt's last, then each one fed back.
    assert cap.hidden.shape == (n_layers + 1, len(cap.generated_ids), sdpa.model.config.hidden_size)
    assert cap.hidden.dtype == torch.float32 and cap.hidden.device.type == "cpu"
    assert cap.attn_implementation == "sdpa" and not cap.notes
    ids = cap.prompt_ids + cap.generated_ids
    from evalrx.internals import using_attention_implementation

    # The reference: eager attention's own maps.
    with torch.no_grad(), using_attention_implementation(sdpa.model, "eager"):
        out = sdpa.model(
            input_ids=torch.tensor([ids]), output_hidden_states=True, output_attentions=True, use_cache=False
        )
    assert sdpa.model.config._attn_implementation == "sdpa"
    p0 = cap.first_position
    forced = torch.stack([h[0, p0 : p0 + cap.n_positions] for h in out.hidden_states])
    torch.testing.assert_close(cap.hidden, forced, atol=2e-4, rtol=1e-5)
    # The model's own logits there, kept so a pass built from the capture does not unembed again.
    assert cap.logits.dtype == torch.float32 and cap.logits.device.type == "cpu"
    torch.testing.assert_close(cap.logits, out.logits[0, p0 : p0 + cap.n_positions].float(), atol=2e-4, rtol=1e-5)
    # Attention rows under sdpa: each position's head-averaged row, as eager attention gives it.
    rows = torch.stack([a[0, :, p0 : p0 + cap.n_positions, : len(ids) - 1].float().mean(0) for a in out.attentions])
    assert cap.attention.shape == rows.shape
    torch.testing.assert_close(dense(cap.attention), rows, atol=1e-5, rtol=1e-5)
    # Rebuilt only where read: any rows, in any order, are the same rows.
    assert isinstance(cap.attention, RebuiltAttention)
    torch.testing.assert_close(cap.attention[:, [2, 0]], rows[:, [2, 0]], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cap.attention[:, 1], rows[:, 1], atol=1e-5, rtol=1e-5)


def test_a_turn_cut_by_the_token_limit_runs_its_last_token_once_more(eager):
    """A rebuilt conversation closes a cut turn with the end-of-turn token: its predicting position is captured."""
    case = load_cases("demo/lookup_easy")[0]
    messages = [{"role": "user", "content": case.inputs.prompt}]
    turn = eager.chat(messages, None, capture=True, max_new_tokens=5)
    cap = turn.capture
    assert turn.finish_reason == "length" and len(cap.generated_ids) == 5
    assert cap.n_positions == 6 and cap.fed_ids == cap.generated_ids
    assert cap.attention.shape == (eager.model.config.num_hidden_layers, 6, len(cap.prompt_ids) + 5)
    ids = cap.prompt_ids + cap.generated_ids
    with torch.no_grad():
        out = eager.model(
            input_ids=torch.tensor([ids]), output_hidden_states=True, output_attentions=True, use_cache=False
        )
    p0 = cap.first_position
    forced = torch.stack([h[0, p0:] for h in out.hidden_states])
    torch.testing.assert_close(cap.hidden, forced, atol=2e-4, rtol=1e-5)
    # The extra step's logits too: one row per captured position.
    torch.testing.assert_close(cap.logits, out.logits[0, p0:].float(), atol=2e-4, rtol=1e-5)
    rows = torch.stack([a[0, :, p0:].float().mean(0) for a in out.attentions])  # [L, 6, T]
    torch.testing.assert_close(dense(cap.attention), rows, atol=1e-5, rtol=1e-5)


def test_capture_kinds_are_checked(sdpa):
    with pytest.raises(ValueError, match="capture="):
        sdpa.chat([{"role": "user", "content": "hi"}], None, capture=["logits"], max_new_tokens=2)
    turn = sdpa.chat([{"role": "user", "content": "hi"}], None, capture=["hidden_states"], max_new_tokens=2)
    assert turn.capture.hidden is not None and turn.capture.attention is None and not turn.capture.notes


# ---------------------------------------------------------------- the agent carries them, the store never sees them


def test_the_agent_keeps_each_turns_capture_on_the_trajectory_never_in_its_record(sdpa, sdpa_runs):
    for traj, _ in sdpa_runs:
        caps = generation_captures(traj)
        actors = [s.idx for s in traj.steps if s.role.value == "actor"]
        assert sorted(caps) == actors
        assert "capture" not in traj.to_json() and "hidden" not in traj.to_json()
        assert generation_captures(Trajectory.from_dict(traj.to_dict())) == {}
    plain, _ = _run(sdpa, "demo/lookup_easy", 0, capture=False)
    assert generation_captures(plain) == {}
    assert [s.content for s in plain.steps] == [s.content for s in sdpa_runs[0][0].steps]


# ---------------------------------------------------------------- analyze from the generation


def test_analyze_from_the_generation_equals_the_teacher_forced_pass_without_running_the_model(eager, eager_runs):
    """Eager generation: all four analyzers come from the captures, no forward runs, every array within 1e-4."""
    whole = 0
    for traj, tools in eager_runs:
        full = _fully_captured(eager, traj, tools)
        calls, hook = _count_forwards(eager.model)
        try:
            gen = analyze(eager, traj, ALL_FOUR, tools=tools)
        finally:
            hook.remove()
        tf = analyze(eager, traj, ALL_FOUR, tools=tools, captures=None)
        for name in ALL_FOUR:
            _assert_close(tf[name], gen[name])
            assert tf[name].info["source"] == "teacher_forced"
            if full:
                assert gen[name].info["source"] == "generation" and "source_notes" not in gen[name].info
        assert gen["token_uncertainty"].source == gen["token_uncertainty"].meta["source"]
        if full:
            whole += 1
            assert calls == []  # no forward at all: every pass was built from the captures
    assert whole >= 4


def test_on_an_sdpa_model_attention_comes_from_the_generation_too(sdpa, sdpa_runs):
    """Under sdpa the newest position's attention row is computed beside the kernel's output: all four
    analyzers come from the captures, no forward runs, every array within 1e-4 of the eager teacher-forced pass."""
    whole = 0
    for traj, tools in sdpa_runs:
        full = _fully_captured(sdpa, traj, tools)
        calls, hook = _count_forwards(sdpa.model)
        try:
            gen = analyze(sdpa, traj, ALL_FOUR, tools=tools)
        finally:
            hook.remove()
        tf = analyze(sdpa, traj, ALL_FOUR, tools=tools, captures=None)
        for name in ALL_FOUR:
            _assert_close(tf[name], gen[name])
        if full:
            whole += 1
            assert calls == [] and {gen[n].info["source"] for n in ALL_FOUR} == {"generation"}
    assert whole >= 4
    assert sdpa.model.config._attn_implementation == "sdpa"  # the capture's kernel was switched back


def test_sdpa_and_eager_generation_capture_the_same_attention_rows(sdpa, eager, sdpa_runs, eager_runs):
    for (ts, _), (te, _) in zip(sdpa_runs, eager_runs):
        assert [s.content for s in ts.steps] == [s.content for s in te.steps]  # the kernel changes no token
        cs, ce = generation_captures(ts), generation_captures(te)
        assert cs.keys() == ce.keys() and cs
        for step in cs:
            assert cs[step].attention is not None and cs[step].attention.shape == ce[step].attention.shape
            torch.testing.assert_close(dense(cs[step].attention), dense(ce[step].attention), atol=1e-5, rtol=0)


def test_without_attention_an_sdpa_run_needs_no_forward(sdpa, sdpa_runs):
    for traj, tools in sdpa_runs:
        if not _fully_captured(sdpa, traj, tools):
            continue
        calls, hook = _count_forwards(sdpa.model)
        try:
            gen = analyze(sdpa, traj, TENSORS, tools=tools)
        finally:
            hook.remove()
        assert calls == [] and {r.info["source"] for r in gen.values()} == {"generation"}


def test_a_pass_built_from_the_captures_reads_their_logits_instead_of_unembedding_again(sdpa, sdpa_runs):
    """The kept logits give the numbers the unembedding of the captured last layer gives, with fewer rows unembedded."""
    import dataclasses

    local = local_model(sdpa, "test")
    rows: list = []
    hook = local.parts.unembed.register_forward_hook(lambda m, args, out: rows.append(out.numel() // out.shape[-1]))
    compared = 0
    try:
        for traj, tools in sdpa_runs:
            if not _fully_captured(sdpa, traj, tools):
                continue
            caps = generation_captures(traj)
            assert all(c.logits is not None and c.logits.shape[0] == c.n_positions for c in caps.values())
            rows.clear()
            kept = analyze(sdpa, traj, TENSORS, tools=tools)
            with_logits = sum(rows)
            rows.clear()
            bare = {k: dataclasses.replace(c, logits=None) for k, c in caps.items()}
            unembedded = analyze(sdpa, _with_captures(traj, bare), TENSORS, tools=tools)
            for name in TENSORS:
                _assert_close(unembedded[name], kept[name])
                assert kept[name].info["source"] == unembedded[name].info["source"] == "generation"
            assert with_logits < sum(rows)
            compared += 1
    finally:
        hook.remove()
    assert compared >= 3


def test_per_step_passes_are_built_from_the_captures_too(eager, eager_runs):
    names = [{"name": "logit_lens", "mode": "per_step"}, {"name": "token_uncertainty", "mode": "per_step"}]
    traj, tools = eager_runs[3]  # two turns: two passes of their own
    assert _fully_captured(eager, traj, tools)
    gen = analyze(eager, traj, names, tools=tools)
    tf = analyze(eager, traj, names, tools=tools, captures=None)
    assert gen["logit_lens"].info["plan"]["mode"] == "per_step"
    for name in ("logit_lens", "token_uncertainty"):
        _assert_close(tf[name], gen[name])
        assert gen[name].info["source"] == "generation"


# ---------------------------------------------------------------- falling back


def _with_captures(traj, captures: dict) -> Trajectory:
    copy = Trajectory.from_dict(traj.to_dict())
    setattr(copy, "_generation_captures", captures)
    return copy


def test_a_capture_that_differs_from_the_rebuilt_conversation_falls_back_to_the_teacher_forced_pass(eager, eager_runs):
    import dataclasses

    traj, tools = eager_runs[3]
    caps = generation_captures(traj)
    last = max(caps)
    tampered = dict(caps)
    prompt = list(caps[last].prompt_ids)
    prompt[5] = (prompt[5] + 1) % eager.model.config.vocab_size  # the model "saw" another prompt
    tampered[last] = dataclasses.replace(caps[last], prompt_ids=prompt)
    gen = analyze(eager, _with_captures(traj, tampered), ALL_FOUR, tools=tools)
    tf = analyze(eager, traj, ALL_FOUR, tools=tools, captures=None)
    for name in ALL_FOUR:
        _assert_close(tf[name], gen[name], atol=0)  # the very same teacher-forced pass
        assert gen[name].info["source"] == "teacher_forced"
        assert "differs from the prompt the model saw (token 5" in gen[name].info["source_notes"][0]


def test_a_missing_capture_or_another_models_capture_is_not_used(sdpa, eager, eager_runs):
    traj, tools = eager_runs[0]
    caps = generation_captures(traj)
    gen = analyze(eager, _with_captures(traj, {k: v for k, v in caps.items() if k != min(caps)}), TENSORS, tools=tools)
    assert {r.info["source"] for r in gen.values()} == {"teacher_forced"}
    assert "has no generation capture" in gen["logit_lens"].info["source_notes"][0]
    other = analyze(sdpa, traj, TENSORS, tools=tools)  # same weights, another model object
    assert "captured on another model" in other["logit_lens"].info["source_notes"][0]


def test_a_capture_that_cannot_be_read_costs_a_forward_not_the_analysis(eager, eager_runs):
    import dataclasses

    traj, tools = eager_runs[0]
    caps = generation_captures(traj)
    broken = {k: dataclasses.replace(c, hidden=c.hidden[..., :7]) for k, c in caps.items()}  # wrong width
    gen = analyze(eager, _with_captures(traj, broken), TENSORS, tools=tools)
    tf = analyze(eager, traj, TENSORS, tools=tools, captures=None)
    for name in TENSORS:
        _assert_close(tf[name], gen[name], atol=0)
        assert gen[name].info["source"] == "teacher_forced"
        assert "reading the captures failed" in gen[name].info["source_notes"][0]


def test_a_stored_trajectory_is_analysed_teacher_forced(eager, eager_runs):
    traj, tools = eager_runs[0]
    stored = Trajectory.from_dict(traj.to_dict())
    got = analyze(eager, stored, ALL_FOUR, tools=tools)
    assert {r.info["source"] for r in got.values()} == {"teacher_forced"}
    assert all("source_notes" not in r.info for r in got.values())


# ---------------------------------------------------------------- the runner


def test_the_runner_switches_capture_on_for_local_white_box_runs_only(sdpa, eager):
    base = {"max_turns": 4, "chat_kwargs": None}
    assert analysis.capture_kinds(ALL_FOUR) == {"hidden_states", "attention"}
    assert analysis.capture_kinds(["token_uncertainty", "replay"]) == {"hidden_states"}
    got = analysis.with_capture(base, eager, ALL_FOUR)
    assert got["chat_kwargs"] == {"capture": ["attention", "hidden_states"]} and got["max_turns"] == 4
    # sdpa keeps attention rows too (the newest position's, beside the kernel).
    assert analysis.with_capture(base, sdpa, ALL_FOUR)["chat_kwargs"] == {"capture": ["attention", "hidden_states"]}

    class FlashLike:  # a kernel that gives no rows: attention keeps its teacher-forced pass, so no capture
        captures_attention = False

        def chat(self, messages, tools=None, *, capture=False):
            raise AssertionError("not called")

    assert analysis.with_capture(base, FlashLike(), ALL_FOUR) == base
    got = analysis.with_capture(base, sdpa, ["logit_lens", "tool_decision", "token_uncertainty"])
    assert got["chat_kwargs"] == {"capture": ["hidden_states"]}
    assert analysis.with_capture(base, sdpa, ["replay"]) == base  # nothing reads the generation
    assert analysis.with_capture(base, sdpa, []) == base
    kept = analysis.with_capture({"chat_kwargs": {"capture": False}}, sdpa, ALL_FOUR)
    assert kept["chat_kwargs"] == {"capture": False}  # a run's own choice stands

    class ApiLike:
        def chat(self, messages, tools=None, *, max_new_tokens=None, logprobs=False):
            raise AssertionError("not called")

    assert analysis.with_capture(base, ApiLike(), ALL_FOUR) == base


def test_the_runners_analyzers_read_the_captures_then_release_them(eager):
    case = load_cases("demo/lookup_easy")[1]
    tools = get_tools(["calculator", "lookup"], case=case)
    kwargs = analysis.with_capture({"max_turns": 4}, eager, ALL_FOUR)
    from evalrx.models.agent import run_case

    traj = run_case(eager, case, tools, **kwargs)
    assert generation_captures(traj)
    schemas = [t.to_openai() for t in tools]
    ctx = analysis.CaseContext(
        handle=eager,
        case=case,
        trajectory=traj,
        tools=tools,
        tool_schemas=schemas,
        system=None,
        run=RunConfig(model=ModelConfig("evalrx-tiny")),
    )
    records = analysis.run_all(analysis.resolve(ALL_FOUR), ctx)
    assert [r.analyzer for r in records] == ALL_FOUR and not any("error" in r.meta for r in records)
    assert generation_captures(traj) == {}  # released with the case
    tf = analyze(eager, traj, ALL_FOUR, tools=schemas, captures=None)
    for rec in records:
        assert rec.meta["info"]["source"] == "generation" and "source_notes" not in rec.meta["info"]
        expected = tf[rec.analyzer].to_arrays()
        assert rec.arrays.keys() == expected.keys()
        for key, value in rec.arrays.items():
            if value.dtype.kind == "f":
                np.testing.assert_allclose(value, expected[key], atol=1e-4, rtol=0, err_msg=key)
            else:
                np.testing.assert_array_equal(value, expected[key], err_msg=key)
    drop_generation_captures(traj)  # releasing twice is harmless


def test_under_sdpa_a_cut_turns_rows_are_rebuilt_after_generation_as_eager_gives_them(sdpa):
    """The rows of an sdpa run come from the captured states and the KV cache after generation (no per-step
    work); for a turn cut by the token limit the extra step's position is there too."""
    from evalrx.internals import using_attention_implementation

    case = load_cases("demo/lookup_easy")[0]
    cap = sdpa.chat([{"role": "user", "content": case.inputs.prompt}], None, capture=True, max_new_tokens=5).capture
    assert cap.attn_implementation == "sdpa" and cap.n_positions == 6 and not cap.notes
    ids = cap.prompt_ids + cap.generated_ids
    with torch.no_grad(), using_attention_implementation(sdpa.model, "eager"):
        out = sdpa.model(input_ids=torch.tensor([ids]), output_attentions=True, use_cache=False)
    rows = torch.stack([a[0, :, cap.first_position :].float().mean(0) for a in out.attentions])  # [L, 6, T]
    torch.testing.assert_close(dense(cap.attention), rows, atol=1e-5, rtol=1e-5)


def test_attention_alone_under_sdpa_comes_from_the_row_kernel(sdpa):
    """Without hidden states to rebuild queries from, the registered kernel adds each step's newest row."""
    from evalrx.internals import using_attention_implementation

    case = load_cases("demo/lookup_easy")[1]
    cap = sdpa.chat([{"role": "user", "content": case.inputs.prompt}], None, capture=["attention"]).capture
    assert cap.hidden is None and cap.attention is not None and not cap.notes
    assert sdpa.model.config._attn_implementation == "sdpa"  # switched back after the call
    ids = cap.prompt_ids + cap.generated_ids
    with torch.no_grad(), using_attention_implementation(sdpa.model, "eager"):
        out = sdpa.model(input_ids=torch.tensor([ids]), output_attentions=True, use_cache=False)
    p0 = cap.first_position
    rows = torch.stack([a[0, :, p0 : p0 + cap.n_positions, : len(ids) - 1].float().mean(0) for a in out.attentions])
    torch.testing.assert_close(dense(cap.attention), rows, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("style", ["llama3", "mistral", "qwen3"])
def test_rows_rebuilt_after_generation_match_eager_on_each_family(style):
    """Llama, Mistral and Qwen3 (q norm) tiny models under sdpa: the rebuilt rows are eager attention's."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tiny_models import make_family_model

    from evalrx.internals import using_attention_implementation

    model, tok = make_family_model(style)
    handle = evalrx.wrap(model.eval(), tok)
    assert handle.model.config._attn_implementation == "sdpa"
    cap = handle.chat([{"role": "user", "content": "What is 3*4?"}], None, capture=True, max_new_tokens=6).capture
    assert cap.attention is not None and not cap.notes
    ids = cap.prompt_ids + cap.generated_ids
    with torch.no_grad(), using_attention_implementation(model, "eager"):
        out = model(input_ids=torch.tensor([ids]), output_attentions=True, use_cache=False)
    p0 = cap.first_position
    rows = torch.stack(
        [a[0, :, p0 : p0 + cap.n_positions, : p0 + cap.n_positions].float().mean(0) for a in out.attentions]
    )
    torch.testing.assert_close(dense(cap.attention), rows, atol=1e-5, rtol=1e-5)


def _shape(plan) -> list:
    return [(p.ids, p.offsets, p.text, [(t.step_idx, t.gen_chars, t.gen_tokens) for t in p.turns]) for p in plan.passes]


def test_the_plan_takes_the_prompts_the_generation_tokenized_and_equals_the_plan_without_them(
    sdpa, sdpa_runs, monkeypatch
):
    from evalrx.internals.passes import planning

    tokenized: list = []
    real = planning._batch_ids
    monkeypatch.setattr(planning, "_batch_ids", lambda tok, texts: tokenized.extend(texts) or real(tok, texts))
    local = local_model(sdpa, "test")
    for traj, tools in sdpa_runs:
        tokenized.clear()
        lent = TrajectoryPlan.build(local, traj, tools=tools, captures=generation_captures(traj))
        assert tokenized == []  # every shared turn's prompt came from its capture
        own = TrajectoryPlan.build(local, traj, tools=tools)
        assert tokenized  # without captures the prompts are tokenized
        assert _shape(lent) == _shape(own)


def test_capturing_and_teacher_forcing_leave_the_model_on_torchs_plain_call_path():
    """Transformers' own hidden-state collection installs module hooks for good (every later forward takes
    torch's slower hooked path); capture and the teacher-forced pass wrap the modules' forward for the call only."""
    handle = evalrx.load("evalrx-tiny")
    turn = handle.chat([{"role": "user", "content": "What is 2 + 3?"}], capture=["hidden_states", "attention"])
    assert turn.capture.hidden is not None and turn.capture.attention is not None
    out = handle.forward(text="What is 2 + 3?")
    assert len(out.hidden_states) == handle.parts.num_layers + 1
    torch.testing.assert_close(handle.parts.unembed(out.hidden_states[-1]), out.logits)
    modules = list(handle.model.modules())
    assert not [m for m in modules if m._forward_hooks or m._forward_pre_hooks]
    assert not [m for m in modules if "forward" in m.__dict__]
    assert not getattr(handle.model, "_output_capturing_hooks_installed", False)
