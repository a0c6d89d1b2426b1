"""The committed demo model really works: it loads offline and solves easy cases end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
from offline import run_offline

import evalrx
from evalrx.specs import get_spec

MODEL_DIR = Path(get_spec("evalrx-tiny").hf_repo)
# Easy held-out cases the committed model solves (checked by benchmarks/demo_eval.py).
EASY_CASES = ["arithmetic_easy-001", "lookup_easy-004", "lookup_unanswerable-001", "no_tool-004"]


def test_the_committed_weights_are_there():
    assert (MODEL_DIR / "model.safetensors").is_file(), f"demo weights missing in {MODEL_DIR}"


_OFFLINE_SCRIPT = r"""
import json

import torch
torch.set_num_threads(1)
import evalrx
from evalrx.models.toolcodec import QwenToolCodec
from evalrx.tools import get_tools

handle = evalrx.load("evalrx-tiny", max_new_tokens=64)
tools = [t.to_openai() for t in get_tools(["calculator", "lookup"])]
turn = handle.chat([{"role": "user", "content": "What is 12 + 30?"}], tools=tools)
parsed = QwenToolCodec().parse(turn)
print(json.dumps({
    "backend": handle.backend,
    "text": turn.text,
    "calls": [c.to_dict() for c in parsed.calls],
    "errors": parsed.errors,
    "finish": turn.finish_reason,
}))
"""


def test_spec_points_at_the_packaged_model():
    spec = get_spec("evalrx-tiny")
    assert spec.family == "qwen2" and spec.tool_call_style == "hermes"
    assert Path(spec.hf_repo).is_absolute() and MODEL_DIR.name == "model"
    assert evalrx.resolve_spec_key("tiny") == evalrx.resolve_spec_key("demo") == "evalrx-tiny"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
        assert (MODEL_DIR / name).is_file(), name
    size = sum(p.stat().st_size for p in MODEL_DIR.iterdir() if p.is_file())
    assert size < 25 * 2**20


def test_loads_and_calls_a_tool_with_the_network_off():
    out = run_offline(_OFFLINE_SCRIPT)
    assert out["backend"] == "hf_local"
    assert out["errors"] == []
    assert [(c["name"], c["args"]) for c in out["calls"]] == [("calculator", {"expression": "12 + 30"})]
    assert out["text"] == '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 + 30"}}\n</tool_call>'
    assert out["finish"] == "stop"


@pytest.fixture(scope="module")
def demo_handle():
    import torch

    torch.set_num_threads(1)
    return evalrx.load("evalrx-tiny", max_new_tokens=64)


@pytest.mark.parametrize("case_id", EASY_CASES)
def test_solves_easy_held_out_cases(demo_handle, case_id):
    from evalrx.grade import grade_trajectory
    from evalrx.suites import load_cases
    from evalrx.tools import get_tools

    suite = case_id.rsplit("-", 1)[0]
    case = next(c for c in load_cases(f"demo/{suite}") if c.id == case_id)
    agent = evalrx.Agent(demo_handle, get_tools(["calculator", "lookup"], case), max_turns=4)
    traj = agent.run(case)
    calls = [c for s in traj.steps for c in s.tool_calls]
    expected_calls = case.meta["reference_calls"]
    assert [c.name for c in calls] == [r["name"] for r in expected_calls]
    assert all(s.parse_error is None for s in traj.steps)
    assert traj.terminated == "final"
    assert grade_trajectory(traj, case) is evalrx.Label.PASS, traj.final_answer


def test_answers_a_greeting_without_calling_a_tool(demo_handle):
    from evalrx.tools import get_tools

    tools = [t.to_openai() for t in get_tools(["calculator", "lookup"])]
    turn = demo_handle.chat([{"role": "user", "content": "Hello!"}], tools=tools)
    assert "<tool_call>" not in turn.text
    assert "hello" in turn.text.lower()
