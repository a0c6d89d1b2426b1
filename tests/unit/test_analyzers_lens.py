"""Logit lens on single prompts, the analyzer contract and registry (tiny random models)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch  # noqa: E402  (the local extra is part of `make test`; a missing torch must fail)
from tiny_models import make_tiny_model, tiny_tokenizer  # noqa: E402

import evalrx  # noqa: E402
from evalrx.analyzers import (  # noqa: E402
    ANALYZERS,
    Analyzer,
    AttentionAnalyzer,
    HookAnalyzer,
    LensResult,
    LogitLensAnalyzer,
    ReplayAnalyzer,
    TokenUncertaintyAnalyzer,
    ToolDecisionAnalyzer,
    analyzer_class,
    get_analyzer,
    known_analyzers,
    register_analyzer,
    result_from_arrays,
    settle_layer,
)
from evalrx.core import Capability, CapabilityError  # noqa: E402
from evalrx.internals import get_final_norm  # noqa: E402

ARCHS = ("qwen2", "llama", "gemma", "gemma2", "gpt2")
TEXT = "What is 3*4? Use the calculator tool."


def _handle(arch: str, **overrides):
    return evalrx.wrap(make_tiny_model(arch, **overrides), tiny_tokenizer())


def _ids(text: str = TEXT) -> list:
    return list(tiny_tokenizer()(text)["input_ids"])


@pytest.mark.parametrize("arch", ARCHS)
def test_last_layer_is_the_models_own_log_softmax(arch):
    handle = _handle(arch)
    res = LogitLensAnalyzer(top_k=5).run(handle, TEXT)
    ids = _ids()
    with torch.no_grad():
        logp = torch.log_softmax(handle.model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    vals, idx = logp.topk(5, -1)
    assert res.topk_logprobs.shape == (res.num_layers + 1, len(ids), 5)
    np.testing.assert_allclose(res.topk_logprobs[-1], vals.numpy(), atol=1e-5)
    np.testing.assert_array_equal(res.topk_ids[-1], idx.numpy())
    # The chosen token of each position is the next actual token; the last position has none.
    nxt = logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].numpy()
    np.testing.assert_allclose(res.target_logprob[-1, :-1], nxt, atol=1e-5)
    entropy = -(logp.exp() * logp).sum(-1).numpy()
    np.testing.assert_allclose(res.entropy[-1], entropy, atol=1e-4)
    assert res.target_is_actual.tolist() == [True] * (len(ids) - 1) + [False]
    assert res.target_ids[-1] == int(logp[-1].argmax())
    assert res.target_rank[-1, -1] == 0


@pytest.mark.parametrize("arch", ARCHS)
def test_intermediate_layers_equal_norm_and_unembed_of_hooked_layer_outputs(arch):
    handle = _handle(arch, **({"n_layer": 3} if arch == "gpt2" else {"num_hidden_layers": 3}))
    model = handle.model
    res = LogitLensAnalyzer(top_k=4).run(handle, TEXT)
    ids = _ids()
    # Capture each decoder layer's input and output independently of the analyzer.
    layer_list = model.transformer.h if arch == "gpt2" else model.model.layers
    inputs, outputs, hooks = {}, {}, []
    for i, layer in enumerate(layer_list):
        hooks.append(
            layer.register_forward_pre_hook(
                lambda m, a, kw, i=i: inputs.__setitem__(i, (a[0] if a else kw["hidden_states"]).detach()),
                with_kwargs=True,
            )
        )
        hooks.append(
            layer.register_forward_hook(
                lambda m, a, o, i=i: outputs.__setitem__(i, (o[0] if isinstance(o, tuple) else o).detach())
            )
        )
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]))
    for h in hooks:
        h.remove()
    norm = get_final_norm(model)
    head = model.get_output_embeddings()
    softcap = getattr(model.config, "final_logit_softcapping", None)
    assert len(layer_list) == 3 and res.num_layers == 3
    # Lens layer 0 is the first layer's input (the embedding output); layer i the output of layer i-1.
    for lens_layer, hidden in [(0, inputs[0]), (1, outputs[0]), (2, outputs[1])]:
        with torch.no_grad():
            logits = head(norm(hidden))[0].float()
            if softcap:
                logits = torch.tanh(logits / softcap) * softcap
            logp = torch.log_softmax(logits, -1)
        vals, idx = logp.topk(4, -1)
        np.testing.assert_allclose(res.topk_logprobs[lens_layer], vals.numpy(), atol=1e-5)
        np.testing.assert_array_equal(res.topk_ids[lens_layer], idx.numpy())
        np.testing.assert_allclose(res.hidden_norm[lens_layer], hidden[0].norm(dim=-1).numpy(), rtol=1e-5)


def test_positions_last_and_negative_select_the_same_rows():
    handle = _handle("qwen2")
    full = LogitLensAnalyzer(top_k=3).run(handle, TEXT)
    last = LogitLensAnalyzer(top_k=3).run(handle, TEXT, positions="last")
    some = LogitLensAnalyzer(top_k=3).run(handle, TEXT, positions=[0, -2])
    n = len(_ids())
    assert last.positions.tolist() == [n - 1]
    assert some.positions.tolist() == [0, n - 2]
    np.testing.assert_allclose(last.topk_logprobs[:, 0], full.topk_logprobs[:, -1], atol=1e-5)
    np.testing.assert_allclose(some.entropy[:, 1], full.entropy[:, n - 2], atol=1e-5)
    with pytest.raises(IndexError):
        LogitLensAnalyzer().run(handle, TEXT, positions=[n + 3])


def test_settle_layer_is_first_layer_from_which_the_choice_stays_top1():
    top1 = np.array([[5, 7, 1, 9], [7, 7, 1, 9], [5, 7, 2, 9], [7, 7, 2, 4]])
    target = np.array([7, 7, 2, -1])
    # pos 0: top-1 at layer 1, lost at 2, back at 3 -> 3; pos 1: always -> 0; pos 2: from 2; pos 3: no target.
    assert settle_layer(top1, target).tolist() == [3, 0, 2, -1]
    assert settle_layer(np.array([[1], [2]]), np.array([1])).tolist() == [-1]  # not top-1 at the end


def test_lens_result_survives_a_store_round_trip():
    import io
    import json

    res = LogitLensAnalyzer(top_k=3).run(_handle("llama"), TEXT)
    buf = io.BytesIO()
    np.savez(buf, **res.to_arrays())
    buf.seek(0)
    loaded = dict(np.load(buf, allow_pickle=False))
    back = result_from_arrays(loaded, json.loads(json.dumps(res.meta)))
    assert isinstance(back, LensResult)
    for name in ("topk_ids", "topk_logprobs", "entropy", "target_rank", "hidden_norm", "target_ids"):
        np.testing.assert_array_equal(getattr(back, name), getattr(res, name))
    assert back.topk_logprobs.dtype == np.float32 and back.topk_ids.dtype == np.int32
    np.testing.assert_array_equal(back.settles_at, res.settles_at)
    assert back.token_text(int(res.topk_ids[0, 0, 0])) == res.token_text(int(res.topk_ids[0, 0, 0]))
    assert back.layers.tolist() == list(range(res.num_layers + 1))


def test_white_box_analyzers_refuse_an_api_handle_by_name():
    api = evalrx.load("gpt-4o-mini", backend="api", base_url="http://127.0.0.1:9", api_key="unused")
    for analyzer, missing in [
        (LogitLensAnalyzer(), "hidden_states"),
        (ToolDecisionAnalyzer(), "hidden_states"),
        (TokenUncertaintyAnalyzer(), "logits"),
        (AttentionAnalyzer(), "attention"),
        (ReplayAnalyzer(), "logits"),
    ]:
        with pytest.raises(CapabilityError) as err:
            analyzer.run(api, TEXT) if not isinstance(analyzer, ReplayAnalyzer) else analyzer.check(api)
        msg = str(err.value)
        assert type(analyzer).__name__ in msg and "gpt-4o-mini" in msg and missing in msg


def test_capability_error_when_a_local_handle_lacks_hidden_states():
    class NoHidden:
        """A handle that chats and gives logits but no hidden states."""

        backend = "hf_local"
        capabilities = frozenset({Capability.GENERATE, Capability.LOGITS})

        def __init__(self):
            inner = _handle("qwen2")
            self.model, self.tokenizer, self.spec = inner.model, inner.tokenizer, inner.spec

    with pytest.raises(CapabilityError, match=r"LogitLensAnalyzer needs \[hidden_states\]"):
        LogitLensAnalyzer().run(NoHidden(), TEXT)
    # Uncertainty needs only logits, so the same handle works there.
    assert len(TokenUncertaintyAnalyzer().run(NoHidden(), TEXT).logprob) == len(_ids()) - 1


@pytest.mark.parametrize("arch", ["llama", "qwen3"])  # qwen3: a q norm before the rotary
def test_teacher_forced_rows_rebuilt_from_the_kv_cache_are_eager_attentions_own(arch):
    """Every requested query position, in any order and repeated, gets its whole head-averaged row as an
    eager forward's own weights give it, while the model stays on sdpa."""
    from evalrx.internals.passes import local_model, teacher_forced

    handle = _handle(arch)
    assert handle.model.config._attn_implementation == "sdpa" and handle.attention_rows_rebuildable
    ids = _ids(TEXT + " " + TEXT)
    positions = [len(ids) - 1, 3, 9, 3, 0]  # unsorted, repeated, the first token
    _, states, rows = teacher_forced(
        local_model(handle, "test"), ids, [len(ids) - 1], hidden=False, attention=positions
    )
    assert states is None and rows.shape == (handle.model.config.num_hidden_layers, len(positions), len(ids))
    eager = make_tiny_model(arch, attn_implementation="eager")
    with torch.no_grad():
        att = eager(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    want = torch.stack([layer[0][:, positions].mean(0) for layer in att])  # [L, P, T]
    np.testing.assert_allclose(rows.numpy(), want.numpy(), atol=1e-6)
    assert rows[:, 1, 4:].abs().max() == 0  # causal: position 3 sees nothing after it
    assert handle.model.config._attn_implementation == "sdpa"


def test_attention_analyzer_runs_eager_only_for_its_own_pass():
    """A model whose rows cannot be rebuilt from its KV cache (here a sliding window) runs its attention
    pass eager, and goes back to sdpa afterwards."""
    handle = _handle("mistral", sliding_window=64)
    assert handle.model.config._attn_implementation == "sdpa"
    assert not handle.attention_rows_rebuildable and _handle("llama").attention_rows_rebuildable
    spread = _handle("llama")
    spread.model.hf_device_map = {"model.layers.0": 0, "model.layers.1": 1}  # layers on two devices
    assert not spread.attention_rows_rebuildable
    switched = []
    set_impl = handle.model.set_attn_implementation
    handle.model.set_attn_implementation = lambda impl: (switched.append(impl), set_impl(impl))[1]
    res = AttentionAnalyzer().run(handle, TEXT)
    assert res.mass.shape == (1, 2, 1)
    np.testing.assert_allclose(res.mass.sum(-1), 1.0, atol=1e-5)
    assert switched == ["eager", "sdpa"] and handle.model.config._attn_implementation == "sdpa"


def test_registry_lists_builtins_builds_by_name_and_rejects_duplicates():
    assert {"logit_lens", "tool_decision", "attention", "token_uncertainty", "replay"} <= set(ANALYZERS)
    lens = get_analyzer("logit_lens", top_k=3)
    assert isinstance(lens, LogitLensAnalyzer) and lens.top_k == 3
    with pytest.raises(ValueError, match="Known analyzers: .*logit_lens"):
        get_analyzer("mind_reader")

    class Custom(Analyzer):
        name = "custom_probe_for_test"

    try:
        register_analyzer(Custom)
        assert isinstance(get_analyzer("custom_probe_for_test"), Custom)

        class Other(Analyzer):
            name = "custom_probe_for_test"

        with pytest.raises(ValueError, match="already registered"):
            register_analyzer(Other)
    finally:
        ANALYZERS.pop("custom_probe_for_test", None)


def test_a_worker_hook_joins_the_one_registry_of_analysis_names():
    from evalrx.config import RunConfig
    from evalrx.runner import enqueue
    from evalrx.runner.analysis import register_hook, resolve

    def answer_length(ctx):
        return []

    try:
        register_hook("Answer_Length_For_Test", answer_length)
        assert "answer_length_for_test" in known_analyzers() and issubclass(
            ANALYZERS["answer_length_for_test"], HookAnalyzer
        )
        with pytest.raises(ValueError, match="already registered"):  # one namespace: hooks and analyzers
            register_hook("logit_lens", answer_length)
        with pytest.raises(ValueError, match="already registered"):
            register_hook("answer_length_for_test", answer_length)
        (name, hook), (shared, _) = resolve(["answer_length_for_test", "logit_lens"])
        assert name == "answer_length_for_test" and hook(None) == [] and shared == "logit_lens"
        with pytest.raises(ValueError, match="takes no arguments"):
            resolve([{"name": "answer_length_for_test", "top_k": 3}])
        with pytest.raises(NotImplementedError, match="worker hook"):
            get_analyzer("answer_length_for_test").run_trajectory(None, None)
        # The queue's check and the registry name the same known analyzers in the same words.
        with pytest.raises(ValueError) as from_registry:
            analyzer_class("mind_reader")
        with pytest.raises(ValueError) as from_queue:
            enqueue._check(RunConfig.from_dict({"model": {"name": "evalrx-tiny"}, "analyzers": ["mind_reader"]}))
        assert str(from_queue.value) == str(from_registry.value)
        assert "answer_length_for_test" in str(from_registry.value) and "logit_lens" in str(from_registry.value)
        enqueue._check(
            RunConfig.from_dict(
                {"model": {"name": "evalrx-tiny"}, "analyzers": ["answer_length_for_test", "logit_lens"]}
            )
        )
    finally:
        ANALYZERS.pop("answer_length_for_test", None)
    assert "answer_length_for_test" not in known_analyzers()


def test_importing_analyzers_does_not_import_torch():
    code = "import sys, evalrx.analyzers; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_block_statistics_handle_masked_vocabulary_entries():
    from evalrx.internals.passes.lens import _block_stats

    torch.manual_seed(0)
    x = torch.randn(2, 3, 50) * 4
    x[:, :, 7] = -float("inf")  # a model that masks a token out
    ent, top_lp, top_ids, lp, rank = _block_stats(x, torch.tensor([1, 7, -1]), 3)
    logp = torch.log_softmax(x.double(), -1)
    want_ent = torch.special.entr(logp.exp()).sum(-1)
    np.testing.assert_allclose(ent, want_ent.numpy(), atol=1e-5)
    np.testing.assert_allclose(top_lp, logp.topk(3, -1).values.numpy(), atol=1e-5)
    np.testing.assert_allclose(lp[:, 0], logp[:, 0, 1].numpy(), atol=1e-5)
    assert np.all(np.isneginf(lp[:, 1])) and np.all(np.isnan(lp[:, 2])) and np.all(rank[:, 2] == -1)
    assert np.all(rank[:, 1] == 49)  # everything else outranks the masked token


def test_a_partial_or_older_lens_record_decodes_through_its_result_class():
    """The diagnosis reads stored lens results only through LensResult: missing statistics come back as zeros,
    missing token labels as -1 (unknown), and label kinds by the names stored with the result."""
    from evalrx.analyzers import LensResult

    topk = np.zeros((3, 2, 2), dtype=np.int32)
    arrays = {
        "topk_ids": topk,
        "topk_logprobs": np.zeros((3, 2, 2), dtype=np.float32),
        "target_ids": np.array([5, 6], dtype=np.int32),
        "label_step": np.array([1, 3], dtype=np.int32),
        "label_kind": np.array([1, 0], dtype=np.int8),
    }
    lens = LensResult.from_arrays(arrays, {"kinds": ["answer", "arg_value"]})
    assert lens.kinds == ["arg_value", "answer"] and list(lens.positions) == [0, 1]
    assert lens.entropy.shape == (3, 2) and not lens.entropy.any()
    assert list(lens.labels["label_token_index"]) == [-1, -1] and lens.labels["label_arg"] == ["", ""]
    assert lens.select(np.array([False, True])).kinds == ["answer"]
    with pytest.raises(KeyError, match="target_ids"):
        LensResult.from_arrays({"topk_ids": topk, "topk_logprobs": arrays["topk_logprobs"]}, {})


@pytest.mark.parametrize("scale", [1.0, 40.0])
def test_block_statistics_on_a_wide_vocabulary_match_float64(scale):
    """The screened top-k and the floored exp give torch.topk's tokens and float64's numbers: on logits spread so
    wide that most probabilities fall below float32's normal range (scale 40), on the top tokens packed into one
    chunk, and on a vocabulary that is not a whole number of chunks (its tail holds the best token)."""
    from evalrx.internals.passes.lens import _block_stats

    torch.manual_seed(1)
    x = torch.randn(4, 3, 3001) * scale
    x[0, 0, 128:138] = x[0, 0].max() + torch.arange(10, dtype=torch.float32)  # the top 10 in one chunk
    x[1, 1, 3000] = x[1, 1].max() + 1  # the best token past the last whole chunk
    targets = torch.tensor([5, 3000, 130])
    ent, top_lp, top_ids, lp, rank = _block_stats(x, targets, 10)
    logp = torch.log_softmax(x.double(), -1)
    want = logp.topk(10, -1)
    np.testing.assert_array_equal(top_ids, want.indices.numpy())
    np.testing.assert_allclose(top_lp, want.values.numpy(), atol=2e-5)
    # entropy = lse - E[x] in float32: logits near 160 leave ~1e-5 of cancellation
    np.testing.assert_allclose(ent, torch.special.entr(logp.exp()).sum(-1).numpy(), atol=1e-4)
    np.testing.assert_allclose(lp, logp.gather(-1, targets.view(1, -1, 1).expand(4, -1, 1)).squeeze(-1), atol=2e-5)
    np.testing.assert_array_equal(rank, (x > x.gather(-1, targets.view(1, -1, 1).expand(4, -1, 1))).sum(-1).numpy())
