"""tests/framework_traces.py runs real agent frameworks against `evalrx serve` and writes their traces.

A sanity check of the trace producer only (reading the traces is the importer's business): each
framework's run against the demo model on loopback ends, writes spans as the SDK's JSON lines and
as one OTLP/JSON request, with the OpenInference span kinds and both agents' names in them.
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
    pytest.importorskip("openinference.instrumentation.smolagents", reason="the dev extra: pip install 'evalrx[dev]'")
    spans, summary, _ = _run("smolagents", url, tmp_path)
    assert {"AGENT", "LLM", "TOOL"} <= _kinds(spans), summary
    agents = {s["name"] for s in spans if s["attributes"].get(KIND) == "AGENT"}
    assert {"manager.run", "math_calculator.run"} <= agents, agents
    tools = {s["attributes"].get("tool.name") for s in spans if s["attributes"].get(KIND) == "TOOL"}
    assert "calculator" in tools


def test_autogen_round_robin_of_two_agents(url, tmp_path):
    pytest.importorskip(
        "openinference.instrumentation.autogen_agentchat", reason="the dev extra: pip install 'evalrx[dev]'"
    )
    spans, summary, _ = _run("autogen", url, tmp_path)
    assert {"AGENT", "LLM"} <= _kinds(spans), summary
    agents = {s["name"] for s in spans if s["attributes"].get(KIND) == "AGENT"}
    assert {"solver.on_messages_stream", "checker.on_messages_stream"} <= agents, agents
