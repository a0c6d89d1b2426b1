"""Graders: exact, normalised, numeric, contains, regex, and trajectory grading."""

from __future__ import annotations

import pytest

from evalrx.core.case import FailureCase, Inputs, Label, Step, StepRole, Trajectory
from evalrx.grade import (
    GRADER_KINDS,
    check_grader,
    default_grader,
    extract_numbers,
    grade,
    grade_trajectory,
    normalize_text,
)

P, F = Label.PASS, Label.FAIL


def test_normalize_text_drops_case_punctuation_articles_and_spaces():
    assert normalize_text("  The  Capital, of Arland!  ") == "capital of arland"
    assert normalize_text("An apple a day") == "apple day"
    assert normalize_text("theatre") == "theatre"  # articles only as whole words


@pytest.mark.parametrize(
    "text, numbers",
    [
        ("The answer is 929.", [929.0]),
        ("from 1,234,567 to -3.5", [1234567.0, -3.5]),
        ("347-582 is -235", [347.0, 582.0, -235.0]),
        ("1e3 and .5", [1000.0, 0.5]),
        ("no digits", []),
        ("version2 x3", []),
    ],
)
def test_extract_numbers(text, numbers):
    assert extract_numbers(text) == numbers


@pytest.mark.parametrize(
    "answer, expected, grader, label",
    [
        ("Velmor", "Velmor", {"kind": "exact"}, P),
        (" Velmor\n", "Velmor", {"kind": "exact"}, P),
        ("velmor", "Velmor", {"kind": "exact"}, F),
        ("velmor", "Velmor", {"kind": "exact", "case_sensitive": False}, P),
        ("The Blue Lantern.", "blue lantern", {"kind": "normalized"}, P),
        ("blue lanterns", "blue lantern", {"kind": "normalized"}, F),
        ("The answer is 929.", 929, {"kind": "numeric"}, P),
        ("The answer is 928.", 929, {"kind": "numeric"}, F),
        ("It is 1,234,567 people", "1234567", {"kind": "numeric"}, P),
        ("3.333333", 10 / 3, {"kind": "numeric", "rel_tol": 1e-4}, P),
        ("3.3", 10 / 3, {"kind": "numeric", "rel_tol": 1e-4}, F),
        ("about 101", 100, {"kind": "numeric", "tol": 1.5}, P),
        ("about 102", 100, {"kind": "numeric", "abs_tol": 1.5}, F),
        ("929 or maybe 930", 929, {"kind": "numeric"}, F),  # the LAST number counts
        ("929 or maybe 930", 929, {"kind": "numeric", "which": "any"}, P),
        ("The answer is -334.", -334, {"kind": "numeric"}, P),
        ("I don't know", 5, {"kind": "numeric"}, F),
        ("Your name is Kira.", "Kira", {"kind": "contains"}, P),
        ("Your name is Kiran.", "Kira", {"kind": "contains"}, F),  # whole words only
        ("Velmor, in Arland", ["velmor", "arland"], {"kind": "contains"}, P),
        ("Velmor", ["velmor", "arland"], {"kind": "contains"}, F),
        ("Hello! How can I help?", None, {"kind": "regex", "pattern": r"(?i)\bhello\b"}, P),
        ("Goodbye", None, {"kind": "regex", "pattern": r"(?i)\bhello\b"}, F),
        ("code 42", r"\d+", {"kind": "regex"}, P),
        ("anything", "ignored", {"kind": "exact", "value": "anything"}, P),
    ],
)
def test_grade(answer, expected, grader, label):
    assert grade(answer, expected, grader) is label


def test_no_answer_fails():
    assert grade(None, 3, {"kind": "numeric"}) is F


def test_default_grader_by_expected_type():
    assert default_grader(7) == {"kind": "numeric"}
    assert default_grader("Velmor") == {"kind": "normalized"}
    assert grade("the answer is 7", 7) is P
    assert grade("velmor", "Velmor") is P


def test_bad_grader_specs_raise_with_reason():
    with pytest.raises(ValueError, match="unknown grader kind 'fuzzy'"):
        grade("x", "x", {"kind": "fuzzy"})
    with pytest.raises(ValueError, match="not a valid regex"):
        grade("x", "x", {"kind": "regex", "pattern": "("})
    with pytest.raises(ValueError, match="needs a number"):
        grade("7", "seven", {"kind": "numeric"})
    assert check_grader({"kind": "numeric", "rel_tol": -1}).startswith("grader rel_tol")
    assert check_grader("exact").startswith("grader must be an object")
    assert all(check_grader({"kind": k, "pattern": "x"}) is None for k in GRADER_KINDS)


def _traj(final, terminated="final"):
    return Trajectory(
        sample_id="c",
        goal="g",
        steps=[Step(idx=0, role=StepRole.USER, content="g")],
        final_answer=final,
        metrics={"terminated": terminated},
    )


def test_grade_trajectory():
    case = FailureCase(inputs=Inputs("What is 3 + 4?"), expected=7, grader={"kind": "numeric"})
    assert grade_trajectory(_traj("The answer is 7."), case) is P
    assert grade_trajectory(_traj("The answer is 8."), case) is F
    assert grade_trajectory(_traj(None, "max_turns"), case) is F
    assert grade_trajectory(_traj("7", "error"), case) is Label.ERROR  # the harness failed, not the model


def test_every_demo_case_passes_its_own_reference_answer():
    """The demo suites' graders accept the scripted answers the model is trained to give."""
    from evalrx.demo.data import SUITE_SEED, SUITES
    from evalrx.demo.episodes import Generator
    from evalrx.demo.world import make_world

    gen = Generator(make_world(), seed=SUITE_SEED, held_out=True)
    for _suite, (_count, method, kwargs, _d) in SUITES.items():
        for _ in range(5):
            ep = getattr(gen, method)(**kwargs)
            assert grade(ep.answer, ep.expected, ep.grader) is P, (ep.prompt, ep.answer, ep.expected)
