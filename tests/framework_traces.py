"""Traces written by real agent frameworks, instrumented with OpenInference, against an OpenAI-compatible server.

    python tests/framework_traces.py {smolagents|autogen} --base-url http://127.0.0.1:PORT/v1 \\
        --model evalrx-tiny --out spans.jsonl [--otlp-out trace.otlp.json]

Meant to run against `evalrx serve --spec evalrx-tiny` on loopback (no network, no key):

* smolagents: a manager `ToolCallingAgent` ("manager") with one managed `ToolCallingAgent`
  ("math_calculator") that has a `calculator` tool (a smolagents `@tool`); traced by `SmolagentsInstrumentor`.
* autogen: a `RoundRobinGroupChat` of two `AssistantAgent`s, "solver" (a `calculator` `FunctionTool`) and
  "checker", stopped by `MaxMessageTermination`; traced by `AutogenAgentChatInstrumentor`.

The spans go through the OpenTelemetry SDK with no collector: `--out` gets the SDK's own span JSON
(`ReadableSpan.to_json(indent=None)`), one span a line, as each span ends; `--otlp-out` gets one OTLP/JSON
`ExportTraceServiceRequest` (the Collector's file format: protobuf's JSON mapping, hex ids, integer enums)
holding every span. The tracer provider is also made the global one, as `phoenix.otel.register()` does, so
spans a framework writes itself (autogen-core's runtime and `gen_ai` spans) are in the trace too
(`--no-global-provider`: the instrumentor's spans only).

The bundled demo model is tiny and was only trained to call `calculator(expression)` and `lookup(query)`,
so two things steer it where the frameworks need more than it knows, both through the OpenAI protocol:

* the smolagents manager's model sends a `tool_choice` naming its managed agent whenever it sends tools,
  so it delegates instead of calling a `calculator` it does not have; the managed agent's model sends
  smolagents' default `tool_choice: "required"` (`evalrx serve` forces both by prefilling the call);
* the managed agent's name ends in "calculator": after such a name the demo model writes the arguments as
  an object (after others, a bare string); and it takes its task under the argument names the demo model
  writes (`expression`, `query`) besides smolagents' `task`.

Whatever the model says, a run ends: steps are few (max_steps, MaxMessageTermination), requests time out,
and the run as a whole is bounded (`--timeout`). An error inside the framework's run is part of the trace:
it is reported on stderr and the exit status is 0 as long as spans were written (1 when none were).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

QUESTION = "What is 17 * 23?"
# The managed agent's name: the demo model writes a call's arguments as an object after a name ending in
# "calculator" (the tool it knows); after other names it writes a bare string.
MEMBER = "math_calculator"
REQUEST_TIMEOUT_S = 30.0
# Replies are short: the demo model's context is 768 tokens, and every reply goes back into a prompt.
MAX_TOKENS = 64


# ------------------------------------------------------------------ span export


class JsonLinesSpanExporter(SpanExporter):
    """Writes each finished span as the SDK's own JSON (`span.to_json(indent=None)`), one span a line."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "w", encoding="utf-8")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            self._file.write(span.to_json(indent=None) + "\n")
        self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._file.close()


class CollectingSpanExporter(SpanExporter):
    """Keeps the finished spans in memory (for the OTLP file and the summary)."""

    def __init__(self) -> None:
        self.spans: list = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def otlp_json(spans: Sequence[ReadableSpan]) -> str:
    """One OTLP/JSON `ExportTraceServiceRequest` line for `spans`: protobuf's JSON mapping with hex ids."""
    from google.protobuf.json_format import MessageToDict

    try:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        request = encode_spans(spans)
    except ImportError:  # only opentelemetry-proto: build the request by hand
        request = _request_from_proto(spans)
    data = MessageToDict(request, use_integers_for_enums=True)
    for rs in data.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for holder in [span, *span.get("links", [])]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if holder.get(key):  # OTLP/JSON writes ids as hex, not protobuf's base64
                            holder[key] = base64.b64decode(holder[key]).hex()
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _request_from_proto(spans: Sequence[ReadableSpan]) -> Any:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Status

    def value(v: Any) -> Any:
        if isinstance(v, bool):
            return AnyValue(bool_value=v)
        if isinstance(v, int):
            return AnyValue(int_value=v)
        if isinstance(v, float):
            return AnyValue(double_value=v)
        if isinstance(v, (list, tuple)):
            return AnyValue(array_value=ArrayValue(values=[value(x) for x in v]))
        return AnyValue(string_value=str(v))

    def attrs(mapping: Any) -> list:
        return [KeyValue(key=k, value=value(v)) for k, v in (mapping or {}).items()]

    request = ExportTraceServiceRequest()
    groups: dict = {}
    for s in spans:
        groups.setdefault((id(s.resource), s.instrumentation_scope), (s.resource, []))[1].append(s)
    for (_, scope), (resource, members) in groups.items():
        rs = request.resource_spans.add()
        rs.resource.attributes.extend(attrs(resource.attributes))
        ss = rs.scope_spans.add()
        if scope is not None:
            ss.scope.name = scope.name
            ss.scope.version = scope.version or ""
        for s in members:
            ctx = s.get_span_context()
            span = ss.spans.add()
            span.trace_id = ctx.trace_id.to_bytes(16, "big")
            span.span_id = ctx.span_id.to_bytes(8, "big")
            if s.parent is not None:
                span.parent_span_id = s.parent.span_id.to_bytes(8, "big")
            span.name = s.name
            span.kind = s.kind.value + 1  # SDK INTERNAL=0 ... ; OTLP SPAN_KIND_INTERNAL=1
            span.start_time_unix_nano = s.start_time or 0
            span.end_time_unix_nano = s.end_time or 0
            span.attributes.extend(attrs(s.attributes))
            for event in s.events:
                ev = span.events.add()
                ev.name = event.name
                ev.time_unix_nano = event.timestamp
                ev.attributes.extend(attrs(event.attributes))
            span.status.code = {"UNSET": Status.STATUS_CODE_UNSET, "OK": Status.STATUS_CODE_OK}.get(
                s.status.status_code.name, Status.STATUS_CODE_ERROR
            )
            span.status.message = s.status.description or ""
    return request


# ------------------------------------------------------------------ the tool both frameworks get


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression (numbers, + - * / ** and parentheses) and return the result.

    Args:
        expression: the arithmetic expression, e.g. "17 * 23".
    """
    import ast
    import operator

    ops = {
        ast.Add: operator.add,
        ast.Sub: operator.sub,
        ast.Mult: operator.mul,
        ast.Div: operator.truediv,
        ast.Pow: operator.pow,
        ast.USub: operator.neg,
        ast.UAdd: operator.pos,
    }

    def ev(node: Any) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in ops:
            return ops[type(node.op)](ev(node.operand))
        raise ValueError(f"not an arithmetic expression: {expression!r}")

    result = ev(ast.parse(expression.replace(",", ""), mode="eval").body)
    return str(int(result) if float(result).is_integer() else round(result, 6))


# ------------------------------------------------------------------ smolagents


def run_smolagents(base_url: str, model_id: str, provider: TracerProvider) -> Any:
    import importlib.resources

    import yaml
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    SmolagentsInstrumentor().instrument(tracer_provider=provider)

    class TeamMember(ToolCallingAgent):
        """A managed agent that takes its task as `task` (smolagents' argument) or as `expression` / `query`
        (the argument names the demo model writes)."""

        def __call__(self, task: Optional[str] = None, **kwargs: Any) -> Any:
            for alias in ("expression", "query"):
                value = kwargs.pop(alias, None)
                task = task or value
            return super().__call__(task or "", **kwargs)

    # Short prompts: the demo model's context is 768 tokens; smolagents' own system prompt alone is more.
    templates = yaml.safe_load(
        importlib.resources.files("smolagents.prompts").joinpath("toolcalling_agent.yaml").read_text()
    )
    templates["system_prompt"] = "{{ custom_instructions }} Use your tools, then call final_answer."
    templates["managed_agent"]["task"] = "{{task}}"
    connection = dict(
        model_id=model_id,
        api_base=base_url,
        api_key="none",
        client_kwargs={"timeout": REQUEST_TIMEOUT_S, "max_retries": 0},
        max_tokens=MAX_TOKENS,
    )
    member = TeamMember(
        tools=[tool(calculator)],
        model=OpenAIServerModel(**connection),  # smolagents' own tool_choice: "required"
        max_steps=2,
        name=MEMBER,
        description="A team member who computes arithmetic with a calculator. Give it the expression.",
        prompt_templates=templates,
        instructions=f"You are {MEMBER}, a team member who computes with a calculator.",
        verbosity_level=0,
    )
    manager = ToolCallingAgent(
        tools=[],
        model=_naming_tool_choice(OpenAIServerModel(**connection), MEMBER),
        managed_agents=[member],
        max_steps=2,
        name="manager",
        prompt_templates=templates,
        instructions=f"You are the manager. Ask {MEMBER} to compute what the task needs.",
        verbosity_level=0,
    )
    optional = {"type": "string", "description": "The task, as an expression or a question.", "nullable": True}
    member.inputs = {**member.inputs, "expression": optional, "query": optional}  # set by the manager
    member.inputs["task"] = {**member.inputs["task"], "nullable": True}
    return manager.run(QUESTION)


def _naming_tool_choice(model: Any, function: str) -> Any:
    """`model`, sending a `tool_choice` that names `function` whenever it sends tools (not on smolagents' final,
    tool-less call, where OpenAI refuses a tool_choice). Patched on the instance, so the instrumented
    `OpenAIModel.generate` still runs and names the LLM span as for any other OpenAIModel."""
    generate = model.generate
    choice = {"type": "function", "function": {"name": function}}

    def generate_naming(
        messages: Any,
        stop_sequences: Any = None,
        response_format: Any = None,
        tools_to_call_from: Any = None,
        **kw: Any,
    ) -> Any:
        if tools_to_call_from:
            kw["tool_choice"] = choice
        return generate(messages, stop_sequences, response_format, tools_to_call_from, **kw)

    model.generate = generate_naming
    return model


# ------------------------------------------------------------------ autogen


async def _autogen(base_url: str, model_id: str, timeout_s: float) -> Any:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_core.tools import FunctionTool
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(
        model=model_id,
        base_url=base_url,
        api_key="none",
        timeout=REQUEST_TIMEOUT_S,
        max_retries=0,
        max_tokens=MAX_TOKENS,
        model_info={
            "vision": False,
            "function_calling": True,
            "json_output": False,
            "structured_output": False,
            "family": "unknown",
            "multiple_system_messages": True,
        },
    )
    solver = AssistantAgent(
        "solver",
        model_client=client,
        tools=[FunctionTool(calculator, description="Evaluate an arithmetic expression.")],
        system_message="You are the solver. Use the calculator.",
        description="Solves arithmetic with a calculator.",
    )
    checker = AssistantAgent(
        "checker",
        model_client=client,
        system_message="You are the checker. Check the solver's answer; say TERMINATE if it is right.",
        description="Checks the solver's answer.",
    )
    team = RoundRobinGroupChat([solver, checker], termination_condition=MaxMessageTermination(5))
    try:
        return await asyncio.wait_for(team.run(task=QUESTION), timeout_s)
    finally:
        await client.close()


def run_autogen(base_url: str, model_id: str, provider: TracerProvider, timeout_s: float) -> Any:
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

    AutogenAgentChatInstrumentor().instrument(tracer_provider=provider)
    result = asyncio.run(_autogen(base_url, model_id, timeout_s))
    return [f"{getattr(m, 'source', '?')}: {str(getattr(m, 'content', ''))[:80]}" for m in result.messages]


# ------------------------------------------------------------------ main


class RunTimeout(Exception):
    """The run went past --timeout."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("framework", choices=["smolagents", "autogen"])
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", default="evalrx-tiny", help="model id sent to the server")
    p.add_argument("--out", required=True, type=Path, help="the SDK's span JSON, one span a line")
    p.add_argument("--otlp-out", type=Path, help="also one OTLP/JSON ExportTraceServiceRequest line")
    p.add_argument("--timeout", type=float, default=50.0, help="seconds the framework's run may take")
    p.add_argument("--no-global-provider", action="store_true", help="do not make the tracer provider the global one")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    provider = TracerProvider(resource=Resource.create({"service.name": f"evalrx-{args.framework}-trace"}))
    collected = CollectingSpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(args.out)))
    provider.add_span_processor(SimpleSpanProcessor(collected))
    if not args.no_global_provider:  # frameworks' own spans too, as phoenix.otel.register() does
        trace.set_tracer_provider(provider)

    t0 = time.monotonic()
    error: Optional[BaseException] = None
    result: Any = None
    try:
        if args.framework == "smolagents":

            def _expire(signum: int, frame: Any) -> None:
                raise RunTimeout(f"the run took over {args.timeout:.0f}s")

            previous = signal.signal(signal.SIGALRM, _expire)
            signal.setitimer(signal.ITIMER_REAL, args.timeout)
            try:
                result = run_smolagents(args.base_url, args.model, provider)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
        else:
            result = run_autogen(args.base_url, args.model, provider, args.timeout)
    except Exception as exc:  # the framework's failure is part of the trace (RunTimeout included)
        error = exc
    provider.force_flush()
    spans = list(collected.spans)
    provider.shutdown()
    if args.otlp_out is not None:
        args.otlp_out.write_text(otlp_json(spans) + "\n", encoding="utf-8")

    kinds: dict = {}
    for s in spans:
        kind = (s.attributes or {}).get("openinference.span.kind", "-")
        kinds[kind] = kinds.get(kind, 0) + 1
    summary = {
        "framework": args.framework,
        "spans": len(spans),
        "kinds": kinds,
        "seconds": round(time.monotonic() - t0, 2),
        "error": " ".join(f"{type(error).__name__}: {error}".split())[:300] if error else None,
        "result": str(result)[:500] if result is not None else None,
    }
    print(json.dumps(summary, ensure_ascii=False))
    if error is not None:
        print(
            f"framework_traces: the {args.framework} run failed (kept in the trace): {summary['error']}",
            file=sys.stderr,
        )
    return 0 if spans else 1


if __name__ == "__main__":
    sys.exit(main())
