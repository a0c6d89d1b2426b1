"""OpenInference and OpenTelemetry traces as trajectories: TRAIL's span trees, Phoenix's and the SDK's span JSON,
OTLP JSON; every span accounted for, each step keeping its agent and its span, TRAIL's labels landing on the step
their span made, and bad spans refused in one line with nothing written."""

from __future__ import annotations

import base64
import json

import pytest

import evalrx.store as S
from evalrx.interop import ImportFormatError, import_file, import_labels, read_file

T0 = 1_780_000_000_000_000_000  # ns


def _iso(ns: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ns / 1e9, timezone.utc).isoformat().replace("+00:00", "Z")


def llm(span_id, *, inputs=(), text="", calls=(), tokens=(10, 3), start=0, end=1, children=(), **extra):
    """A TRAIL-style LLM span (flat OpenInference attributes)."""
    attrs = {"openinference.span.kind": "LLM", "llm.model_name": "m-1"}
    for i, (role, content) in enumerate(inputs):
        attrs[f"llm.input_messages.{i}.message.role"] = role
        attrs[f"llm.input_messages.{i}.message.content"] = content
    attrs["llm.output_messages.0.message.role"] = "assistant"
    attrs["llm.output_messages.0.message.content"] = text
    for j, (cid, name, args) in enumerate(calls):
        base = f"llm.output_messages.0.message.tool_calls.{j}.tool_call"
        attrs[f"{base}.id"] = cid
        attrs[f"{base}.function.name"] = name
        attrs[f"{base}.function.arguments"] = json.dumps(args)
    attrs["llm.token_count.prompt"], attrs["llm.token_count.completion"] = tokens
    attrs.update(extra)
    return _span(span_id, "ChatCompletion", attrs, start, end, children)


def tool(span_id, name, args, result, *, start=0, end=1, error=None):
    attrs = {"openinference.span.kind": "TOOL", "tool.name": name, "input.value": json.dumps(args)}
    if result is not None:
        attrs["output.value"] = result
    return _span(span_id, name, attrs, start, end, (), error)


def _span(span_id, name, attrs, start, end, children=(), error=None):
    out = {
        "span_id": span_id,
        "span_name": name,
        "span_attributes": attrs,
        "timestamp": _iso(T0 + start * 1_000_000_000),
        "duration": f"PT{end - start}S",
        "status_code": "Error" if error else "Unset",
        "status_message": error or "",
        "child_spans": list(children),
    }
    return out


def trail_trace():
    """A manager handing arithmetic to a managed agent, as smolagents' OpenInference spans nest it in TRAIL."""
    math = _span(
        "a2",
        "math_agent.run",
        {"openinference.span.kind": "AGENT", "input.value": json.dumps({"task": "compute 17*23"})},
        3,
        7,
        [
            llm(
                "l2",
                inputs=[("user", "compute 17*23")],
                calls=[("c2", "calculator", {"expression": "17*23"})],
                start=3,
                end=4,
            ),
            tool("t2", "calculator", {"expression": "17*23"}, "391", start=4, end=5),
            llm("l3", text="391", start=5, end=6),
        ],
    )
    step1 = _span(
        "s1",
        "Step 1",
        {"openinference.span.kind": "CHAIN"},
        1,
        8,
        [
            llm(
                "l1",
                inputs=[("user", "What is 17*23?")],
                calls=[("c1", "math_agent", {"task": "compute 17*23"})],
                start=1,
                end=2,
            ),
            math,
        ],
    )
    step2 = _span(
        "s2",
        "Step 2",
        {"openinference.span.kind": "CHAIN"},
        8,
        10,
        [llm("l4", text="The answer is 391.", start=8, end=9)],
    )
    root = _span(
        "a1",
        "manager.run",
        {
            "openinference.span.kind": "AGENT",
            "input.value": json.dumps({"task": "What is 17*23?"}),
            "output.value": "The answer is 391.",
            "smolagents.managed_agents.0.name": "math_agent",
            "smolagents.managed_agents.0.description": "does arithmetic",
        },
        0,
        11,
        [step1, step2, _span("x1", "logging", {}, 10, 11)],
    )
    return {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "spans": [root]}


def test_a_trail_trace_is_one_trajectory_with_the_team_and_every_span_accounted_for(tmp_path, sqlite_url):
    path = tmp_path / "4bf92f3577b34da6a3ce929d0e0e4736.json"
    path.write_text(json.dumps(trail_trace(), indent=2))
    result = import_file(path, store=sqlite_url)
    assert (result.format, result.n_trajectories) == ("spans", 1)
    (row,) = S.list_trajectories(run_id=result.run_ids[0], store=sqlite_url).rows
    traj = S.get_trajectory(row.id, store=sqlite_url).trajectory
    got = [(s.role.value, s.agent, s.addressee, s.span.get("span_id")) for s in traj.steps]
    assert got == [
        ("user", None, None, "a1"),
        ("actor", "manager", "math_agent", "l1"),
        ("actor", "math_agent", None, "l2"),
        ("tool", "math_agent", None, "t2"),
        ("actor", "math_agent", None, "l3"),
        ("actor", "manager", None, "l4"),
    ]
    assert traj.goal == "What is 17*23?" and traj.final_answer == "The answer is 391."
    assert [c.to_dict() for c in traj.steps[1].tool_calls] == [
        {"name": "math_agent", "args": {"task": "compute 17*23"}, "id": "c1"}
    ]
    assert traj.steps[3].observation.value == "391" and traj.steps[3].span["call"] == 0
    assert traj.steps[2].span["latency_ms"] == 1000.0 and traj.steps[2].span["prompt_tokens"] == 10
    assert [m["name"] for m in traj.roster] == ["manager", "math_agent"]
    assert traj.roster[1]["description"] == "does arithmetic"
    trace = traj.metrics["trace"]
    # steps + skipped spans = spans: the two CHAIN steps, the managed AGENT span and the log span were skipped
    assert trace["spans"] == 10 and trace["steps_from"] + sum(trace["skipped"].values()) == 10
    assert trace["skipped"] == {"CHAIN": 2, "AGENT": 1, "(no kind)": 1}
    # every span id finds a step: a skipped span stands for the first step made below it
    owners = {sid: s.idx for s in traj.steps for sid in [s.span.get("span_id"), *s.span.get("spans", [])] if sid}
    assert set(owners) == {"a1", "a2", "s1", "s2", "l1", "l2", "l3", "l4", "t2", "x1"}
    assert owners["s1"] == 1 and owners["a2"] == 2 and owners["s2"] == 5
    assert {a.agent: a.n_steps for a in S.trajectory_agents(row.id, store=sqlite_url)} == {
        "manager": 2,
        "math_agent": 3,
    }


def test_trail_annotations_land_on_the_steps_their_spans_made(tmp_path, sqlite_url):
    path = tmp_path / "4bf92f3577b34da6a3ce929d0e0e4736.json"
    path.write_text(json.dumps(trail_trace()))
    run = import_file(path, store=sqlite_url).run_ids[0]
    labels = tmp_path / "4bf92f3577b34da6a3ce929d0e0e4736.labels.json"
    labels.write_text(
        json.dumps(
            {
                "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                "errors": [
                    {"category": "Tool Selection Errors", "location": "l4", "evidence": "e", "impact": "HIGH"},
                    {"category": "Formatting Errors", "location": "s1", "evidence": "e2", "impact": "LOW"},
                ],
                "scores": [{"overall": 2}],
            },
            indent=2,
        )
    )
    res = import_labels(labels, run_id=run, store=sqlite_url)
    assert (res.format, res.n_labels, res.n_step_labels, res.annotators) == ("trail", 1, 2, ["trail"])
    (row,) = S.list_trajectories(run_id=run, store=sqlite_url).rows
    got = {(x.step_idx, x.failure_kind, x.first_wrong_step) for x in S.current_labels(row.id, store=sqlite_url)}
    # the CHAIN span "s1" stands for its first step (the manager's call); the earliest error is the first wrong step
    assert got == {(None, "malformed_call", 1), (5, "wrong_tool", None), (1, "malformed_call", None)}
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "errors": [{"category": "x", "location": "zz"}]})
    )
    with pytest.raises(ImportFormatError, match="span zz is not in trajectory"):
        import_labels(bad, run_id=run, store=sqlite_url)


def _phoenix_span(span_id, parent, kind, name, start, end, attributes):
    """Phoenix's span JSON: ids under `context`, nested attributes, `span_kind`."""
    return {
        "name": name,
        "context": {"trace_id": "t-phoenix", "span_id": span_id},
        "parent_id": parent,
        "span_kind": kind,
        "start_time": _iso(T0 + start * 1_000_000),
        "end_time": _iso(T0 + end * 1_000_000),
        "status_code": "OK",
        "status_message": "",
        "attributes": attributes,
        "events": [],
    }


def _conversation_spans(layout: str) -> list:
    """Three model calls of one tool-using chat, as `openinference-instrumentation-openai` traces it: each call's
    input holds what came back. `layout`: Phoenix's span JSON (nested attributes) or its dataframe's records."""
    sys_, user = {"role": "system", "content": "be brief"}, {"role": "user", "content": "What is 2+3, then times 4?"}
    call1 = {
        "role": "assistant",
        "tool_calls": [{"tool_call": {"id": "k1", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}}],
    }
    res1 = {"role": "tool", "content": "5", "tool_call_id": "k1"}
    call2 = {
        "role": "assistant",
        "tool_calls": [{"tool_call": {"id": "k2", "function": {"name": "mul", "arguments": '{"a": 5, "b": 4}'}}}],
    }
    res2 = {"role": "tool", "content": "20", "tool_call_id": "k2"}
    final = {"role": "assistant", "content": "20"}

    def span(i, inputs, output, start):
        if layout == "span_json":
            attrs = {
                "llm": {
                    "input_messages": [{"message": m} for m in inputs],
                    "output_messages": [{"message": output}],
                    "token_count": {"prompt": 20 + i, "completion": 5},
                }
            }
            return _phoenix_span(f"p{i}", None, "LLM", "ChatCompletion", start, start + 100, attrs)
        flat = lambda m: {f"message.{k}": v for k, v in m.items()}  # noqa: E731
        return {
            "name": "ChatCompletion",
            "span_kind": "LLM",
            "parent_id": None,
            "status_code": "OK",
            "start_time": _iso(T0 + start * 1_000_000),
            "end_time": _iso(T0 + (start + 100) * 1_000_000),
            "context.span_id": f"p{i}",
            "context.trace_id": "t-phoenix",
            "attributes.llm.input_messages": [flat(m) for m in inputs],
            "attributes.llm.output_messages": [flat(output)],
            "attributes.llm.token_count.prompt": 20 + i,
        }

    return [
        span(1, [sys_, user], call1, 0),
        span(2, [sys_, user, call1, res1], call2, 200),
        span(3, [sys_, user, call1, res1, call2, res2], final, 400),
    ]


@pytest.mark.parametrize("layout", ["span_json", "dataframe_records"])
def test_llm_spans_alone_hold_one_agents_conversation(tmp_path, sqlite_url, layout):
    spans = _conversation_spans(layout)
    path = tmp_path / "phoenix.json"
    if layout == "span_json":  # one span a line, in any order: the times order the steps
        path.write_text("\n".join(json.dumps(s) for s in reversed(spans)))
    else:  # `df.to_json(orient="records")`: one JSON array
        path.write_text(json.dumps(spans))
    result = import_file(path, store=sqlite_url)
    (row,) = S.list_trajectories(run_id=result.run_ids[0], store=sqlite_url).rows
    traj = S.get_trajectory(row.id, store=sqlite_url).trajectory
    assert [(s.role.value, s.content, s.to_dict()["observation"]) for s in traj.steps] == [
        ("user", "What is 2+3, then times 4?", None),
        ("actor", "", None),
        ("tool", "add", "5"),
        ("actor", "", None),
        ("tool", "mul", "20"),
        ("actor", "20", None),
    ]
    assert [c.to_dict() for c in traj.steps[1].tool_calls] == [{"name": "add", "args": {"a": 2, "b": 3}, "id": "k1"}]
    # the first model call is a root that made a step: the goal does not claim its span (a label there is the call's)
    assert "span_id" not in traj.steps[0].span and traj.steps[1].span["span_id"] == "p1"
    assert all(s.agent is None for s in traj.steps) and traj.roster == []  # one agent: a single-agent trajectory
    assert traj.final_answer == "20" and row.n_tool_calls == 2
    assert [s.span.get("latency_ms") for s in traj.steps if s.role.value == "actor"] == [100.0, 100.0, 100.0]
    assert traj.metrics["trace"]["steps_from"] == 3 and traj.metrics["trace"]["skipped"] == {}


def test_otlp_json_with_base64_ids_and_genai_attributes(tmp_path, sqlite_url):
    def kv(k, v):
        return {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}

    tid = base64.b64encode(bytes(range(16))).decode()

    def sid(n):
        return base64.b64encode(bytes([n] * 8)).decode()

    spans = [
        {
            "traceId": tid,
            "spanId": sid(1),
            "name": "invoke_agent planner",
            "startTimeUnixNano": str(T0),
            "endTimeUnixNano": str(T0 + 9),
            "attributes": [kv("gen_ai.operation.name", "invoke_agent"), kv("gen_ai.agent.name", "planner")],
        },
        {
            "traceId": tid,
            "spanId": sid(2),
            "parentSpanId": sid(1),
            "name": "chat m",
            "startTimeUnixNano": str(T0 + 1),
            "endTimeUnixNano": str(T0 + 2),
            "attributes": [
                kv("gen_ai.operation.name", "chat"),
                kv("gen_ai.usage.input_tokens", 7),
                kv(
                    "gen_ai.input.messages",
                    json.dumps([{"role": "user", "parts": [{"type": "text", "content": "plan a trip"}]}]),
                ),
                kv(
                    "gen_ai.output.messages",
                    json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "ask booker"}]}]),
                ),
            ],
        },
        {
            "traceId": tid,
            "spanId": sid(3),
            "parentSpanId": sid(1),
            "name": "invoke_agent booker",
            "startTimeUnixNano": str(T0 + 3),
            "endTimeUnixNano": str(T0 + 8),
            "attributes": [kv("gen_ai.operation.name", "invoke_agent"), kv("gen_ai.agent.name", "booker")],
        },
        {
            "traceId": tid,
            "spanId": sid(4),
            "parentSpanId": sid(3),
            "name": "execute_tool book",
            "startTimeUnixNano": str(T0 + 4),
            "endTimeUnixNano": str(T0 + 5),
            "status": {"code": 2, "message": "HTTP 503"},
            "attributes": [kv("gen_ai.operation.name", "execute_tool"), kv("gen_ai.tool.name", "book")],
        },
    ]
    doc = {
        "resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "x"}, "spans": spans}]}]
    }
    path = tmp_path / "trace.otlp.json"
    path.write_text(json.dumps(doc))
    result = import_file(path, store=sqlite_url)
    (row,) = S.list_trajectories(run_id=result.run_ids[0], store=sqlite_url).rows
    traj = S.get_trajectory(row.id, store=sqlite_url).trajectory
    assert row.sample_id == bytes(range(16)).hex()
    assert [(s.role.value, s.agent, s.content) for s in traj.steps] == [
        ("user", None, "plan a trip"),
        ("actor", "planner", "ask booker"),
        ("tool", "booker", "book"),
    ]
    assert traj.steps[2].span["tool_error"] is True and traj.steps[2].observation.value == "HTTP 503"
    assert traj.steps[1].span["prompt_tokens"] == 7


@pytest.mark.parametrize(
    "doc, says",
    [
        (
            {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "ab" * 16, "name": "x"}]}]}]},
            "span x has no spanId",
        ),
        (
            {"context": {"trace_id": "t", "span_id": "s"}, "name": "n", "attributes": [1]},
            "span s: attributes must be an object",
        ),
        (
            {"trace_id": "t", "spans": [{"span_id": "s1", "timestamp": "yesterday"}]},
            "span s1: timestamp 'yesterday' is not an ISO",
        ),
        (
            {"trace_id": "t", "spans": [{"span_id": "s1", "duration": "long"}]},
            "span s1: duration 'long' is not a duration",
        ),
    ],
)
def test_a_bad_span_is_one_line_naming_it_and_nothing_is_written(tmp_path, sqlite_url, doc, says):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ImportFormatError, match=says):
        import_file(path, store=sqlite_url)
    assert S.list_runs(store=sqlite_url) == []


def test_spans_of_two_traces_in_one_file_are_two_trajectories():
    a, b = trail_trace(), trail_trace()
    b["trace_id"] = "0" * 31 + "1"
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "two.jsonl"
        path.write_text(json.dumps(a) + "\n" + json.dumps(b) + "\n")
        fmt, records = read_file(path)
    assert fmt == "spans" and [r.case.id for r in records] == [a["trace_id"], b["trace_id"]]


def _sdk_span(span_id, parent=None, kind="LLM", **attrs):
    return {
        "name": "x",
        "context": {"trace_id": "0x" + "ab" * 16, "span_id": span_id},
        "parent_id": parent,
        "start_time": "2026-01-01T00:00:00Z",
        "end_time": "2026-01-01T00:00:01Z",
        "attributes": {"openinference.span.kind": kind, **attrs},
    }


def _otlp(span: dict) -> dict:
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}


@pytest.mark.parametrize(
    "lines",
    [
        [_sdk_span("a1", parent="a1", kind="TOOL")],  # a span its own parent
        [_sdk_span("a1", parent="b1", kind="TOOL"), _sdk_span("b1", parent="a1", kind="TOOL")],  # a cycle
        [_sdk_span("a1", **{"output.value": '{"choices": ["x"]}'})],
        [_sdk_span("a1", kind="AGENT", **{"input.value": "[" * 5000}), _sdk_span("b1", parent="a1")],
        [_sdk_span("a1", **{"llm.token_count.prompt": 1e300})],
        [
            _sdk_span(
                "a1",
                **{
                    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "f",
                    "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "[" * 5000,
                },
            )
        ],
        [
            _otlp(
                {
                    "traceId": "ab" * 16,
                    "spanId": "cd" * 8,
                    "name": "n",
                    "attributes": [
                        {"key": "openinference.span.kind", "value": {"stringValue": "LLM"}},
                        {"key": "k", "value": {"arrayValue": [1]}},
                        {"key": "j", "value": {"kvlistValue": {"values": [1, {"key": "a"}]}}},
                    ],
                }
            )
        ],
        [_otlp({"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "n", "startTimeUnixNano": 1e300})],
        [{"trace_id": "t", "spans": [{"span_id": "s1", "duration": "P" + "9" * 400 + "D"}]}],
        [{"trace_id": "t", "spans": [{"span_id": "s1", "timestamp": "99999999999999999999999999"}]}],
    ],
)
def test_foreign_values_give_a_trajectory_or_one_line_never_a_traceback(tmp_path, sqlite_url, lines):
    path = tmp_path / "odd.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    try:
        result = import_file(path, store=sqlite_url)
    except ImportFormatError as exc:
        assert "\n" not in str(exc) and "odd.jsonl" in str(exc)
        assert S.list_runs(store=sqlite_url) == []
    else:
        assert result.n_trajectories >= 1


def test_a_team_log_with_a_huge_role_is_read_in_linear_time(tmp_path):
    import time

    path = tmp_path / "big.json"
    path.write_text(json.dumps({"question": "q", "history": [{"role": "A" + " " * 200_000 + "B", "content": "x"}]}))
    t0 = time.perf_counter()
    fmt, (record,) = read_file(path)
    assert time.perf_counter() - t0 < 5  # the speaker is split once, not backtracked over
    assert record.traj.steps[0].agent.startswith("A")
