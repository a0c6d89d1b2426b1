"""The one reading of a tool's observation as text (`evalrx.core.observation_text`), and its callers."""

from __future__ import annotations

import sys
from pathlib import Path

from evalrx.core import (
    PICTURE_MARKER,
    Observation,
    Step,
    StepRole,
    ToolResult,
    Trajectory,
    observation_text,
    picture_count,
)

PNG = "data:image/png;base64," + "iVBORw0KGgo" * 50


def test_a_steps_observation_is_typed_and_stored_as_its_value() -> None:
    """A tool's return becomes an `Observation`: its text, its pictures, its structured value; the step stores the
    value as before, and a stored value reads back as the same observation."""
    returned = ToolResult(text="zoomed", images=["p1", "p2"], meta={"box": [0, 0, 5, 5]})
    obs = Observation.of(returned)
    assert (obs.text, obs.pictures, obs.structured) == ("zoomed", 2, {"box": [0, 0, 5, 5]})
    assert observation_text(obs) == "zoomed" and observation_text(obs, shown=True) == "zoomed"
    assert Observation.of({"rows": 3}).structured == {"rows": 3} and Observation.of("12").structured is None
    step = Step(2, StepRole.TOOL, "image_zoom", observation=obs)
    stored = {"text": "zoomed", "n_images": 2, "meta": {"box": [0, 0, 5, 5]}}
    assert step.to_dict()["observation"] == stored
    assert Step.from_dict(step.to_dict()) == step and Step.from_dict(step.to_dict()).observation == obs
    assert Step(3, StepRole.TOOL, "f", observation=Observation.of(None)).observation is None  # as it reads back


def test_plain_values_read_as_text() -> None:
    assert observation_text(None) == ""
    assert observation_text("42 rows") == "42 rows"
    assert observation_text(ToolResult(text="a page", images=["x"])) == "a page"


def test_a_record_or_a_text_dict_reads_as_its_text() -> None:
    assert observation_text({"text": "the page", "n_images": 2, "meta": {"url": "u"}}) == "the page"
    assert observation_text({"text": "imported"}) == "imported"


def test_any_other_value_is_canonical_json_with_sorted_keys() -> None:
    assert observation_text({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
    assert observation_text({"a": 1, "b": 1}) == observation_text({"b": 1, "a": 1})
    assert observation_text({"text": None, "x": 1}) == '{"text":null,"x":1}'  # a `text` that is not a string
    assert observation_text([{"id": 1}, {"id": 2}]) == '[{"id":1},{"id":2}]'  # a JSON array, not content
    assert observation_text(["a", "b"]) == '["a","b"]'
    assert observation_text(3) == "3"


def test_content_blocks_join_their_texts_and_name_pictures() -> None:
    blocks = [
        {"type": "text", "text": "before"},
        {"type": "image_url", "image_url": {"url": PNG}},
        {"type": "text", "text": "after"},
    ]
    text = observation_text(blocks)
    assert text == f"before\n{PICTURE_MARKER}\nafter"
    assert "base64" not in text


def test_shown_is_what_the_loop_put_in_the_tool_message() -> None:
    # a teacher-forced pass rebuilds the tool message from the stored record: it must be the loop's `str()`
    for value in ("text", ToolResult(text="page", images=[1]), {"a": 1}, [1, 2], None, 3):
        record = {"text": value.text, "n_images": 1} if isinstance(value, ToolResult) else value
        assert observation_text(record, shown=True) == str(value)
    assert observation_text({"text": "t", "x": 1}, shown=True) == str({"text": "t", "x": 1})  # not a record


def test_picture_count() -> None:
    assert picture_count(ToolResult(text="", images=[1, 2])) == 2
    assert picture_count({"text": "", "n_images": 3}) == 3
    assert picture_count({"text": "", "n_images": "bad"}) == 0
    assert picture_count("text") == picture_count(None) == picture_count([{"type": "image"}]) == 0


def test_every_reader_agrees_on_a_dict_without_text() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))  # components, as Streamlit puts it
    from components.viewmodel import step_views

    from evalrx.diagnosis._evidence import calls_of
    from evalrx.diagnosis.judge import transcript_part
    from evalrx.store import observation_text as stored

    obs = {"rows": [{"id": 7}], "count": 1}
    assert stored is observation_text
    steps = [
        Step(idx=0, role=StepRole.ACTOR, content="", tool_calls=[{"name": "q", "args": {}}]),
        Step(idx=1, role=StepRole.TOOL, content="q", observation=obs),
    ]
    traj = Trajectory(sample_id="s", goal="g", steps=steps)
    expected = '{"count":1,"rows":[{"id":7}]}'
    assert step_views(traj)[1].observation == expected
    assert calls_of(traj)[0].observation == expected
    assert expected in transcript_part(traj, steps, 10_000, 10)
