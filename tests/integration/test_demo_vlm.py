"""The committed demo VLM really works: it loads offline through hf_local as a VLM and solves image
cases end to end (read a card, combine two panels, zoom into a small label and read it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from offline import run_offline

import evalrx
from evalrx.core import Capability, Observation
from evalrx.specs import get_spec

MODEL_DIR = Path(get_spec("evalrx-tiny-vl").hf_repo)
# Held-out image cases the committed model solves (checked by benchmarks/demo_eval.py --spec evalrx-tiny-vl).
SOLVED = [
    "vision_read-001",
    "vision_read-002",
    "vision_compare-001",
    "vision_zoom-001",
    "vision_zoom-002",
    "vision_lookup-001",  # a name read from the card, looked up: a (country, fact) pair training never asks
]


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
agent = evalrx.Agent(handle, get_tools(case.meta["tools"], case), max_turns=4)
traj = agent.run(case)
print(json.dumps({
    "backend": handle.backend,
    "vision": "vision" in {c.value for c in handle.capabilities},
    "calls": [c.name for s in traj.steps for c in s.tool_calls],
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
    traj = evalrx.Agent(vlm, get_tools(case.meta["tools"], case), max_turns=4).run(case)
    calls = [(c.name, c.args) for s in traj.steps for c in s.tool_calls]
    assert calls == [(r["name"], r["arguments"]) for r in case.meta["reference_calls"]]
    assert traj.terminated == "final"
    assert grade_trajectory(traj, case) is evalrx.Label.PASS, traj.final_answer
    if suite == "vision_zoom":  # the zoomed picture was shown to the model after the tool's reply
        tool_step = next(s for s in traj.steps if s.role.value == "tool")
        assert tool_step.observation.value["n_images"] == 1


@pytest.fixture(scope="module")
def zoom_run(vlm):
    """A zoom case run with generation capture on, as the worker runs it, with the pictures it showed."""
    from evalrx.models.agent import run_case
    from evalrx.runner.analysis import with_capture
    from evalrx.runner.toolset import capturing, pictures_by_step, shown_pictures
    from evalrx.suites import load_cases
    from evalrx.tools import get_tools

    case = load_cases("demo/vision_zoom")[0]
    returned: list = []
    tools = [capturing(t, returned) for t in get_tools(case.meta["tools"], case)]
    kwargs = with_capture({"max_turns": 4}, vlm, ["logit_lens", "attention"])
    traj = run_case(vlm, case, tools, **kwargs)
    images = shown_pictures(traj, case, pictures_by_step(traj, returned))
    return traj, [t.to_openai() for t in tools], images


def test_the_passes_see_both_pictures_and_reproduce_what_the_model_generated(vlm, zoom_run):
    """With the pictures the teacher-forced pass predicts every token the model generated (the code it read
    from the zoomed picture included); with the pictures dropped it cannot."""
    from evalrx.analyzers import TrajectoryPlan
    from evalrx.internals.passes import local_model, teacher_forced

    traj, schemas, images = zoom_run
    assert sorted(images) == [0, 2]  # the case picture on the prompt, the zoomed one on the tool's step
    local = local_model(vlm, "test")
    seen = TrajectoryPlan.build(local, traj, tools=schemas, images=images)
    blind = TrajectoryPlan.build(local, traj, tools=schemas)
    assert [(s.step, s.n, s.grid) for s in seen.passes[0].images] == [(0, 64, (8, 8)), (2, 64, (8, 8))]
    assert not blind.passes[0].images and len(seen.passes[0].ids) == len(blind.passes[0].ids) + 2 * 64

    def agreement(plan):
        tf = plan.passes[0]
        gen = [i for pt in tf.turns for i in range(pt.gen_tokens[0], pt.gen_tokens[1])]
        logits, _, _ = teacher_forced(local, tf.ids, [i - 1 for i in gen], hidden=False, inputs=plan.inputs(0))
        return sum(int(a == tf.ids[i]) for a, i in zip(logits.argmax(-1).tolist(), gen)) / len(gen)

    assert agreement(seen) == 1.0
    assert agreement(blind) < 1.0  # the digits cannot be predicted without the pictures


def test_patch_attention_sums_to_each_pictures_share_and_the_capture_matches_the_pass(vlm, zoom_run):
    import numpy as np

    from evalrx.analyzers import analyze

    traj, schemas, images = zoom_run
    names = ["logit_lens", "attention"]
    captured = analyze(vlm, traj, names, tools=schemas, images=images)
    forced = analyze(vlm, traj, names, tools=schemas, images=images, captures=None)
    att = captured["attention"]
    assert att.info["source"] == "generation" and forced["attention"].info["source"] == "teacher_forced"
    assert [(img["step"], img["n"], img["grid"]) for img in att.images] == [(0, 64, [8, 8]), (2, 64, [8, 8])]
    for img in att.images:
        seg = next(i for i, s in enumerate(att.segments) if s["kind"] == "image" and s["step"] == img["step"])
        block = att.patches[:, :, img["offset"] : img["offset"] + img["n"]]
        np.testing.assert_allclose(block.sum(-1), att.mass[:, :, seg], atol=1e-5)
    answer = [p for p, s in enumerate(att.labels["label_step"]) if s == 3]  # the answer, after the zoom
    zoomed = next(i for i, s in enumerate(att.segments) if s["kind"] == "image" and s["step"] == 2)
    assert answer and (att.mass[answer, :, zoomed] > 0).all()
    assert att.patch_map(answer[0], 1).shape == (8, 8)
    np.testing.assert_allclose(att.patches, forced["attention"].patches, atol=1e-5)
    np.testing.assert_allclose(captured["logit_lens"].entropy, forced["logit_lens"].entropy, atol=1e-4)


def test_text_holding_the_image_token_is_refused_rather_than_misplacing_the_pictures(vlm, zoom_run):
    import copy

    from evalrx.analyzers import analyze

    traj, schemas, images = zoom_run
    forged = copy.deepcopy(traj)
    tool_step = next(s for s in forged.steps if s.role.value == "tool")
    tool_step.observation = Observation(dict(tool_step.observation.value, text="look: <|image_pad|>"))
    errors: dict = {}
    assert analyze(vlm, forged, ["attention"], tools=schemas, images=images, captures=None, errors=errors) == {}
    assert "3 image tokens for 2 pictures" in str(errors["attention"])
