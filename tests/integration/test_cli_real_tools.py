"""`evalrx suites` and `evalrx run` with BFCL suites and an `--mcp-config` file, straight to a JSONL file,
against an API model on loopback (it checks what it is sent) and the real `mcp-server-time`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "store" / "queue"))

from test_bfcl_and_mcp_runs import ToolServer  # noqa: E402

from evalrx.cli import main  # noqa: E402
from evalrx.suites import load_cases  # noqa: E402


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-evalrx-test-not-a-real-key")


def test_suites_lists_bfcl_categories(capsys):
    assert main(["suites"]) == 0
    out = capsys.readouterr().out
    assert "bfcl/simple_python" in out and "400 cases" in out and "bfcl/live_multiple" in out


def test_suites_says_how_to_install_bfcl_when_it_is_missing(capsys, monkeypatch):
    from evalrx.suites import bfcl

    monkeypatch.setattr(bfcl, "_data_dir", lambda: None)
    assert main(["suites"]) == 0
    out = capsys.readouterr().out
    assert "bfcl/" not in out.replace("bfcl-eval", "") and "pip install --no-deps bfcl-eval==" in out
    assert main(["run", "--spec", "gpt-4o-mini", "--suite", "bfcl/simple_python", "--out", "x.jsonl"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install --no-deps bfcl-eval" in err


def test_run_a_bfcl_suite_to_a_file_offers_only_the_cases_functions(tmp_path, api_key, capsys):
    cases = {c.inputs.prompt: c for c in load_cases("bfcl/simple_python")[:2]}

    def plan(prompt, tools):
        ref = cases[prompt].meta["reference_calls"][0]
        if cases[prompt].id == "simple_python_1":
            return [(ref["name"].replace(".", "_"), {"number": 6})]  # not BFCL's answer: fails, and says why
        return [(ref["name"].replace(".", "_"), ref["arguments"])]

    out = tmp_path / "bfcl.jsonl"
    with ToolServer(plan) as server:
        argv = ["run", "--spec", "gpt-4o-mini", "--backend", "api", "--base-url", server.url]
        argv += ["--suite", "bfcl/simple_python", "--limit", "2", "--out", str(out), "--no-progress"]
        assert main(argv) == 0
    rows = sorted((json.loads(line) for line in out.read_text().splitlines()), key=lambda r: r["case_id"])
    assert [r["outcome"] for r in rows] == ["pass", "fail"]  # API cases run concurrently: in any order
    offered = [[t["name"] for t in r["offered_tools"]] for r in rows]
    assert rows[1]["metrics"]["grade_reason"] == "`number`: got 6, want one of 5"  # graded as the worker grades
    assert offered == [["calculate_triangle_area"], ["math.factorial"]]  # no calculator, no lookup
    assert {t["function"]["name"] for b in server.requests for t in b.get("tools") or []} == {
        "calculate_triangle_area",
        "math_factorial",
    }


def test_run_with_an_mcp_config_file_calls_the_real_server(tmp_path, api_key):
    config = tmp_path / "servers.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
                }
            }
        )
    )

    def plan(prompt, tools):
        return [("convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"})]

    out = tmp_path / "mcp.jsonl"
    with ToolServer(plan) as server:
        argv = ["run", "--spec", "gpt-4o-mini", "--backend", "api", "--base-url", server.url, "--tools", ""]
        argv += ["--suite", "demo/arithmetic_easy", "--limit", "1", "--mcp-config", str(config), "--out", str(out)]
        assert main(argv + ["--no-progress"]) == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    tool = next(s for s in row["steps"] if s["role"] == "tool")
    assert tool["content"] == "convert_time" and "21:00" in json.dumps(tool["observation"])  # Tokyo is UTC+9
    assert {t["origin"] for t in row["offered_tools"]} == {"time"}


def test_a_bad_mcp_config_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"mcpServers": {"x": {"args": []}}}')
    argv = ["run", "--spec", "gpt-4o-mini", "--suite", "demo/arithmetic_easy", "--mcp-config", str(bad), "--out"]
    assert main(argv + [str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'x'" in err and "command" in err


def test_run_a_conversation_case_file_to_a_file(tmp_path, api_key):
    cases = tmp_path / "talk.jsonl"
    turns = [{"prompt": "What is 6 * 7?", "expected": 42}, {"prompt": "And 42 + 1?", "expected": 43}]
    cases.write_text(json.dumps({"id": "talk", "turns": turns}) + "\n")
    answers = {
        "What is 6 * 7?": [("calculator", {"expression": "6 * 7"})],
        "And 42 + 1?": [("calculator", {"expression": "42 + 1"})],
    }

    def plan(prompt, tools):
        return answers[prompt]

    out = tmp_path / "talk_out.jsonl"
    with ToolServer(plan, follow_turns=True) as server:
        argv = ["run", "--spec", "gpt-4o-mini", "--backend", "api", "--base-url", server.url, "--tools", "calculator"]
        assert main(argv + ["--cases", str(cases), "--out", str(out), "--no-progress"]) == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert [s["content"] for s in row["steps"] if s["role"] == "user"] == [t["prompt"] for t in turns]
    assert row["metrics"]["n_user_turns"] == 2
    # The loopback model answers each turn from its own call's result: "done: 42", then "done: 43".
    assert [s["content"] for s in row["steps"] if s["role"] == "actor" and not s["tool_calls"]] == [
        "done: 42",
        "done: 43",
    ]
    assert row["outcome"] == "pass"
