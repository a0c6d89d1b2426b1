"""`analyze`: several analyzers of a trajectory from ONE teacher-forced forward per planned pass.

Real bundled demo model (`evalrx-tiny`), real agent trajectories of demo cases: the shared
pass must give each analyzer exactly its own `run_trajectory` result, and must run the
model once per planned pass where the analyzers alone run it once each."""

from __future__ import annotations

import numpy as np
import pytest
import torch  # noqa: E402  (the local extra is part of `make test`; a missing torch must fail)

import evalrx  # noqa: E402
from evalrx.analyzers import (  # noqa: E402
    AttentionAnalyzer,
    LogitLensAnalyzer,
    TokenUncertaintyAnalyzer,
    ToolDecisionAnalyzer,
    TrajectoryPlan,
    analyze,
)
from evalrx.core import Capability, CapabilityError  # noqa: E402
from evalrx.internals import using_attention_implementation  # noqa: E402
from evalrx.internals.passes import local_model  # noqa: E402
from evalrx.models.agent import Agent  # noqa: E402
from evalrx.suites import load_cases  # noqa: E402
from evalrx.tools import get_tools  # noqa: E402

ALL_FOUR = ["logit_lens", "tool_decision", "attention", "token_uncertainty"]


@pytest.fixture(scope="module")
def handle():
    return evalrx.load("evalrx-tiny")


def _run(handle, suite: str, index: int, **agent_kwargs) -> tuple:
    case = load_cases(suite)[index]
    tools = get_tools(["calculator", "lookup"], case=case)
    traj = Agent(handle, tools, **agent_kwargs).run(case)
    return traj, [t.to_openai() for t in tools]


@pytest.fixture(scope="module")
def trajectories(handle):
    """Two lookup runs (one shared pass each) and a forced final answer (a second pass of its own)."""
    runs = [_run(handle, "demo/lookup_easy", 0), _run(handle, "demo/lookup_easy", 1)]
    runs.append(_run(handle, "demo/two_step", 0, max_turns=1, force_final_answer=True))
    return runs


def _n_passes(handle, traj, tools) -> int:
    return len(TrajectoryPlan.build(local_model(handle, "test"), traj, tools=tools).passes)


def _assert_same(alone, together, atol=1e-5, rtol=1e-7, ints=True) -> None:
    assert type(alone) is type(together)
    a, b = alone.to_arrays(), together.to_arrays()
    assert a.keys() == b.keys() and a
    for key in a:
        msg = f"{alone.result_type}:{key}"
        assert a[key].shape == b[key].shape and a[key].dtype == b[key].dtype, msg
        if a[key].dtype.kind == "f":
            np.testing.assert_allclose(b[key], a[key], atol=atol, rtol=rtol, err_msg=msg)
        elif ints:
            np.testing.assert_array_equal(b[key], a[key], err_msg=msg)


def _alone(handle, traj, tools) -> dict:
    return {
        "logit_lens": LogitLensAnalyzer(top_k=5).run_trajectory(handle, traj, tools=tools),
        "tool_decision": ToolDecisionAnalyzer().run_trajectory(handle, traj, tools=tools),
        "attention": AttentionAnalyzer().run_trajectory(handle, traj, tools=tools),
        "token_uncertainty": TokenUncertaintyAnalyzer().run_trajectory(handle, traj, tools=tools),
    }


NAMES = [{"name": "logit_lens", "top_k": 5}, "tool_decision", "attention", "token_uncertainty"]


def test_analyze_gives_every_analyzer_its_own_results_from_the_shared_pass(handle, trajectories):
    """Without attention the shared pass runs the model's own kernel: every array is the analyzer's own."""
    for traj, tools in trajectories:
        alone = _alone(handle, traj, tools)
        together = analyze(handle, traj, [n for n in NAMES if n != "attention"], tools=tools)
        assert list(together) == ["logit_lens", "tool_decision", "token_uncertainty"]
        for name, result in together.items():
            _assert_same(alone[name], result)
            assert result.meta == alone[name].meta
        assert together["logit_lens"].top_k == 5 and len(together["logit_lens"].positions) > 5


def test_the_shared_pass_holds_the_models_own_log_probs(handle, trajectories):
    """An anchor outside the mechanism: the shared pass scores each token as the model's own forward does."""
    traj, tools = trajectories[0]
    (tf_pass,) = TrajectoryPlan.build(local_model(handle, "test"), traj, tools=tools).passes
    with torch.no_grad():
        logp = torch.log_softmax(handle.model(input_ids=torch.tensor([tf_pass.ids])).logits[0].float(), -1)
    ids = torch.tensor(tf_pass.ids)
    res = analyze(handle, traj, ["logit_lens", "token_uncertainty"], tools=tools)
    unc, lens = res["token_uncertainty"], res["logit_lens"]
    pos = torch.tensor(unc.position.tolist())
    np.testing.assert_allclose(unc.logprob, logp[pos - 1, ids[pos]].numpy(), atol=1e-5)
    pos = torch.tensor(lens.positions.tolist())
    np.testing.assert_allclose(lens.target_logprob[-1], logp[pos, ids[pos + 1]].numpy(), atol=1e-5)


def test_with_attention_every_analyzer_reads_the_same_eager_pass_as_it_would_alone(handle, trajectories):
    """On a model loaded with eager attention, each analyzer alone gives the same arrays as in the shared pass."""
    with using_attention_implementation(handle.model, "eager"):
        for traj, tools in trajectories:
            alone = _alone(handle, traj, tools)
            together = analyze(handle, traj, NAMES, tools=tools)
            assert list(together) == ALL_FOUR
            for name, result in together.items():
                _assert_same(alone[name], result)
                assert result.meta == alone[name].meta


def test_with_attention_on_an_sdpa_model_the_shared_pass_stays_on_sdpa_and_changes_nothing(handle, trajectories):
    """The attention rows are rebuilt from the pass's residual streams and KV cache, so the pass runs the
    model's own kernel (no eager [heads, T, T] maps): the other analyzers read exactly what they read alone,
    and the rows are eager attention's own (checked against eager weights in test_analyzers_trajectory)."""
    assert handle.model.config._attn_implementation == "sdpa"
    weights = []
    hooks = [
        layer.self_attn.register_forward_hook(lambda m, a, out: weights.append(out[1])) for layer in handle.parts.layers
    ]
    try:
        for traj, tools in trajectories:
            alone = _alone(handle, traj, tools)
            together = analyze(handle, traj, NAMES, tools=tools, captures=None)
            for name, result in together.items():
                _assert_same(alone[name], result)
    finally:
        for h in hooks:
            h.remove()
    assert weights and all(w is None for w in weights)  # no layer ever computed eager weights
    assert handle.model.config._attn_implementation == "sdpa"


def _count_forwards(model):
    calls = []
    hook = model.register_forward_hook(lambda *args: calls.append(1))
    return calls, hook


def test_analyze_runs_the_model_once_per_planned_pass_where_alone_they_run_it_four_times(handle, trajectories):
    for traj, tools in trajectories:
        n_passes = _n_passes(handle, traj, tools)
        calls, hook = _count_forwards(handle.model)
        try:
            analyze(handle, traj, ALL_FOUR, tools=tools)
            shared = len(calls)
            calls.clear()
            _alone(handle, traj, tools)
            alone = len(calls)
        finally:
            hook.remove()
        assert shared == n_passes
        if n_passes == 1:
            assert alone == 4 * n_passes == 4
        else:  # the forced final answer's own pass: only the lens and uncertainty read it (no call there)
            assert (n_passes, alone) == (2, 4 + 2)
    assert {_n_passes(handle, t, tools) for t, tools in trajectories} == {1, 2}


def test_a_failing_analyzer_is_reported_by_name_and_the_others_still_share_the_pass(handle, trajectories):
    class LogitsOnly:
        """The demo model behind a handle that declares logits but no hidden states."""

        backend = "hf_local"
        capabilities = frozenset({Capability.GENERATE, Capability.LOGITS})
        model, tokenizer, spec = handle.model, handle.tokenizer, handle.spec

    traj, tools = trajectories[0]
    errors: dict = {}
    results = analyze(LogitsOnly(), traj, ["logit_lens", "token_uncertainty"], tools=tools, errors=errors)
    assert list(results) == ["token_uncertainty"] and list(errors) == ["logit_lens"]
    assert isinstance(errors["logit_lens"], CapabilityError) and "hidden_states" in str(errors["logit_lens"])
    _assert_same(TokenUncertaintyAnalyzer().run_trajectory(handle, traj, tools=tools), results["token_uncertainty"])
    with pytest.raises(CapabilityError, match="LogitLensAnalyzer"):
        analyze(LogitsOnly(), traj, ["logit_lens", "token_uncertainty"], tools=tools)


def test_analyze_rejects_unknown_and_repeated_names(handle, trajectories):
    traj, tools = trajectories[0]
    with pytest.raises(ValueError, match="Known analyzers"):
        analyze(handle, traj, ["mind_reader"], tools=tools)
    with pytest.raises(ValueError, match="requested twice"):
        analyze(handle, traj, ["logit_lens", {"name": "Logit_Lens", "top_k": 3}], tools=tools)
