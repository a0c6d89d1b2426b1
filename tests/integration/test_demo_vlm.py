"""The committed demo VLM really works: it loads offline through hf_local as a VLM and solves image
cases end to end (read a card, combine two panels, zoom into a small label and read it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from offline import run_offline

import evalrx
from evalrx.core import Capability
from evalrx.specs import get_spec

MODEL_DIR = Path(get_spec("evalrx-tiny-vl").hf_repo)
# Held-out image cases the committed model solves (checked by benchmarks/demo_eval.py --spec evalrx-tiny-vl).
SOLVED = ["vision_read-001", "vision_read-002", "vision_compare-001", "vision_zoom-001", "vision_zoom-002"]


def test_the_committed_weights_and_processor_are_there():
    for name in ("config.json", "model.safetensors", "processor_config.json", "tokenizer.json", "chat_template.jinja"):
        assert (MODEL_DIR / name).is_file(), name
    size = sum(p.stat().st_size for p in MODEL_DIR.iterdir() if p.is_file())
    assert size <= 15 * 2**20
    spec = get_spec("evalrx-tiny-vl")
    assert spec.vision and spec.family == "llava" and spec.tool_call_style == "hermes"


_OFFLINE_SCRIPT = r"""
import json

import torch
torch.set_num_threads(1)
import evalrx
from evalrx.suites import load_cases
from evalrx.tools import get_tools

handle = evalrx.load("evalrx-tiny-vl", max_new_tokens=64)
case = load_cases("demo/vision_read")[0]
agent = evalrx.Agent(handle, get_tools(["calculator", "image_zoom"], case), max_turns=4)
traj = agent.run(case)
print(json.dumps({
    "backend": handle.backend,
    "vision": "vision" in {c.value for c in handle.capabilities},
    "calls": [c["name"] for s in traj.steps for c in s.tool_calls],
    "prompt_tokens": traj.steps[1].span.get("prompt_tokens"),
}))
"""


def test_loads_as_a_vlm_and_runs_an_image_case_with_the_network_off():
    out = run_offline(_OFFLINE_SCRIPT)
    assert out["backend"] == "hf_local" and out["vision"] is True
    assert out["calls"] == ["calculator"]
    assert out["prompt_tokens"] > 64  # the picture's 64 tokens are in the prompt


@pytest.fixture(scope="module")
def vlm():
    import torch

    torch.set_num_threads(1)
    handle = evalrx.load("evalrx-tiny-vl", max_new_tokens=64)
    assert Capability.VISION in handle.capabilities
    return handle


@pytest.mark.parametrize("case_id", SOLVED)
def test_solves_held_out_image_cases(vlm, case_id):
    from evalrx.grade import grade_trajectory
    from evalrx.suites import load_cases
    from evalrx.tools import get_tools

    suite = case_id.rsplit("-", 1)[0]
    case = next(c for c in load_cases(f"demo/{suite}") if c.id == case_id)
    traj = evalrx.Agent(vlm, get_tools(["calculator", "image_zoom"], case), max_turns=4).run(case)
    calls = [(c["name"], c["args"]) for s in traj.steps for c in s.tool_calls]
    assert calls == [(r["name"], r["arguments"]) for r in case.meta["reference_calls"]]
    assert traj.terminated == "final"
    assert grade_trajectory(traj, case) is evalrx.Label.PASS, traj.final_answer
    if suite == "vision_zoom":  # the zoomed picture was shown to the model after the tool's reply
        tool_step = next(s for s in traj.steps if s.role.value == "tool")
        assert tool_step.observation["n_images"] == 1
