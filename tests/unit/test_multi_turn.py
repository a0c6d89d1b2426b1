"""Conversations: cases with several user turns, each a USER step of the trajectory, the next given when
the agent answers; per-turn grades; a conversation that outgrows the model's context ends as an error
naming the turn; replay rebuilds what the model saw."""

from __future__ import annotations

import json

import pytest
from test_bfcl_cases import Scripted, call

from evalrx.core import ContextOverflow, FailureCase, Label, StepRole, Termination, Tool
from evalrx.diagnosis import diagnose
from evalrx.grade import grade_explanation, turn_answers, turn_grades
from evalrx.models.agent import Agent, run_case
from evalrx.suites import CaseFileError, load_case_file

ADD = Tool(
    "add",
    "add two numbers",
    {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
    fn=lambda a, b: a + b,
)


def _conversation(tmp_path, turns, **extra):
    path = tmp_path / "talk.jsonl"
    path.write_text(json.dumps({"id": "talk", "turns": turns, **extra}) + "\n")
    return load_case_file(path)[0]


def test_each_user_turn_is_a_step_and_comes_after_the_agents_answer(tmp_path):
    case = _conversation(
        tmp_path,
        [
            {"prompt": "What is 2 + 3?", "expected": 5},
            {"prompt": "And that plus 4?", "expected": 9},
            {"prompt": "Thanks, bye."},
        ],
    )
    assert case.inputs.prompt == "What is 2 + 3?" and len(case.meta["turns"]) == 3
    h = Scripted(call("add", a=2, b=3), "It is 5.", call("add", a=5, b=4), "It is 9.", "Bye!")
    traj = run_case(h, case, [ADD], grade=True)
    roles = [(s.role, s.span.get("user_turn")) for s in traj.steps]
    assert roles == [
        (StepRole.USER, 0),
        (StepRole.ACTOR, 0),
        (StepRole.TOOL, 0),
        (StepRole.ACTOR, 0),
        (StepRole.USER, 1),
        (StepRole.ACTOR, 1),
        (StepRole.TOOL, 1),
        (StepRole.ACTOR, 1),
        (StepRole.USER, 2),
        (StepRole.ACTOR, 2),
    ]
    # The second question reached the model only after its first answer, in order.
    second = h.messages_seen[2]
    assert [m["role"] for m in second][-3:] == ["tool", "assistant", "user"]
    assert second[-1]["content"] == "And that plus 4?" and second[-2]["content"] == "It is 5."
    assert traj.final_answer == "Bye!" and traj.terminated == Termination.FINAL.value
    assert traj.metrics["n_user_turns"] == 3 and traj.metrics["user_turns_reached"] == 3
    assert turn_answers(traj) == ["It is 5.", "It is 9.", "Bye!"]
    assert traj.outcome is Label.PASS
    wrong = run_case(Scripted("It is 5.", "It is 10.", "Bye!"), case, [ADD], grade=True)
    assert wrong.outcome is Label.FAIL, "the second turn's answer is graded on its own"


def test_a_failed_turn_is_named_by_its_grade_and_is_the_reference_of_its_diagnosis(tmp_path):
    case = _conversation(
        tmp_path,
        [
            {"prompt": "What is 2 + 3?", "expected": 5},
            {"prompt": "Which city is the capital of France?", "expected": "Paris", "grader": {"kind": "contains"}},
            {"prompt": "And that plus 4?", "expected": 9},
        ],
    )
    traj = run_case(Scripted(call("add", a=2, b=3), "It is 5.", "It is Lyon.", "It is 9."), case, [ADD], grade=True)
    assert [(g.turn, g.expected, g.outcome) for g in turn_grades(traj, case)] == [
        (0, 5, Label.PASS),
        (1, "Paris", Label.FAIL),
        (2, 9, Label.PASS),
    ]
    assert traj.outcome is Label.FAIL
    assert traj.metrics["grade_turn"] == 1  # 0-based, as the state grade's turn; the pages say "turn 2"
    assert traj.metrics["grade_reason"] == "turn 2: answered 'It is Lyon.', expected 'Paris'"
    top = diagnose(traj, case=case, tools=[ADD])[0]
    answer = next(s.idx for s in traj.steps if s.content == "It is Lyon.")
    # No sign in turn 2 but its answer: the answer is the wrong step, against the turn's expected answer.
    assert (top.source, top.kind, top.first_wrong_step) == ("reference", "wrong_final_answer", answer)
    assert (top.evidence["user_turn"], top.evidence["answer"], top.evidence["expected_answer"]) == (
        1,
        "It is Lyon.",
        "Paris",
    )

    # A sign the rules see inside the failing turn gives the kind; one in a turn that passed does not.
    wrong = run_case(
        Scripted(call("add", a=2, b=3), "It is 5.", "Paris.", call("add", a=5, b=4), "It is 10."),
        case,
        [ADD],
        grade=True,
    )
    assert wrong.metrics["grade_turn"] == 2 and wrong.metrics["grade_reason"].startswith("turn 3: answered 'It is 10.'")
    top = diagnose(wrong, case=case, tools=[ADD])[0]
    assert (top.source, top.kind, top.evidence["user_turn"]) == ("reference", "ignored_observation", 2)
    assert wrong.steps[top.first_wrong_step].span["user_turn"] == 2 and top.evidence["observation"] == "9"

    # A turn the conversation never reached has no answer; a pass grades nothing wrong.
    short = run_case(Scripted(call("add", a=2, b=3), "It is 5."), case, [ADD], grade=True, max_turns=1)
    assert short.metrics["grade_reason"].startswith("turn 1: got no answer, expected 5")
    passed = run_case(Scripted(call("add", a=2, b=3), "It is 5.", "Paris.", "It is 9."), case, [ADD], grade=True)
    assert passed.outcome is Label.PASS and grade_explanation(passed, case) is None
    assert "grade_turn" not in passed.metrics and diagnose(passed, case=case) == []


def test_a_turn_that_runs_out_of_model_turns_ends_the_conversation(tmp_path):
    case = _conversation(tmp_path, [{"prompt": "Add forever"}, {"prompt": "never asked"}])
    traj = Agent(Scripted(*[call("add", a=1, b=1)] * 5), [ADD], max_turns=2).run(case)
    assert traj.terminated == Termination.MAX_TURNS.value
    assert [s.content for s in traj.steps if s.role is StepRole.USER] == ["Add forever"]
    assert traj.metrics["user_turns_reached"] == 1


class FailsFrom(Scripted):
    """Answers its first calls, then raises `error` from the `at`-th on: a local backend past its context
    (ContextOverflow), a server that fails (an HTTP 500, a dropped connection)."""

    def __init__(self, at: int, error: Exception, *texts):
        super().__init__(*texts)
        self.at, self.error, self.calls = at, error, 0

    def chat(self, messages, tools=None, **kw):
        self.calls += 1
        if self.calls >= self.at:
            raise self.error
        return super().chat(messages, tools, **kw)


def test_a_conversation_that_outgrows_the_context_is_an_error_naming_the_turn(tmp_path):
    case = _conversation(tmp_path, [{"prompt": "one"}, {"prompt": "two"}, {"prompt": "three"}])
    traj = run_case(
        FailsFrom(3, ContextOverflow(800, 768), "first answer", call("add", a=1, b=2)), case, [ADD], grade=True
    )
    assert traj.terminated == Termination.ERROR.value and traj.outcome is Label.ERROR
    assert traj.metrics["error"] == (
        "ContextOverflow: user turn 2 of 3: the conversation is 800 tokens, over the model's context of 768"
    )
    assert [s.role for s in traj.steps][:3] == [StepRole.USER, StepRole.ACTOR, StepRole.USER], "kept so far"
    assert traj.metrics["n_turns"] == 2


def test_hf_local_refuses_a_conversation_longer_than_its_context():
    from tiny_models import make_tiny_model, tiny_tokenizer

    import evalrx

    handle = evalrx.wrap(make_tiny_model("llama", max_position_embeddings=64), tiny_tokenizer())
    assert handle.context_length() == 64
    with pytest.raises(ContextOverflow, match="over the model's context of 64"):
        handle.chat([{"role": "user", "content": "word " * 200}], max_new_tokens=2)
    traj = run_case(handle, FailureCase.from_prompt("word " * 200), [], max_turns=1, grade=True)
    assert traj.outcome is Label.ERROR and "ContextOverflow" in traj.metrics["error"]


def test_replay_rebuilds_a_conversation_with_later_user_turns(tmp_path):
    from evalrx.internals.passes import messages_from_trajectory

    case = _conversation(tmp_path, [{"prompt": "What is 2 + 3?"}, {"prompt": "And plus 4?"}])
    h = Scripted(call("add", a=2, b=3), "5.", call("add", a=5, b=4), "9.")
    traj = Agent(h, [ADD], system="be brief").run(case)
    rebuilt = messages_from_trajectory(traj, "be brief", [ADD], style="hermes")
    assert rebuilt[:-1] == h.messages_seen[-1]


def test_bad_turns_are_one_line(tmp_path):
    for turns, problem in [
        ([], "turns must be a non-empty list"),
        ([{"prompt": ""}], "turn 1 has no prompt"),
        ([{"prompt": "a"}, {"prompt": "b", "grader": {"kind": "nope"}}], "turn 2: unknown grader kind"),
    ]:
        path = tmp_path / "bad.jsonl"
        path.write_text(json.dumps({"turns": turns}) + "\n")
        with pytest.raises(CaseFileError, match=problem) as err:
            load_case_file(path)
        assert "\n" not in str(err.value)
    path.write_text(json.dumps({"prompt": "x", "turns": [{"prompt": "y"}]}) + "\n")
    with pytest.raises(CaseFileError, match="not both"):
        load_case_file(path)


def test_a_model_call_that_fails_after_some_turns_keeps_the_steps_so_far(tmp_path):
    case = _conversation(tmp_path, [{"prompt": "one"}, {"prompt": "two"}])
    traj = run_case(
        FailsFrom(3, RuntimeError("upstream exploded"), "first answer", call("add", a=1, b=2)), case, [ADD], grade=True
    )
    assert traj.terminated == Termination.ERROR.value and traj.outcome is Label.ERROR
    assert traj.metrics["error"] == "RuntimeError: user turn 2 of 2: upstream exploded"
    assert [s.role for s in traj.steps] == [StepRole.USER, StepRole.ACTOR, StepRole.USER, StepRole.ACTOR, StepRole.TOOL]
    # The first call failing leaves nothing to keep: the error trajectory of run_case, as before.
    first = run_case(FailsFrom(1, RuntimeError("upstream exploded")), case, [ADD], grade=True)
    assert first.outcome is Label.ERROR and [s.role for s in first.steps] == [StepRole.USER]
    # The forced final turn failing: the steps are kept too.
    forced = run_case(
        FailsFrom(3, RuntimeError("upstream exploded"), call("add", a=1, b=1), call("add", a=1, b=1)),
        "add",
        [ADD],
        max_turns=2,
        force_final_answer=True,
        grade=False,
    )
    assert forced.terminated == Termination.ERROR.value and len(forced.steps) == 5
