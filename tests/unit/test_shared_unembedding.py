"""`logit_lens` and `tool_decision` on one pass share one unembedding of the hidden states at their positions.

Real bundled demo model, a real agent trajectory with a tool call: together they give what each gives alone,
and the lens' unembedding (`ModelParts.lens_logits`) runs once per pass instead of once per analyzer.
"""

from __future__ import annotations

import numpy as np
import pytest

import evalrx
from evalrx.analyzers import LogitLensAnalyzer, ToolDecisionAnalyzer, TrajectoryPlan, analyze
from evalrx.internals.passes import local_model
from evalrx.models.agent import Agent
from evalrx.suites import load_cases
from evalrx.tools import get_tools


@pytest.fixture(scope="module")
def run():
    handle = evalrx.load("evalrx-tiny")
    case = load_cases("demo/lookup_easy")[0]
    tools = get_tools(["calculator", "lookup"], case=case)
    traj = Agent(handle, tools).run(case)
    return handle, traj, [t.to_openai() for t in tools]


def _counting(handle, monkeypatch) -> list:
    """Count the lens' unembedding products (one per block of positions)."""
    parts = local_model(handle, "test").parts
    calls: list = []
    inner = parts.lens_logits

    def spy(*args, **kwargs):
        calls.append(args[0].shape[0])
        return inner(*args, **kwargs)

    monkeypatch.setattr(parts, "lens_logits", spy)
    return calls


@pytest.mark.parametrize("precision", ["exact", "bfloat16"])
def test_lens_and_tool_decision_together_equal_each_alone_from_one_unembedding(run, monkeypatch, precision):
    handle, traj, tools = run
    lens_alone = LogitLensAnalyzer(precision=precision)
    td_alone = ToolDecisionAnalyzer(precision=precision)
    calls = _counting(handle, monkeypatch)
    alone = {
        "logit_lens": lens_alone.run_trajectory(handle, traj, tools=tools),
        "tool_decision": td_alone.run_trajectory(handle, traj, tools=tools),
    }
    separate = len(calls)
    calls.clear()
    together = analyze(
        handle,
        traj,
        [LogitLensAnalyzer(precision=precision), ToolDecisionAnalyzer(precision=precision)],
        tools=tools,
        captures=None,
    )
    n_passes = len(TrajectoryPlan.build(local_model(handle, "test"), traj, tools=tools).passes)
    assert alone["tool_decision"].decisions and len(alone["logit_lens"].positions)
    assert len(calls) == n_passes and separate == 2 * n_passes  # one block a pass on the demo model
    for name, result in alone.items():
        a, b = result.to_arrays(), together[name].to_arrays()
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{name}.{key}")
    assert together["tool_decision"].decisions == alone["tool_decision"].decisions
