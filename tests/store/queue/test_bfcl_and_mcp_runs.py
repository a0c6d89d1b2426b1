"""BFCL cases and MCP tools through the real worker and store, against an API model on loopback.

The model is an OpenAI-compatible server on a real socket that checks what it is sent (wire-named
tools, JSON Schema, the MCP server's tools) and answers with native tool calls; the MCP server is
the real `mcp-server-time` from PyPI over stdio.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import evalrx.store as S
from evalrx.config import ModelConfig, RunConfig
from evalrx.runner import Worker, enqueue_run
from evalrx.suites import load_cases

BFCL_TYPES = {"dict", "float", "tuple", "any"}


def _schema_types(schema, out):
    if isinstance(schema, dict):
        if isinstance(schema.get("type"), str):
            out.add(schema["type"])
        for sub in (schema.get("properties") or {}).values():
            _schema_types(sub, out)
        _schema_types(schema.get("items"), out)
    return out


class ToolServer:
    """Answers chat completions with native tool calls chosen by `plan(prompt, tools)`, or with text
    once a tool result is in the conversation; records every request body (`requests`)."""

    def __init__(self, plan, *, follow_turns: bool = False) -> None:
        requests = self.requests = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                requests.append(body)
                messages, tools = body["messages"], body.get("tools") or []
                prompt = next(m["content"] for m in messages if m["role"] == "user")
                results = [m for m in messages if m["role"] == "tool"]
                if follow_turns:  # a conversation: plan for the latest user turn, with its own results
                    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
                    prompt, results = messages[last]["content"], [m for m in messages[last:] if m["role"] == "tool"]
                calls = [] if results or not tools else plan(prompt, tools)  # no tools: a ping
                if calls:
                    content = None
                elif results:
                    content = f"done: {str(results[-1]['content'])[:200]}"
                else:
                    content = "No function fits this request."
                message = {"role": "assistant", "content": content}
                if calls:
                    message["tool_calls"] = [
                        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                        for i, (n, a) in enumerate(calls)
                    ]
                reply = {
                    "id": "c",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "m",
                    "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop", "message": message}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-evalrx-test-not-a-real-key")


def test_a_bfcl_run_on_an_api_model_is_graded_by_its_calls_and_keeps_its_tools(store_url, api_key):
    store = S.connect(store_url)
    simple = {c.id: c for c in load_cases("bfcl/simple_python")}
    cases = [simple["simple_python_0"], simple["simple_python_1"], simple["simple_python_2"]]
    cases.append(load_cases("bfcl/irrelevance")[0])
    by_prompt = {c.inputs.prompt: c for c in cases}

    def plan(prompt, tools):
        case = by_prompt[prompt]
        if not case.meta["reference_calls"]:
            return []
        ref = case.meta["reference_calls"][0]
        args = dict(ref["arguments"])
        if case.id == "simple_python_0":
            args["unit"] = "cm"  # not among BFCL's answers: this case fails, and says why
        return [(ref["name"].replace(".", "_"), args)]

    with ToolServer(plan) as server:
        cfg = RunConfig(model=ModelConfig("gpt-4o-mini", backend="api"), tools=[], max_turns=3, base_url=server.url)
        run_id = enqueue_run(cfg, cases, store=store)
        Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    # The server saw valid OpenAI names and JSON Schema, never BFCL's dialect.
    for body in server.requests:
        for tool in body.get("tools") or []:
            assert "." not in tool["function"]["name"]
            assert not (_schema_types(tool["function"]["parameters"], set()) & BFCL_TYPES)
    assert len(server.requests) == 4, "a call-graded case ends at its first calling turn: one request each"
    rows = {r.sample_id: r for r in S.list_trajectories(run_id=run_id, limit=10, store=store).rows}
    assert {k: r.outcome for k, r in rows.items()} == {
        "simple_python_0": "fail",
        "simple_python_1": "pass",
        "simple_python_2": "pass",
        "irrelevance_0": "pass",
    }
    assert {r.terminated for k, r in rows.items() if k != "irrelevance_0"} == {"calls"}
    assert rows["simple_python_0"].diagnosis_kind == "bad_arguments"
    failed = S.get_trajectory(rows["simple_python_0"].id, store=store)
    assert failed.trajectory.metrics["grade_reason"] == "`unit`: got 'cm', want one of 'units', ''"
    fact = S.get_trajectory(rows["simple_python_1"].id, store=store)
    assert fact.trajectory.steps[1].tool_calls[0].name == "math.factorial"  # BFCL's name, not the wire name
    offered = fact.trajectory.offered_tools
    assert [(t["name"], t["source"]) for t in offered] == [("math.factorial", "case")]
    assert offered[0]["parameters"]["properties"]["number"]["type"] == "integer"
    # Exported, the trajectory carries what it was offered (a name apart from the tools it called).
    rows_out = list(S.iter_export_rows(run_id, store=store))
    by_case = {r["case_id"]: r for r in rows_out}
    assert by_case["simple_python_1"]["offered_tools"] == offered


def _time_server() -> dict:
    return {"name": "time", "command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}


def _children() -> set:
    import os

    me = str(os.getpid())
    found = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    if fh.read().rsplit(")", 1)[1].split()[1] == me:
                        found.add(int(pid))
            except OSError:
                continue
    return found


def test_a_run_with_an_mcp_server_calls_it_per_case_and_records_who_answered(sqlite_url, api_key):
    store = S.connect(sqlite_url)
    cases = load_cases("demo/arithmetic_easy")[:2]
    before = _children()

    def plan(prompt, tools):
        names = {t["function"]["name"] for t in tools}
        assert {"get_current_time", "convert_time", "calculator", "add"} <= names  # the server's beside the run's
        return [("get_current_time", {"timezone": "UTC"}), ("add", {"a": 2, "b": "x"}), ("add", {"a": 2, "b": 3})]

    with ToolServer(plan) as server:
        cfg = RunConfig(
            model=ModelConfig("gpt-4o-mini", backend="api"),
            tools=["calculator", "fixtures.pyfuncs:add"],  # a built-in and a Python function
            mcp_servers=[_time_server()],
            max_turns=3,
            base_url=server.url,
        )
        run_id = enqueue_run(cfg, cases, store=store)
        Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    rows = S.list_trajectories(run_id=run_id, limit=10, store=store).rows
    assert len(rows) == 2 and all(r.outcome in ("pass", "fail") for r in rows)
    detail = S.get_trajectory(rows[0].id, store=store)
    tool_step = next(s for s in detail.trajectory.steps if s.role.value == "tool")
    assert tool_step.content == "get_current_time"
    assert "UTC" in json.dumps(tool_step.observation.value)  # the real server's answer
    offered = {t["name"]: t for t in detail.trajectory.offered_tools}
    assert offered["get_current_time"]["source"] == "mcp" and offered["get_current_time"]["origin"] == "time"
    assert offered["get_current_time"]["annotations"].get("read_only_hint") is True
    assert offered["calculator"]["source"] == "builtin"
    assert (offered["add"]["source"], offered["add"]["origin"]) == ("python", "fixtures.pyfuncs:add")
    assert offered["add"]["parameters"]["required"] == ["a", "b"]
    bad, good = [s for s in detail.trajectory.steps if s.role.value == "tool" and s.content == "add"]
    assert bad.span.get("tool_error") and "b" in bad.observation.text  # validated against the schema first
    assert good.observation.text == "5"
    assert _children() <= before, "every case's server session was closed"


FLAKY = str(Path(__file__).resolve().parents[2] / "fixtures" / "mcp_flaky_server.py")


@pytest.mark.parametrize("shared", [False, True])
def test_mcp_images_are_stored_a_crash_or_hang_is_an_observation_and_sessions_are_per_case_unless_shared(
    sqlite_url, api_key, caplog, shared
):
    store = S.connect(sqlite_url)
    cases = load_cases("demo/arithmetic_easy")[:7]
    tools = ["pid", "pid", "crash", "pid", "picture", "sleep", "pid"]  # sleep: a server that never answers
    script = {c.inputs.prompt: tool for c, tool in zip(cases, tools)}

    def plan(prompt, tools):
        return [(script[prompt], {"seconds": 600} if script[prompt] == "sleep" else {})]

    server_entry = {"name": "flaky", "command": sys.executable, "args": [FLAKY], "timeout": 2}
    if shared:
        server_entry["shareSession"] = True
    before = _children()
    with caplog.at_level("INFO", logger="evalrx.worker"), ToolServer(plan) as server:
        cfg = RunConfig(
            model=ModelConfig("gpt-4o-mini", backend="api"),
            tools=[],
            mcp_servers=[server_entry],
            max_turns=2,
            base_url=server.url,
            concurrency=1,
        )
        run_id = enqueue_run(cfg, cases, store=store)
        Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    rows = {r.sample_id: r for r in S.list_trajectories(run_id=run_id, limit=10, store=store).rows}
    assert len(rows) == 7 and all(r.outcome != "error" for r in rows.values())  # every case went on

    def tool_step(case):
        detail = S.get_trajectory(rows[case.id].id, store=store)
        return detail, next(s for s in detail.trajectory.steps if s.role.value == "tool")

    (_, pid1), (_, pid2), (_, crash), (_, pid3), _, (_, hung), (_, pid4) = (tool_step(c) for c in cases)
    assert hung.span.get("tool_error") and str(hung.observation).startswith("[tool error in 'sleep': ")
    assert "did not answer within 2 s" in str(hung.observation)  # ended at the server's deadline
    assert not pid4.span.get("tool_error")  # the next case went on, with a server that answers
    assert S.step_pictures(rows[cases[4].id].id, store=store), "the server's image is stored like any tool image"
    assert crash.span.get("tool_error") and "crash" in json.dumps(crash.observation.value)
    assert "flaky server starting" in caplog.text, "the server's stderr goes to the worker log"
    assert not pid3.span.get("tool_error") and pid3.observation != pid1.observation  # a new server after the crash
    if shared:
        assert pid1.observation == pid2.observation  # one session (one server process) across cases
    else:
        assert pid1.observation != pid2.observation  # a fresh server per case
    assert _children() <= before


def test_a_bfcl_multi_turn_run_on_an_api_model_gives_each_turn_after_the_answer_and_grades_by_state(
    sqlite_url, api_key
):
    from evalrx.tools.environment import Environment

    store = S.connect(sqlite_url)
    cases = load_cases("bfcl/multi_turn_base")[:2]
    # Each user turn answered with its ground-truth calls, then text (the second case's first turn misses one).
    plans: dict = {}
    for case in cases:
        env = Environment.from_spec(case.meta["environment"])
        for k, turn in enumerate(case.meta["turns"]):
            calls = []
            for text in turn["expected"]:
                name, args, kwargs = env.parse_call_string(text)
                calls.append((name, env.bound_arguments(name, args, kwargs) or dict(kwargs)))
            if case is cases[1] and k == 0:
                calls = calls[:-1]  # a needed call dropped
            plans[turn["prompt"]] = calls

    def plan(prompt, tools):
        return plans[prompt]

    with ToolServer(plan, follow_turns=True) as server:
        cfg = RunConfig(model=ModelConfig("gpt-4o-mini", backend="api"), tools=[], max_turns=3, base_url=server.url)
        run_id = enqueue_run(cfg, cases, store=store)
        Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    rows = {r.sample_id: r for r in S.list_trajectories(run_id=run_id, limit=10, store=store).rows}
    good = S.get_trajectory(rows[cases[0].id].id, store=store)
    users = [s for s in good.trajectory.steps if s.role.value == "user"]
    assert [s.content for s in users] == [t["prompt"] for t in cases[0].meta["turns"]]
    assert rows[cases[0].id].outcome == "pass", good.trajectory.metrics.get("grade_reason")
    assert {t["source"] for t in good.trajectory.offered_tools} == {"environment"}
    bad = S.get_trajectory(rows[cases[1].id].id, store=store)
    assert rows[cases[1].id].outcome == "fail" and bad.trajectory.metrics["grade_reason"].startswith("user turn 1: ")
    assert rows[cases[1].id].grade_turn == 0  # the list says "fail (turn 1)"
    assert rows[cases[1].id].diagnosis_kind in ("no_tool_call", "wrong_tool", "bad_arguments")
