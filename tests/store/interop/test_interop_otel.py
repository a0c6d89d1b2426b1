"""OpenTelemetry GenAI export: OTLP JSON read back with protobuf's own parser, span by span, and OTLP/HTTP."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from storehelpers import fill_run

import evalrx.interop as X
import evalrx.store as S
from evalrx.core import FailureCase, Inputs, Label, Step, StepRole, Trajectory
from evalrx.core.failures import Diagnosis
from evalrx.interop import otel
from evalrx.runner.commands import export_main
from evalrx.store import runs

pytest.importorskip("opentelemetry.proto")  # the export extra; `make test` installs it
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status  # noqa: E402


def _trajectory() -> Trajectory:
    """A user question, two calls in one turn (the second tool fails), then the answer."""
    steps = [
        Step(idx=0, role=StepRole.USER, content="What is 6 * 7, and who is Ada?"),
        Step(
            idx=1,
            role=StepRole.ACTOR,
            content="Two lookups.",
            tool_calls=[
                {"name": "calculator", "args": {"expression": "6 * 7"}, "id": "call_a"},
                {"name": "lookup", "args": {"name": "Ada"}},
            ],
            span={
                "turn": 1,
                "latency_ms": 120.5,
                "prompt_tokens": 50,
                "completion_tokens": 12,
                "started_at": "2025-03-01T10:00:00+00:00",
            },
        ),
        Step(
            idx=2,
            role=StepRole.TOOL,
            content="calculator",
            observation="42",
            span={"turn": 1, "call": 0, "latency_ms": 2.0},
        ),
        Step(
            idx=3,
            role=StepRole.TOOL,
            content="lookup",
            observation="lookup failed: timeout",
            span={"turn": 1, "call": 1, "tool_error": True, "latency_ms": 30.0},
        ),
        Step(
            idx=4,
            role=StepRole.ACTOR,
            content="42, and I do not know.",
            span={"turn": 2, "latency_ms": 80.0, "prompt_tokens": 90, "completion_tokens": 9},
        ),
    ]
    return Trajectory(
        sample_id="ada",
        goal=steps[0].content,
        steps=steps,
        final_answer="42, and I do not know.",
        outcome=Label.FAIL,
        metrics={"terminated": "final", "total_prompt_tokens": 140, "total_completion_tokens": 21},
    )


@pytest.fixture
def run_id(sqlite_url):
    store = S.connect(sqlite_url)
    case = FailureCase(inputs=Inputs(prompt="What is 6 * 7, and who is Ada?"), id="ada", expected="42")
    with store.write() as s:
        rid = runs.create_run(
            s, name="otel run", config={"model": {"name": "qwen-tiny", "backend": "api"}}, cases=[case]
        )
        tid = runs.save_trajectory(
            s,
            rid,
            1,
            _trajectory(),
            diagnoses=[
                Diagnosis(
                    kind="ignored_observation", first_wrong_step=4, evidence={"text": "lookup failed"}, confidence=0.7
                )
            ],
        )
    S.set_label(tid, "fail", failure_kind="gave_up", note="did not retry", annotator="ana", store=store)
    S.set_label(tid, "fail", step_idx=3, first_wrong_step=3, annotator="ana", store=store)
    return rid


def _read(path) -> list:
    """Every request of an OTLP JSON lines file, parsed by protobuf's json_format (after OTLP's hex ids)."""
    return [otel.parse_otlp_json(line) for line in path.read_text().splitlines()]


def _spans(requests) -> list:
    return [sp for req in requests for rs in req.resource_spans for ss in rs.scope_spans for sp in ss.spans]


def _attrs(holder) -> dict:
    out = {}
    for kv in holder.attributes:
        v = kv.value
        out[kv.key] = (
            getattr(v, v.WhichOneof("value"))
            if v.WhichOneof("value") != "array_value"
            else [getattr(x, x.WhichOneof("value")) for x in v.array_value.values]
        )
    return out


def test_otlp_json_spans_names_attributes_parents(run_id, sqlite_url, tmp_path, capsys):
    out = tmp_path / "run.otlp.json"
    assert export_main([str(run_id), str(out), "--url", sqlite_url]) == 0
    assert capsys.readouterr().out.strip() == f"wrote 1 trajectory of run {run_id} to {out}"
    raw = json.loads(out.read_text())
    raw_span = raw["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(raw_span["traceId"]) == 32 and len(raw_span["spanId"]) == 16  # OTLP/JSON: hex, not base64
    int(raw_span["traceId"], 16)
    assert isinstance(raw_span["kind"], int)  # OTLP/JSON: enums as integers

    (request,) = _read(out)
    assert isinstance(request, ExportTraceServiceRequest)
    resource = _attrs(request.resource_spans[0].resource)
    assert resource["service.name"] == "evalrx" and resource["evalrx.run.name"] == "otel run"
    spans = _spans([request])
    assert [s.name for s in spans] == [
        "invoke_agent",
        "chat qwen-tiny",
        "execute_tool calculator",
        "execute_tool lookup",
        "chat qwen-tiny",
    ]
    root, chat1, calc, look, chat2 = spans
    assert len({s.trace_id for s in spans}) == 1 and len({s.span_id for s in spans}) == 5
    assert root.parent_span_id == b"" and all(s.parent_span_id == root.span_id for s in spans[1:])
    assert [s.kind for s in spans] == [
        Span.SPAN_KIND_INTERNAL,
        Span.SPAN_KIND_CLIENT,
        Span.SPAN_KIND_INTERNAL,
        Span.SPAN_KIND_INTERNAL,
        Span.SPAN_KIND_CLIENT,
    ]
    a = _attrs(root)
    assert a["gen_ai.operation.name"] == "invoke_agent" and a["gen_ai.request.model"] == "qwen-tiny"
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (140, 21)
    assert a["evalrx.outcome"] == "fail" and a["evalrx.failure_kind"] == "ignored_observation"
    c = _attrs(chat1)
    assert {
        k: c[k]
        for k in (
            "gen_ai.operation.name",
            "gen_ai.request.model",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.provider.name",
        )
    } == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "qwen-tiny",
        "gen_ai.usage.input_tokens": 50,
        "gen_ai.usage.output_tokens": 12,
        "gen_ai.provider.name": "api",
    }
    assert c["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert _attrs(calc) == {
        "evalrx.step.idx": 2,
        "evalrx.turn": 1,
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "calculator",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": "call_a",
    }  # no arguments or result unless asked
    assert _attrs(look)["gen_ai.tool.call.id"] == "call_1_1" and _attrs(look)["error.type"] == "tool_error"
    assert look.status.code == Status.STATUS_CODE_ERROR and look.status.message == "lookup failed: timeout"
    assert calc.status.code == Status.STATUS_CODE_UNSET
    # times: the first turn's recorded start, each span as long as its latency, the rest in order
    start = chat1.start_time_unix_nano
    assert start == 1740823200 * 10**9 and root.start_time_unix_nano == start
    assert chat1.end_time_unix_nano - start == 120_500_000
    assert calc.start_time_unix_nano == chat1.end_time_unix_nano
    assert look.start_time_unix_nano == calc.end_time_unix_nano
    assert root.end_time_unix_nano == chat2.end_time_unix_nano
    # verdicts: the outcome, the whole-trajectory label and the diagnosis on the root; the step label on its span
    evals = [(e.name, _attrs(e)) for e in root.events]
    assert all(name == "gen_ai.evaluation.result" for name, _ in evals)
    assert [(x["gen_ai.evaluation.name"], x["gen_ai.evaluation.score.label"]) for _, x in evals] == [
        ("outcome", "fail"),
        ("evalrx.label", "fail"),
        ("evalrx.diagnosis", "ignored_observation"),
    ]
    assert evals[0][1]["gen_ai.evaluation.score.value"] == 0.0
    assert evals[1][1]["gen_ai.evaluation.explanation"] == "did not retry"
    assert evals[1][1]["evalrx.label.failure_kind"] == "gave_up" and evals[1][1]["evalrx.label.annotator"] == "ana"
    assert evals[2][1]["evalrx.diagnosis.first_wrong_step"] == 4
    (step_label,) = look.events
    assert _attrs(step_label)["evalrx.label.step_idx"] == 3


def test_content_only_when_asked(run_id, sqlite_url, tmp_path):
    out = tmp_path / "content.otlp.json"
    assert X.export_run(run_id, out, store=sqlite_url, otel_content=True) == 1
    root, chat1, calc, look, _ = _spans(_read(out))
    assert json.loads(_attrs(calc)["gen_ai.tool.call.arguments"]) == {"expression": "6 * 7"}
    assert _attrs(calc)["gen_ai.tool.call.result"] == "42"
    assert json.loads(_attrs(look)["gen_ai.tool.call.arguments"]) == {"name": "Ada"}
    parts = json.loads(_attrs(chat1)["gen_ai.output.messages"])[0]["parts"]
    assert parts[0] == {"type": "text", "content": "Two lookups."} and parts[2]["name"] == "lookup"
    plain = tmp_path / "plain.otlp.json"
    X.export_run(run_id, plain, store=sqlite_url)
    assert "6 * 7" not in plain.read_text() and "lookup failed" in plain.read_text()  # the error status stays


def test_one_trace_per_trajectory_and_the_same_bytes_again(sqlite_url, tmp_path):
    store = S.connect(sqlite_url)
    rid, _, trajs = fill_run(store, 7, name="many")
    a, b = tmp_path / "a.otlp.json", tmp_path / "b.otlp.json"
    assert X.export_run(rid, a, store=store) == 7
    X.export_run(rid, b, store=store)
    assert a.read_bytes() == b.read_bytes()  # ids and times come from the store, not the clock
    spans = _spans(_read(a))
    roots = [s for s in spans if s.name == "invoke_agent"]
    assert len(roots) == 7 and len({s.trace_id for s in roots}) == 7
    for root in roots:
        children = [s for s in spans if s.trace_id == root.trace_id and s is not root]
        assert all(c.parent_span_id == root.span_id for c in children)
    by_case = {_attrs(r)["evalrx.case.id"]: r for r in roots}
    for tr in trajs:
        root = by_case[tr.sample_id]
        n_spans = sum(1 for s in spans if s.trace_id == root.trace_id) - 1
        assert n_spans == sum(1 for st in tr.steps if st.role is not StepRole.USER)


class _Collector:
    """A loopback OTLP/HTTP receiver: keeps each POST's content type and body."""

    def __init__(self, status: int = 200) -> None:
        got = self.got = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                got.append((self.path, self.headers.get("Content-Type"), body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_otlp_http_endpoint_gets_protobuf(run_id, sqlite_url, tmp_path, capsys):
    collector = _Collector()
    try:
        out = tmp_path / "also.otlp.json"
        assert export_main([str(run_id), str(out), "--otel-endpoint", collector.url, "--url", sqlite_url]) == 0
        assert capsys.readouterr().out.strip() == f"wrote 1 trajectory of run {run_id} to {out} and {collector.url}"
        ((path, ctype, body),) = collector.got
        assert path == "/v1/traces" and ctype == "application/x-protobuf"
        sent = ExportTraceServiceRequest.FromString(body)
        assert sent == _read(out)[0]  # the same request as the file's line
        assert export_main([str(run_id), "--otel-endpoint", collector.url, "--url", sqlite_url]) == 0  # no file
        assert len(collector.got) == 2
    finally:
        collector.close()
    refusing = _Collector(status=500)
    try:
        assert export_main([str(run_id), "--otel-endpoint", refusing.url, "--url", sqlite_url]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"the OTLP endpoint {refusing.url} answered 500" in err
    finally:
        refusing.close()
    assert export_main([str(run_id), "--otel-endpoint", refusing.url, "--url", sqlite_url]) == 2  # closed now
    assert "cannot reach the OTLP endpoint" in capsys.readouterr().err


def test_pictures_go_by_hash_and_as_files_with_content(sqlite_url, tmp_path):
    """A case picture and a tool's picture: their hashes on the spans always; with content, `uri` parts
    naming files written beside the export; without it, or sent to a collector alone, no file and no part."""
    import hashlib

    card = b"\x89PNG\r\n\x1a\n" + bytes(range(48))
    zoomed = b"\xff\xd8\xff\xe0" + bytes(range(30))
    store = S.connect(sqlite_url)
    case = FailureCase(inputs=Inputs(prompt="What is 6 * 7, and who is Ada?", image=card), id="ada", expected="42")
    with store.write() as s:
        rid = runs.create_run(s, name="pictures", config={"model": {"name": "vl", "backend": "api"}}, cases=[case])
        tid = runs.save_trajectory(s, rid, 1, _trajectory())
        runs.save_step_pictures(s, tid, {2: [zoomed]})
    sha_card, sha_zoom = hashlib.sha256(card).hexdigest(), hashlib.sha256(zoomed).hexdigest()

    plain = tmp_path / "plain" / "run.otlp.json"
    X.export_run(rid, plain, store=sqlite_url)
    root, _, calc, look, _ = _spans(_read(plain))
    assert _attrs(root)["evalrx.images"] == [sha_card] and _attrs(calc)["evalrx.images"] == [sha_zoom]
    assert "evalrx.images" not in _attrs(look) and not (plain.parent / "images").exists()
    assert "uri" not in plain.read_text()

    full = tmp_path / "full" / "run.otlp.json"
    X.export_run(rid, full, store=sqlite_url, otel_content=True)
    root, _, calc, _, _ = _spans(_read(full))
    user = json.loads(_attrs(root)["gen_ai.input.messages"])[0]["parts"]
    assert user[1] == {"type": "uri", "modality": "image", "mime_type": "image/png", "uri": f"images/{sha_card}.png"}
    (returned,) = json.loads(_attrs(calc)["gen_ai.input.messages"])[0]["parts"]
    assert returned["uri"] == f"images/{sha_zoom}.jpg" and returned["mime_type"] == "image/jpeg"
    assert (full.parent / user[1]["uri"]).read_bytes() == card
    assert (full.parent / returned["uri"]).read_bytes() == zoomed

    # to a collector alone no file is written, so the messages name no file: the pictures go by hash
    collector = _Collector()
    try:
        X.export_run(rid, None, fmt="otel", store=sqlite_url, otel_content=True, otel_endpoint=collector.url)
        ((_, _, body),) = collector.got
    finally:
        collector.close()
    root, _, calc, _, _ = _spans([ExportTraceServiceRequest.FromString(body)])
    assert json.loads(_attrs(root)["gen_ai.input.messages"])[0]["parts"] == [user[0]]
    assert "gen_ai.input.messages" not in _attrs(calc) and _attrs(calc)["evalrx.images"] == [sha_zoom]
