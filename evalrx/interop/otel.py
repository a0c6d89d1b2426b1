"""A run as OpenTelemetry GenAI traces (OTLP), for any OTLP collector, Phoenix or Langfuse.

One trace per trajectory: a root `invoke_agent` span, a `chat {model}` span per model turn
(`gen_ai.usage.*` tokens) and an `execute_tool {name}` span per tool call, both children of
the root; the outcome, the human labels and the diagnosis are `gen_ai.evaluation.result`
events. Tool arguments and results (and model output) are on the spans only when asked
(`content=True`: they may hold data a trace store should not). Trace and span ids are hashes
of (run id, trajectory id, step), and times come from the stored spans or the trajectory's
creation time, so the same run exports the same bytes.

Pictures go by hash: `evalrx.images` (the SHA-256 of each picture a step showed; the case's on the
root). With `content=True` they are GenAI `uri` parts of the messages naming files written beside
the export (`images/<sha256>.<ext>`, `interop.pictures`), as the text is.

Messages are built with the official `opentelemetry-proto` classes. The file holds OTLP JSON
lines (one `ExportTraceServiceRequest` a line, the Collector's file format): protobuf's JSON
mapping with what OTLP/JSON changes in it, hex trace and span ids and integer enums.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from evalrx.core.case import Label, Termination
from evalrx.core.observation import observation_text
from evalrx.interop.atif import session_id
from evalrx.interop.files import write_lines
from evalrx.interop.messages import as_dict
from evalrx.interop.pictures import as_file, picture_path, row_pictures, write_pictures
from evalrx.interop.registry import ExportOptions, Format, register

BATCH = 100  # trajectories per ExportTraceServiceRequest (a line of the file, a POST)
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")
SCOPE = "evalrx.store.otel"  # the instrumentation scope traces were first exported under; kept so they stay alike


def _proto() -> Any:
    try:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
        from opentelemetry.proto.common.v1 import common_pb2
        from opentelemetry.proto.resource.v1 import resource_pb2
        from opentelemetry.proto.trace.v1 import trace_pb2
    except ImportError:
        raise ImportError("OTLP export needs opentelemetry-proto: pip install 'evalrx[export]'") from None
    return trace_service_pb2, trace_pb2, common_pb2, resource_pb2


def trace_requests(
    rows: Iterable[dict],
    *,
    run_id: Optional[int],
    content: bool = False,
    picture_files: bool = False,
    batch: int = BATCH,
) -> Iterator[tuple[Any, int]]:
    """(ExportTraceServiceRequest, trajectories in it) for export rows carrying `_trajectory_id`/`_created_at`.

    With `content` and `picture_files` (the caller writes `row_pictures` beside the traces), the messages
    name each picture's file in a `uri` part; without files, pictures go by hash only."""
    from evalrx import __version__

    trace_service_pb2, trace_pb2, common_pb2, resource_pb2 = _proto()
    spans: list = []
    n = 0
    run_name = None

    def request() -> Any:
        resource = resource_pb2.Resource(
            attributes=_attributes(
                common_pb2,
                {
                    "service.name": "evalrx",
                    "service.version": __version__,
                    "evalrx.run.id": run_id,
                    "evalrx.run.name": run_name,
                },
            )
        )
        scope = common_pb2.InstrumentationScope(name=SCOPE, version=__version__)
        return trace_service_pb2.ExportTraceServiceRequest(
            resource_spans=[
                trace_pb2.ResourceSpans(resource=resource, scope_spans=[trace_pb2.ScopeSpans(scope=scope, spans=spans)])
            ]
        )

    files = content and picture_files
    for row in rows:
        run_name = (row.get("run") or {}).get("name")
        spans.extend(_trajectory_spans(row, row.get("_run_id", run_id), content, files, trace_pb2, common_pb2))
        n += 1
        if n == batch:
            yield request(), n
            spans, n = [], 0
    if n:
        yield request(), n


def _trajectory_spans(
    row: dict, run_id: Optional[int], content: bool, files: bool, trace_pb2: Any, common_pb2: Any
) -> list:

    Span = trace_pb2.Span
    tid = row["_trajectory_id"]
    trace_id = _hash_id(16, "trace", run_id, tid)
    root_id = _hash_id(8, "span", run_id, tid, "root")
    config = (row.get("run") or {}).get("config") or {}
    model_cfg = as_dict(config.get("model"))
    model = str(model_cfg.get("name") or "unknown")
    provider = model_cfg.get("backend")
    steps = row.get("steps") or []
    metrics = row.get("metrics") or {}
    starts = [_ns((s.get("span") or {}).get("started_at")) for s in steps]
    known = [x for x in starts if x is not None]
    base = min(known) if known else _ns(row.get("_created_at")) or 0
    cursor = base
    out: list = []
    by_step: dict = {}  # step idx -> its span (for step labels)
    actor: Optional[dict] = None
    call_ids: list = []
    for step, start in zip(steps, starts):
        span = step.get("span") or {}
        role = step.get("role")
        if role == "actor":
            actor = step
            call_ids = [
                str(c.get("id") or f"call_{step.get('idx')}_{j}") for j, c in enumerate(step.get("tool_calls") or [])
            ]
        if role not in ("actor", "tool"):
            continue
        begin = start if start is not None else cursor
        end = begin + int(float(span.get("latency_ms") or 0) * 1e6)
        cursor = max(cursor, end)
        pictures = step.get("images") or []
        attrs: dict = {
            "evalrx.step.idx": step.get("idx"),
            "evalrx.turn": span.get("turn"),
            "evalrx.images": [p["sha256"] for p in pictures] or None,
            "gen_ai.agent.name": step.get("agent"),  # who acted, in a team (absent for one agent)
            "evalrx.addressee": step.get("addressee"),
        }
        status = None
        if role == "actor":
            calls = step.get("tool_calls") or []
            name = f"chat {model}"
            kind = Span.SPAN_KIND_CLIENT
            attrs.update(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": model,
                    "gen_ai.provider.name": provider,
                    "gen_ai.usage.input_tokens": span.get("prompt_tokens"),
                    "gen_ai.usage.output_tokens": span.get("completion_tokens"),
                    "gen_ai.response.finish_reasons": ["tool_calls" if calls else "stop"],
                    "evalrx.parse_error": step.get("parse_error"),
                }
            )
            if content:
                parts: list = [{"type": "text", "content": step.get("content") or ""}]
                parts += [
                    {"type": "tool_call", "id": call_ids[j], "name": c.get("name"), "arguments": c.get("args")}
                    for j, c in enumerate(calls)
                    if isinstance(c, dict)
                ]
                attrs["gen_ai.output.messages"] = json.dumps(
                    [{"role": "assistant", "parts": parts}], ensure_ascii=False, sort_keys=True, default=str
                )
        else:
            call = _answered_call(step, actor, call_ids)
            tool = str(step.get("content") or "unknown")
            name = f"execute_tool {tool}"
            kind = Span.SPAN_KIND_INTERNAL
            attrs.update(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.type": "function",
                    "gen_ai.tool.call.id": call_ids[call] if call is not None else None,
                }
            )
            if content:
                args = ((actor or {}).get("tool_calls") or [])[call].get("args") if call is not None else None
                attrs["gen_ai.tool.call.arguments"] = (
                    json.dumps(args, ensure_ascii=False, sort_keys=True, default=str) if args is not None else None
                )
                attrs["gen_ai.tool.call.result"] = observation_text(step.get("observation"))
                uris = [_uri_part(p) for p in pictures if as_file(p)] if files else []
                if uris:  # what the tool returned besides its text, as the next turn's input shows it
                    attrs["gen_ai.input.messages"] = _json([{"role": "tool", "parts": uris}])
            if span.get("tool_error") or span.get("parse_error"):
                attrs["error.type"] = str(
                    span.get("tool_error_type") or ("tool_error" if span.get("tool_error") else "parse_error")
                )
                status = trace_pb2.Status(
                    code=trace_pb2.Status.STATUS_CODE_ERROR,
                    message=observation_text(step.get("observation"))[:1000],
                )
        sp = Span(
            trace_id=trace_id,
            span_id=_hash_id(8, "span", run_id, tid, step.get("idx")),
            parent_span_id=root_id,
            name=name,
            kind=kind,
            start_time_unix_nano=begin,
            end_time_unix_nano=end,
            attributes=_attributes(common_pb2, attrs),
        )
        if status is not None:
            sp.status.CopyFrom(status)
        by_step[step.get("idx")] = sp
        out.append(sp)
    root_end = max(cursor, base + int(float(metrics.get("total_latency_ms") or 0) * 1e6))
    case_picture = (row.get("case") or {}).get("image")
    case_picture = case_picture if isinstance(case_picture, dict) and case_picture.get("sha256") else None
    attrs = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "evalrx",
        "gen_ai.request.model": model,
        "gen_ai.provider.name": provider,
        "gen_ai.conversation.id": session_id(
            (row.get("run") or {}).get("name"), row.get("case_id"), row.get("attempt") or 1
        ),
        "gen_ai.usage.input_tokens": metrics.get("total_prompt_tokens"),
        "gen_ai.usage.output_tokens": metrics.get("total_completion_tokens"),
        "evalrx.run.id": run_id,
        "evalrx.trajectory.id": tid,
        "evalrx.case.id": row.get("case_id"),
        "evalrx.sample_id": row.get("sample_id"),
        "evalrx.attempt": row.get("attempt") or 1,
        "evalrx.outcome": row.get("outcome"),
        "evalrx.terminated": metrics.get("terminated"),
        "evalrx.failure_kind": (row.get("diagnosis") or {}).get("kind"),
        "evalrx.images": [case_picture["sha256"]] if case_picture else None,
    }
    if content:
        user: list = [{"type": "text", "content": row.get("goal") or ""}]
        user += [_uri_part(case_picture)] if files and case_picture and as_file(case_picture) else []
        attrs["gen_ai.input.messages"] = json.dumps([{"role": "user", "parts": user}], ensure_ascii=False)
        attrs["evalrx.final_answer"] = row.get("final_answer")
    root = Span(
        trace_id=trace_id,
        span_id=root_id,
        name="invoke_agent",
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=base,
        end_time_unix_nano=root_end,
        attributes=_attributes(common_pb2, attrs),
    )
    if row.get("outcome") == Label.ERROR or metrics.get("terminated") == Termination.ERROR:
        root.status.CopyFrom(
            trace_pb2.Status(
                code=trace_pb2.Status.STATUS_CODE_ERROR,
                message=str(metrics.get("error") or "the trajectory ended in an error"),
            )
        )
    root.events.append(
        _evaluation(
            common_pb2,
            trace_pb2,
            root_end,
            "outcome",
            row.get("outcome"),
            {"evalrx.terminated": metrics.get("terminated")},
        )
    )
    for lab in row.get("labels") or []:
        holder = by_step.get(lab.get("step_idx"), root)
        holder.events.append(
            _evaluation(
                common_pb2,
                trace_pb2,
                _ns(lab.get("created_at")) or root_end,
                "evalrx.label",
                lab.get("outcome"),
                {
                    "gen_ai.evaluation.explanation": lab.get("note"),
                    "evalrx.label.failure_kind": lab.get("failure_kind"),
                    "evalrx.label.first_wrong_step": lab.get("first_wrong_step"),
                    "evalrx.label.step_idx": lab.get("step_idx"),
                    "evalrx.label.annotator": lab.get("annotator"),
                    "evalrx.label.is_current": lab.get("is_current"),
                    "evalrx.label.agent": lab.get("agent"),
                },
            )
        )
    diagnosis = row.get("diagnosis") or {}
    if diagnosis.get("kind"):
        evidence = diagnosis.get("evidence") or {}
        root.events.append(
            _evaluation(
                common_pb2,
                trace_pb2,
                root_end,
                "evalrx.diagnosis",
                diagnosis["kind"],
                {
                    "gen_ai.evaluation.explanation": evidence.get("text")
                    if isinstance(evidence, dict)
                    else str(evidence),
                    "evalrx.diagnosis.first_wrong_step": diagnosis.get("first_wrong_step"),
                    "evalrx.diagnosis.confidence": diagnosis.get("confidence"),
                    "evalrx.diagnosis.source": diagnosis.get("source"),
                },
            )
        )
    return [root, *out]


def _evaluation(common_pb2: Any, trace_pb2: Any, when: int, name: str, label: Any, extra: dict) -> Any:
    """A `gen_ai.evaluation.result` event: pass/fail verdicts also get a 1/0 score."""
    attrs = {
        "gen_ai.evaluation.name": name,
        "gen_ai.evaluation.score.label": label,
        "gen_ai.evaluation.score.value": {"pass": 1.0, "fail": 0.0}.get(label),
        **extra,
    }
    return trace_pb2.Span.Event(
        time_unix_nano=when, name="gen_ai.evaluation.result", attributes=_attributes(common_pb2, attrs)
    )


def _answered_call(step: dict, actor: Optional[dict], call_ids: list) -> Optional[int]:
    """Which call of the turn a tool step answers: its `call` index, else its place after the actor step."""
    span = step.get("span") or {}
    if isinstance(span.get("call"), int) and 0 <= span["call"] < len(call_ids):
        return span["call"]
    if actor is None or span.get("parse_error"):
        return None
    place = int(step.get("idx", 0)) - int(actor.get("idx", 0)) - 1
    return place if 0 <= place < len(call_ids) else None


def _attributes(common_pb2: Any, values: dict) -> list:
    """KeyValues for the set values (None is left out, as OTLP has no null); others as JSON text."""
    out = []
    for key, value in values.items():
        if value is None:
            continue
        out.append(common_pb2.KeyValue(key=key, value=_any_value(common_pb2, value)))
    return out


def _any_value(common_pb2: Any, value: Any) -> Any:
    AnyValue = common_pb2.AnyValue
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, bool, int, float)) for v in value):
        return AnyValue(array_value=common_pb2.ArrayValue(values=[_any_value(common_pb2, v) for v in value]))
    return AnyValue(string_value=json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))


def _uri_part(picture: dict) -> dict:
    """A GenAI message part for a picture: the file beside the export that holds it."""
    return {"type": "uri", "modality": "image", "mime_type": picture.get("mime"), "uri": picture_path(picture)}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _hash_id(n: int, *parts: Any) -> bytes:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()[:n]


def _ns(value: Any) -> Optional[int]:
    """Unix nanoseconds of a datetime or ISO 8601 text (naive means UTC), else None."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    delta = value - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000


# ---------------------------------------------------------------- OTLP JSON and HTTP


def to_otlp_json(request: Any) -> str:
    """One request as an OTLP/JSON line: protobuf's JSON mapping with hex ids and integer enums."""
    from google.protobuf.json_format import MessageToDict

    data = MessageToDict(request, use_integers_for_enums=True)
    _recode_ids(data, lambda b64: base64.b64decode(b64).hex())
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def parse_otlp_json(text: str) -> Any:
    """An `ExportTraceServiceRequest` from one OTLP/JSON line (hex ids), via `json_format.Parse`."""
    from google.protobuf import json_format

    trace_service_pb2 = _proto()[0]
    data = json.loads(text)
    _recode_ids(data, lambda hexid: base64.b64encode(bytes.fromhex(hexid)).decode("ascii"))
    return json_format.Parse(json.dumps(data), trace_service_pb2.ExportTraceServiceRequest())


def _recode_ids(data: dict, recode: Any) -> None:
    for rs in data.get("resourceSpans") or []:
        for ss in rs.get("scopeSpans") or []:
            for span in ss.get("spans") or []:
                for holder in [span, *(span.get("links") or [])]:
                    for key in _ID_FIELDS:
                        if holder.get(key):
                            holder[key] = recode(holder[key])


def write_traces(
    requests: Iterable[tuple[Any, int]], path: Optional[Path], *, endpoint: Optional[str] = None, timeout: float = 30.0
) -> int:
    """Write OTLP JSON lines to `path` (if given) and POST each request to `endpoint` (if given).

    Returns:
        The number of trajectories exported.
    """
    count = [0]

    def lines() -> Iterator[str]:
        for request, n in requests:
            if endpoint:
                post(request, endpoint, timeout=timeout)
            count[0] += n
            yield to_otlp_json(request)

    if path is not None:
        write_lines(path, lines())
    else:
        for _ in lines():
            pass
    return count[0]


def post(request: Any, endpoint: str, *, timeout: float = 30.0) -> None:
    """POST one request to an OTLP/HTTP traces endpoint as protobuf; a refusal is one ValueError line."""
    import urllib.error
    import urllib.request

    if not endpoint.startswith(("http://", "https://")):
        raise ValueError(
            f"--otel-endpoint must be an http(s) URL such as http://localhost:4318/v1/traces, not {endpoint!r}"
        )
    req = urllib.request.Request(
        endpoint, data=request.SerializeToString(), method="POST", headers={"Content-Type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        raise ValueError(f"the OTLP endpoint {endpoint} answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ValueError(f"cannot reach the OTLP endpoint {endpoint}: {reason}") from None


def _write(rows: Iterator[dict], path: Optional[Path], options: ExportOptions) -> int:
    beside = path.parent if options.otel_content and path is not None else None
    if beside is not None:  # the pictures the uri parts name, beside the file
        rows = _with_pictures_written(rows, beside)
    files = beside is not None
    requests = trace_requests(rows, run_id=options.run_id, content=options.otel_content, picture_files=files)
    return write_traces(requests, path, endpoint=options.otel_endpoint)


def _with_pictures_written(rows: Iterator[dict], out_dir: Path) -> Iterator[dict]:
    for row in rows:
        write_pictures(row_pictures(row), out_dir)
        yield row


register(
    Format(
        name="otel",
        title="OpenTelemetry (OTLP JSON)",
        write=_write,
        suffixes=(".otlp.json", ".otlp.jsonl"),
        mime="application/json",
        export_ids=True,
    )
)
