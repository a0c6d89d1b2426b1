"""Trajectory heuristics on hand-made trajectories (no model)."""

from __future__ import annotations

import json

from evalrx.analyzers import FAILURE_MODES, HeuristicsAnalyzer, get_analyzer, result_from_arrays, trajectory_heuristics
from evalrx.core import Step, StepRole, Trajectory

CALC = {"name": "calculator", "args": {"expression": "3*4"}}
DIV = {"name": "calculator", "args": {"expression": "1/0"}}
ERROR = "[tool error in 'calculator': ZeroDivisionError: division by zero]"


def _traj(steps, answer="12", terminated="final", **metrics):
    return Trajectory("c", "What is 3*4?", steps=steps, final_answer=answer, metrics={"terminated": terminated, **metrics})


def _by_tag(traj):
    return {f.tag: f for f in trajectory_heuristics(traj)}


def test_a_clean_run_has_no_findings():
    traj = _traj([
        Step(0, StepRole.USER, "What is 3*4?"),
        Step(1, StepRole.ACTOR, "<tool_call>...", tool_calls=[CALC]),
        Step(2, StepRole.TOOL, "calculator", observation="12", span={"call": 0}),
        Step(3, StepRole.ACTOR, "12"),
    ])
    assert trajectory_heuristics(traj) == []


def test_repeated_identical_calls_are_found_even_with_reordered_arguments():
    a = {"name": "search", "args": {"q": "x", "n": 1}}
    b = {"name": "search", "args": {"n": 1, "q": "x"}}
    traj = _traj([
        Step(0, StepRole.USER, "q"),
        Step(1, StepRole.ACTOR, "", tool_calls=[a]),
        Step(2, StepRole.TOOL, "search", observation="r", span={"call": 0}),
        Step(3, StepRole.ACTOR, "", tool_calls=[CALC]),
        Step(4, StepRole.TOOL, "calculator", observation="12", span={"call": 0}),
        Step(5, StepRole.ACTOR, "", tool_calls=[b]),
        Step(6, StepRole.TOOL, "search", observation="r", span={"call": 0}),
        Step(7, StepRole.ACTOR, "r"),
    ])
    found = _by_tag(traj)
    assert set(found) == {"repeated_call"}
    assert found["repeated_call"].steps == [1, 5]
    assert found["repeated_call"].failure_mode == FAILURE_MODES["repeated_call"]
    assert "search" in found["repeated_call"].detail and "2 times" in found["repeated_call"].detail


def test_an_error_answered_with_the_same_call_is_an_ignored_observation():
    traj = _traj([
        Step(0, StepRole.USER, "q"),
        Step(1, StepRole.ACTOR, "", tool_calls=[DIV]),
        Step(2, StepRole.TOOL, "calculator", observation=ERROR, span={"call": 0, "tool_error": True}),
        Step(3, StepRole.ACTOR, "", tool_calls=[DIV]),
        Step(4, StepRole.TOOL, "calculator", observation=ERROR, span={"call": 0, "tool_error": True}),
        Step(5, StepRole.ACTOR, "I cannot."),
    ])
    found = _by_tag(traj)
    assert set(found) == {"tool_error", "observation_ignored", "repeated_call"}
    assert found["tool_error"].steps == [2, 4]
    assert found["observation_ignored"].steps == [2, 3]
    assert found["observation_ignored"].failure_mode == "ignored_observation"


def test_an_error_followed_by_a_different_call_is_not_ignored():
    fixed = {"name": "calculator", "args": {"expression": "1/1"}}
    traj = _traj([
        Step(0, StepRole.USER, "q"),
        Step(1, StepRole.ACTOR, "", tool_calls=[DIV]),
        Step(2, StepRole.TOOL, "calculator", observation={"text": ERROR, "n_images": 0}, span={"call": 0}),
        Step(3, StepRole.ACTOR, "", tool_calls=[fixed]),
        Step(4, StepRole.TOOL, "calculator", observation="1", span={"call": 0}),
        Step(5, StepRole.ACTOR, "1"),
    ])
    assert set(_by_tag(traj)) == {"tool_error"}  # the error text alone marks it, without the span flag


def test_unknown_tools_malformed_calls_and_repeated_malformed_text():
    bad = '<tool_call>\n{"name": "calculator", "arguments": {"expression": }\n</tool_call>'
    traj = _traj([
        Step(0, StepRole.USER, "q"),
        Step(1, StepRole.ACTOR, "", tool_calls=[{"name": "weather", "args": {}}]),
        Step(2, StepRole.TOOL, "weather", observation="[tool error: unknown tool 'weather'; available tools: calculator]",
             span={"call": 0, "tool_error": True}),
        Step(3, StepRole.ACTOR, bad, parse_error="call #1: invalid JSON"),
        Step(4, StepRole.TOOL, "", observation="[tool call parse error] ...", span={"parse_error": True}),
        Step(5, StepRole.ACTOR, bad, parse_error="call #1: invalid JSON"),
        Step(6, StepRole.TOOL, "", observation="[tool call parse error] ...", span={"parse_error": True}),
    ], answer=None, terminated="max_turns", n_turns=3)
    found = _by_tag(traj)
    assert set(found) == {"tool_error", "unknown_tool", "malformed_call", "observation_ignored", "no_final_answer", "out_of_turns"}
    assert found["unknown_tool"].failure_mode == "hallucinated_tool" and "weather" in found["unknown_tool"].detail
    assert found["malformed_call"].steps == [3, 5]
    assert found["observation_ignored"].steps == [4, 5]
    assert found["no_final_answer"].steps == [5]
    assert "3 turns" in found["out_of_turns"].detail


def test_blocked_repeats_and_forced_answers_are_reported():
    traj = _traj([
        Step(0, StepRole.USER, "q"),
        Step(1, StepRole.ACTOR, "", tool_calls=[CALC]),
        Step(2, StepRole.TOOL, "calculator", observation="12", span={"call": 0}),
        Step(3, StepRole.ACTOR, "", tool_calls=[CALC]),
        Step(4, StepRole.TOOL, "calculator", observation="[repeat blocked] ...", span={"call": 0, "repeat_blocked": True}),
        Step(5, StepRole.ACTOR, "12", span={"forced_final": True}),
    ], terminated="forced_final")
    found = _by_tag(traj)
    assert set(found) == {"repeated_call", "out_of_turns"}
    assert found["repeated_call"].steps == [1, 3, 4]
    assert "forced" in found["out_of_turns"].detail


def test_runs_that_raised_have_no_answer_and_say_why():
    traj = _traj([Step(0, StepRole.USER, "q")], answer=None, terminated="error", error="ConnectionError: refused")
    found = _by_tag(traj)
    assert set(found) == {"run_error", "no_final_answer"}
    assert "refused" in found["run_error"].detail


def test_heuristics_analyzer_needs_no_model_and_stores_compactly():
    traj = _traj([
        Step(0, StepRole.USER, "q"),
        Step(1, StepRole.ACTOR, "", tool_calls=[DIV]),
        Step(2, StepRole.TOOL, "calculator", observation=ERROR, span={"call": 0, "tool_error": True}),
    ], answer=None, terminated="max_turns")
    analyzer = get_analyzer("heuristics")
    assert isinstance(analyzer, HeuristicsAnalyzer) and analyzer.requires == frozenset()
    res = analyzer.run_trajectory(None, traj)
    assert res.tags == ["tool_error", "no_final_answer", "out_of_turns"]
    back = result_from_arrays(res.to_arrays(), json.loads(json.dumps(res.meta)))
    assert back.tags == res.tags and back.failure_modes == res.failure_modes
    assert res.to_arrays()["first_step"].tolist() == [2, 1, 1]
