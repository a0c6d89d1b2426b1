"""Diagnosis: why a trajectory failed, from the reference, from model-free rules and from white-box margins.

Every trajectory here is written by hand (no model): a user step, model turns that call tools,
the tool steps that answer them, and a final answer.
"""

from __future__ import annotations

import numpy as np
import pytest

from evalrx.analyzers import KINDS
from evalrx.core.case import FailureCase, Inputs, Label, Step, StepRole, Trajectory
from evalrx.core.failures import (
    BUILTIN_KINDS,
    DEFINITIONS,
    FAILURE_KINDS,
    LEGACY_KINDS,
    SOURCES,
    Diagnosis,
    canonical_kind,
    definition,
)
from evalrx.core.observation import Observation
from evalrx.diagnosis import diagnose, from_analyses, from_reference, from_rules, rank
from evalrx.diagnosis.whitebox import LOOKED_AWAY
from evalrx.suites import load_cases
from evalrx.tools import get_tools

P, F = Label.PASS, Label.FAIL


# ---------------------------------------------------------------- builders


def call(name: str, observation: str, **args) -> tuple:
    return name, args, observation


def build(
    goal: str,
    *turns,
    answer: "str | None" = None,
    outcome: Label = F,
    terminated: "str | None" = None,
    expected=None,
    metrics: "dict | None" = None,
) -> Trajectory:
    """A trajectory: `turns` are lists of `call(...)` (one model turn each), then the answer turn.

    Tool steps are recorded the way the agent records them (observation `{"text": ...}`,
    span `call` index, `tool_error` for an error the executor reported).
    """
    steps = [Step(idx=0, role=StepRole.USER, content=goal)]
    for turn in turns:
        steps.append(
            Step(
                idx=len(steps),
                role=StepRole.ACTOR,
                content="<tool_call>...</tool_call>",
                tool_calls=[{"name": n, "args": a} for n, a, _ in turn],
            )
        )
        for i, (n, _, obs) in enumerate(turn):
            span = {"call": i}
            if obs.startswith("[tool error"):
                span["tool_error"] = True
            steps.append(
                Step(idx=len(steps), role=StepRole.TOOL, content=n, observation={"text": obs, "n_images": 0}, span=span)
            )
    if answer is not None:
        steps.append(Step(idx=len(steps), role=StepRole.ACTOR, content=answer))
    m = {"terminated": terminated or ("final" if answer is not None else "max_turns")}
    m.update(metrics or {})
    return Trajectory(
        sample_id="s", goal=goal, steps=steps, final_answer=answer, ground_truth=expected, outcome=outcome, metrics=m
    )


def demo(suite: str, case_id: str) -> "tuple[FailureCase, dict]":
    case = next(c for c in load_cases(suite) if c.id == case_id)
    return case, {t.name: t for t in get_tools(["calculator", "lookup"], case)}


def ref(traj: Trajectory, case: FailureCase, tools: "dict | None") -> Diagnosis:
    d = from_reference(traj, case, tools)
    assert d is not None and d.source == "reference"
    return d


def top(traj: Trajectory, **kw) -> Diagnosis:
    found = diagnose(traj, **kw)
    assert found, "a failed trajectory always gets a diagnosis"
    return found[0]


def rule(traj: Trajectory, kind: str) -> Diagnosis:
    found = [d for d in from_rules(traj) if d.kind == kind]
    assert found, f"no {kind} among {[d.kind for d in from_rules(traj)]}"
    assert len(found) == 1 and found[0].source == "heuristic"
    return found[0]


# ---------------------------------------------------------------- the reference source


def test_reference_calling_the_wrong_tool_is_wrong_tool_at_that_call():
    case, tools = demo("demo/lookup_easy", "lookup_easy-001")  # When was Drogai founded? lookup(...)
    traj = build(
        case.inputs.prompt, [call("calculator", "1124", expression="1124")], answer="1124", expected=case.expected
    )
    d = ref(traj, case, tools)
    assert (d.kind, d.first_wrong_step) == ("wrong_tool", 1)
    assert d.evidence["expected"]["name"] == "lookup" and d.evidence["actual"]["name"] == "calculator"
    assert top(traj, case=case, tools=list(tools.values())) == d


def test_reference_bad_arguments_carry_an_argument_diff():
    case, tools = demo("demo/arithmetic_easy", "arithmetic_easy-001")  # How much is 7 minus 3?
    traj = build(case.inputs.prompt, [call("calculator", "10", expression="7 + 3")], answer="10")
    d = ref(traj, case, tools)
    assert (d.kind, d.first_wrong_step) == ("bad_arguments", 1)
    assert d.evidence["diff"] == [{"arg": "expression", "expected": "7 - 3", "actual": "7 + 3"}]
    assert d.evidence["expected"] == {"name": "calculator", "args": {"expression": "7 - 3"}}
    assert d.evidence["actual"] == {"name": "calculator", "args": {"expression": "7 + 3"}}


def test_reference_judges_calls_by_what_they_return_so_a_commuted_sum_is_not_a_bad_call():
    case, tools = demo("demo/two_step", "two_step-001")  # height of Vafa plus 821: lookup, 7915 + 821
    traj = build(
        case.inputs.prompt,
        [call("lookup", "The height of Vafa is 7915 m.", query="height of Vafa")],
        [call("calculator", "8736", expression="821 + 7915")],
        answer="It is 8736 metres, give or take.",
    )
    d = ref(traj, case, tools)
    assert d.kind == "wrong_final_answer" and d.first_wrong_step == 5


def test_reference_argument_garbling_an_earlier_observation_is_misread_observation():
    case, tools = demo("demo/two_step", "two_step-001")
    traj = build(
        case.inputs.prompt,
        [call("lookup", "The height of Vafa is 7915 m.", query="height of Vafa")],
        [call("calculator", "8772", expression="7951 + 821")],
        answer="8772",
    )
    d = ref(traj, case, tools)
    assert (d.kind, d.first_wrong_step) == ("misread_observation", 3)
    assert d.evidence["diff"] == [{"arg": "expression", "expected": "7915 + 821", "actual": "7951 + 821"}]
    assert "7915" in d.evidence["observation"] and "'7951'" in d.summary


def test_reference_answer_without_any_call_is_no_tool_call_at_the_first_model_turn():
    case, tools = demo("demo/arithmetic_easy", "arithmetic_easy-001")
    traj = build(case.inputs.prompt, answer="The answer is 10.")
    d = ref(traj, case, tools)
    assert (d.kind, d.first_wrong_step) == ("no_tool_call", 1)
    assert d.evidence["expected"] == {"name": "calculator", "args": {"expression": "7 - 3"}}


def test_reference_call_on_a_case_that_needs_no_tool_is_unneeded_tool_call():
    case, tools = demo("demo/no_tool", "no_tool-001")  # "Suppose Nakral keeps 398 lamps ...", no calls
    assert case.meta["reference_calls"] == []
    traj = build(
        case.inputs.prompt,
        [call("lookup", "no results for 'Nakral lamps'", query="Nakral lamps")],
        answer="I could not find it.",
    )
    d = ref(traj, case, tools)
    assert (d.kind, d.first_wrong_step) == ("unneeded_tool_call", 1)
    assert d.evidence["actual"] == {"name": "lookup", "args": {"query": "Nakral lamps"}}


def test_reference_repeated_call_is_diagnosed_at_the_step_of_the_repeat():
    case, tools = demo("demo/lookup_easy", "lookup_easy-001")
    fact = "The founding year of Drogai is 1124."
    traj = build(
        case.inputs.prompt,
        [call("lookup", fact, query="founding year of Drogai")],
        [call("lookup", fact, query="founding year of Drogai")],
        answer="1124",
    )
    d = ref(traj, case, tools)
    assert (d.kind, d.first_wrong_step) == ("repeated_calls", 3)


def test_reference_a_wrong_call_made_twice_is_diagnosed_at_the_first_call_not_the_repeat():
    """The reference reports the first thing that went wrong: the bad call at step 1, not its repeat at step 3."""
    case, tools = demo("demo/arithmetic_easy", "arithmetic_easy-001")
    traj = build(
        case.inputs.prompt,
        [call("calculator", "10", expression="7 + 3")],
        [call("calculator", "10", expression="7 + 3")],
        answer="10",
    )
    d = ref(traj, case, tools)
    assert (d.kind, d.first_wrong_step) == ("bad_arguments", 1)


def test_reference_calling_a_tool_that_does_not_exist_is_unknown_tool():
    case, tools = demo("demo/arithmetic_easy", "arithmetic_easy-001")
    traj = build(
        case.inputs.prompt,
        [call("calc", "[tool error: unknown tool 'calc'; available tools: calculator, lookup]", expression="7 - 3")],
        answer="4",
    )
    d = ref(traj, case, tools)
    assert (d.kind, d.first_wrong_step) == ("unknown_tool", 1)


def test_reference_right_call_but_no_answer_is_no_final_answer():
    case, tools = demo("demo/arithmetic_easy", "arithmetic_easy-001")
    traj = build(case.inputs.prompt, [call("calculator", "4", expression="7 - 3")], terminated="max_turns")
    d = ref(traj, case, tools)
    assert (d.kind, d.first_wrong_step) == ("no_final_answer", 1)


def test_reference_a_malformed_call_is_malformed_call_at_its_step():
    case, tools = demo("demo/arithmetic_easy", "arithmetic_easy-001")
    steps = [
        Step(idx=0, role=StepRole.USER, content=case.inputs.prompt),
        Step(idx=1, role=StepRole.ACTOR, content="<tool_call>{oops</tool_call>", parse_error="bad JSON"),
        Step(idx=2, role=StepRole.TOOL, content="", observation="[parse error]", span={"parse_error": True}),
        Step(idx=3, role=StepRole.ACTOR, content="10"),
    ]
    traj = Trajectory(
        sample_id="s",
        goal=case.inputs.prompt,
        steps=steps,
        final_answer="10",
        outcome=F,
        metrics={"terminated": "final"},
    )
    d = ref(traj, case, tools)
    assert (d.kind, d.first_wrong_step) == ("malformed_call", 1) and d.summary == "bad JSON"


def test_reference_answer_not_carrying_the_last_observations_value_is_misread_observation():
    case, tools = demo("demo/lookup_easy", "lookup_easy-001")
    traj = build(
        case.inputs.prompt,
        [call("lookup", "The founding year of Drogai is 1124.", query="founding year of Drogai")],
        answer="Drogai was founded in 1142.",
    )
    d = ref(traj, case, tools)
    assert (d.kind, d.first_wrong_step) == ("misread_observation", 3)
    assert "1124" in d.evidence["observation"] and "1142" in d.evidence["answer"]


def test_reference_right_calls_and_a_wrong_answer_is_wrong_final_answer():
    case, tools = demo("demo/arithmetic_easy", "arithmetic_easy-001")
    traj = build(
        case.inputs.prompt,
        [call("calculator", "4", expression="7 - 3")],
        answer="The calculator says 4, so the answer is 5.",
    )
    d = ref(traj, case, tools)
    assert (d.kind, d.first_wrong_step) == ("wrong_final_answer", 3)
    assert d.evidence["expected_answer"] == "4"


def test_reference_without_tools_compares_calls_by_name_and_arguments():
    case, _ = demo("demo/arithmetic_easy", "arithmetic_easy-001")
    traj = build(case.inputs.prompt, [call("calculator", "10", expression="7 + 3")], answer="10")
    d = ref(traj, case, None)
    assert (d.kind, d.first_wrong_step) == ("bad_arguments", 1)


def test_a_case_without_a_reference_calls_list_gets_no_reference_diagnosis():
    """An imported case carries no reference calls: the reference source stays silent, the rules speak."""
    imported = FailureCase(inputs=Inputs(prompt="What is 6 times 7?"), id="imp-1", expected=42, meta={})
    traj = build(imported.inputs.prompt, [call("calculator", "42", expression="6 * 7")], answer="The answer is 24.")
    assert from_reference(traj, imported) is None
    assert from_reference(traj, None) is None
    found = diagnose(traj, case=imported)
    assert found and all(d.source != "reference" for d in found)
    assert found[0].kind == "ignored_observation"


def test_use_reference_false_hides_the_reference():
    case, tools = demo("demo/arithmetic_easy", "arithmetic_easy-001")
    traj = build(case.inputs.prompt, [call("calculator", "10", expression="7 + 3")], answer="10")
    assert all(d.source != "reference" for d in diagnose(traj, case=case, tools=tools, use_reference=False))


# ---------------------------------------------------------------- model-free rules


def test_rules_answer_contradicting_the_last_observation_is_ignored_observation_at_the_answer():
    traj = build("What is 6 times 7?", [call("calculator", "42", expression="6 * 7")], answer="The answer is 24.")
    d = rule(traj, "ignored_observation")
    assert d.first_wrong_step == 3 and d.evidence["observation"] == "42"
    assert top(traj).kind == "ignored_observation"
    assert "misread_observation" not in {x.kind for x in from_rules(traj)}  # 42 -> 24 is not a garbled copy


def test_rules_garbled_copy_of_the_last_observation_is_misread_observation():
    traj = build(
        "Compute 23.3 / 26.", [call("calculator", "0.896154", expression="23.3 / 26")], answer="The result is 0.891654."
    )
    d = top(traj)
    assert (d.kind, d.first_wrong_step) == ("misread_observation", 3)
    assert "0.891654" in d.summary and "0.896154" in d.summary
    assert "ignored_observation" not in {x.kind for x in from_rules(traj)}


def test_rules_an_argument_stated_nowhere_before_is_bad_arguments():
    traj = build("What is 12 times 9?", [call("calculator", "228", expression="12 * 19")], answer="228")
    d = top(traj)
    assert (d.kind, d.first_wrong_step) == ("bad_arguments", 1)
    assert "'19'" in d.summary


def test_rules_an_argument_garbling_an_earlier_observation_is_misread_observation():
    traj = build(
        "What is the population of Arland plus 10?",
        [call("lookup", "The population of Arland is 48213.", query="population of Arland")],
        [call("calculator", "48241", expression="48231 + 10")],
        answer="48241",
    )
    d = rule(traj, "misread_observation")
    assert d.first_wrong_step == 3 and "48213" in d.evidence["observation"]
    assert "bad_arguments" not in {x.kind for x in from_rules(traj)}


def test_rules_an_argument_copied_from_an_earlier_observation_is_fine():
    traj = build(
        "What is the population of Arland plus 10?",
        [call("lookup", "The population of Arland is 48213.", query="population of Arland")],
        [call("calculator", "48223", expression="48213 + 10")],
        answer="48223",
        outcome=F,
    )
    kinds = {d.kind for d in from_rules(traj)}
    assert not kinds & {"bad_arguments", "misread_observation", "ignored_observation"}


def test_rules_answering_after_a_tool_error_as_if_it_succeeded_is_ignored_tool_error():
    traj = build(
        "What is 5 divided by 0?",
        [call("calculator", "[tool error in 'calculator': ZeroDivisionError: division by zero]", expression="5 / 0")],
        answer="The answer is 0.",
    )
    d = top(traj)
    assert (d.kind, d.first_wrong_step) == ("ignored_tool_error", 3)
    assert "division by zero" in d.evidence["observation"]


def test_rules_an_answer_that_reports_the_tool_error_does_not_ignore_it():
    traj = build(
        "What is 5 divided by 0?",
        [call("calculator", "error: division by zero", expression="5 / 0")],
        answer="I cannot divide by zero.",
    )
    assert "ignored_tool_error" not in {d.kind for d in from_rules(traj)}


def test_rules_repeated_identical_calls_first_repeat_is_the_first_wrong_step():
    fact = "The population of Arland is 48213."
    traj = build(
        "What is the population of Arland?",
        [call("lookup", fact, query="population of Arland")],
        [call("lookup", fact, query="population of Arland")],
        [call("lookup", fact, query="population of Arland")],
        answer="48213",
    )
    d = top(traj)
    assert (d.kind, d.first_wrong_step) == ("repeated_calls", 3)
    assert "first at step 1" in d.summary


def test_rules_calling_a_tool_that_does_not_exist_is_unknown_tool():
    traj = build(
        "What is the weather in Arland?",
        [call("weather", "[tool error: unknown tool 'weather'; available tools: calculator, lookup]", city="Arland")],
        answer="It is sunny in Arland.",
    )
    d = top(traj)
    assert (d.kind, d.first_wrong_step) == ("unknown_tool", 1)
    assert "ignored_tool_error" not in {x.kind for x in from_rules(traj)}  # the unknown tool says it already


def test_rules_a_call_that_could_not_be_parsed_is_malformed_call():
    steps = [
        Step(idx=0, role=StepRole.USER, content="What is 3 * 4?"),
        Step(
            idx=1,
            role=StepRole.ACTOR,
            content='<tool_call>{"name": calculator</tool_call>',
            parse_error="Expecting value: line 1 column 10",
        ),
        Step(
            idx=2,
            role=StepRole.TOOL,
            content="",
            observation="[parse error] write valid JSON",
            span={"parse_error": True},
        ),
        Step(idx=3, role=StepRole.ACTOR, content="12"),
    ]
    traj = Trajectory(
        sample_id="s", goal="What is 3 * 4?", steps=steps, final_answer="12", outcome=F, metrics={"terminated": "final"}
    )
    d = top(traj)
    assert (d.kind, d.first_wrong_step) == ("malformed_call", 1)
    assert "Expecting value" in d.summary
    assert "no_tool_call" not in {x.kind for x in from_rules(traj)}  # it tried to call


def test_rules_a_run_that_ends_without_an_answer_is_no_final_answer():
    traj = build(
        "What is the population of Arland?",
        [call("lookup", "The population of Arland is 48213.", query="population of Arland")],
        terminated="max_turns",
    )
    d = top(traj)
    assert (d.kind, d.first_wrong_step) == ("no_final_answer", 1)
    assert "max_turns" in d.summary


def test_rules_arithmetic_answered_without_a_tool_is_no_tool_call():
    traj = build("What is 347 plus 582?", answer="The answer is 928.")
    d = top(traj)
    assert (d.kind, d.first_wrong_step) == ("no_tool_call", 1)


def test_rules_a_chat_question_answered_without_a_tool_is_not_no_tool_call():
    traj = build("Thank you so much, that was useful.", answer="Glad to help.")
    assert "no_tool_call" not in {d.kind for d in from_rules(traj)}


def test_rules_a_failed_trajectory_with_no_sign_falls_back_to_wrong_final_answer_at_the_answer():
    traj = build(
        "What is the capital of Arland?",
        [call("lookup", "The capital of Arland is Velmor.", query="capital of Arland")],
        answer="Velmor",
        expected="Ostrava",
    )
    found = diagnose(traj)
    assert [(d.kind, d.first_wrong_step) for d in found] == [("wrong_final_answer", 3)]
    assert found[0].confidence < 0.3 and found[0].evidence["expected_answer"] == "Ostrava"


def test_a_passing_trajectory_has_no_diagnosis():
    case, tools = demo("demo/arithmetic_easy", "arithmetic_easy-001")
    traj = build(case.inputs.prompt, [call("calculator", "4", expression="7 - 3")], answer="4", outcome=P)
    assert diagnose(traj, case=case, tools=tools) == []
    # even one whose steps look odd: the grade decides
    odd = build("What is 6 times 7?", [call("calculator", "42", expression="6 * 7")], answer="24", outcome=P)
    assert diagnose(odd) == []


def test_an_errored_run_is_infra_error_not_a_model_failure():
    case, tools = demo("demo/arithmetic_easy", "arithmetic_easy-001")
    traj = build(
        case.inputs.prompt,
        [call("calculator", "4", expression="7 - 3")],
        outcome=Label.ERROR,
        terminated="error",
        metrics={"error": "HTTP 503 from the model server"},
    )
    assert [d.kind for d in from_rules(traj)] == ["infra_error"]
    found = diagnose(traj, case=case, tools=tools)
    assert found[0].kind == "infra_error" and "HTTP 503" in found[0].summary
    assert {d.kind for d in found} == {"infra_error"}


def test_an_unknown_outcome_gets_rules_but_no_fallback():
    traj = build(
        "What is the capital of Arland?",
        [call("lookup", "The capital of Arland is Velmor.", query="capital of Arland")],
        answer="Velmor",
        outcome=Label.UNKNOWN,
    )
    assert diagnose(traj) == []


# ---------------------------------------------------------------- white box


def _decisions():
    return [
        {"step": 1, "kind": "tool_name", "chosen": "lookup", "candidates": ["lookup", "calculator"]},
        {"step": 3, "kind": "argument", "arg": "expression", "chosen": "7", "candidates": ["7", "9"]},
    ]


def test_whitebox_a_margin_that_collapses_by_the_last_layer_proposes_that_step():
    margin = np.array(
        [
            [0.5, 2.0, 3.5, 4.0],  # step 1: confident all the way
            [0.2, 1.6, 0.7, 0.04],
        ]
    )  # step 3: led by 1.6 nats mid-way, 0.04 at the end
    found = from_analyses({"tool_decision": {"meta": {"decisions": _decisions()}, "arrays": {"margin": margin}}})
    assert len(found) == 1
    d = found[0]
    assert (d.source, d.first_wrong_step, d.kind) == ("whitebox", 3, "bad_arguments")
    assert d.evidence["chosen"] == "7" and d.evidence["alternative"] == "9"
    assert d.evidence["margin_peak"] == pytest.approx(1.6) and d.evidence["margin_last"] == pytest.approx(0.04)
    assert "'7'" in d.summary and "'9'" in d.summary


def test_whitebox_a_collapsed_tool_name_decision_is_wrong_tool_naming_both_tools():
    margin = np.array([[0.3, 1.2, 0.05], [1.0, 2.0, 3.0]])
    found = from_analyses({"tool_decision": {"meta": {"decisions": _decisions()}, "arrays": {"margin": margin}}})
    assert [(d.kind, d.first_wrong_step) for d in found] == [("wrong_tool", 1)]
    assert found[0].evidence["chosen"] == "lookup" and found[0].evidence["alternative"] == "calculator"


def test_whitebox_an_argument_names_the_token_it_was_measured_at_and_its_runner_up():
    """A value read token by token: the evidence pits its decided token against the runner-up token, not the
    whole value against a placeholder, and says which token of the value it was."""
    from evalrx.analyzers import RUNNER_UP, ToolDecisionResult

    decisions = [dict(_decisions()[1], kind="arg_value", arg="query", chosen="height of Morvane")]
    decisions[0].update(candidates=[" M", RUNNER_UP], token=" M", piece=2, call=0, token_index=40, **{"pass": 0})
    lp = np.log([[[0.3, 0.2], [0.8, 0.1], [0.5, 0.48]]], dtype=np.float32)  # [decision, layer, candidate]
    margin = lp[:, :, 0] - lp[:, :, 1]
    runner = np.full((1, 3), 7, dtype=np.int32)
    rec = ToolDecisionResult(decisions, lp, lp, margin, runner * 0, margin, runner, vocab={"7": " K"})
    (d,) = from_analyses({"tool_decision": {"meta": rec.meta, "arrays": rec.to_arrays()}})
    assert (d.kind, d.first_wrong_step) == ("bad_arguments", 3)
    ev = d.evidence
    assert (ev["chosen"], ev["alternative"], ev["value"], ev["piece"]) == (" M", " K", "height of Morvane", 2)
    assert ev["token_index"] == 40 and "token 3 of 'height of Morvane'" in d.summary and RUNNER_UP not in d.summary


def test_whitebox_a_confident_decision_proposes_nothing():
    margin = np.array([[0.5, 2.0, 3.5, 4.0], [0.2, 1.1, 1.8, 2.5]])
    assert from_analyses({"tool_decision": {"meta": {"decisions": _decisions()}, "arrays": {"margin": margin}}}) == []
    assert from_analyses({"tool_decision": {"meta": {"error": "no tool call"}, "arrays": {}}}) == []
    assert from_analyses({"logit_lens": {"meta": {}, "arrays": {}}}) == []


def _lens(mid_token: int, mid_p: float) -> dict:
    """A lens result over one answer token (step 3) across 4 layers: the last wrote token 11 ("krevom")."""
    layers, k = 4, 2
    topk = np.full((layers, 1, k), 12, dtype=np.int32)
    logp = np.full((layers, 1, k), np.log(0.1), dtype=np.float32)
    topk[:, 0, 0] = [12, mid_token, mid_token, 11]
    logp[:, 0, 0] = np.log([0.2, mid_p, mid_p, 0.9])
    return {
        "logit_lens": {
            "meta": {
                "kinds": ["tool_name", "arg_value", "answer", "turn_start"],
                "vocab": {"10": " krevumus", "11": " krevom", "12": " the"},
            },
            "arrays": {
                "topk_ids": topk,
                "topk_logprobs": logp,
                "target_ids": np.array([11], dtype=np.int32),
                "label_step": np.array([3], dtype=np.int32),
                "label_kind": np.array([2], dtype=np.int8),
            },
        }
    }


def test_whitebox_the_lens_had_the_observed_value_mid_way_and_lost_it_by_the_last_layer():
    traj = build(
        "What is the home city of Kigol Trafo?",
        [call("lookup", "The home city of Kigol Trafo is Krevumus.", query="home city of Kigol Trafo")],
        answer="The home city of Kigol Trafo is Krevom.",
    )
    (d,) = from_analyses(_lens(10, 0.8), traj)
    assert (d.kind, d.first_wrong_step, d.source) == ("misread_observation", 3, "whitebox")
    assert (d.evidence["alternative"], d.evidence["chosen"]) == ("krevumus", "krevom")
    # Not confident mid-way, or a value nothing stated: no sign.
    assert from_analyses(_lens(10, 0.3), traj) == []
    assert from_analyses(_lens(12, 0.8), traj) == []  # "the" is a word of the question, not a value it states
    assert from_analyses(_lens(10, 0.8)) == []  # without the trajectory there is nothing to compare with


def test_whitebox_evidence_names_the_token_where_the_call_went_wrong():
    """The panels show the alternatives at that token, not at the call's first argument token."""
    traj = build(
        "What is the home city of Kigol Trafo?",
        [call("lookup", "The home city of Kigol Trafo is Krevumus.", query="home city of Kigol Trafo")],
        answer="The home city of Kigol Trafo is Krevom.",
    )
    lens = _lens(10, 0.8)
    lens["logit_lens"]["arrays"].update(
        label_token_index=np.array([42], dtype=np.int32),
        label_pass=np.array([0], dtype=np.int16),
        label_call=np.array([0], dtype=np.int16),
    )
    lens["logit_lens"]["meta"]["label_arg"] = [""]
    (d,) = from_analyses(lens, traj)
    ev = d.evidence
    assert (ev["token_index"], ev["pass"], ev["call"], ev["arg"]) == (42, 0, 0, "")
    assert (ev["chosen_id"], ev["alternative_id"]) == (11, 10)
    (older,) = from_analyses(_lens(10, 0.8), traj)  # a result without the label arrays: no token named
    assert "token_index" not in older.evidence
    decisions = [dict(_decisions()[1], call=0, token_index=17, **{"pass": 0})]
    margin = np.array([[0.2, 1.6, 0.7, 0.04]])
    (t,) = from_analyses({"tool_decision": {"meta": {"decisions": decisions}, "arrays": {"margin": margin}}})
    assert (t.evidence["token_index"], t.evidence["call"], t.evidence["arg"]) == (17, 0, "expression")


# ---------------------------------------------------------------- ranking


def D(kind, step, source="heuristic", confidence=0.6):
    return Diagnosis(kind=kind, first_wrong_step=step, evidence={"text": kind}, confidence=confidence, source=source)


def test_rank_reference_beats_heuristic():
    h = D("malformed_call", 1, confidence=0.9)
    r = D("bad_arguments", 5, "reference", 0.95)
    assert rank([h, r]) == [r, h]


def test_rank_infra_error_comes_first():
    r = D("bad_arguments", 1, "reference", 0.95)
    i = D("infra_error", 7, "heuristic", 1.0)
    assert rank([r, i])[0] is i


def test_rank_among_heuristics_the_earliest_step_wins():
    late = D("repeated_calls", 5, confidence=0.9)
    early = D("bad_arguments", 1, confidence=0.5)
    assert rank([late, early]) == [early, late]


def test_rank_low_confidence_fallback_never_outranks_a_real_sign():
    fallback = D("wrong_final_answer", 1, confidence=0.2)
    sign = D("ignored_observation", 5, confidence=0.6)
    assert rank([fallback, sign]) == [sign, fallback]


def test_rank_low_confidence_fallback_never_outranks_a_whitebox_sign():
    fallback = D("wrong_final_answer", 3, confidence=0.2)
    margin = D("wrong_tool", 1, "whitebox", 0.4)
    assert rank([fallback, margin]) == [margin, fallback]


def test_diagnose_a_reference_diagnosis_outranks_the_rules():
    case, tools = demo("demo/two_step", "two_step-001")
    traj = build(
        case.inputs.prompt,
        [call("lookup", "The height of Vafa is 7915 m.", query="height of Vafa")],
        [call("calculator", "8772", expression="7951 + 821")],
        answer="8772",
    )
    found = diagnose(traj, case=case, tools=list(tools.values()))
    assert found[0].source == "reference" and any(d.source == "heuristic" for d in found)


def test_diagnose_whitebox_evidence_outranks_the_low_confidence_fallback():
    """A graded failure with no rule sign gets the 0.2 fallback; a collapsed margin is a real sign and must lead."""
    traj = build(
        "What is the capital of Arland?",
        [call("lookup", "The capital of Arland is Velmor.", query="capital of Arland")],
        answer="Velmor",
        expected="Ostrava",
    )
    decisions = [{"step": 1, "kind": "tool_name", "chosen": "lookup", "candidates": ["lookup", "calculator"]}]
    analyses = {"tool_decision": {"meta": {"decisions": decisions}, "arrays": {"margin": np.array([[0.1, 1.5, 0.02]])}}}
    found = diagnose(traj, analyses=analyses)
    assert {d.kind for d in found} == {"wrong_tool", "wrong_final_answer"}
    assert (found[0].source, found[0].kind, found[0].first_wrong_step) == ("whitebox", "wrong_tool", 1)


# ---------------------------------------------------------------- the vocabulary


def test_the_builtin_kinds_are_exactly_these_eighteen():
    assert FAILURE_KINDS == (
        "wrong_tool",
        "unknown_tool",
        "bad_arguments",
        "misread_observation",
        "malformed_call",
        "ignored_observation",
        "ignored_tool_error",
        "repeated_calls",
        "no_tool_call",
        "unneeded_tool_call",
        "no_final_answer",
        "wrong_final_answer",
        "infra_error",
        "policy_violation",
        "invented_information",
        "wrong_goal",
        "task_not_supported",
        "user_error",
    )
    assert [k.key for k in BUILTIN_KINDS] == list(FAILURE_KINDS)


def test_every_builtin_kind_has_a_definition():
    for k in BUILTIN_KINDS:
        assert k.definition.strip(), k.key
        assert DEFINITIONS[k.key] == k.definition == definition(k.key)
    assert definition("looping") == DEFINITIONS["repeated_calls"]
    assert definition("my_custom_kind") == ""


@pytest.mark.parametrize("old", sorted(LEGACY_KINDS))
def test_canonical_kind_maps_every_legacy_key_into_the_vocabulary(old):
    assert canonical_kind(old) in FAILURE_KINDS
    assert canonical_kind(old) == LEGACY_KINDS[old]


def test_canonical_kind_keeps_current_and_custom_keys():
    for k in FAILURE_KINDS:
        assert canonical_kind(k) == k
    assert canonical_kind("tool_timeout") == "tool_timeout"
    assert canonical_kind(" looping ") == "repeated_calls"
    assert canonical_kind(None) is None and canonical_kind("") is None


def test_every_kind_the_sources_propose_is_in_the_vocabulary():
    from evalrx.diagnosis.rules import CONFIDENCE, RULES

    assert set(RULES) <= set(FAILURE_KINDS) and set(CONFIDENCE) <= set(FAILURE_KINDS)


def test_diagnosis_round_trips_through_a_dict():
    d = Diagnosis(
        kind="bad_arguments",
        first_wrong_step=3,
        confidence=0.95,
        source="reference",
        evidence={"text": "calculator(...)", "diff": [{"arg": "expression", "expected": "7 - 3", "actual": "7 + 3"}]},
    )
    assert Diagnosis.from_dict(d.to_dict()) == d
    none = Diagnosis(kind=None)
    assert Diagnosis.from_dict(none.to_dict()) == none
    for source in SOURCES:
        x = Diagnosis(kind="wrong_tool", first_wrong_step=0, evidence={}, confidence=0.4, source=source)
        assert Diagnosis.from_dict(x.to_dict()) == x


def test_from_dict_maps_legacy_kinds_and_clamps_confidence():
    d = Diagnosis.from_dict({"kind": "looping", "confidence": 7, "evidence": "went round in circles"})
    assert d.kind == "repeated_calls" and d.confidence == 1.0 and d.summary == "went round in circles"
    assert d.source == "heuristic"


@pytest.mark.parametrize(
    "bad, match",
    [
        (["kind", "wrong_tool"], "must be an object, got list"),
        ("wrong_tool", "must be an object, got str"),
        ({"kind": "wrong_tool", "first_wrong_step": "3"}, "first_wrong_step must be a step index, got '3'"),
        ({"kind": "wrong_tool", "first_wrong_step": True}, "first_wrong_step must be a step index, got True"),
        ({"kind": "wrong_tool", "first_wrong_step": 1.5}, "first_wrong_step must be a step index"),
        ({"kind": "wrong_tool", "evidence": ["x"]}, "evidence must be an object or a string"),
        ({"kind": "wrong_tool", "source": "oracle"}, "source 'oracle' is not one of reference"),
        ({"kind": "wrong_tool", "confidence": "high"}, "confidence must be a number, got 'high'"),
    ],
)
def test_from_dict_rejects_bad_input_with_a_message(bad, match):
    with pytest.raises(ValueError, match=match):
        Diagnosis.from_dict(bad)


def _looked(share: float, stated_in_question: bool = False) -> "tuple[dict, Trajectory]":
    """An attention result over the calculator argument of step 1 (3 tokens at positions 200-202), after a
    64-token case picture shown on step 0, each layer giving the picture `share` of its attention; and the
    trajectory whose step 1 computed `347 * 2` (a number only the picture states unless the question does)."""
    goal = (
        "What is twice the number 347 on the card?" if stated_in_question else "What is twice the number on the card?"
    )
    traj = build(goal, [call("calculator", "694", expression="347 * 2")], answer="The result is 694.")
    positions = np.array([200, 201, 202], dtype=np.int32)
    patches = np.zeros((3, 2, 64), dtype=np.float32)
    patches[:, :, :] = share / 64
    mass = np.stack([np.full((3, 2), share), np.full((3, 2), 1 - share)], axis=-1).astype(np.float32)
    analyses = {
        "attention": {
            "meta": {
                "segments": [{"kind": "image", "step": 0, "label": "image@0"}, {"kind": "turn", "step": 1}],
                "images": [{"step": 0, "offset": 0, "n": 64, "grid": [8, 8], "region": [0, 0, 1, 1]}],
                "label_arg": ["expression"] * 3,
            },
            "arrays": {
                "positions": positions,
                "token_ids": np.array([5, 6, 7], dtype=np.int32),
                "mass": mass,
                "patches": patches,
                "label_step": np.array([1, 1, 1]),
                "label_kind": np.array([KINDS.index("arg_value")] * 3),
                "label_call": np.array([0, 0, 0]),
                "label_pass": np.array([0, 0, 0]),
                "label_token_index": positions + 1,
            },
        }
    }
    return analyses, traj


def test_whitebox_a_value_read_from_a_picture_it_barely_attended_is_a_misreading():
    # An even share of 64 of ~201 tokens is ~0.32: 0.05 is well under half of it, 0.3 is not.
    analyses, traj = _looked(0.05)
    (d,) = from_analyses(analyses, traj)
    assert (d.kind, d.first_wrong_step, d.source) == ("misread_observation", 1, "whitebox")
    assert d.evidence["image_step"] == 0 and d.evidence["attention_ratio"] < LOOKED_AWAY
    assert (d.evidence["token_index"], d.evidence["arg"], d.evidence["position"]) == (201, "expression", 0)
    assert "347" in d.evidence["text"]
    looked, _ = _looked(0.3)
    assert from_analyses(looked, traj) == []
    # The question states 347: the value came from the text, whatever the picture got.
    stated, told = _looked(0.05, stated_in_question=True)
    assert from_analyses(stated, told) == []
    # A text-only result (no pictures) proposes nothing.
    analyses["attention"]["meta"].pop("images")
    assert from_analyses(analyses, traj) == []


def test_whitebox_a_call_that_fetches_a_picture_is_not_a_value_read_from_one():
    """Zoom coordinates are where to look, not a number read off the picture: no sign however little it looked."""
    analyses, _ = _looked(0.05)
    traj = build("What is the code on the small label?", [call("image_zoom", "(zoomed)", x0="0.5")], answer="1234")
    traj.steps[1].tool_calls[0].args = {"expression": "0.75"}  # the argument the result names
    traj.steps[2].observation = Observation({"text": "(zoomed)", "n_images": 1})
    assert from_analyses(analyses, traj) == []
    traj.steps[2].observation = Observation({"text": "(zoomed)", "n_images": 0})  # the same call returning no picture
    (d,) = from_analyses(analyses, traj)
    assert d.kind == "misread_observation" and "0.75" in d.evidence["text"]
