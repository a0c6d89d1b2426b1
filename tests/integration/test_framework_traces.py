"""Traces that real agent frameworks write, imported: smolagents (a manager with one managed agent) and
autogen-agentchat (a two-agent round-robin team) run against `evalrx serve` over the demo model on loopback,
traced by their OpenInference instrumentors and written by the OpenTelemetry SDK (`tests/framework_traces.py`).

Whatever the demo model says, each file (the SDK's span JSON lines and OTLP/JSON alike) imports with every span
accounted for (steps + skipped spans = spans), each model call and tool call a step of the agent whose AGENT
span holds it, with its tool name and its span's latency.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from servehelpers import serving

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "framework_traces.py"
KIND = "openinference.span.kind"


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "stderr.log"
    with serving("evalrx-tiny", log, max_new_tokens=64) as base_url:
        yield base_url


def _run(framework: str, url: str, tmp_path: Path) -> "tuple[list, dict, dict]":
    out, otlp = tmp_path / f"{framework}.spans.jsonl", tmp_path / f"{framework}.otlp.json"
    cmd = [sys.executable, str(SCRIPT), framework, "--base-url", url, "--model", "evalrx-tiny"]
    proc = subprocess.run(
        [*cmd, "--out", str(out), "--otlp-out", str(otlp), "--timeout", "45"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    spans = [json.loads(line) for line in out.read_text().splitlines()]
    request = json.loads(otlp.read_text())
    otlp_spans = [s for rs in request["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert len(spans) == len(otlp_spans) == summary["spans"] > 0
    ids = {s["context"]["span_id"] for s in spans}
    assert {"0x" + s["spanId"] for s in otlp_spans} == ids  # OTLP/JSON: hex ids, the same spans
    assert all(s["parent_id"] is None or s["parent_id"] in ids for s in spans), "a parent span is missing"
    return spans, summary, request


def _kinds(spans: list) -> set:
    return {s["attributes"].get(KIND) for s in spans} - {None}


def test_smolagents_manager_and_managed_agent(url, tmp_path):
    spans, summary, _ = _run("smolagents", url, tmp_path)
    assert {"AGENT", "LLM", "TOOL"} <= _kinds(spans), summary
    agents = {s["name"] for s in spans if s["attributes"].get(KIND) == "AGENT"}
    assert {"manager.run", "math_calculator.run"} <= agents, agents
    tools = {s["attributes"].get("tool.name") for s in spans if s["attributes"].get(KIND) == "TOOL"}
    assert "calculator" in tools
    _imports_as_the_framework_put_it(spans, tmp_path, "smolagents", {"manager", "math_calculator"})


def test_autogen_round_robin_of_two_agents(url, tmp_path):
    spans, summary, _ = _run("autogen", url, tmp_path)
    assert {"AGENT", "LLM"} <= _kinds(spans), summary
    agents = {s["name"] for s in spans if s["attributes"].get(KIND) == "AGENT"}
    assert {"solver.on_messages_stream", "checker.on_messages_stream"} <= agents, agents
    _imports_as_the_framework_put_it(spans, tmp_path, "autogen", {"solver", "checker"})


def _agent_above(span: dict, by_id: dict) -> "str | None":
    """The agent a span belongs to, read from the raw spans: its nearest AGENT ancestor's name before the dot."""
    node = by_id.get(span["parent_id"])
    while node is not None:
        if node["attributes"].get(KIND) == "AGENT":
            return node["name"].rsplit(".", 1)[0]
        node = by_id.get(node["parent_id"])
    return None


def _imports_as_the_framework_put_it(spans: list, tmp_path: Path, framework: str, team: set) -> None:
    import evalrx.store as S
    from evalrx.interop import import_file

    by_id = {s["context"]["span_id"]: s for s in spans}
    tools = {s["context"]["span_id"][2:]: s for s in spans if s["attributes"].get(KIND) == "TOOL"}
    llms = {s["context"]["span_id"][2:]: s for s in spans if s["attributes"].get(KIND) == "LLM"}
    seen = []
    for suffix in ("spans.jsonl", "otlp.json"):
        url = f"sqlite:///{tmp_path / f'{suffix}.sqlite'}"
        S.upgrade(url)
        result = import_file(tmp_path / f"{framework}.{suffix}", store=url)
        assert result.format == "spans"
        rows = S.list_trajectories(run_id=result.run_ids[0], limit=100, store=url).rows
        trajs = [S.get_trajectory(r.id, store=url).trajectory for r in rows]
        noted = sum(int(n.split("(")[1].split(" span")[0]) for n in result.notes if "held no model call" in n)
        # every span accounted for: each trajectory's steps and skipped spans, and the traces with nothing in them
        assert sum(t.metrics["trace"]["spans"] for t in trajs) + noted == len(spans)
        for t in trajs:
            trace = t.metrics["trace"]
            assert trace["steps_from"] + sum(trace["skipped"].values()) == trace["spans"]
        (traj,) = [t for t in trajs if len(t.steps) > 1]
        assert {s.agent for s in traj.steps if s.agent} == team and {m["name"] for m in traj.roster} == team
        for step in traj.steps:
            sid = step.span.get("span_id")
            if sid in llms:  # a model call: its agent, its latency
                assert step.role.value == "actor" and step.agent == _agent_above(llms[sid], by_id)
                assert step.span["latency_ms"] > 0
            elif sid in tools:  # a tool call: its name and agent
                raw = tools[sid]
                assert step.role.value == "tool" and step.content == raw["attributes"]["tool.name"]
                assert step.agent == _agent_above(raw, by_id)
                recorded = step.to_dict()["observation"]
                assert recorded == raw["attributes"].get("output.value", recorded)
        made = {s.span.get("span_id") for s in traj.steps}
        assert set(tools) <= made and set(llms) <= made | {x for s in traj.steps for x in s.span.get("spans", [])}
        seen.append([(s.role.value, s.agent, s.content, s.tool_calls) for s in traj.steps])
        S.forget(url)
    assert seen[0] == seen[1]  # the SDK's JSON and OTLP/JSON of the same spans give the same trajectory
