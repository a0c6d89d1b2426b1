"""The hf_local backend on a tiny random Qwen2 checkpoint: load/wrap, capabilities, chat, forward, errors."""

from __future__ import annotations

import copy
import itertools
import mmap
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch  # noqa: E402  (the local extra is part of `make test`; a missing torch must fail)
from tiny_models import make_tiny_model, make_tiny_vlm, tiny_tokenizer  # noqa: E402

import evalrx  # noqa: E402
from evalrx import Capability, CapabilityError  # noqa: E402
from evalrx.core.model import Model  # noqa: E402
from evalrx.models.backends import BACKENDS  # noqa: E402
from evalrx.models.backends.hf_local import HFLocalModel  # noqa: E402
from evalrx.models.checkpoints import CheckpointNotFoundError  # noqa: E402
from evalrx.specs import ModelSpec, get_spec  # noqa: E402

KEY = "qwen2.5-0.5b-instruct"
BASE_CAPS = {
    Capability.GENERATE,
    Capability.TOOL_CALLS,
    Capability.LOGPROBS,
    Capability.LOGITS,
    Capability.HIDDEN_STATES,
}
MESSAGES = [{"role": "user", "content": "What is 3*4?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def handle(tiny_qwen_dir):
    return evalrx.load(KEY, checkpoint=str(tiny_qwen_dir))


@pytest.fixture(scope="module")
def eager_handle(tiny_qwen_dir):
    return evalrx.load(KEY, checkpoint=str(tiny_qwen_dir), want=["attention"])


def _assert_causal_attentions(attentions, n_layers, n_heads, seq_len):
    assert len(attentions) == n_layers
    for a in attentions:
        assert a.shape == (1, n_heads, seq_len, seq_len)
        assert torch.allclose(a.sum(-1).float().cpu(), torch.ones(1, n_heads, seq_len), atol=1e-3)
        assert torch.all(torch.triu(a[0], diagonal=1) == 0)


# ------------------------------------------------------------------ load / wrap


def test_load_by_key_from_local_checkpoint(handle, tiny_qwen_dir):
    assert isinstance(handle, HFLocalModel) and isinstance(handle, Model)
    assert handle.backend == "hf_local"
    assert handle.capabilities == BASE_CAPS
    assert handle.spec.key == KEY and handle.spec.hf_repo == str(tiny_qwen_dir)
    assert handle.model.config._attn_implementation == "sdpa"
    assert next(handle.model.parameters()).dtype == torch.float32
    assert not handle.model.training
    r = repr(handle)
    assert KEY in r and "attn='sdpa'" in r and "tool_calls" in r and "attention" not in r


def test_wrap_gives_the_same_capabilities_and_a_synthesized_spec():
    model = make_tiny_model("qwen2")
    wrapped = evalrx.wrap(model, tiny_tokenizer())
    assert isinstance(wrapped, HFLocalModel)
    assert wrapped.capabilities == BASE_CAPS
    assert wrapped.spec.family == "qwen2"
    assert wrapped.spec.key == "Qwen2ForCausalLM"  # built from a config: no name_or_path
    assert wrapped.spec.tool_call_style == "hermes" and not wrapped.spec.vision


def test_wrap_of_a_loaded_checkpoint_takes_the_key_from_name_or_path(tiny_qwen_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_qwen_dir))
    wrapped = evalrx.wrap(model)  # tokenizer found next to the weights
    assert wrapped.spec.key == str(tiny_qwen_dir)
    assert wrapped.capabilities == BASE_CAPS


def test_tokenizer_without_chat_template_has_no_tool_calls():
    tok = copy.deepcopy(tiny_tokenizer())
    tok.chat_template = None
    wrapped = evalrx.wrap(make_tiny_model("llama"), tok)
    assert Capability.TOOL_CALLS not in wrapped.capabilities
    with pytest.raises(CapabilityError, match="tool_calls"):
        evalrx.wrap(make_tiny_model("llama"), tok, want=["tool_calls"])


def test_provides_answers_from_the_spec_alone():
    provides = BACKENDS["hf_local"].provides
    assert provides(get_spec(KEY)) == frozenset(Capability) - {Capability.VISION}
    assert provides(get_spec("qwen2.5-vl-7b-instruct")) == frozenset(Capability)
    assert provides(get_spec("gpt-4o-mini")) == frozenset()


def test_wanting_vision_on_a_text_spec_fails_before_loading(tmp_path):
    with pytest.raises(CapabilityError, match="vision"):
        evalrx.load(KEY, checkpoint=str(tmp_path / "never-read"), want=["vision"])


def test_dtype_from_runtime(tiny_qwen_dir):
    h = evalrx.load(KEY, checkpoint=str(tiny_qwen_dir), dtype="bf16")
    assert next(h.model.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="Unknown dtype 'float8'"):
        evalrx.load(KEY, checkpoint=str(tiny_qwen_dir), dtype="float8")


# ------------------------------------------------------------------ attention


def test_attention_via_load(eager_handle):
    assert Capability.ATTENTION in eager_handle.capabilities
    assert eager_handle.model.config._attn_implementation == "eager"
    out = eager_handle.forward(messages=MESSAGES, output_attentions=True)
    cfg = eager_handle.model.config
    _assert_causal_attentions(out.attentions, cfg.num_hidden_layers, cfg.num_attention_heads, out.input_ids.shape[1])


def test_attention_via_wrap_switches_an_sdpa_model_to_eager():
    model = make_tiny_model("qwen2")
    assert model.config._attn_implementation == "sdpa"
    wrapped = evalrx.wrap(model, tiny_tokenizer(), want=["attention"])
    assert model.config._attn_implementation == "eager"
    assert wrapped.capabilities == BASE_CAPS | {Capability.ATTENTION}
    out = wrapped.forward(text="hello world", output_attentions=True)
    _assert_causal_attentions(out.attentions, 2, 2, out.input_ids.shape[1])


def test_attentions_from_a_non_eager_model_are_refused_with_a_hint(handle):
    with pytest.raises(CapabilityError) as err:
        handle.forward(text="hello", output_attentions=True)
    assert err.value.missing == frozenset({Capability.ATTENTION})
    assert "want=['attention']" in str(err.value) and "sdpa" in str(err.value)


# ------------------------------------------------------------------ forward / render / tokenize


def test_forward_shapes_and_input_forms_agree(handle):
    cfg = handle.model.config
    by_messages = handle.forward(messages=MESSAGES, tools=TOOLS)
    ids = by_messages.input_ids
    assert ids.shape[0] == 1
    assert by_messages.logits.shape == (1, ids.shape[1], cfg.vocab_size)
    assert len(by_messages.hidden_states) == cfg.num_hidden_layers + 1
    assert all(h.shape == (1, ids.shape[1], cfg.hidden_size) for h in by_messages.hidden_states)
    assert by_messages.attentions is None
    by_ids = handle.forward(ids[0].tolist(), output_hidden_states=False)
    assert by_ids.hidden_states is None
    assert torch.allclose(by_ids.logits, by_messages.logits, atol=1e-5)
    with pytest.raises(ValueError, match="exactly one"):
        handle.forward()
    with pytest.raises(ValueError, match="exactly one"):
        handle.forward(ids, text="x")


def test_forward_is_the_pass_the_analyzers_run(handle):
    from evalrx.internals.passes import forward, local_model

    ids = handle.tokenize(messages=MESSAGES, tools=TOOLS, add_generation_prompt=True)[0].tolist()
    keep = [0, len(ids) // 2, len(ids) - 1]
    whole = handle.forward(ids)
    logits, hidden = forward(local_model(handle, "test"), ids, keep)
    # The same pass, only the kept rows projected (a smaller matrix product: equal up to float rounding).
    torch.testing.assert_close(logits, whole.logits[0, keep], atol=1e-6, rtol=1e-5)
    assert len(hidden) == len(whole.hidden_states)
    assert all(torch.equal(a, b) for a, b in zip(hidden, whole.hidden_states))
    no_hidden, none = forward(local_model(handle, "test"), ids, hidden=False)
    assert none is None and torch.equal(no_hidden, whole.logits[0])


def test_render_and_tokenize_match_the_chat_template(handle):
    text = handle.render(MESSAGES, tools=TOOLS, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n") and '"name": "calculator"' in text
    ids = handle.tokenize(messages=MESSAGES, tools=TOOLS, add_generation_prompt=True)
    direct = tiny_tokenizer()(text, add_special_tokens=False)["input_ids"]
    assert ids[0].tolist() == direct
    assert handle.tokenize("hello")[0].tolist() == tiny_tokenizer()("hello")["input_ids"]


# ------------------------------------------------------------------ chat


def test_chat_is_deterministic_and_counts_tokens(handle):
    first = handle.chat(MESSAGES, tools=TOOLS, max_new_tokens=7, logprobs=True)
    second = handle.chat(MESSAGES, tools=TOOLS, max_new_tokens=7, logprobs=True)
    assert first.text == second.text and first.logprobs == second.logprobs
    prompt = handle.tokenize(messages=MESSAGES, tools=TOOLS, add_generation_prompt=True)
    assert first.usage == {"prompt_tokens": prompt.shape[1], "completion_tokens": 7}
    assert first.finish_reason == "length" and first.tool_calls == []
    assert len(first.logprobs) == first.usage["completion_tokens"]
    ids = [lp["token_id"] for lp in first.logprobs]
    assert first.text == tiny_tokenizer().decode(ids, skip_special_tokens=True)
    assert all(lp["token"] == tiny_tokenizer().decode([lp["token_id"]]) for lp in first.logprobs)


def test_chat_logprobs_match_a_teacher_forced_forward(handle):
    turn = handle.chat(MESSAGES, max_new_tokens=6, logprobs=True)
    prompt = handle.tokenize(messages=MESSAGES, add_generation_prompt=True)[0].tolist()
    gen = [lp["token_id"] for lp in turn.logprobs]
    logits = handle.forward(prompt + gen, output_hidden_states=False).logits[0]
    logp = torch.log_softmax(logits.float(), dim=-1)
    for i, lp in enumerate(turn.logprobs):
        pos = len(prompt) + i - 1
        assert lp["logprob"] == pytest.approx(logp[pos, lp["token_id"]].item(), abs=1e-4)
        assert lp["token_id"] == int(logits[pos].argmax())  # greedy


def test_checkpoint_generation_config_does_not_change_greedy_decoding():
    model = make_tiny_model("qwen2")
    gc = model.generation_config
    gc.do_sample, gc.temperature, gc.top_k, gc.num_beams, gc.repetition_penalty = True, 0.7, 5, 3, 50.0
    wrapped = evalrx.wrap(model, tiny_tokenizer())
    turn = wrapped.chat(MESSAGES, max_new_tokens=10, logprobs=True)
    prompt = wrapped.tokenize(messages=MESSAGES, add_generation_prompt=True)[0].tolist()
    gen = [lp["token_id"] for lp in turn.logprobs]
    logits = wrapped.forward(prompt + gen, output_hidden_states=False).logits[0]
    assert gen == logits[len(prompt) - 1 : -1].argmax(-1).tolist()


def test_chat_stops_on_eos_and_strips_it():
    model = make_tiny_model("qwen2")
    tok = tiny_tokenizer()
    # A head that always predicts eos: the model must stop after one token.
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(-10.0)
        head.bias[tok.eos_token_id] = 10.0
    model.lm_head = head
    turn = evalrx.wrap(model, tok).chat(MESSAGES, max_new_tokens=5, logprobs=True)
    assert turn.finish_reason == "stop"
    assert turn.text == ""
    assert turn.usage["completion_tokens"] == 1
    assert turn.logprobs[0]["token_id"] == tok.eos_token_id
    assert turn.logprobs[0]["logprob"] == pytest.approx(0.0, abs=1e-6)


def test_text_blocks_are_folded_and_images_need_vision(handle):
    blocks = [{"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "3*4?"}]}]
    assert handle.render(blocks) == handle.render(MESSAGES)
    with_image = [{"role": "user", "content": [{"type": "image", "image": "x.png"}, {"type": "text", "text": "hi"}]}]
    with pytest.raises(CapabilityError) as err:
        handle.chat(with_image)
    assert err.value.missing == frozenset({Capability.VISION})
    assert "no VISION" in str(err.value)


def test_tool_round_trip_messages_render(handle):
    convo = MESSAGES + [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "3*4"}}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "12"},
    ]
    text = handle.render(convo, tools=TOOLS, add_generation_prompt=True)
    assert '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>' in text
    assert "<tool_response>\n12\n</tool_response>" in text
    assert (
        handle.chat(convo, tools=TOOLS, max_new_tokens=3).usage["prompt_tokens"]
        == handle.tokenize(messages=convo, tools=TOOLS, add_generation_prompt=True).shape[1]
    )


# ------------------------------------------------------------------ vision


def _image_messages():
    from PIL import Image

    image = Image.new("RGB", (40, 30), (200, 30, 30))
    return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "What is 3*4?"}]}]


def test_vision_spec_loads_a_processor_and_chats_about_images(tiny_vlm_dir):
    h = evalrx.load("qwen2.5-vl-7b-instruct", checkpoint=str(tiny_vlm_dir), want=["vision"])
    assert h.capabilities == BASE_CAPS | {Capability.VISION}
    assert h.processor is not None and h.parts.layers_path == "model.language_model.layers"
    with_image = h.chat(_image_messages(), tools=TOOLS, max_new_tokens=3, logprobs=True)
    text_only = h.chat(MESSAGES, tools=TOOLS, max_new_tokens=3)
    # One image = 4 patch tokens in place of the text-only prompt's nothing.
    assert with_image.usage["prompt_tokens"] == text_only.usage["prompt_tokens"] + 4
    assert len(with_image.logprobs) == with_image.usage["completion_tokens"] == 3
    out = h.forward(messages=_image_messages(), tools=TOOLS, add_generation_prompt=True)
    assert out.input_ids.shape[1] == with_image.usage["prompt_tokens"]
    assert len(out.hidden_states) == 3
    # The image reaches the model: a different image changes the logits.
    other = _image_messages()
    other[0]["content"][0]["image"] = other[0]["content"][0]["image"].point(lambda v: 255 - v)
    assert not torch.allclose(h.forward(messages=other, tools=TOOLS, add_generation_prompt=True).logits, out.logits)


def test_wrap_vlm_with_processor_has_vision_and_with_tokenizer_does_not():
    model, processor = make_tiny_vlm()
    assert Capability.VISION in evalrx.wrap(model, processor).capabilities
    text_only = evalrx.wrap(model, processor.tokenizer)
    assert Capability.VISION not in text_only.capabilities
    with pytest.raises(CapabilityError, match="no VISION"):
        text_only.chat(_image_messages())


def test_vlm_attention_via_load(tiny_vlm_dir):
    h = evalrx.load("qwen2.5-vl-7b-instruct", checkpoint=str(tiny_vlm_dir), want=["attention", "vision"])
    out = h.forward(messages=_image_messages(), output_attentions=True)
    _assert_causal_attentions(out.attentions, 2, 2, out.input_ids.shape[1])


# ------------------------------------------------------------------ errors and offline use


def _assert_clear(err: BaseException, *needles: str) -> None:
    msg = str(err)
    assert isinstance(err, CheckpointNotFoundError) and isinstance(err, FileNotFoundError)
    assert type(err).__module__.startswith("evalrx.")
    assert "\n" not in msg and len(msg) < 600
    assert err.__cause__ is None
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_missing_local_path_is_one_clear_error(tmp_path):
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(FileNotFoundError) as err:
        evalrx.load(KEY, checkpoint=missing)
    _assert_clear(err.value, missing, "does not exist", "checkpoint=")
    assert err.value.__context__ is None  # raised directly, not from inside transformers


def test_uncached_hub_id_offline_is_one_clear_error_without_retries(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    start = time.perf_counter()
    with pytest.raises(FileNotFoundError) as err:
        evalrx.load(KEY)
    assert time.perf_counter() - start < 5
    _assert_clear(
        err.value, "Qwen/Qwen2.5-0.5B-Instruct", "no hub is reachable", "HF_HUB_OFFLINE", "checkpoint=", "pre-download"
    )


def test_missing_hub_weights_are_said_before_a_run_is_queued_and_its_fix_is_the_runs_own(tmp_path, monkeypatch):
    """The New run form asks `weights_problem` with its field as the place; a worker's failed load names the
    run's places (the form's field, `--checkpoint`), not `evalrx.load`, which a run's user never calls."""
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.models import weights_problem
    from evalrx.runner.worker import RUN_CHECKPOINT_HOW, load_handle

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    said = weights_problem(KEY, how="the form's weights field")
    assert said is not None and "\n" not in said
    assert "Qwen/Qwen2.5-0.5B-Instruct" in said and "(the form's weights field)" in said and "evalrx.load" not in said
    assert weights_problem(KEY, backend="api") is None  # a server holds an API run's weights
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.json").write_text("{}")
    assert weights_problem(KEY, checkpoint=str(tmp_path / "mine")) is None  # the field's directory clears it
    assert "does not exist" in weights_problem(KEY, checkpoint=str(tmp_path / "typo"), how="the field")

    with pytest.raises(FileNotFoundError) as err:
        load_handle(RunConfig(model=ModelConfig(KEY)))
    _assert_clear(err.value, "Qwen/Qwen2.5-0.5B-Instruct", "HF_HUB_OFFLINE", RUN_CHECKPOINT_HOW, "hf download")
    assert "evalrx.load" not in str(err.value)


def test_uncached_hub_id_with_unreachable_hub_fails_fast(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    start = time.perf_counter()
    with pytest.raises(FileNotFoundError) as err:
        evalrx.load(KEY, checkpoint="acme/not-downloaded")
    assert time.perf_counter() - start < 5  # transformers alone retries for ~45 s here
    _assert_clear(
        err.value, "acme/not-downloaded", "no hub is reachable from this machine", "hf download acme/not-downloaded"
    )


def test_directory_without_weights_is_one_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError) as err:
        evalrx.load(KEY, checkpoint=str(tmp_path / "empty"))
    _assert_clear(err.value, "no config.json", str(tmp_path / "empty"))


def test_directory_without_weights_names_the_missing_file(tiny_qwen_dir, tmp_path):
    broken = tmp_path / "no-weights"
    shutil.copytree(tiny_qwen_dir, broken)
    (broken / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError) as err:
        evalrx.load(KEY, checkpoint=str(broken))
    _assert_clear(err.value, "Could not load", "model.safetensors", "checkpoint=")
    assert err.value.__suppress_context__  # re-raised `from None`: no transformers traceback chained


def test_offline_load_of_a_local_dir(tiny_qwen_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    h = evalrx.load(KEY, checkpoint=str(tiny_qwen_dir))
    assert h.chat(MESSAGES, max_new_tokens=2).usage["completion_tokens"] == 2


def test_offline_load_of_a_hub_id_from_the_cache(tiny_qwen_dir, tmp_path, monkeypatch):
    # The hub cache layout: models--org--name/{refs/main, snapshots/<commit>/...}.
    repo_dir = tmp_path / "hub" / "models--acme--tiny-qwen"
    commit = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(tiny_qwen_dir, repo_dir / "snapshots" / commit)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    h = evalrx.load(KEY, checkpoint="acme/tiny-qwen")
    assert h.capabilities == BASE_CAPS
    assert h.spec.hf_repo == "acme/tiny-qwen"


def test_spec_without_repo_is_a_clear_error():
    spec = ModelSpec("local-only", "qwen2")
    with pytest.raises(FileNotFoundError, match="no hf_repo"):
        evalrx.compose(spec, "hf_local")


def test_import_evalrx_does_not_import_torch():
    code = (
        "import sys, evalrx, evalrx.models.backends.hf_local; "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------- load time, apart from step latency

PAGE = mmap.PAGESIZE
needs_pagemap = pytest.mark.skipif(
    not Path("/proc/self/pagemap").exists(), reason="reads page residency from Linux's /proc/self/pagemap"
)


def _weight_pages(model) -> set:
    pages: set = set()
    for p in itertools.chain(model.parameters(), model.buffers()):
        n = p.numel() * p.element_size()
        if n and p.device.type == "cpu":
            pages.update(range(p.data_ptr() // PAGE, (p.data_ptr() + n - 1) // PAGE + 1))
    return pages


def _untouched_weight_pages(model) -> int:
    """Pages under the model's CPU weights not yet in this process's page tables (never read since load).

    A pagemap entry has bit 63 set when the page is present and bit 62 when swapped out.
    """
    untouched = 0
    with open("/proc/self/pagemap", "rb") as fh:
        for page in sorted(_weight_pages(model)):
            fh.seek(page * 8)
            untouched += not (int.from_bytes(fh.read(8), "little") >> 62) & 3
    return untouched


def _views_of(model, checkpoint_dir) -> int:
    """How many weight pages lie in a memory mapping of `checkpoint_dir`'s safetensors file."""
    target = str(Path(checkpoint_dir, "model.safetensors").resolve())
    spans = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.endswith(target):
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            spans.append((lo // PAGE, hi // PAGE))
    return sum(any(lo <= page < hi for lo, hi in spans) for page in _weight_pages(model))


@needs_pagemap
def test_load_reads_the_weights_before_the_first_step_timer_starts():
    """transformers maps a safetensors checkpoint and reads it on first touch: `load` must do
    that touch, or the first agent step's latency would include reading the weights."""
    from evalrx.core.case import StepRole
    from evalrx.core.tool import Tool
    from evalrx.models.agent import Agent
    from evalrx.specs import DEMO_MODEL_DIR

    handle = evalrx.load("evalrx-tiny")
    # The weights are views of the checkpoint file: what `from_pretrained` alone would leave unread.
    assert _views_of(handle.model, DEMO_MODEL_DIR) > 0
    assert isinstance(handle.load_ms, float) and handle.load_ms > 0

    untouched_when_timed = []
    generate = handle.chat

    def chat(*args, **kwargs):  # runs inside the agent's step timer
        untouched_when_timed.append(_untouched_weight_pages(handle.model))
        return generate(*args, **kwargs)

    handle.chat = chat
    calc = Tool(
        "calculator",
        "Evaluate an arithmetic expression.",
        {"type": "object", "properties": {"expression": {"type": "string"}}},
        fn=lambda expression: "12",
    )
    traj = Agent(handle, [calc], max_turns=1, chat_kwargs={"max_new_tokens": 8}).run("What is 3*4?")

    first = next(s for s in traj.steps if s.role is StepRole.ACTOR)
    assert first.span["latency_ms"] > 0
    assert untouched_when_timed[0] == 0  # nothing left to load when the first step was being timed
    assert "model_load_ms" not in traj.metrics  # a run-level figure, not the first case's


@needs_pagemap
def test_wrap_pages_in_a_memory_mapped_model_and_records_the_time():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evalrx.specs import DEMO_MODEL_DIR

    model = AutoModelForCausalLM.from_pretrained(DEMO_MODEL_DIR, dtype=torch.float32).eval()
    assert _untouched_weight_pages(model) > 0  # from_pretrained returns before reading the weights
    handle = evalrx.wrap(model, AutoTokenizer.from_pretrained(DEMO_MODEL_DIR))
    assert _untouched_weight_pages(model) == 0
    assert handle.load_ms > 0


def test_a_handle_built_directly_reports_no_load_time():
    handle = HFLocalModel(make_tiny_model("qwen2"), tiny_tokenizer(), get_spec(KEY))
    assert handle.load_ms is None


# ---------------------------------------------------------------- the prefix cache


def _prefilled(handle):
    """Count the positions each forward of `handle`'s model runs (prefill and decode alike)."""
    seen: list = []
    embed = handle.model.get_input_embeddings()
    hook = embed.register_forward_hook(lambda _m, args, _out: seen.append(int(args[0].shape[-1])))
    return seen, hook


def _conversation(first_answer: str) -> list:
    system = {"role": "system", "content": "You are a careful assistant. " * 12}
    return [
        system,
        {"role": "user", "content": "What is 3*4?"},
        {"role": "assistant", "content": first_answer},
        {"role": "user", "content": "And 5*6?"},
    ]


def test_a_conversations_next_turn_prefills_only_what_it_adds_and_says_the_same(tiny_qwen_dir):
    cached = evalrx.load(KEY, checkpoint=str(tiny_qwen_dir), max_new_tokens=12)
    cold = evalrx.load(KEY, checkpoint=str(tiny_qwen_dir), max_new_tokens=12, prefix_cache=False)
    first = _conversation("")[:2]
    a1, c1 = cached.chat(first, TOOLS), cold.chat(first, TOOLS)
    assert a1.text == c1.text
    second = _conversation(a1.text)
    n_second = int(cached.tokenize(messages=second, tools=TOOLS, add_generation_prompt=True).shape[1])
    seen, hook = _prefilled(cached)
    try:
        a2 = cached.chat(second, TOOLS)
    finally:
        hook.remove()
    assert a2.text == cold.chat(second, TOOLS).text
    assert seen[0] < n_second - 32  # the system prompt, tools and first turn were not run again
    # Another conversation in between shares only the start; the first one's answer does not change.
    cached.chat([{"role": "user", "content": "Say something else entirely, at length."}])
    assert cached.chat(second, TOOLS).text == a2.text


def test_a_capture_on_a_reused_prefix_equals_a_cold_one_and_prefix_cache_false_prefills_all(tiny_qwen_dir):
    handle = evalrx.load(KEY, checkpoint=str(tiny_qwen_dir), max_new_tokens=6)
    cold = evalrx.load(KEY, checkpoint=str(tiny_qwen_dir), max_new_tokens=6, prefix_cache=False)
    conversation = _conversation("12")
    n = int(handle.tokenize(messages=conversation, tools=TOOLS, add_generation_prompt=True).shape[1])
    handle.chat(conversation[:2], TOOLS)
    seen, hook = _prefilled(handle)
    try:
        warm = handle.chat(conversation, TOOLS, capture=["hidden_states", "attention"])
    finally:
        hook.remove()
    assert seen[0] < n - 32  # the shared start was not run again, capture or not
    seen, hook = _prefilled(cold)
    try:
        ref = cold.chat(conversation, TOOLS, capture=["hidden_states", "attention"])
    finally:
        hook.remove()
    assert seen[0] == n  # prefix_cache=False: every prompt prefilled whole
    assert warm.text == ref.text and warm.capture.generated_ids == ref.capture.generated_ids
    assert torch.allclose(warm.capture.hidden, ref.capture.hidden, atol=1e-4)
    # Rebuilt from the keys the capture copied at its own turn's end: the kept cache serving later turns cannot alter them.
    warm_rows, ref_rows = (
        c.attention.full() if hasattr(c.attention, "full") else c.attention for c in (warm.capture, ref.capture)
    )
    assert torch.allclose(warm_rows, ref_rows, atol=1e-4)
