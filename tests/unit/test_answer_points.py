"""A final answer's decision points are its values (`answer_points="values"`, the default); "all" reads every token.

Values: numbers and ids, quoted strings, JSON values, the words an answer shares with the expected answer,
an observation or a call's arguments, and the answer's first token. Checked on the text alone, on the demo
model's own answers, on SmolLM2's tokenizer over an answer it wrote, and on an imported real transcript.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import evalrx
from evalrx.analyzers import LogitLensAnalyzer, TrajectoryPlan
from evalrx.core import Step, StepRole, Trajectory
from evalrx.internals.passes import answer_value_spans, find_decision_points, known_words, local_model
from evalrx.internals.passes.positions import tokenize_with_offsets
from evalrx.models.agent import Agent
from evalrx.suites import load_cases
from evalrx.tools import get_tools


def _values(text: str, known=frozenset()) -> list:
    return [text[s:e] for s, e in answer_value_spans(text, 0, len(text), known)]


def test_prose_values_are_numbers_ids_quotes_and_known_words_never_filler():
    known = known_words(["cancelled", '{"status": "cancelled", "order_id": "#W123"}', {"city": "New York"}])
    assert _values("The area of the triangle is 25 square units.") == ["25"]
    assert _values("Your order #W123 has been cancelled.", known) == ["#W123", "cancelled"]
    assert _values('Ticket ORD-17 (id 3f2a1b4c-1111-2222-3333-444455556666) says "out of stock".') == [
        "ORD-17",
        "3f2a1b4c-1111-2222-3333-444455556666",
        "out of stock",
    ]
    # A name inside a sentence is a value even when nothing states it (a misread name is one).
    assert _values("The home city of Lomin Bounatum is Vomu.") == ["Lomin", "Bounatum", "Vomu"]
    # A field's name is not a value it shares: "status" and "order_id" stay filler.
    assert _values("The status of the order is cancelled, it ships to New York.", known) == [
        "cancelled",
        "New",
        "York",
    ]


def test_json_answers_have_their_values_not_their_keys():
    text = '```json\n{"area": 25, "unit": "square units", "ok": true, "sides": [3, "4.5"]}\n```'
    assert _values(text) == ["25", "square units", "true", "3", "4.5"]
    assert _values('[1, 2.5, "x"]') == ["1", "2.5", "x"]


class _Spaced:
    """A tokenizer splitting on spaces (each word and each space its own token), with offsets."""

    is_fast = True

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        import re

        spans = [(m.start(), m.end()) for m in re.finditer(r"\S+|\s", text)]
        return {"input_ids": list(range(len(spans))), "offset_mapping": spans}


def _answer_pieces(text: str, answer: str, tokenizer, **kw) -> list:
    ids, offsets = tokenize_with_offsets(tokenizer, text)
    start = text.index(answer)
    g0 = next(i for i, (s, _) in enumerate(offsets) if s >= start)
    points = find_decision_points(3, text, offsets, (start, len(text)), (g0, len(ids)), [], is_answer=True, **kw)
    return [text[slice(*offsets[p.token_index])].strip() for p in points if p.kind == "answer"]


def test_values_mode_keeps_the_first_token_and_the_values_all_mode_every_token():
    text = "user: area?\nassistant: The area is 25 square units."
    values = _answer_pieces(text, "The area", _Spaced())
    assert values == ["The", "25"]
    every = _answer_pieces(text, "The area", _Spaced(), answer_points="all")
    assert [p for p in every if p] == ["The", "area", "is", "25", "square", "units."]
    with pytest.raises(ValueError, match="answer_points must be one of values, all"):
        _answer_pieces(text, "The area", _Spaced(), answer_points="some")


# SmolLM2-135M-Instruct's own answers to two demo cases (48 new tokens, greedy), recorded.
SMOLLM2_ANSWERS = [
    (
        "The home city of Tethun Troseshir is a fictional planet in the Star Wars univers",
        ["Tethun", "Troseshir", "Star", "Wars"],
        ["home", "city", "fictional", "planet", "univers"],
    ),
    (
        "To solve this problem, we need to find 52 + 896 and then add 52 to 896.\n\nLet's break it down step by "
        "step:\n\n1. 52 + ",
        ["52", "896", "1"],
        ["solve", "problem", "need", "find", "add", "break", "down", "step"],
    ),
]


@pytest.mark.parametrize("answer, values, filler", SMOLLM2_ANSWERS)
def test_smollm2s_answers_are_read_at_their_values(answer, values, filler):
    """SmolLM2-135M's tokenizer (from its cached checkpoint) over answers it wrote."""
    from transformers import AutoTokenizer

    from evalrx.models import gguf
    from evalrx.specs import SMOLLM2_KEY, get_spec, resolve_weights

    cached = gguf.cached_dir(resolve_weights(get_spec(SMOLLM2_KEY)))
    tokenizer = AutoTokenizer.from_pretrained(str(cached)) if cached else evalrx.load(SMOLLM2_KEY).tokenizer
    text = "<|im_start|>assistant\n" + answer + "<|im_end|>"
    got = _answer_pieces(text, answer, tokenizer, eos_text="<|im_end|>")
    assert got[0] == answer.split()[0][: len(got[0])] and got[0]  # the answer's first token
    joined = "".join(got[1:])
    for value in values:
        assert value in joined, (value, got)
    for word in filler:
        assert not any(word.startswith(piece) and len(piece) > 2 for piece in got[1:]), (word, got)
    every = _answer_pieces(text, answer, tokenizer, answer_points="all", eos_text="<|im_end|>")
    assert len(got) < len(every) and set(got) < set(every)


@pytest.fixture(scope="module")
def demo():
    return evalrx.load("evalrx-tiny")


def _answer_points(plan, answer_points: str) -> list:
    return [
        (p.step, plan.passes[i].text[slice(*p.char_span)].strip())
        for i in range(len(plan.passes))
        for p in plan.decisions(i, answer_points=answer_points)
        if p.kind == "answer"
    ]


def test_the_demo_models_answers_are_read_at_their_values(demo):
    case = load_cases("demo/lookup_easy")[0]
    tools = get_tools(["calculator", "lookup"], case=case)
    traj = Agent(demo, tools).run(case)
    schemas = [t.to_openai() for t in tools]
    plan = TrajectoryPlan.build(local_model(demo, "test"), traj, tools=schemas)
    values = _answer_points(plan, "values")
    every = _answer_points(plan, "all")
    assert values and len(values) < len(every)
    answer = traj.final_answer or ""
    expected = {str(v).lower() for v in known_words([case.expected])}
    shared = [w for w in expected if w in answer.lower()]
    assert shared, (answer, case.expected)  # the demo model's answer states the looked-up value
    read = "".join(piece for _, piece in values).lower()
    assert all(w.replace(" ", "") in read for w in shared)
    lens = LogitLensAnalyzer().run_trajectory(demo, traj, tools=schemas)
    assert lens.info["answer_points"] == "values"
    assert int((lens.labels["label_kind"] == 2).sum()) == len(values)  # KINDS.index("answer")


def test_an_imported_transcript_is_read_at_its_values(demo):
    from pathlib import Path

    from evalrx.interop import read_file

    path = Path(__file__).resolve().parents[1] / "fixtures" / "interop" / "autogen_team.spans.jsonl"
    _, records = read_file(path)
    traj = records[0].traj
    plan = TrajectoryPlan.build(local_model(demo, "test"), traj)
    values = _answer_points(plan, "values")
    by_step = {}
    for step, piece in values:
        by_step.setdefault(step, []).append(piece)
    answer_step = next(s.idx for s in traj.steps if s.content == "The answer is 923.")
    assert "".join(by_step[answer_step][1:]) == "923" and by_step[answer_step][0] == "The"


def test_an_answer_without_values_has_only_its_first_token(demo):
    traj = Trajectory(
        "t",
        "Say hello",
        steps=[
            Step(0, StepRole.USER, "Say hello politely."),
            Step(1, StepRole.ACTOR, "Hello there, it is nice to meet you."),
        ],
        final_answer="Hello there, it is nice to meet you.",
    )
    plan = TrajectoryPlan.build(local_model(demo, "test"), traj)
    assert [piece for _, piece in _answer_points(plan, "values")] == ["Hello"]


def test_the_new_run_form_carries_the_setting_and_the_page_says_which_was_used():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))  # components, as Streamlit puts it
    from components.analysis_panels import answer_points_line
    from components.launch import lens_entries

    assert lens_entries(["logit_lens", "attention", "tool_decision"], "exact", "all") == [
        {"name": "logit_lens", "answer_points": "all"},
        "attention",
        "tool_decision",
    ]
    assert lens_entries(["logit_lens"], "bfloat16", "values") == [{"name": "logit_lens", "precision": "bfloat16"}]

    class Result:
        def __init__(self, info):
            self.info = info

    assert "answer_points=values" in answer_points_line({"logit_lens": Result({"answer_points": "values"})})
    # A result stored before the setting read every answer token.
    assert "every answer token (answer_points=all)" in answer_points_line({"logit_lens": Result({})})
    assert answer_points_line({"attention": Result({})}) is None
