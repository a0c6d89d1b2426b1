"""Traces as trajectories: OpenInference spans (Phoenix, TRAIL, every `openinference-instrumentation-*`) and
OpenTelemetry GenAI spans (OTLP JSON, the SDK's span JSON lines), one trajectory a trace.

The steps come from the spans, in the order their content was produced (a span's end): an LLM span is a model
turn (its output message, tool calls, latency and `llm.token_count.*`), a TOOL span a tool's result. Who acted is
the nearest AGENT span above a step (`agent.name`, `gen_ai.agent.name`, or the span's name); a trace with one
agent is a single-agent trajectory (no agent on its steps). Where a trace holds no TOOL span for an agent (a trace
of LLM spans alone, as `openinference-instrumentation-openai` writes), the tool results and user turns that each
model call received are read from its input messages. The goal is the root span's input (or the first user
message), the answer the root's output (or the last turn without calls).

Every span is accounted for (`metrics["trace"]`: spans, those made into steps, and the skipped ones by kind), and
each step keeps the span it came from (`span["span_id"]`) and the skipped spans it stands for (`span["spans"]`),
so labels given by span id (TRAIL's `location`) find their step. Spans are read from the whole file before any
trajectory is made, since a trace may be spread over many lines.
"""

from __future__ import annotations

import ast
import bisect
import json
import math
import re
from collections import deque
from datetime import datetime, timezone
from typing import Any, Iterator, Optional

from evalrx.core.case import FailureCase, Inputs, Label, Step, StepRole, Trajectory, agent_name, roster_of
from evalrx.core.observation import PICTURE_MARKER, Observation
from evalrx.interop.errors import ImportFormatError
from evalrx.interop.messages import CHAT_ROLES, message_text, outcome_of, parse_tool_call, trajectory_metrics
from evalrx.interop.records import Reading, Record
from evalrx.interop.registry import Format, register
from evalrx.interop.span_files import KIND, Span, is_span_json, is_trail_trace, json_span, otlp_spans, trail_spans

_LLM, _TOOL, _AGENT = "LLM", "TOOL", "AGENT"
# GenAI semantic conventions' operations, as OpenInference kinds.
_OPERATIONS = {
    "chat": _LLM,
    "text_completion": _LLM,
    "generate_content": _LLM,
    "completion": _LLM,
    "execute_tool": _TOOL,
    "invoke_agent": _AGENT,
    "create_agent": _AGENT,
}
_MESSAGE_KEY = re.compile(r"^llm\.(input|output)_messages\.(\d+)\.message\.(.+)$")
_GOAL_KEYS = ("task", "input", "query", "question", "prompt", "message", "content", "text")
_ANSWER_KEYS = ("output", "answer", "final_answer", "content", "text", "result")
BUFFER = "traces"  # the key of this format's spans in `Reading.buffers`


def kind_of(span: Span) -> Optional[str]:
    """The OpenInference kind of a span (a GenAI operation read as one), or None."""
    kind = span.attrs.get(KIND)
    if isinstance(kind, str) and kind.strip():
        return kind.strip().upper()
    op = span.attrs.get("gen_ai.operation.name")
    return _OPERATIONS.get(op) if isinstance(op, str) else None


def _agent_of_span(span: Span) -> Optional[str]:
    """The name an AGENT span gives its agent."""
    for key in ("agent.name", "gen_ai.agent.name"):
        if isinstance(span.attrs.get(key), str) and span.attrs[key].strip():
            return agent_name(span.attrs[key])
    name = span.name.strip()
    if name.startswith("invoke_agent "):  # GenAI's span name: "invoke_agent {agent}"
        return agent_name(name[len("invoke_agent ") :])
    # OpenInference instrumentations name the span after the call: "manager.run" is the agent "manager"
    return agent_name(name.rsplit(".", 1)[0] if "." in name.strip(".") else name)


def _loads(value: Any) -> Any:
    """A JSON (or Python literal) value written as text, or the text itself."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            try:
                return ast.literal_eval(text)  # literals only: nothing runs
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return value
    return value


def _said(value: Any, keys: tuple) -> Optional[str]:
    """The text a span's input or output value holds: itself, a known key of its object, or its text parts."""
    value = _loads(value)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in keys:
            if isinstance(value.get(key), str) and value[key].strip():
                return value[key]
        return None
    if isinstance(value, list):
        texts = [str(v["text"]) for v in value if isinstance(v, dict) and isinstance(v.get("text"), str)]
        return "\n".join(texts) if texts else None
    return str(value)


# ---------------------------------------------------------------- messages on a span


def _flat_messages(attrs: dict, which: str) -> list:
    """OpenInference's `llm.{input|output}_messages.N.message.*` as OpenAI-style message dicts, in order."""
    found: dict = {}
    for key, value in attrs.items():
        m = _MESSAGE_KEY.match(key)
        if m is None or m.group(1) != which:
            continue
        found.setdefault(int(m.group(2)), {})[m.group(3)] = value
    out = []
    for _, fields in sorted(found.items()):
        parts: dict = {}
        calls: dict = {}
        for key, value in fields.items():
            if key.startswith("contents."):  # contents.K.message_content.{type,text,image...}
                k, _, rest = key[len("contents.") :].partition(".")
                if rest == "message_content.text" and k.isdigit():
                    parts[int(k)] = message_text(value)
                elif rest.startswith("message_content.image") and k.isdigit():
                    parts.setdefault(int(k), PICTURE_MARKER)
            elif key.startswith("tool_calls."):
                j, _, rest = key[len("tool_calls.") :].partition(".")
                if j.isdigit():
                    calls.setdefault(int(j), {})[rest.removeprefix("tool_call.")] = value
        content = fields.get("content")
        text = message_text(content) if content is not None else "".join(parts[k] for k in sorted(parts))
        msg: dict = {"role": str(fields.get("role") or ""), "content": text}
        if calls:
            msg["tool_calls"] = [
                {
                    "id": c.get("id"),
                    "function": {"name": c.get("function.name"), "arguments": c.get("function.arguments")},
                }
                for _, c in sorted(calls.items())
            ]
        for key in ("tool_call_id", "name"):
            if fields.get(key) is not None:
                msg[key] = str(fields[key])
        out.append(msg)
    return out


def _genai_messages(value: Any) -> list:
    """GenAI's `gen_ai.{input|output}.messages` (`[{role, parts: [...]}]`) as OpenAI-style message dicts."""
    value = _loads(value)
    out = []
    for m in value if isinstance(value, list) else []:
        if not isinstance(m, dict):
            continue
        texts: list = []
        calls: list = []
        msg: dict = {"role": str(m.get("role") or "")}
        for p in m.get("parts") or []:
            if not isinstance(p, dict):
                continue
            if p.get("type") == "text":
                texts.append(message_text(p.get("content")))
            elif p.get("type") == "tool_call":
                args = p.get("arguments")
                calls.append(
                    {
                        "id": p.get("id"),
                        "function": {"name": p.get("name"), "arguments": args},
                    }
                )
            elif p.get("type") == "tool_call_response":
                texts.append(message_text(p.get("response")))
                msg["tool_call_id"] = p.get("id")
        msg["content"] = "\n".join(texts)
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
    return out


def _messages(span: Span, which: str) -> list:
    found = _flat_messages(span.attrs, which)
    if not found:
        found = _genai_messages(span.attrs.get(f"gen_ai.{which}.messages"))
    if not found and which == "output":  # the raw response: a message object or an OpenAI completion
        value = _loads(span.attrs.get("output.value"))
        if isinstance(value, dict) and isinstance(value.get("choices"), list) and value["choices"]:
            first = value["choices"][0]
            value = first.get("message") if isinstance(first, dict) else None
        if isinstance(value, dict) and ("content" in value or "tool_calls" in value):
            found = [{"role": "assistant", **{k: value.get(k) for k in ("content", "tool_calls")}}]
        elif isinstance(value, str) and value:
            found = [{"role": "assistant", "content": value}]
    for m in found:
        m["role"] = CHAT_ROLES.get(str(m.get("role") or "").strip().lower(), "user")
    return found


def _calls(message: dict, where: str) -> "tuple[list, Optional[str]]":
    """A model message's tool calls, and the parse errors of those whose arguments were not JSON."""
    calls, errors = [], []
    for j, raw in enumerate(message.get("tool_calls") or []):
        fn = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            continue  # a call with no name is nothing to replay: its text stays in the content
        args = fn.get("arguments")
        raw = {**raw, "function": {**fn, "arguments": args if isinstance(args, (str, dict)) or args is None else ""}}
        try:
            call, err = parse_tool_call(raw, j, "openai")
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        calls.append(call)
        if err:
            errors.append(err)
    return calls, "; ".join(errors) or None


# ---------------------------------------------------------------- one trace


class _Trace:
    """The spans of one trace, with their tree, kinds and agents."""

    def __init__(self, spans: list) -> None:
        self.spans = sorted(spans, key=lambda s: (s.start_ns if s.start_ns is not None else 0, s.order))
        self.by_id = {s.span_id: s for s in self.spans}
        self.kinds = {s.span_id: kind_of(s) for s in self.spans}
        self.roots = [s for s in self.spans if s.parent_id not in self.by_id]
        self.children: dict = {}
        for s in self.spans:
            if s.parent_id in self.by_id:
                self.children.setdefault(s.parent_id, []).append(s)
        self.agent_span: dict = {}  # span id -> the AGENT span above it (or itself)
        for s in self.spans:
            self._agent_above(s)

    def _agent_above(self, span: Span) -> Optional[Span]:
        path = []
        node: Optional[Span] = span
        found: Optional[Span] = None
        while node is not None and node.span_id not in self.agent_span:
            path.append(node)
            if self.kinds[node.span_id] == _AGENT:
                found = node
                break
            node = self.by_id.get(node.parent_id) if node.parent_id and len(path) <= len(self.spans) else None
        if found is None and node is not None:
            found = self.agent_span.get(node.span_id)
        for p in path:
            self.agent_span[p.span_id] = found
        return found

    def inside_same(self, span: Span) -> bool:
        """Whether a span sits inside another of its kind with no AGENT between (a wrapper and the client both
        traced one call): the outer one speaks for both."""
        kind = self.kinds[span.span_id]
        for a in self.ancestors(span):
            if self.kinds[a.span_id] == _AGENT:
                return False
            if self.kinds[a.span_id] == kind:
                return True
        return False

    def same_inside(self, span: Span) -> list:
        """The spans of its kind a span speaks for (`inside_same`), nearest first."""
        kind, out = self.kinds[span.span_id], []
        todo, seen = deque(self.children.get(span.span_id, [])), {span.span_id}
        while todo:
            c = todo.popleft()
            if c.span_id in seen or self.kinds[c.span_id] == _AGENT:
                continue
            seen.add(c.span_id)
            if self.kinds[c.span_id] == kind:
                out.append(c)
            todo.extend(self.children.get(c.span_id, []))
        return out

    def ancestors(self, span: Span) -> Iterator[Span]:
        seen = {span.span_id}
        node = self.by_id.get(span.parent_id) if span.parent_id else None
        while node is not None and node.span_id not in seen:
            seen.add(node.span_id)
            yield node
            node = self.by_id.get(node.parent_id) if node.parent_id else None

    def agent(self, span: Span) -> Optional[str]:
        own = span.attrs.get("gen_ai.agent.name")  # a step's own agent (evalrx's export names it on each span)
        if self.kinds[span.span_id] != _AGENT and isinstance(own, str) and own.strip():
            return agent_name(own)
        holder = self.agent_span.get(span.span_id)
        return _agent_of_span(holder) if holder is not None else None

    def roster(self, acting: set) -> list:
        """Each agent with its description, in order of appearance: the AGENT spans of the agents that took steps
        (`acting`), and the members a manager lists (`*.managed_agents.N.name` / `.description`, as smolagents
        declares its team)."""
        members: dict = {}
        for s in self.spans:
            if self.kinds[s.span_id] != _AGENT:
                continue
            name = _agent_of_span(s)
            if name in acting:
                desc = next(
                    (s.attrs[k] for k in ("agent.description", "gen_ai.agent.description") if s.attrs.get(k)), None
                )
                members.setdefault(name, {"name": name})
                if isinstance(desc, str) and desc.strip():
                    members[name].setdefault("description", desc)
            managed: dict = {}
            for key, value in s.attrs.items():
                m = re.search(r"managed_agents\.(\d+)\.(name|description)$", key)
                if m and isinstance(value, str):
                    managed.setdefault(int(m.group(1)), {})[m.group(2)] = value
            for _, entry in sorted(managed.items()):
                if entry.get("name", "").strip():
                    member = members.setdefault(agent_name(entry["name"]), {"name": agent_name(entry["name"])})
                    if entry.get("description"):
                        member.setdefault("description", entry["description"])
        return list(members.values())


def trace_record(spans: list) -> Optional[Record]:
    """One trace's spans as a trajectory; None for a trace with no model call or tool span (nothing happened)."""
    trace = _Trace(spans)
    tid = spans[0].trace_id
    where = f"trace {tid}"
    root = trace.roots[0] if trace.roots else trace.spans[0]
    made: list = []  # (time, order, Step, source span or None)
    used: set = set()
    tool_agents = {trace.agent(s) for s in trace.spans if trace.kinds[s.span_id] == _TOOL}
    seen_inputs: dict = {}  # agent -> messages its last model call had seen (inputs + output)
    said: set = set()  # what the model turns so far said
    goal: Optional[str] = None
    for s in trace.spans:
        kind = trace.kinds[s.span_id]
        if kind not in (_LLM, _TOOL):
            continue
        if trace.inside_same(s):
            continue  # a call inside another of its kind (a wrapper and the client both traced): the outer speaks
        agent = trace.agent(s)
        when = s.end_ns if s.end_ns is not None else (s.start_ns or 0)
        span_info: dict = {"span_id": s.span_id}
        if s.start_ns is not None:
            span_info["started_at"] = datetime.fromtimestamp(s.start_ns / 1e9, timezone.utc).isoformat()
        if s.latency_ms is not None:
            span_info["latency_ms"] = s.latency_ms
        used.add(s.span_id)
        if kind == _LLM:
            inputs = _messages(s, "input")
            if goal is None:
                goal = next((m["content"] for m in inputs if m["role"] == "user" and m["content"]), None)
            before = seen_inputs.get(agent)
            if before is not None and agent not in tool_agents and len(inputs) >= before:
                # what came back since this agent's last call: tool results and user turns, as steps
                for m in inputs[before:]:
                    if m["role"] == "tool":
                        step = Step(
                            idx=0,
                            role=StepRole.TOOL,
                            content=str(m.get("name") or ""),
                            observation=Observation(m["content"]),
                            span={"from_input_of": s.span_id},
                        )
                    elif m["role"] == "user" and m["content"] not in said:
                        # a user turn no step said yet (a group chat relays the other agents' messages as user turns)
                        step = Step(idx=0, role=StepRole.USER, content=m["content"], span={"from_input_of": s.span_id})
                    else:
                        continue
                    step.agent = agent if step.role is StepRole.TOOL else None
                    made.append((s.start_ns or when, s.order, step, None))
            outputs = [m for m in _messages(s, "output") if m["role"] == "assistant"]
            out = outputs[0] if outputs else {"role": "assistant", "content": ""}
            seen_inputs[agent] = len(inputs) + 1
            calls, parse_error = _calls(out, f"span {s.span_id}")
            for key, to in (("prompt", "prompt_tokens"), ("completion", "completion_tokens")):
                n = s.attrs.get(f"llm.token_count.{key}")
                n = (
                    n
                    if n is not None
                    else s.attrs.get(f"gen_ai.usage.{'input' if key == 'prompt' else 'output'}_tokens")
                )
                if isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n) and 0 <= n < 2**53:
                    span_info[to] = int(n)
            if s.error is not None:
                span_info["error"] = s.error or "the model call failed"
            content = message_text(out.get("content"))
            said.add(content)
            step = Step(idx=0, role=StepRole.ACTOR, content=content, tool_calls=calls, parse_error=parse_error)
        else:
            inner = trace.same_inside(s)
            for x in inner:
                used.add(x.span_id)

            def attr(*keys: str) -> Any:  # the span's own value, else the nearest inner span's
                for holder in (s, *inner):
                    for key in keys:
                        if holder.attrs.get(key) is not None:
                            return holder.attrs[key]
                return None

            name = attr("tool.name", "gen_ai.tool.name") or s.name
            result = attr("output.value", "gen_ai.tool.call.result")
            error = next((x.error for x in (s, *inner) if x.error is not None), None)
            observation = message_text(result) if result is not None else (error or "")
            call_id = attr("tool_call.id", "gen_ai.tool.call.id")
            if call_id is not None:
                span_info["call_id"] = str(call_id)
            args = attr("input.value", "gen_ai.tool.call.arguments")
            if args is not None:
                span_info["arguments"] = message_text(args)[:2000]
            if error is not None:
                span_info["tool_error"] = True
            step = Step(idx=0, role=StepRole.TOOL, content=str(name), observation=Observation(observation))
        step.span.update(span_info)
        step.agent = agent
        if isinstance(s.attrs.get("evalrx.addressee"), str):  # evalrx's own export names it
            step.addressee = agent_name(s.attrs["evalrx.addressee"])
        made.append((when, s.order, step, s))
    if not made:
        return None
    made.sort(key=lambda x: (x[0], x[1]))
    if not goal or not isinstance(goal, str):
        goal = None
    root_goal = None
    if trace.kinds[root.span_id] != _LLM:
        root_goal = _said(root.attrs.get("input.value"), _GOAL_KEYS) or next(
            (m["content"] for m in _messages(root, "input") if m["role"] == "user" and m["content"]), None
        )
    goal = root_goal or goal or root.name or f"trace {tid}"
    # the goal stands for the root span, unless the root is itself a model or tool call that made a step
    steps = [
        Step(idx=0, role=StepRole.USER, content=goal, span={} if root.span_id in used else {"span_id": root.span_id})
    ]
    used.add(root.span_id)
    steps += [m[2] for m in made]
    for i, st in enumerate(steps):
        st.idx = i
    _pair_calls(steps)
    roster = trace.roster({st.agent for st in steps if st.agent})
    names = {st.agent for st in steps if st.agent} | {m["name"] for m in roster}
    if len(names) < 2:  # one agent is a single-agent trajectory
        for st in steps:
            st.agent = None
        roster = []
    else:
        for st in steps:
            _addressed(st, names)
        known = {m["name"] for m in roster}
        for st in steps:  # an agent that acted but had no AGENT span of its own (a step naming its agent)
            if st.agent and st.agent not in known:
                known.add(st.agent)
                roster.append({"name": st.agent})
    skipped = _assign_skipped(trace, steps, used)
    answer = None
    if trace.kinds[root.span_id] != _LLM:
        answer = _said(root.attrs.get("output.value"), _ANSWER_KEYS)
    last = next((st for st in reversed(steps) if st.role is StepRole.ACTOR), None)
    if answer is None and last is not None and not last.tool_calls and not last.span.get("error"):
        answer = last.content or None
    sample_id = str(root.attrs.get("evalrx.sample_id") or root.attrs.get("evalrx.case.id") or tid)
    attempt = root.attrs.get("evalrx.attempt")
    metrics = trajectory_metrics(steps, answer, {"source": "trace"})
    metrics["trace"] = {"trace_id": tid, "spans": len(trace.spans), "steps_from": len(used), "skipped": skipped}
    if root.error is not None:
        metrics["trace"]["error"] = root.error
    outcome = outcome_of(root.attrs.get("evalrx.outcome")) if root.attrs.get("evalrx.outcome") else Label.UNKNOWN
    case = FailureCase(inputs=Inputs(prompt=goal), id=sample_id, meta={"trace_id": tid})
    traj = Trajectory(
        sample_id=sample_id,
        goal=goal,
        steps=steps,
        final_answer=answer,
        outcome=outcome,
        metrics=metrics,
        attempt=attempt if isinstance(attempt, int) and attempt >= 1 else 0,
        roster=roster_of(roster),
    )
    model = next(
        (
            s.attrs.get("llm.model_name") or s.attrs.get("gen_ai.request.model")
            for s in trace.spans
            if s.attrs.get("llm.model_name") or s.attrs.get("gen_ai.request.model")
        ),
        None,
    )
    return Record(
        case=case,
        traj=traj,
        where=where,
        run_meta={"model": str(model)} if model else None,
    )


def _pair_calls(steps: list) -> None:
    """Number the turns and pair each tool result with the call of its agent's last model turn (by id, else name)."""
    turn = 0
    last: dict = {}  # agent -> its last model turn
    for st in steps:
        if st.role is StepRole.ACTOR:
            turn += 1
            st.span["turn"] = turn
            last[st.agent] = (st, set())
        elif st.role is StepRole.TOOL:
            st.span["turn"] = turn
            actor, taken = last.get(st.agent, (None, set()))
            if actor is None:
                continue
            ids = [c.id for c in actor.tool_calls]
            at = None
            if st.span.get("call_id") in ids:
                at = ids.index(st.span["call_id"])
            elif not st.content:  # a result read from the next call's input, which names no tool: calls in order
                at = next((j for j in range(len(actor.tool_calls)) if j not in taken), None)
            else:
                at = next((j for j, c in enumerate(actor.tool_calls) if c.name == st.content and j not in taken), None)
            if at is not None:
                st.span["call"] = at
                taken.add(at)
                if not st.content:
                    st.content = actor.tool_calls[at].name


def _addressed(step: Step, agents: set) -> None:
    """A model turn that calls another agent of the team (a manager handing work over) addresses it."""
    if step.role is StepRole.ACTOR and step.addressee is None:
        to = next((c.name for c in step.tool_calls if c.name in agents and c.name != step.agent), None)
        step.addressee = to


def _assign_skipped(trace: _Trace, steps: list, used: set) -> dict:
    """Give each span that made no step to the first step made from it or below it (else the first step after it),
    so a label at any span finds a step; returns the skipped spans counted by kind (or name, for spans of none)."""
    first_below: dict = {}  # span id -> the first step made at or below it
    for st in steps:  # in step order: an ancestor already given a step keeps it, and so do the ones above it
        source = trace.by_id.get(st.span.get("span_id"))
        if source is None:
            continue
        for node in (source, *trace.ancestors(source)):
            if node.span_id in first_below:
                break
            first_below[node.span_id] = st
    ends = sorted(
        (trace.by_id[st.span["span_id"]].end_ns or 0, st.idx)
        for st in steps
        if st.span.get("span_id") in trace.by_id and st.role is not StepRole.USER
    )
    # the lowest step index at or after each position of `ends` (the first step to end after a time)
    later = [0] * len(ends)
    low = len(steps)
    for i in range(len(ends) - 1, -1, -1):
        low = min(low, ends[i][1])
        later[i] = low
    counts: dict = {}
    for s in trace.spans:
        if s.span_id in used:
            continue
        key = trace.kinds[s.span_id] or "(no kind)"
        counts[key] = counts.get(key, 0) + 1
        target = first_below.get(s.span_id)
        if target is None:
            end = s.end_ns if s.end_ns is not None else (s.start_ns or 0)
            at = bisect.bisect_left(ends, (end, -1))
            target = steps[later[at]] if at < len(ends) else steps[-1]
        target.span.setdefault("spans", []).append(s.span_id)
        if s.error is not None:
            target.span.setdefault("span_errors", []).append(f"{s.name}: {s.error}"[:2000])
    return counts


# ---------------------------------------------------------------- the format


def _sniff(obj: dict, whole: bool) -> bool:
    if "steps" in obj or "messages" in obj:  # our rows and chat transcripts, whatever else they carry
        return False
    return "resourceSpans" in obj or is_span_json(obj) or is_trail_trace(obj)


def _read(obj: dict, where: Any, reading: Reading) -> Iterator[Record]:
    """Keep a record's spans until the whole file is read (a trace may be spread over many lines)."""
    buffer = reading.buffers.setdefault(BUFFER, {})
    order = reading.buffers.get(BUFFER + ".n", 0)
    if "resourceSpans" in obj:
        found = list(otlp_spans(obj, order))
    elif is_trail_trace(obj):
        found = list(trail_spans(obj))
        for s in found:
            s.order += order
    else:
        found = [json_span(obj, order + 1)]
    for s in found:
        buffer.setdefault(s.trace_id, []).append(s)
    reading.buffers[BUFFER + ".n"] = order + len(found)
    return iter(())


def _read_list(doc: list, reading: Reading) -> Iterator[Record]:
    for obj in doc:
        yield from _read(obj, 1, reading)
    yield from _finish(reading)


def _is_span_list(doc: list) -> bool:
    return all(isinstance(o, dict) and _sniff(o, False) for o in doc)


def _finish(reading: Reading) -> Iterator[Record]:
    """The trajectories of every trace the file held, in the order their first span came."""
    buffer = reading.buffers.pop(BUFFER, {})
    reading.buffers.pop(BUFFER + ".n", None)
    empty = empty_spans = 0
    for tid, spans in buffer.items():
        try:
            record = trace_record(spans)
        except ValueError as exc:
            raise ImportFormatError(reading.path, f"trace {tid}", str(exc)) from None
        if record is None:
            empty, empty_spans = empty + 1, empty_spans + len(spans)
            continue
        record.traj.attempt = record.traj.attempt or reading.attempts.get(record.case.id, 0) + 1
        reading.attempts[record.case.id] = max(reading.attempts.get(record.case.id, 0), record.traj.attempt)
        yield record
    if empty:
        reading.notes.append(
            f"{empty} trace{'s' if empty > 1 else ''} ({empty_spans} span{'s' if empty_spans > 1 else ''}) held no "
            "model call or tool span (e.g. an agent being created): not imported"
        )


register(
    Format(
        name="spans",
        title="OpenInference / OpenTelemetry spans",
        sniff_rank=20,
        sniff_record=_sniff,
        read_record=_read,
        sniff_list=_is_span_list,
        read_list=_read_list,
        finish=_finish,
    )
)
