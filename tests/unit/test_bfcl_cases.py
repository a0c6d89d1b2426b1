"""BFCL v4 single-turn suites end to end without a real model: loading, the agent's stop at the first
calling turn, wire names mapped both ways, the grade's one-line reason and the diagnosis at the calling step.

The model is a scripted handle (the loop's own logic is under test; real-model runs are in
`benchmarks/bfcl_runs.py` and the recorded SmolLM2 outputs in `test_grade_calls.py`).
"""

from __future__ import annotations

import json

import pytest

from evalrx.core import Capability, ChatTurn, Label, StepRole, Termination
from evalrx.diagnosis import diagnose
from evalrx.grade import grade_calls
from evalrx.models.agent import Agent, run_case
from evalrx.specs import ModelSpec
from evalrx.suites import CaseFileError, case_tools, list_suites, load_case_file, load_cases
from evalrx.suites import bfcl as bfcl_suites

FULL = frozenset({Capability.GENERATE, Capability.TOOL_CALLS})
LISTED = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance", "live_simple", "live_multiple")


class Scripted:
    """Replays prepared replies and records the tool schemas it was shown."""

    def __init__(self, *texts: str) -> None:
        self.spec = ModelSpec("scripted", "test", tool_call_style="hermes")
        self.capabilities, self.backend = FULL, "hf_local"
        self.texts, self.tools_seen, self.messages_seen = list(texts), [], []

    def chat(self, messages, tools=None, **kw):
        self.tools_seen.append(tools)
        self.messages_seen.append([dict(m) for m in messages])
        reply = self.texts.pop(0) if self.texts else "done"
        return reply if isinstance(reply, ChatTurn) else ChatTurn(text=reply)


def call(name: str, **args) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def _types(schema, found):
    if isinstance(schema, dict):
        if isinstance(schema.get("type"), str):
            found.add(schema["type"])
        for key in ("properties",):
            for sub in (schema.get(key) or {}).values():
                _types(sub, found)
        if "items" in schema:
            _types(schema["items"], found)
    return found


def test_listed_categories_load_with_bfcl_ids_tools_and_ground_truth():
    names = list_suites()
    for cat in LISTED:
        assert f"bfcl/{cat}" in names
    cases = load_cases("bfcl/simple_python")
    assert len(cases) == 400 and cases[0].id == "simple_python_0"
    by_id = {c.id: c for c in cases}
    fact = by_id["simple_python_1"]
    assert fact.grader == {"kind": "calls"} and fact.expected == [{"math.factorial": {"number": [5]}}]
    assert [t.name for t in case_tools(fact)] == ["math.factorial"]
    assert case_tools(fact)[0].source == "case"
    ref = fact.meta["reference_calls"][0]
    assert ref == {"name": "math.factorial", "arguments": {"number": 5}, "accept": {"number": [5]}}
    # "" = may be omitted: every acceptable value is kept, the omittable one is not an argument.
    tri = by_id["simple_python_0"].meta["reference_calls"][0]
    assert tri["accept"]["unit"] == ["units", ""] and tri["arguments"]["unit"] == "units"
    # BFCL's dialect is gone from every schema of every listed category.
    found: set = set()
    for cat in LISTED:
        for case in load_cases(f"bfcl/{cat}"):
            for doc in case.meta["tools"]:
                assert doc["parameters"]["type"] == "object"
                _types(doc["parameters"], found)
    assert found <= {"object", "number", "integer", "string", "boolean", "array"}, found
    assert load_cases("bfcl/irrelevance")[0].expected == []


def test_live_entries_keep_their_system_prompt():
    with_system = [c for c in load_cases("bfcl/live_multiple") if c.meta.get("system")]
    assert with_system, "live_multiple has entries with a system message"
    h = Scripted(call("noop"))
    case = with_system[0]
    Agent(h, case_tools(case), system="run system").run(case)
    system = h.messages_seen[0][0]
    assert system["role"] == "system"
    assert "run system" in system["content"] and case.meta["system"][:40] in system["content"]


def test_missing_package_is_one_line_with_the_install_command(monkeypatch):
    monkeypatch.setattr(bfcl_suites, "_data_dir", lambda: None)
    assert bfcl_suites.bfcl_suites() == []
    with pytest.raises(ValueError) as err:
        load_cases("bfcl/simple_python")
    assert "pip install --no-deps bfcl-eval" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="Known BFCL suites"):
        monkeypatch.undo()
        load_cases("bfcl/no_such_category")


def test_model_sees_wire_names_and_the_trajectory_keeps_bfcls():
    case = next(c for c in load_cases("bfcl/simple_python") if c.id == "simple_python_1")
    h = Scripted(call("math_factorial", number=5))
    traj = run_case(h, case, case_tools(case), grade=True)
    shown = [t["function"]["name"] for t in h.tools_seen[0]]
    assert shown == ["math_factorial"]
    assert traj.terminated == Termination.CALLS.value
    actor = [s for s in traj.steps if s.role is StepRole.ACTOR]
    assert len(actor) == 1 and actor[0].tool_calls[0].name == "math.factorial"
    assert not [s for s in traj.steps if s.role is StepRole.TOOL], "a call-graded case runs nothing"
    assert traj.outcome is Label.PASS and traj.final_answer is None
    assert traj.offered_tools[0]["name"] == "math.factorial" and traj.offered_tools[0]["source"] == "case"
    assert diagnose(traj, case=case, tools=case_tools(case)) == []


def test_a_wrong_value_fails_with_a_one_line_reason_and_bad_arguments_at_the_call():
    case = next(c for c in load_cases("bfcl/simple_python") if c.id == "simple_python_0")
    h = Scripted(call("calculate_triangle_area", base=10, height=5, unit="cm"))
    traj = run_case(h, case, case_tools(case), grade=True)
    assert traj.outcome is Label.FAIL
    assert traj.metrics["grade_reason"] == "`unit`: got 'cm', want one of 'units', ''"
    found = diagnose(traj, case=case, tools=case_tools(case))
    assert found[0].kind == "bad_arguments" and found[0].first_wrong_step == 1
    assert found[0].source == "reference"
    assert all(d.kind != "no_final_answer" for d in found), "a run that ended by calling has no missing answer"


def test_text_instead_of_a_call_is_no_tool_call_and_irrelevance_passes_it():
    simple = load_cases("bfcl/simple_python")[1]
    traj = run_case(Scripted("The factorial of 5 is 120."), simple, case_tools(simple), grade=True)
    assert traj.terminated == Termination.FINAL.value and traj.outcome is Label.FAIL
    top = diagnose(traj, case=simple, tools=case_tools(simple))[0]
    assert top.kind == "no_tool_call" and top.first_wrong_step == 1

    irrelevant = load_cases("bfcl/irrelevance")[0]
    ok = run_case(Scripted("I cannot do that with these functions."), irrelevant, case_tools(irrelevant), grade=True)
    assert ok.outcome is Label.PASS
    name = irrelevant.meta["tools"][0]["name"]
    bad = run_case(Scripted(call(name.replace(".", "_"))), irrelevant, case_tools(irrelevant), grade=True)
    assert bad.outcome is Label.FAIL
    top = diagnose(bad, case=irrelevant, tools=case_tools(irrelevant))[0]
    assert top.kind == "unneeded_tool_call" and top.first_wrong_step == 1


def test_parallel_calls_in_any_order_pass_and_a_missing_one_fails():
    case = load_cases("bfcl/parallel")[0]
    wanted = case.meta["reference_calls"]
    calls = "\n".join(call(r["name"].replace(".", "_"), **r["arguments"]) for r in reversed(wanted))
    traj = run_case(Scripted(calls), case, case_tools(case), grade=True)
    assert traj.outcome is Label.PASS, grade_calls(traj, case)
    one = call(wanted[0]["name"].replace(".", "_"), **wanted[0]["arguments"])
    short = run_case(Scripted(one), case, case_tools(case), grade=True)
    assert short.outcome is Label.FAIL and "want" in short.metrics["grade_reason"]


def test_malformed_call_is_diagnosed_at_its_step():
    case = load_cases("bfcl/simple_python")[1]
    traj = run_case(
        Scripted('<tool_call>\n{"name": "math_factorial", "arguments": {\n</tool_call>'),
        case,
        case_tools(case),
        grade=True,
    )
    assert traj.terminated == Termination.CALLS.value and traj.outcome is Label.FAIL
    assert diagnose(traj, case=case, tools=case_tools(case))[0].kind == "malformed_call"


def test_tools_that_would_look_the_same_to_the_model_are_refused():
    from evalrx.core import Tool

    with pytest.raises(ValueError, match="both reach the model as 'a_b'"):
        Agent(Scripted(), [Tool("a.b", "one"), Tool("a_b", "two")])


def test_case_files_may_carry_function_documents(tmp_path):
    doc = {"name": "get.weather", "description": "weather", "parameters": {"type": "object", "properties": {}}}
    good = tmp_path / "cases.jsonl"
    good.write_text(json.dumps({"prompt": "weather?", "expected": [], "grader": {"kind": "calls"}, "tools": [doc]}))
    case = load_case_file(good)[0]
    assert [t.name for t in case_tools(case)] == ["get.weather"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "weather?", "tools": [{"description": "no name"}]}))
    with pytest.raises(CaseFileError) as err:
        load_case_file(bad)
    assert "bad tool document" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("style", ["hermes", "openai"])
def test_replay_rebuilds_the_conversation_the_model_saw_under_wire_names(style):
    """The white-box analyzers score what the model saw: its tool's wire name, not the name the step keeps."""
    from evalrx.core import FailureCase, Tool
    from evalrx.internals.passes import messages_from_trajectory

    tool = Tool("math.add", "add", {"type": "object", "properties": {"a": {"type": "integer"}}}, fn=lambda a: a + 1)
    h = Scripted(call("math_add", a=1), "It is 2.")
    if style == "openai":  # native calls, as an API server returns them
        h.spec = ModelSpec("scripted", "test", tool_call_style="openai")
        fn = {"name": "math_add", "arguments": '{"a": 1}'}
        h.texts = [ChatTurn(text="", tool_calls=[{"id": "c0", "type": "function", "function": fn}]), "It is 2."]
    traj = Agent(h, [tool], max_turns=3).run(FailureCase.from_prompt("add one to 1"))
    assert traj.steps[1].tool_calls[0].name == "math.add" and traj.final_answer == "It is 2."
    rebuilt = messages_from_trajectory(traj, None, [tool], style=style)
    assert rebuilt[:-1] == h.messages_seen[-1]  # up to the answer, which the model saw nothing after


def _multi_turn_script(case, change=None):
    """Replies that make each turn's ground-truth calls (as Hermes calls), then answer; `change(k, name, args)`
    may alter a call."""
    from evalrx.tools.environment import Environment

    env = Environment.from_spec(case.meta["environment"])
    replies = []
    for k, turn in enumerate(case.meta["turns"]):
        calls = []
        for text in turn["expected"]:
            name, args, kwargs = env.parse_call_string(text)
            bound = env.bound_arguments(name, args, kwargs) or dict(kwargs)
            if change is not None:
                name, bound = change(k, name, bound)
            calls.append(call(name, **bound))
        if calls:
            replies.append("\n".join(calls))
        replies.append(f"Done with turn {k + 1}.")
    return replies


def test_a_bfcl_multi_turn_case_runs_on_its_own_environment_and_is_graded_by_state():
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner.toolset import static_tools

    case = load_cases("bfcl/multi_turn_base")[0]
    run = RunConfig(model=ModelConfig("scripted"), tools=[])
    tools = static_tools(run, case)
    assert {t.source for t in tools} == {"environment"} and {t.origin for t in tools} == {
        "GorillaFileSystem",
        "TwitterAPI",
    }
    traj = run_case(Scripted(*_multi_turn_script(case)), case, tools, grade=True, max_turns=3)
    assert traj.metrics["user_turns_reached"] == 4 and traj.outcome is Label.PASS, traj.metrics.get("grade_reason")
    # The calls ran on the live environment: the observations are its answers.
    greps = [s for s in traj.steps if s.role is StepRole.TOOL and s.content == "grep"]
    assert greps and "budget analysis" in greps[0].observation.text
    assert diagnose(traj, case=case, tools=tools) == []

    # Another copy of the environment for the next attempt: a wrong destination in turn 1 fails there.
    def wrong(k, name, args):
        return (name, dict(args, destination="archive")) if (k, name) == (0, "mv") else (name, args)

    bad_tools = static_tools(run, case)
    bad = run_case(Scripted(*_multi_turn_script(case, wrong)), case, bad_tools, grade=True, max_turns=3)
    assert bad.outcome is Label.FAIL
    reason = bad.metrics["grade_reason"]
    assert (
        reason.startswith("user turn 1: GorillaFileSystem differs in root") and "`destination`: got 'archive'" in reason
    )
    assert bad.metrics["grade_diff"], "the difference of state is kept for the page"
    top = diagnose(bad, case=case, tools=bad_tools)[0]
    assert top.source == "reference" and top.kind == "bad_arguments" and top.evidence["user_turn"] == 0
    mv_step = next(s.idx for s in bad.steps if s.role is StepRole.ACTOR and any(c.name == "mv" for c in s.tool_calls))
    assert top.first_wrong_step == mv_step


@pytest.mark.parametrize(
    "record, problem",
    [
        ({"prompt": "x", "grader": {"kind": "calls"}, "expected": "f(1)"}, "a calls grader needs expected"),
        ({"prompt": "x", "grader": {"kind": "calls"}, "expected": [{"f": {"a": 1}}]}, "a calls grader needs expected"),
        ({"prompt": "x", "grader": {"kind": "state"}}, 'a state grader needs "environment" and "turns"'),
        ({"turns": [{"prompt": "a", "grader": {"kind": "calls"}}]}, "grades the whole case, not one turn"),
        ({"prompt": "x", "tools": [{"name": "f", "annotations": 5}]}, "annotations must be an object"),
    ],
)
def test_case_files_that_a_call_or_state_grader_cannot_read_are_one_line(tmp_path, record, problem):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(CaseFileError, match=problem) as err:
        load_case_file(path)
    assert "\n" not in str(err.value)


def test_the_state_grade_replays_only_the_calls_the_loop_ran():
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner.toolset import static_tools

    case = load_cases("bfcl/multi_turn_base")[0]
    assert "cp" not in {t["name"] for t in case.meta["tools"]}  # excluded from this entry's functions
    replies = _multi_turn_script(case)
    # Turn 1: a cp the model was not offered (refused as unknown, so nothing was copied), then the real calls.
    first, rest = replies[0].split("</tool_call>\n", 1)  # after the cd into document, where the file is
    replies[0] = first + "</tool_call>\n" + call("cp", source="final_report.pdf", destination="copy.pdf") + "\n" + rest
    tools = static_tools(RunConfig(model=ModelConfig("scripted"), tools=[]), case)
    traj = run_case(Scripted(*replies), case, tools, grade=True, max_turns=3)
    refused = next(s for s in traj.steps if s.role is StepRole.TOOL and s.content == "cp")
    assert refused.span.get("tool_error") and "unknown tool" in refused.observation.text
    assert traj.outcome is Label.PASS, traj.metrics.get("grade_reason")


def test_two_tools_of_the_same_name_from_different_places_are_refused():
    from evalrx.core import Tool

    with pytest.raises(ValueError, match=r"two tools are named 'calculator' \(builtin and mcp calc-server\)"):
        Agent(Scripted(), [Tool("calculator", "one"), Tool("calculator", "two", source="mcp", origin="calc-server")])
