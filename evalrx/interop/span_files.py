"""Spans as trace stores and tracers write them, read into one plain shape (`Span`) whatever the container.

- OTLP JSON (`{"resourceSpans": [...]}`, one request a line as the Collector's file exporter writes, or a
  whole document): ids in hex (OTLP/JSON) or base64 (protobuf's JSON mapping), attributes as `{key, value}`.
- The OpenTelemetry SDK's own span JSON (`ReadableSpan.to_json()`: `context.span_id`, `parent_id`, ISO times,
  flat attributes) and Phoenix's span JSON (the same ids, `span_kind`, `status_code`, nested attributes).
- Phoenix's spans dataframe as JSON records (`context.span_id`, `parent_id`, `attributes.*` columns).
- TRAIL's traces: `{trace_id, spans: [{span_id, span_name, span_attributes, status_code, timestamp, duration,
  child_spans: [...]}]}`, a tree.

Attributes always come out flat, with dotted keys (`llm.input_messages.0.message.role`), as the OpenInference
conventions name them. A malformed span raises `ValueError` naming it.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator, Optional

KIND = "openinference.span.kind"


@dataclass
class Span:
    """One span: ids, name, times (ns since the epoch; None when the source gave none), status and attributes."""

    trace_id: str
    span_id: str
    parent_id: Optional[str]
    name: str
    start_ns: Optional[int]
    end_ns: Optional[int]
    attrs: dict = field(default_factory=dict)
    error: Optional[str] = None  # the status message of a span whose status is an error ("" when it gave none)
    order: int = 0  # position in the file: ties in time keep it

    @property
    def latency_ms(self) -> Optional[float]:
        if self.start_ns is None or self.end_ns is None:
            return None
        return max(0.0, (self.end_ns - self.start_ns) / 1e6)


def flatten(value: Any, prefix: str = "", out: Optional[dict] = None) -> dict:
    """Nested attributes (Phoenix's JSON) as OpenInference's flat dotted keys; lists of objects by index."""
    out = {} if out is None else out
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            flatten(v, f"{prefix}.{i}", out)
    elif prefix:
        out[prefix] = value
    return out


def span_key(value: Any, what: str) -> Optional[str]:
    """A trace or span id as the trace import keeps it (a label naming a span finds it so): lower-case hex
    from OTLP/JSON's hex, the SDK's "0x…" or protobuf JSON's base64; any other spelling as given."""
    if value in (None, "", 0):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:x}"
    if not isinstance(value, str):
        raise ValueError(f"{what} must be text, not {type(value).__name__}")
    text = value[2:] if value[:2].lower() == "0x" else value
    if re.fullmatch(r"[0-9a-fA-F]+", text) and len(text) in (16, 32):
        return text.lower()
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return text  # any other spelling is kept as given: ids are compared, never decoded further
    return raw.hex() if len(raw) in (8, 16) else text


MAX_NS = 10**19  # past the year 2286: no span's time; a bound keeps foreign numbers from overflowing later


def _bounded_ns(n: float, what: str, value: Any) -> int:
    if not math.isfinite(n) or not 0 <= n < MAX_NS:
        raise ValueError(f"{what} {value!r} is not a time (ns since 1970)")
    return int(n)


def _time_ns(value: Any, what: str) -> Optional[int]:
    """A time as ns since the epoch: an integer (or its string) of ns, or an ISO 8601 date and time."""
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what} is not a time")
    if isinstance(value, (int, float)):
        return _bounded_ns(value, what, value)
    if isinstance(value, str):
        if value.strip().isdigit():
            return _bounded_ns(int(value.strip()), what, value)
        text = value.strip().replace("Z", "+00:00")
        m = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?(.*)$", text)
        frac = 0
        if m and m.group(2):  # Python's fromisoformat keeps microseconds: nanoseconds are added back by hand
            digits = (m.group(2)[1:] + "000000000")[:9]
            frac, text = int(digits), m.group(1) + m.group(3)
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{what} {value!r} is not an ISO date and time") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return _bounded_ns(int(when.timestamp()) * 1_000_000_000 + frac, what, value)
    raise ValueError(f"{what} is not a time")


def _duration_ns(value: Any, what: str) -> Optional[int]:
    """TRAIL's `duration`: ISO 8601 ("PT1.5S"), seconds as a number, or "0:00:01.5"."""
    if value in (None, ""):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _bounded_ns(float(value) * 1e9, what, value)
    if isinstance(value, str) and len(value) <= 64:
        m = re.fullmatch(
            r"P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?", value
        )
        if m and any(m.groups()):
            d, h, mi, s = (float(g or 0) for g in m.groups())
            return _bounded_ns((((d * 24 + h) * 60 + mi) * 60 + s) * 1e9, what, value)
        m = re.fullmatch(r"(\d+):(\d\d):(\d\d(?:\.\d+)?)", value)
        if m:
            return _bounded_ns((int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))) * 1e9, what, value)
    raise ValueError(f"{what} {value!r} is not a duration")


# The keys of a span's parent, start and end: OTLP's, and the SDK's and Phoenix's.
_OTLP_KEYS = ("parentSpanId", "startTimeUnixNano", "endTimeUnixNano")
_JSON_KEYS = ("parent_id", "start_time", "end_time")


def _span(
    obj: dict, trace: str, sid: str, what: str, attrs: dict, error: Optional[str], order: int, keys: "tuple[str, ...]"
) -> Span:
    """The span `obj` describes, its parent, start and end read at `keys`."""
    parent, start, end = keys
    return Span(
        trace_id=trace,
        span_id=sid,
        parent_id=span_key(obj.get(parent), f"{what}: {parent}"),
        name=str(obj.get("name") or ""),
        start_ns=_time_ns(obj.get(start), f"{what}: {start}"),
        end_ns=_time_ns(obj.get(end), f"{what}: {end}"),
        attrs=attrs,
        error=error,
        order=order,
    )


def _error_of(code: Any, message: Any) -> Optional[str]:
    """The status message of an error status (OTLP's 2 or STATUS_CODE_ERROR, the SDK's ERROR, TRAIL's Error)."""
    text = str(code or "").strip().upper()
    if text in ("2", "ERROR", "STATUS_CODE_ERROR", "STATUSCODE.ERROR"):
        return str(message or "")
    return None


def _attrs(value: Any, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{what}: attributes must be an object")
    return flatten(value)


# ---------------------------------------------------------------- OTLP JSON


def _any_value(v: Any) -> Any:
    """An OTLP AnyValue as a plain value."""
    if not isinstance(v, dict):
        return v
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            return v["intValue"]
    if "arrayValue" in v:
        values = v["arrayValue"].get("values") if isinstance(v["arrayValue"], dict) else None
        return [_any_value(x) for x in values] if isinstance(values, list) else []
    if "kvlistValue" in v:
        pairs = v["kvlistValue"].get("values") if isinstance(v["kvlistValue"], dict) else None
        return {
            str(kv.get("key")): _any_value(kv.get("value"))
            for kv in (pairs if isinstance(pairs, list) else [])
            if isinstance(kv, dict)
        }
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def otlp_spans(doc: dict, order: int = 0) -> Iterator[Span]:
    """The spans of one OTLP JSON `ExportTraceServiceRequest`."""
    for rs in _list(doc.get("resourceSpans"), "resourceSpans"):
        for ss in _list(
            _obj(rs, "resourceSpans entry").get("scopeSpans") or rs.get("instrumentationLibrarySpans"), "scopeSpans"
        ):
            for sp in _list(_obj(ss, "scopeSpans entry").get("spans"), "spans"):
                sp = _obj(sp, "span")
                sid = span_key(sp.get("spanId"), "spanId")
                what = f"span {sid or sp.get('name') or '?'}"
                if sid is None:
                    raise ValueError(f"{what} has no spanId")
                trace = span_key(sp.get("traceId"), f"{what}: traceId")
                if trace is None:
                    raise ValueError(f"{what} has no traceId")
                attrs: dict = {}
                for kv in _list(sp.get("attributes"), f"{what}: attributes"):
                    if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
                        raise ValueError(f"{what}: an attribute is not {{key, value}}")
                    attrs[kv["key"]] = _any_value(kv.get("value"))
                status: dict = sp["status"] if isinstance(sp.get("status"), dict) else {}
                order += 1
                error = _error_of(status.get("code"), status.get("message"))
                yield _span(sp, trace, sid, what, attrs, error, order, _OTLP_KEYS)


def _list(value: Any, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"`{what}` must be a list")
    return value


def _obj(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"a {what} is not an object")
    return value


# ---------------------------------------------------------------- the SDK's and Phoenix's span JSON


def is_span_json(obj: dict) -> bool:
    """One span as the OpenTelemetry SDK (`to_json`), Phoenix (span JSON) or a Phoenix dataframe row writes it."""
    ctx = obj.get("context")
    if isinstance(ctx, dict) and "span_id" in ctx and "trace_id" in ctx:
        return True
    if "context.span_id" in obj and "context.trace_id" in obj:
        return True
    # a dataframe row of the newer Phoenix client: the ids as plain columns
    return "span_id" in obj and "trace_id" in obj and ("parent_id" in obj or "span_kind" in obj)


def json_span(obj: dict, order: int = 0) -> Span:
    """A span from the SDK's, Phoenix's or a Phoenix dataframe row's JSON."""
    ctx: dict = obj["context"] if isinstance(obj.get("context"), dict) else {}
    sid = span_key(ctx.get("span_id", obj.get("context.span_id", obj.get("span_id"))), "span_id")
    what = f"span {sid or obj.get('name') or '?'}"
    if sid is None:
        raise ValueError(f"{what} has no span_id")
    trace = span_key(ctx.get("trace_id", obj.get("context.trace_id", obj.get("trace_id"))), f"{what}: trace_id")
    if trace is None:
        raise ValueError(f"{what} has no trace_id")
    attrs = _attrs(obj.get("attributes"), what)
    # a dataframe row's columns: "attributes.llm.input_messages" and the like
    for key, value in obj.items():
        if key.startswith("attributes.") and value is not None:
            flatten(value, key[len("attributes.") :], attrs)
    kind = obj.get("span_kind")
    if isinstance(kind, str) and kind and KIND not in attrs:
        attrs[KIND] = kind.upper()
    status: dict = obj["status"] if isinstance(obj.get("status"), dict) else {}
    code = obj.get("status_code", status.get("status_code"))
    message = obj.get("status_message", status.get("description"))
    return _span(obj, trace, sid, what, attrs, _error_of(code, message), order, _JSON_KEYS)


# ---------------------------------------------------------------- TRAIL's span trees


def is_trail_trace(obj: dict) -> bool:
    spans = obj.get("spans")
    return isinstance(spans, list) and bool(spans) and isinstance(spans[0], dict) and "span_id" in spans[0]


def trail_spans(doc: dict) -> Iterator[Span]:
    """The spans of a TRAIL trace, its tree walked depth first (a child's parent is the span holding it)."""
    trace = span_key(doc.get("trace_id"), "trace_id") or ""
    stack: "list[tuple[Any, Optional[str]]]" = [(sp, None) for sp in reversed(_list(doc.get("spans"), "spans"))]
    order = 0
    while stack:
        sp, parent = stack.pop()
        sp = _obj(sp, "span")
        sid = span_key(sp.get("span_id"), "span_id")
        what = f"span {sid or sp.get('span_name') or '?'}"
        if sid is None:
            raise ValueError(f"{what} has no span_id")
        start = _time_ns(sp.get("timestamp") or sp.get("start_time"), f"{what}: timestamp")
        length = _duration_ns(sp.get("duration"), f"{what}: duration")
        end = _time_ns(sp.get("end_time"), f"{what}: end_time")
        if end is None and start is not None and length is not None:
            end = start + length
        order += 1
        yield Span(
            trace_id=span_key(sp.get("trace_id"), f"{what}: trace_id") or trace,
            span_id=sid,
            parent_id=parent or span_key(sp.get("parent_span_id") or sp.get("parent_id"), f"{what}: parent_span_id"),
            name=str(sp.get("span_name") or sp.get("name") or ""),
            start_ns=start,
            end_ns=end,
            attrs=_attrs(sp.get("span_attributes", sp.get("attributes")), what),
            error=_error_of(sp.get("status_code"), sp.get("status_message")),
            order=order,
        )
        for child in reversed(_list(sp.get("child_spans"), f"{what}: child_spans")):
            stack.append((child, sid))
