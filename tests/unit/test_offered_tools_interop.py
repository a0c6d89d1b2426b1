"""The tools a trajectory was offered travel with it through imports and exports: OpenAI chat JSONL's
`tools`, ATIF's `agent.tool_definitions` (written and read), evalrx JSONL's `offered_tools`."""

from __future__ import annotations

from evalrx.interop.atif import from_atif, to_atif
from evalrx.interop.evalrx_jsonl import record_of_row
from evalrx.interop.openai_chat import from_openai_row

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_openai_chat_rows_keep_their_tools_as_offered_and_skip_what_is_not_a_tool():
    row = {
        "messages": [{"role": "user", "content": "weather in Paris?"}, {"role": "assistant", "content": "Sunny."}],
        "tools": [WEATHER, {"type": "function", "function": {"description": "no name"}}, "junk"],
    }
    _, traj = from_openai_row(row, 1)
    assert [(t["name"], t["source"]) for t in traj.offered_tools] == [("get_weather", "case")]
    assert traj.offered_tools[0]["parameters"]["required"] == ["city"]


def test_atif_writes_tool_definitions_and_a_foreign_document_brings_them_back():
    offered = [dict(WEATHER["function"], source="mcp", origin="weather-server")]
    row = {
        "case_id": "c1",
        "sample_id": "c1",
        "goal": "weather in Paris?",
        "steps": [
            {"idx": 0, "role": "user", "content": "weather in Paris?"},
            {"idx": 1, "role": "actor", "content": "Sunny.", "tool_calls": [], "span": {}},
        ],
        "final_answer": "Sunny.",
        "offered_tools": offered,
        "run": {"name": "r", "config": {"model": {"name": "m"}}},
        "case": {"id": "c1", "prompt": "weather in Paris?"},
    }
    doc = to_atif(row)
    assert doc["agent"]["tool_definitions"] == [WEATHER]
    back = record_of_row(from_atif(doc))  # our own document: the whole row rides in extra.evalrx
    assert back.traj.offered_tools == offered
    foreign = dict(doc, extra={})  # as another tool would write it: only ATIF's own fields
    row_in = from_atif(foreign)
    assert [(t["name"], t["source"]) for t in row_in["offered_tools"]] == [("get_weather", "case")]
    assert record_of_row(row_in).traj.offered_tools[0]["parameters"] == WEATHER["function"]["parameters"]
