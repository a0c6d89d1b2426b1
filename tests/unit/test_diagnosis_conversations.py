"""The diagnosis on conversations: user turns, hand-offs, tool effects, order-free references, prose misreads.

Transcripts here are made up in a domain of their own (a library's loans and a clinic's bookings), so the
rules are shown to hold away from the data set they are measured on.
"""

from __future__ import annotations

import json

import pytest

from evalrx.core import Label, Termination
from evalrx.core.effects import READ, WRITE, is_handoff, tool_effect
from evalrx.diagnosis import diagnose, from_rules
from evalrx.interop.openai_chat import from_openai_row

POLICY = "You are the library's assistant. Before any change to a loan, list it and get the user's explicit yes."


def _call(i: int, name: str, **args) -> dict:
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _assistant(*calls: dict, text=None) -> dict:
    return (
        {"role": "assistant", "content": text, "tool_calls": list(calls)}
        if calls
        else {"role": "assistant", "content": text}
    )


def _tool(i: int, name: str, result) -> dict:
    content = result if isinstance(result, str) else json.dumps(result)
    return {"role": "tool", "tool_call_id": f"c{i}", "name": name, "content": content}


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def _load(messages: list, refs=None, outcome=0, tools=None):
    row = {"id": "t1", "messages": messages, "outcome": outcome}
    if refs is not None:
        row["metadata"] = {"reference_calls": [{"name": n, "arguments": a} for n, a in refs]}
    if tools is not None:
        row["tools"] = tools
    return from_openai_row(row, 1)


def _top(messages, refs=None, **kw):
    case, traj = _load(messages, refs, **kw)
    found = diagnose(traj, case=case)
    assert found, "a failed run always gets a diagnosis"
    step = next(s for s in traj.steps if s.idx == found[0].first_wrong_step)
    return found[0], step.span["message"], traj


BOOK = {"loan_id": "L-4471", "title": "Middlemarch", "due": "2026-12-20"}
RENEWAL = [
    ("find_member", {"card": "88120"}),
    ("get_loan", {"loan_id": "L-4471"}),
    ("renew_loan", {"loan_id": "L-4471", "weeks": 2}),
]


def _renewal_run(weeks: int, user_yes: str = "Yes, please renew it.", loan: str = "L-4471") -> list:
    return [
        {"role": "system", "content": POLICY},  # message 1
        _user("Hi, my card is 88120 and I want to renew Middlemarch."),  # 2
        _assistant(_call(1, "find_member", card="88120")),  # 3
        _tool(1, "find_member", {"member": "m-17", "loans": ["L-4471", "L-5120"]}),  # 4
        _assistant(_call(2, "get_loan", loan_id="L-4471")),  # 5
        _tool(2, "get_loan", BOOK),  # 6
        _assistant(text=f"I can renew loan {loan} (Middlemarch) for {weeks} weeks. Shall I?"),  # 7
        _user(user_yes),  # 8
        _assistant(_call(3, "renew_loan", loan_id=loan, weeks=weeks)),  # 9
        _tool(3, "renew_loan", {"loan_id": "L-4471", "due": "2027-01-03"}),  # 10
        _assistant(text="Done: Middlemarch is now due on 2027-01-03."),  # 11
        _user("Thanks, bye!"),  # 12
    ]


# ---------------------------------------------------------------- tool effects


def test_a_tool_says_what_it_does_before_its_name_does():
    assert tool_effect("get_loan").effect == READ and "guess from the verb" in tool_effect("get_loan").why
    assert tool_effect("renewLoan").effect == WRITE
    assert tool_effect("get_loan", {"annotations": {"destructive_hint": True}}).effect == WRITE
    assert tool_effect("renew_loan", {"annotations": {"readOnlyHint": True}}).effect == READ
    assert tool_effect("renew_loan", {"function": {"name": "renew_loan", "x-effect": "read"}}).effect == READ
    assert tool_effect("get_loan", None, mark="write").why == "a person marked it write"
    unknown = tool_effect("loans")
    assert unknown.effect is None and "unknown" in unknown.why


def test_a_handoff_is_a_transfer_to_a_person_not_any_transfer():
    assert is_handoff("transfer_to_human_agents") and is_handoff("escalate") and is_handoff("handoffToOperator")
    assert not is_handoff("transfer_funds") and not is_handoff("get_agent_status")


# ---------------------------------------------------------------- conversations on import


def test_the_final_answer_of_a_conversation_is_the_agents_last_message_to_the_user():
    case, traj = _load(_renewal_run(2), outcome=1)
    assert traj.final_answer == "Done: Middlemarch is now due on 2027-01-03."
    assert traj.terminated == Termination.FINAL.value
    assert [s.span["message"] for s in traj.steps] == list(range(2, 13))


def test_a_run_handed_to_a_person_ended_normally_and_is_never_no_final_answer():
    messages = [
        {"role": "system", "content": POLICY},
        _user("I lost the book, can a librarian call me?"),
        _assistant(_call(1, "transfer_to_human_agents", summary="The member lost a book and wants a call back.")),
        _tool(1, "transfer_to_human_agents", "Transfer successful"),
    ]
    case, traj = _load(messages)
    assert traj.terminated == Termination.HANDOFF.value
    assert "no_final_answer" not in {d.kind for d in diagnose(traj, case=case)}


def test_a_run_whose_last_message_is_a_call_without_its_result_has_no_final_answer():
    messages = [_user("Renew L-4471"), _assistant(_call(1, "renew_loan", loan_id="L-4471", weeks=2))]
    case, traj = _load(messages)
    assert traj.terminated == Termination.INCOMPLETE.value
    assert diagnose(traj, case=case)[0].kind == "no_final_answer"


# ---------------------------------------------------------------- model-free rules


def test_a_refetch_after_the_user_asked_something_new_is_not_a_repeat():
    base = _renewal_run(2)
    again = [
        _user("Wait, when is it due now?"),
        _assistant(_call(4, "get_loan", loan_id="L-4471")),
        _tool(4, "get_loan", dict(BOOK, due="2027-01-03")),
        _assistant(text="It is due on 2027-01-03."),
    ]
    case, traj = _load(base[:-1] + again)
    assert "repeated_calls" not in {d.kind for d in from_rules(traj)}
    looped = base[:6] + [_assistant(_call(9, "get_loan", loan_id="L-4471")), _tool(9, "get_loan", BOOK)] + base[6:]
    case, traj = _load(looped)
    repeat = next(d for d in from_rules(traj) if d.kind == "repeated_calls")
    assert traj.steps[repeat.first_wrong_step].span["message"] == 7


def test_free_text_arguments_are_not_values_to_check():
    messages = [
        _user("Renew my loan please."),
        _assistant(_call(1, "think", thought="The Member probably means the Novel they borrowed in November.")),
        _tool(1, "think", ""),
        _assistant(text="Which loan would you like to renew?"),
    ]
    case, traj = _load(messages)
    assert not [d for d in from_rules(traj) if d.kind in ("bad_arguments", "misread_observation")]


def test_a_refused_call_the_agent_worked_around_is_where_it_went_wrong():
    messages = _renewal_run(2)[:8] + [
        _assistant(_call(3, "renew_loan", loan_id="L-4471", weeks=9)),  # 9
        _tool(3, "renew_loan", "Error: a loan can be renewed for at most 4 weeks"),  # 10
        _assistant(text="Renewals are limited; I could not renew it."),  # 11
        _user("Oh well. Bye."),  # 12
    ]
    top, message, _ = _top(messages)
    assert (top.kind, message) == ("bad_arguments", 9)
    assert "at most 4 weeks" in top.evidence["observation"]


def test_an_action_without_the_confirmation_the_policy_asks_for_is_a_policy_violation():
    case, traj = _load(_renewal_run(2, user_yes="Hmm, what are the late fees like?"))
    found = {d.kind: d for d in from_rules(traj, system=POLICY)}
    assert traj.steps[found["policy_violation"].first_wrong_step].span["message"] == 9
    case, traj = _load(_renewal_run(2))
    assert "policy_violation" not in {d.kind for d in from_rules(traj, system=POLICY)}
    case, traj = _load(_renewal_run(2, user_yes="Hmm, what are the late fees like?"))
    assert "policy_violation" not in {d.kind for d in from_rules(traj, system="You help with loans.")}


def test_a_count_that_misses_the_qualifier_the_message_names_is_a_misread():
    rooms = {"rooms": [{"room": f"R{i}", "free": i % 3 != 0} for i in range(1, 10)]}  # 9 rooms, 6 free
    messages = [
        _user("How many study rooms are free this afternoon?"),
        _assistant(_call(1, "list_rooms", day="today")),
        _tool(1, "list_rooms", rooms),
        _assistant(text="There are 9 free study rooms this afternoon."),
        _user("Great, thanks."),
    ]
    case, traj = _load(messages)
    misread = next(d for d in from_rules(traj) if d.kind == "misread_observation")
    assert traj.steps[misread.first_wrong_step].span["message"] == 4
    assert misread.evidence["observed"] == 6 and misread.evidence["stated"] == 9
    right = messages[:3] + [_assistant(text="There are 6 free study rooms this afternoon.")] + messages[4:]
    case, traj = _load(right)
    assert "misread_observation" not in {d.kind for d in from_rules(traj)}


# ---------------------------------------------------------------- the reference read order-free


def test_look_ups_in_any_order_repeated_or_extra_are_not_a_divergence():
    run = _renewal_run(2)
    extra = [_assistant(_call(7, "list_fees", loan_id="L-4471")), _tool(7, "list_fees", {"fees": []})]
    refs = [RENEWAL[1], RENEWAL[0], RENEWAL[1], RENEWAL[2]]  # the reference reads in another order, twice
    case, traj = _load(run[:6] + extra + run[6:], refs)
    assert [d.source for d in diagnose(traj, case=case)] == ["heuristic"]  # the rules' fallback only


def test_a_state_changing_call_with_other_arguments_is_wrong_at_the_call_or_where_the_value_came_from():
    top, message, _ = _top(_renewal_run(3), RENEWAL)
    assert (top.source, top.kind, message) == ("reference", "bad_arguments", 9)  # a small number: at the call
    assert top.evidence["diff"] == [{"arg": "weeks", "expected": 2, "actual": 3}]
    # The other loan came from an observation and was first named in the agent's proposal (message 7).
    top, message, _ = _top(_renewal_run(2, loan="L-5120"), RENEWAL)
    assert (top.kind, message) == ("misread_observation", 7)
    by_user = _renewal_run(2, loan="L-5120")
    by_user[1] = _user("Hi, my card is 88120; renew loan L-5120 please.")
    top, message, _ = _top(by_user, RENEWAL)
    assert (top.kind, message) == ("user_error", 2)


def test_a_state_changing_call_the_run_never_made_is_named_with_its_effect():
    messages = _renewal_run(2)[:7] + [_user("Actually, never mind."), _assistant(text="No problem. Goodbye!")]
    top, message, _ = _top(messages, RENEWAL)
    assert top.kind == "no_tool_call" and "renew_loan" in top.evidence["text"]
    assert "guess from the verb" in top.evidence["text"]
    assert message == 5  # the first turn after the loan id was stated (message 4): the call could have come there


def test_a_persons_mark_turns_a_look_up_into_a_state_change_the_reference_must_match():
    # `loans` has no verb the rule knows: unknown, so an extra call of it is not a divergence...
    messages = _renewal_run(2)[:8] + [
        _assistant(_call(3, "loans", loan_id="L-4471", action="renew")),  # 9
        _tool(3, "loans", {"ok": True}),
        _assistant(text="Renewed."),
    ]
    refs = [("renew_loan", {"loan_id": "L-4471", "weeks": 2})]
    case, traj = _load(messages, refs)
    top = diagnose(traj, case=case)[0]
    assert top.kind == "no_tool_call" and "never called renew_loan" in top.evidence["text"]
    # ...until a person marks it as changing state: then it is the wrong tool, and the evidence says who said so.
    top = diagnose(traj, case=case, tool_marks={"loans": "write"})[0]
    assert top.kind == "wrong_tool" and traj.steps[top.first_wrong_step].span["message"] == 9
    assert top.evidence["effect"] == "a person marked it write"


def test_two_changes_to_one_thing_keep_the_reference_order():
    refs = [("cancel_booking", {"booking": "B-900"}), ("refund_booking", {"booking": "B-900", "amount": 40})]
    messages = [
        _user("Cancel booking B-900 and refund my 40 dollars."),
        _assistant(text="To confirm: cancel B-900 and refund 40?"),
        _user("Yes."),
        _assistant(_call(1, "refund_booking", booking="B-900", amount=40)),  # 4
        _tool(1, "refund_booking", {"ok": True}),
        _assistant(_call(2, "cancel_booking", booking="B-900")),
        _tool(2, "cancel_booking", {"ok": True}),
        _assistant(text="Both done."),
    ]
    top, message, _ = _top(messages, refs)
    assert (top.kind, message) == ("wrong_tool", 4) and "before cancel_booking" in top.evidence["text"]


def test_a_refused_attempt_retried_rightly_is_not_the_divergence():
    messages = _renewal_run(2)[:8] + [
        _assistant(_call(3, "renew_loan", loan_id="L-4471", weeks="two")),  # 9
        _tool(3, "renew_loan", "Error: weeks must be a number"),
        _assistant(_call(4, "renew_loan", loan_id="L-4471", weeks=2)),  # 11
        _tool(4, "renew_loan", {"ok": True}),
        _assistant(text="Renewed."),
    ]
    case, traj = _load(messages, RENEWAL)
    assert "reference" not in {d.source for d in diagnose(traj, case=case)}


@pytest.mark.parametrize("outcome", [1])
def test_a_passing_conversation_has_no_diagnosis(outcome):
    case, traj = _load(_renewal_run(2), RENEWAL, outcome=outcome)
    assert traj.outcome is Label.PASS and diagnose(traj, case=case) == []


def test_a_record_the_user_picked_by_its_words_is_the_users_choice():
    slots = {
        "slots": {
            "S-301": {"slot_id": "S-301", "doctor": "Okafor", "time": "morning", "room": "east"},
            "S-302": {"slot_id": "S-302", "doctor": "Lindqvist", "time": "afternoon", "room": "west"},
        }
    }
    messages = [
        _user("I need to book a check-up, patient P-77."),  # 1
        _assistant(_call(1, "list_slots", patient="P-77")),  # 2
        _tool(1, "list_slots", slots),  # 3
        _assistant(text="Two slots are open: a morning one and an afternoon one. Which would you like?"),  # 4
        _user("The afternoon with Dr Lindqvist, please."),  # 5
        _assistant(_call(2, "book_slot", patient="P-77", slot_id="S-302")),  # 6
        _tool(2, "book_slot", {"ok": True}),
        _assistant(text="Booked."),
    ]
    refs = [("list_slots", {"patient": "P-77"}), ("book_slot", {"patient": "P-77", "slot_id": "S-301"})]
    top, message, _ = _top(messages, refs)
    assert (top.kind, message) == ("user_error", 5)
    # Had the agent picked it with no word from the user, the agent's choice is where it went wrong.
    messages[4] = _user("Whichever is fine.")
    top, message, _ = _top(messages, refs)
    assert top.kind == "misread_observation" and message == 6


def test_a_long_search_query_is_still_a_value_to_check():
    messages = [
        _user("When was the Okonkwo reading room built?"),
        _assistant(_call(1, "search", query="When was the Okonkow reading room of the library built")),
        _tool(1, "search", "no results"),
        _assistant(text="I could not find it."),
    ]
    case, traj = _load(messages)
    assert "Okonkow" in next(d for d in from_rules(traj) if d.kind == "bad_arguments").evidence["text"]
