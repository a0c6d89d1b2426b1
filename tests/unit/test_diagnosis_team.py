"""The diagnosis of a team's log names the agent to blame and its step, from signs general to teams of agents: a run
never recovered from, the wrong value the team ended with, the same action again, the team saying it is stuck. A
single agent's diagnosis is unchanged. The logs here are made up, with names of no data set."""

from __future__ import annotations

from evalrx.core import Diagnosis, FailureCase, Inputs, Label, Step, StepRole, Trajectory
from evalrx.diagnosis import diagnose, from_rules


def team(*turns: "tuple[str, str]", expected=None) -> "tuple[Trajectory, FailureCase]":
    steps = [
        Step(idx=i, role=StepRole.ACTOR, content=text, agent=agent, span={"message": i + 1})
        for i, (agent, text) in enumerate(turns)
    ]
    traj = Trajectory(sample_id="t", goal="How many rows?", steps=steps, outcome=Label.FAIL, metrics={"terminated": ""})
    case = FailureCase(inputs=Inputs(prompt="How many rows?"), id="t", expected=expected)
    return traj, case


CODE = "Run this:\n```python\nprint(len(rows))\n```"


def test_a_run_the_team_never_recovered_from_blames_the_agent_that_asked_for_it():
    traj, case = team(
        ("Planner", "Plan: count the rows."),
        ("Analyst", CODE),
        ("Runner", "exitcode: 1 (execution failed)\nTraceback (most recent call last):\nNameError: name 'rows'"),
        ("Checker", "The answer is 12."),
    )
    top = diagnose(traj, case=case, use_reference=False)[0]
    assert (top.agent, top.first_wrong_step, top.kind) == ("Analyst", 1, "ignored_tool_error")
    assert top.evidence["failed_at"] == 2


def test_a_run_made_good_later_is_not_the_failure():
    traj, case = team(
        ("Analyst", CODE),
        ("Runner", "exitcode: 1 (execution failed)\nNameError: name 'rows'"),
        ("Analyst", "Fixed:\n```python\nrows = load()\nprint(len(rows))\n```"),
        ("Runner", "exitcode: 0 (execution succeeded)\n12"),
        ("Checker", "12 it is."),
    )
    signs = {d.evidence.get("sign") for d in diagnose(traj, case=case, use_reference=False)}
    assert "unrecovered_run" not in signs


def test_with_the_reference_the_wrong_value_is_traced_to_where_it_first_appeared():
    traj, case = team(
        ("Planner", "Plan: count the rows, then check."),
        ("Analyst", "I count 14 rows in the table."),
        ("Checker", "Verified: 14 rows."),
        ("Checker", "Final: 14"),
        expected="12",
    )
    top = diagnose(traj, case=case, use_reference=True)[0]
    assert (top.agent, top.first_wrong_step, top.evidence["sign"]) == ("Analyst", 1, "wrong_value_origin")
    # without the reference nothing points there: the weak guess is the team's first turn
    free = diagnose(traj, case=case, use_reference=False)[0]
    assert (free.agent, free.first_wrong_step, free.evidence["sign"]) == ("Planner", 0, "first_turn")


def test_the_same_action_again_is_a_loop_and_a_repeated_sign_off_is_not():
    traj, case = team(("Analyst", CODE), ("Runner", "exitcode: 0 (execution succeeded)\n3"), ("Analyst", CODE))
    top = diagnose(traj, case=case, use_reference=False)[0]
    assert (top.agent, top.first_wrong_step, top.kind) == ("Analyst", 0, "repeated_calls")
    traj, case = team(("Planner", "Plan."), ("Checker", "TERMINATE"), ("Checker", "TERMINATE"))
    assert "loop" not in {d.evidence.get("sign") for d in diagnose(traj, case=case, use_reference=False)}


def test_every_diagnosis_of_a_team_names_an_agent_and_a_single_agents_names_none():
    traj, case = team(("Planner", "Plan."), ("Analyst", "Done."))
    assert all(d.agent for d in diagnose(traj, case=case))
    single = Trajectory(
        sample_id="s",
        goal="q",
        steps=[Step(idx=0, role=StepRole.USER, content="q"), Step(idx=1, role=StepRole.ACTOR, content="a")],
        outcome=Label.FAIL,
        final_answer="a",
        metrics={"terminated": "final"},
    )
    found = diagnose(single)
    assert found and all(d.agent is None for d in found)
    assert [d.to_dict() for d in found] == [d.to_dict() for d in from_rules(single)]  # the rules alone, as before
    assert "agent" not in found[0].to_dict()


def test_a_diagnosis_keeps_its_agent_through_its_dict():
    d = Diagnosis("wrong_tool", 3, {"text": "x"}, 0.5, "heuristic", agent="Analyst")
    assert Diagnosis.from_dict(d.to_dict()) == d
