"""A run's one shape (`evalrx.config.RunConfig`): typed runtime, analyzer entries and MCP servers, one
serialisation and one reader that still reads the configs stored before it was versioned."""

from __future__ import annotations

import pytest

from evalrx.config import CONFIG_VERSION, AnalyzerEntry, McpServer, ModelConfig, RunConfig, RuntimeConfig

# A queued run's config as the store held it before `to_dict` wrote a version (no version, a None backend).
STORED_BEFORE_VERSIONS = {
    "model": {"name": "evalrx-tiny", "backend": None, "want": [], "checkpoint": None, "device": None, "dtype": None},
    "tools": ["calculator"],
    "suite": "demo/arithmetic_easy",
    "case_file": None,
    "max_turns": 6,
    "system": None,
    "block_repeat_calls": False,
    "force_final_answer": False,
    "concurrency": 4,
    "analyzers": ["logit_lens", {"name": "tool_decision", "precision": "bfloat16"}],
    "base_url": None,
    "runtime": {"max_new_tokens": 48, "temperature": 0.7},
    "chat_kwargs": {},
    "repeats": 3,
    "seed": 11,
    "mcp_servers": [{"name": "time", "command": "python", "args": ["-m", "mcp_server_time"]}],
}


def test_a_config_stored_before_versions_loads_typed():
    run = RunConfig.from_dict(STORED_BEFORE_VERSIONS)
    assert run.model.backend == "hf_local"  # the default, written once
    assert run.runtime == RuntimeConfig(max_new_tokens=48, temperature=0.7)
    assert run.analyzers == [AnalyzerEntry("logit_lens"), AnalyzerEntry("tool_decision", {"precision": "bfloat16"})]
    assert run.mcp_servers == [McpServer("time", command="python", args=["-m", "mcp_server_time"])]
    stored = run.to_dict()
    assert stored["version"] == CONFIG_VERSION and RunConfig.from_dict(stored) == run
    assert {k: v for k, v in stored.items() if k not in ("version", "model")} == {
        k: v for k, v in STORED_BEFORE_VERSIONS.items() if k != "model"
    }  # the same keys and values as before, the version added


def test_a_config_from_a_newer_evalrx_is_one_line():
    with pytest.raises(ValueError, match=r"^run config version 99 is newer than this evalrx reads \(2\); upgrade"):
        RunConfig.from_dict({"version": 99, "model": {"name": "evalrx-tiny"}})


def test_entries_are_parsed_once_when_the_run_is_made():
    run = RunConfig(model=ModelConfig("evalrx-tiny"), analyzers=[" Logit_Lens "], runtime={"temperature": 0.5})
    assert run.analyzers == [AnalyzerEntry("logit_lens")] and run.runtime.temperature == 0.5
    with pytest.raises(ValueError, match=r"unknown runtime setting\(s\) \['headers'\]; known: "):
        RunConfig(model=ModelConfig("evalrx-tiny"), runtime={"headers": {}})
    with pytest.raises(ValueError, match="has neither"):
        RunConfig(model=ModelConfig("evalrx-tiny"), mcp_servers=[{"name": "x"}])


def test_a_run_to_run_never_drops_an_entry_that_does_not_parse_but_an_imported_config_may():
    stored = RunConfig(model=ModelConfig("evalrx-tiny"), analyzers=["logit_lens"]).to_dict()
    stored["analyzers"].append({"name": 7})
    stored["mcp_servers"] = [{"command": ""}]
    tolerant = RunConfig.from_dict(stored)  # an imported run's config, read as far as it says
    assert [e.name for e in tolerant.analyzers] == ["logit_lens"] and tolerant.mcp_servers == []
    with pytest.raises(ValueError, match=r"^the run config's analyzer entry 2 does not parse: ") as err:
        RunConfig.from_dict(stored, strict=True)
    assert "\n" not in str(err.value)
