"""A named cheaper setting for the layers' unembedding (`precision="bfloat16"`), said by the result, the run
config and the page, never in place of the exact default."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

import evalrx
from evalrx.analyzers import LogitLensAnalyzer, ToolDecisionAnalyzer, analyze
from evalrx.models import Agent
from evalrx.suites import load_cases
from evalrx.tools import get_tools

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))


@pytest.fixture(scope="module")
def run():
    handle = evalrx.load("evalrx-tiny")
    case = load_cases("demo/lookup_easy")[0]
    tools = get_tools(["calculator", "lookup"], case=case)
    traj = Agent(handle, tools).run(case)
    return handle, traj, [t.to_openai() for t in tools]


def test_bfloat16_is_close_named_and_leaves_the_last_layer_exact(run):
    handle, traj, schemas = run
    exact = analyze(handle, traj, [LogitLensAnalyzer()], tools=schemas, captures=None)["logit_lens"]
    cheap = analyze(handle, traj, [LogitLensAnalyzer(precision="bfloat16")], tools=schemas, captures=None)["logit_lens"]
    assert "precision" not in exact.info and cheap.info["precision"] == "bfloat16"
    assert cheap.to_arrays().keys() == exact.to_arrays().keys() and len(exact.positions) > 0
    last = exact.num_layers
    # The model's own logits are not recomputed: the last layer is identical.
    assert (cheap.topk_ids[last] == exact.topk_ids[last]).all()
    np.testing.assert_allclose(cheap.topk_logprobs[last], exact.topk_logprobs[last], atol=1e-6)
    # The other layers are approximate: mostly the same top-1, log-probs near, not equal.
    agree = (cheap.topk_ids[:last, :, 0] == exact.topk_ids[:last, :, 0]).mean()
    diff = np.abs(cheap.target_logprob[:last] - exact.target_logprob[:last])
    assert agree > 0.9, agree
    assert 0 < float(np.nanmedian(diff)) < 0.1, float(np.nanmedian(diff))


def test_tool_decision_takes_the_setting_too(run):
    handle, traj, schemas = run
    result = analyze(handle, traj, [ToolDecisionAnalyzer(precision="bfloat16")], tools=schemas, captures=None)
    assert result["tool_decision"].info["precision"] == "bfloat16"


def test_an_unknown_precision_is_one_line():
    with pytest.raises(ValueError, match="precision must be one of exact, bfloat16, got 'fp8'"):
        LogitLensAnalyzer(precision="fp8")


def test_the_cli_and_the_queue_take_and_check_settings(tmp_path):
    import evalrx.store as S
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import enqueue_run
    from evalrx.runner.argtypes import analyzer_names

    entries = analyzer_names("logit_lens:precision=bfloat16:top_k=5,attention")
    assert entries == [{"name": "logit_lens", "precision": "bfloat16", "top_k": 5}, "attention"]
    with pytest.raises(argparse.ArgumentTypeError, match="a setting is key=value"):
        analyzer_names("logit_lens:precision")
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    cases = load_cases("demo/lookup_easy")[:1]
    for bad, why in (
        ({"name": "logit_lens", "precision": "fp8"}, "precision must be one of"),
        ({"name": "tool_decision", "colour": 1}, "analyzer tool_decision: got an unexpected keyword argument"),
    ):
        cfg = RunConfig(model=ModelConfig("evalrx-tiny"), tools=["calculator", "lookup"], analyzers=[bad])
        with pytest.raises(ValueError, match=why):
            enqueue_run(cfg, cases, store=url)
    cfg = RunConfig(model=ModelConfig("evalrx-tiny"), tools=["calculator", "lookup"], analyzers=entries)
    run_id = enqueue_run(cfg, cases, store=url)
    assert S.get_run(run_id, store=url).config["analyzers"] == entries  # the run config names the setting
    S.forget(url)


def test_the_page_says_when_a_result_is_cheaper():
    from components.analysis_panels import cheaper_settings
    from components.launch import lens_entries

    assert lens_entries(["logit_lens", "attention", "tool_decision"], "bfloat16") == [
        {"name": "logit_lens", "precision": "bfloat16"},
        "attention",
        {"name": "tool_decision", "precision": "bfloat16"},
    ]

    class Result:
        def __init__(self, info):
            self.info = info

    lines = cheaper_settings({"logit_lens": Result({"precision": "bfloat16"}), "attention": Result({})})
    assert len(lines) == 1 and lines[0].startswith("logit_lens unembedded its layers in bfloat16")
    assert cheaper_settings({"logit_lens": Result({"top_k": 10})}) == []
