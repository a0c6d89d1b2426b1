"""End to end: `evalrx serve` as a real subprocess, the `api` backend against it, hf_local as the reference.

The same tiny random Qwen2 checkpoint is loaded in-process (hf_local) and served over HTTP;
every turn must come back identical through both paths: same text, same tool calls after
codec parsing, same token counts, same log-probabilities.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from servehelpers import get_json, serving

import evalrx
from evalrx.core.tool import Tool
from evalrx.models.toolcodec import OpenAIToolCodec, QwenToolCodec
from evalrx.tools import get_tools

QWEN = "qwen2.5-0.5b-instruct"
MAX_NEW = 12  # gibberish from a random model: a few tokens prove equality as well as many
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tiny_qwen_dir, tmp_path_factory):
    """`evalrx serve` of the tiny checkpoint as a real process on loopback."""
    log = tmp_path_factory.mktemp("serve") / "stderr.log"
    with serving(QWEN, log, checkpoint=str(tiny_qwen_dir), max_new_tokens=MAX_NEW) as url:
        yield url


@pytest.fixture(scope="module")
def local(tiny_qwen_dir):
    return evalrx.load(QWEN, checkpoint=str(tiny_qwen_dir), device="cpu", max_new_tokens=MAX_NEW)


@pytest.fixture(scope="module")
def remote(server):
    return evalrx.load(
        QWEN,
        backend="api",
        base_url=server,
        api_key="sk-not-needed",
        max_new_tokens=MAX_NEW,
        max_retries=0,
        timeout=120,
    )


def _post_raw(url: str, data: bytes):
    req = urllib.request.Request(
        url + "/chat/completions", data=data, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


CALCULATOR = get_tools(["calculator"])[0]
SEARCH = Tool("search", "Search the web.", {"type": "object", "properties": {"query": {"type": "string"}}})
TOOLS = [CALCULATOR.to_openai(), SEARCH.to_openai()]

_STAGE_1 = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 3*4? Use the calculator tool."},
]
_STAGE_2 = _STAGE_1 + [
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "3*4"}}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_a", "name": "calculator", "content": "12"},
]
_STAGE_3 = _STAGE_2 + [
    {"role": "assistant", "content": "The answer is 12."},
    {"role": "user", "content": "And the weather in Paris? Also compute 5*6."},
    {
        "role": "assistant",
        "content": "Let me check both.",
        "tool_calls": [
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "search", "arguments": {"query": "weather in Paris"}},
            },
            {
                "id": "call_c",
                "type": "function",
                "function": {"name": "calculator", "arguments": {"expression": "5*6"}},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_b", "content": "Sunny, 21 degrees."},
    {"role": "tool", "tool_call_id": "call_c", "content": "30"},
]
SCRIPTED = {"user_turn": _STAGE_1, "after_tool_result": _STAGE_2, "two_calls_two_results": _STAGE_3}


def _assert_same_turn(hf_turn, api_turn):
    """hf_local's raw text parsed by the Hermes codec == the server's native reply parsed by the OpenAI codec."""
    hf = QwenToolCodec().parse(hf_turn)
    api = OpenAIToolCodec().parse(api_turn)
    assert [c.signature() for c in api.calls] == [c.signature() for c in hf.calls]
    if hf.errors:
        assert api_turn.text == hf_turn.text  # malformed markup comes back raw
    else:
        assert api.text == hf.text
        if not hf.calls:
            assert api_turn.text == hf_turn.text.strip()
    assert api_turn.usage["prompt_tokens"] == hf_turn.usage["prompt_tokens"]
    assert api_turn.usage["completion_tokens"] == hf_turn.usage["completion_tokens"]
    assert api_turn.finish_reason == ("tool_calls" if hf.calls else hf_turn.finish_reason)


@pytest.mark.slow
@pytest.mark.parametrize("stage", list(SCRIPTED))
def test_scripted_turn_is_identical_through_the_server(local, remote, stage):
    messages = SCRIPTED[stage]
    hf_turn = local.chat(messages, TOOLS)
    api_turn = remote.chat(messages, TOOLS)
    assert hf_turn.usage["completion_tokens"] > 0
    _assert_same_turn(hf_turn, api_turn)


@pytest.mark.slow
def test_history_with_tool_calls_reaches_the_model_unchanged(local, remote):
    # Same prompt length with and without wire conversion, and longer than without the calls:
    # the server re-rendered the assistant calls and folded tool results exactly as hf_local did.
    hf_turn = local.chat(_STAGE_3, TOOLS)
    api_turn = remote.chat(_STAGE_3, TOOLS)
    shorter = local.chat(_STAGE_3[:5], TOOLS)
    assert api_turn.usage["prompt_tokens"] == hf_turn.usage["prompt_tokens"] > shorter.usage["prompt_tokens"]
    # Without tools the schema block leaves the prompt.
    no_tools_hf = local.chat(_STAGE_1, None)
    no_tools_api = remote.chat(_STAGE_1, None)
    _assert_same_turn(no_tools_hf, no_tools_api)
    assert no_tools_api.usage["prompt_tokens"] < local.chat(_STAGE_1, TOOLS).usage["prompt_tokens"]


@pytest.mark.slow
def test_logprobs_match_hf_local(local, remote):
    hf_turn = local.chat(_STAGE_2, TOOLS, logprobs=True)
    api_turn = remote.chat(_STAGE_2, TOOLS, logprobs=True)
    assert hf_turn.logprobs and api_turn.logprobs
    assert [lp["token"] for lp in api_turn.logprobs] == [lp["token"] for lp in hf_turn.logprobs]
    for a, h in zip(api_turn.logprobs, hf_turn.logprobs):
        assert a["logprob"] <= 0.0
        assert abs(a["logprob"] - h["logprob"]) < 1e-4
    assert len(api_turn.logprobs) == api_turn.usage["completion_tokens"]


@pytest.mark.slow
def test_agent_trajectories_match(local, remote):
    trajectories = []
    for handle in (local, remote):
        agent = evalrx.Agent(handle, [CALCULATOR], max_turns=3, system="You are a helpful assistant.")
        trajectories.append(agent.run("What is 3*4? Use the calculator tool."))
    hf_traj, api_traj = trajectories

    def shape(traj):
        return [
            (
                s.role,
                [c.signature() for c in s.tool_calls],
                s.span.get("prompt_tokens"),
                s.span.get("completion_tokens"),
            )
            for s in traj.steps
        ]

    assert shape(api_traj) == shape(hf_traj)
    assert api_traj.final_answer == hf_traj.final_answer
    assert api_traj.metrics["terminated"] == hf_traj.metrics["terminated"]


@pytest.mark.slow
def test_server_rejects_malformed_requests_and_keeps_serving(server, remote):
    code, payload = _post_raw(server, b'{"messages": [')
    assert code == 400 and payload["error"]["type"] == "invalid_request_error"
    code, payload = _post_raw(server, json.dumps({"model": QWEN}).encode())
    assert code == 400 and "messages" in payload["error"]["message"]
    code, payload = _post_raw(
        server,
        json.dumps(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
                    }
                ]
            }
        ).encode(),
    )
    assert code == 400 and "does not accept images" in payload["error"]["message"]
    code, models = get_json(server, "/v1/models")
    assert code == 200 and models["data"][0]["id"] == QWEN
    assert remote.chat(_STAGE_1).usage["completion_tokens"] > 0  # still serving


@pytest.mark.slow
def test_port_in_use_is_one_clear_line(server, tiny_qwen_dir):
    port = server.rsplit(":", 1)[1].split("/")[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evalrx.cli",
            "serve",
            "--spec",
            QWEN,
            "--checkpoint",
            str(tiny_qwen_dir),
            "--port",
            port,
            "--quiet",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert f"Cannot listen on 127.0.0.1:{port}" in proc.stderr and "Traceback" not in proc.stderr
