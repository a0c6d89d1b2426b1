"""Case files, MCP configs and `--tools pkg.mod:fn` specs: what a user writes gives cases, servers or tools,
or one line naming what is wrong (exit 2 on the CLI), never another exception."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mutate import SEEDS, awkward_text, mutated_file, mutated_json, one_line, ran

from evalrx.config.mcp import load_mcp_config
from evalrx.runner.toolset import tool_list
from evalrx.suites import CaseFileError, load_cases


@given(raw=mutated_file("cases.jsonl") | st.binary(max_size=300))
def test_a_case_file_loads_or_says_what_is_wrong_in_one_line(raw):
    ran("case file")
    with tempfile.TemporaryDirectory(prefix="evalrx-fuzz-") as tmp:
        path = Path(tmp) / "cases.jsonl"
        path.write_bytes(raw)
        try:
            cases = load_cases(str(path))
        except CaseFileError as exc:
            assert one_line(exc), repr(str(exc))
            assert str(path) in str(exc)
        else:
            assert cases and all(c.inputs.prompt.strip() for c in cases)


MCP_SEED = json.loads((SEEDS / "mcp.json").read_text())


@pytest.mark.parametrize("as_file", [False, True])
@given(config=mutated_json(MCP_SEED), noise=st.sampled_from(["", "x", "}", "\x00"]))
def test_an_mcp_config_loads_or_says_what_is_wrong_in_one_line(as_file, config, noise):
    ran(f"mcp config {'file' if as_file else 'text'}")
    text = json.dumps(config) + noise
    with tempfile.TemporaryDirectory(prefix="evalrx-fuzz-") as tmp:
        source = text
        if as_file:
            source = str(Path(tmp) / "mcp.json")
            Path(source).write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            servers = load_mcp_config(source)
        except ValueError as exc:
            assert one_line(exc), repr(str(exc))
        else:
            assert all(s.command or s.url for s in servers)


# Module names that cannot import anything: a fuzzer must not import whatever module a string names.
absent_module = st.builds(lambda s: "evalrx_fuzz_absent" + s, st.text("abc._", max_size=6))
safe_module = st.sampled_from(["math", "json", "fixtures.pyfuncs", "evalrx.core.tool", "", " ", ".", "..x"])
tool_spec = st.builds(
    lambda m, sep, attr: f"{m}{sep}{attr}",
    safe_module | absent_module,
    st.sampled_from([":", "::", "", " : "]),
    st.sampled_from(["add", "factorial", "dumps", "NOT_CALLABLE", "ToolCall", "ToolCall.from_dict", "", "a.b"])
    | awkward_text,
)


@given(spec=tool_spec)
def test_a_python_tool_spec_gives_a_tool_or_one_line(spec):
    ran("--tools spec")
    from evalrx.tools.python_fn import python_tool

    for name in tool_list(spec) or []:
        if ":" not in name:
            continue
        try:
            tool = python_tool(name)
        except ValueError as exc:
            assert one_line(exc), repr(str(exc))
        else:
            assert tool.name
