"""Readers for foreign trajectory formats: OpenAI chat messages and Inspect AI eval logs.

Each reader turns one record into a (FailureCase, Trajectory) pair, raising `ValueError`
with a short description of the problem; `evalrx.store.io` adds the file and line.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from evalrx.core.case import FailureCase, Inputs, Label, Step, StepRole, Trajectory

_ROLES = ("system", "developer", "user", "assistant", "tool")
_PASS = {"c", "correct", "pass", "passed", "true", "1", "1.0", "yes"}
_FAIL = {"i", "incorrect", "fail", "failed", "false", "0", "0.0", "no"}


def outcome_of(value: Any) -> Label:
    """Map a score or verdict (Inspect's C/I, booleans, 1/0, pass/fail) to a Label."""
    if isinstance(value, Label):
        return value
    if isinstance(value, bool):
        return Label.PASS if value else Label.FAIL
    if isinstance(value, (int, float)):
        return Label.PASS if value >= 1 else Label.FAIL if value <= 0 else Label.UNKNOWN
    if isinstance(value, str):
        v = value.strip().lower()
        return Label.PASS if v in _PASS else Label.FAIL if v in _FAIL else Label.UNKNOWN
    return Label.UNKNOWN


def content_text(content: Any, attachments: Optional[dict] = None) -> str:
    """The text of a message content (a string or a list of content blocks)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return _resolve(content, attachments)
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(_resolve(block, attachments))
            elif isinstance(block, dict):
                kind = block.get("type")
                if kind == "text":
                    parts.append(_resolve(str(block.get("text") or ""), attachments))
                elif kind == "reasoning":
                    parts.append(f"<think>{_resolve(str(block.get('reasoning') or ''), attachments)}</think>")
                elif kind in ("image", "image_url", "input_image"):
                    parts.append("[image]")
            else:
                raise ValueError(f"content block of type {type(block).__name__} is not a string or object")
        return "\n".join(p for p in parts if p)
    raise ValueError(f"message content must be a string or a list of blocks, not {type(content).__name__}")


def _resolve(text: str, attachments: Optional[dict]) -> str:
    if attachments and text.startswith("attachment://"):
        return attachments.get(text[len("attachment://") :], text)
    return text


def _call(raw: Any, i: int, style: str) -> tuple[dict, Optional[str]]:
    """One tool call as a ToolCall dict plus a parse error (if its arguments were not JSON)."""
    if not isinstance(raw, dict):
        raise ValueError(f"tool call {i} is not an object")
    if style == "inspect":
        name, args, error = raw.get("function"), raw.get("arguments"), raw.get("parse_error")
    else:
        fn = raw.get("function")
        if not isinstance(fn, dict):
            raise ValueError(f"tool call {i} has no `function` object")
        name, args, error = fn.get("name"), fn.get("arguments"), None
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool call {i} has no function name")
    call: dict = {"name": name, "args": {}}
    if isinstance(args, str):
        try:
            parsed = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            parsed, error = None, f"arguments of {name!r} are not valid JSON: {exc.msg}"
        if isinstance(parsed, dict):
            call["args"] = parsed
        else:
            error = error or f"arguments of {name!r} are not a JSON object"
            call["raw"] = args
    elif isinstance(args, dict):
        call["args"] = args
    elif args is not None:
        raise ValueError(f"tool call {i} arguments must be an object or a JSON string")
    if raw.get("id") is not None:
        call["id"] = str(raw["id"])
    return call, error


def messages_to_steps(
    messages: Any, *, style: str = "openai", attachments: Optional[dict] = None
) -> tuple[list, Optional[str], Optional[str], str]:
    """Convert a chat transcript to steps.

    Returns:
        (steps, system prompt, final answer, goal): the final answer is the last
        assistant message when it made no tool call.
    """
    if not isinstance(messages, list) or not messages:
        raise ValueError("`messages` must be a non-empty list")
    steps: list = []
    system: Optional[str] = None
    goal: Optional[str] = None
    names: dict = {}
    turn = 0
    turn_ids: list = []
    final: Optional[str] = None
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ValueError(f"message {i} is not an object")
        role = msg.get("role")
        if role not in _ROLES:
            raise ValueError(f"message {i} has role {role!r}; expected one of {', '.join(_ROLES)}")
        text = content_text(msg.get("content"), attachments)
        if role in ("system", "developer"):
            system = text if system is None else f"{system}\n{text}"
            continue
        if role == "user":
            if goal is None:
                goal = text
            steps.append(Step(idx=len(steps), role=StepRole.USER, content=text))
            final = None
        elif role == "assistant":
            turn += 1
            calls, errors = [], []
            raw_calls = msg.get("tool_calls") or []
            if not isinstance(raw_calls, list):
                raise ValueError(f"message {i}: `tool_calls` must be a list")
            for j, raw in enumerate(raw_calls):
                try:
                    call, err = _call(raw, j, style)
                except ValueError as exc:
                    raise ValueError(f"message {i}: {exc}") from None
                calls.append(call)
                if call.get("id"):
                    names[call["id"]] = call["name"]
                if err:
                    errors.append(err)
            turn_ids = [c.get("id") for c in calls]
            steps.append(
                Step(
                    idx=len(steps),
                    role=StepRole.ACTOR,
                    content=text,
                    tool_calls=calls,
                    parse_error="; ".join(errors) or None,
                    span={"turn": turn},
                )
            )
            final = text if not calls and not errors else None
        else:  # tool
            call_id = msg.get("tool_call_id")
            name = msg.get("function") or msg.get("name") or names.get(call_id) or ""
            span: dict = {"turn": turn}
            if call_id and call_id in turn_ids:  # results may come back in any order: pair them by id
                span["call"] = turn_ids.index(call_id)
            err = msg.get("error")
            if err:
                span["tool_error"] = True
                if isinstance(err, dict) and err.get("message"):
                    text = text or str(err["message"])
            steps.append(Step(idx=len(steps), role=StepRole.TOOL, content=str(name), observation=text, span=span))
            final = None
    if goal is None:
        raise ValueError("the transcript has no user message")
    return steps, system, final, goal


def _metrics(steps: list, final: Optional[str], extra: Optional[dict] = None) -> dict:
    actor = [s for s in steps if s.role is StepRole.ACTOR]
    m: dict = {
        "n_steps": len(steps),
        "n_turns": len(actor),
        "n_tool_calls": sum(len(s.tool_calls) for s in actor),
        "n_parse_errors": sum(1 for s in actor if s.parse_error),
        "terminated": "final" if final is not None else "incomplete",
    }
    m.update(extra or {})
    return m


def from_openai_row(row: dict, line: int) -> tuple[FailureCase, Trajectory]:
    """One OpenAI chat-format record: `{"messages": [...], "tools"?, "id"?, "expected"?, "outcome"?,
    "attempt"? | "epoch"?}`; without either the attempt is 0 (the reader numbers repeats of an id)."""
    steps, system, final, goal = messages_to_steps(row.get("messages"), style="openai")
    sample_id = str(row.get("id") or row.get("sample_id") or f"line-{line}")
    expected = next((row[k] for k in ("expected", "ideal", "target", "ground_truth") if k in row), None)
    verdict = next((row[k] for k in ("outcome", "label", "score", "correct") if k in row), None)
    meta = dict(row.get("metadata") or {}) if isinstance(row.get("metadata"), dict) else {}
    if system is not None:
        meta["system"] = system
    if row.get("tools") is not None:
        meta["tools"] = row["tools"]
    attempt = next((row[k] for k in ("attempt", "epoch") if row.get(k) is not None), None)
    if attempt is not None and (isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1):
        raise ValueError(f"`attempt` / `epoch` must be a whole number from 1, not {attempt!r}")
    case = FailureCase(inputs=Inputs(prompt=goal), id=sample_id, expected=expected, meta=meta)
    traj = Trajectory(
        sample_id=sample_id,
        goal=goal,
        steps=steps,
        final_answer=final,
        ground_truth=expected,
        outcome=outcome_of(verdict),
        metrics=_metrics(steps, final, {"source": "openai"}),
        attempt=attempt or 0,
    )
    return case, traj


def from_inspect_sample(sample: Any) -> tuple[FailureCase, Trajectory]:
    """One sample of an Inspect AI eval log (a `.json` log's `samples[i]` or a `.eval` log's sample entry).

    The messages give the steps; the events add each model call's latency, tokens and logprobs
    and each tool call's latency and error, matched by message and tool-call id. The epoch is
    the trajectory's attempt: every epoch of a sample is the same case (id = the sample id),
    so pass@k and comparisons pair epochs as they pair a run's repeated attempts.
    `attachment://` references are resolved from the sample's `attachments`.
    """
    if not isinstance(sample, dict):
        raise ValueError("the sample is not an object")
    if "id" not in sample:
        raise ValueError("the sample has no `id`")
    attachments = sample.get("attachments") if isinstance(sample.get("attachments"), dict) else None
    messages = sample.get("messages")
    if not messages:  # a log without transcripts: the input is the only message
        inp = sample.get("input")
        messages = inp if isinstance(inp, list) else [{"role": "user", "content": inp or ""}]
    steps, system, final, goal = messages_to_steps(messages, style="inspect", attachments=attachments)
    _add_event_spans(steps, messages, sample.get("events"), attachments)
    inp = sample.get("input")
    if isinstance(inp, str):
        goal = _resolve(inp, attachments)
    output = sample.get("output") or {}
    completion = output.get("completion") if isinstance(output, dict) else None
    if final is None and completion and steps and steps[-1].role is StepRole.ACTOR and not steps[-1].tool_calls:
        final = _resolve(completion, attachments)
    sid = str(sample["id"])
    epoch = sample.get("epoch", 1)
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
        raise ValueError(f"`epoch` must be a whole number from 1, not {epoch!r}")
    scores = sample.get("scores") or {}
    if not isinstance(scores, dict):
        raise ValueError("`scores` must be an object")
    scorer, first = next(iter(scores.items()), (None, None))
    value = first.get("value") if isinstance(first, dict) else None
    outcome = outcome_of(value)
    extra: dict = {"source": "inspect"}
    usage = sample.get("model_usage") or {}
    if isinstance(usage, dict) and usage:
        extra["total_prompt_tokens"] = sum(int((u or {}).get("input_tokens") or 0) for u in usage.values())
        extra["total_completion_tokens"] = sum(int((u or {}).get("output_tokens") or 0) for u in usage.values())
    if sample.get("working_time") is not None:
        extra["total_latency_ms"] = round(float(sample["working_time"]) * 1000, 3)
    if sample.get("total_time") is not None:
        extra["total_time_s"] = float(sample["total_time"])
    if scores:
        extra["scores"] = scores
        extra["grade"] = {"source": "inspect", "scorer": scorer, "value": value}
    if sample.get("error"):
        err = sample["error"]
        extra["terminated"] = "error"
        extra["error"] = err.get("message") if isinstance(err, dict) else str(err)
        outcome = Label.ERROR  # the sample did not run to the end: not a verdict on the model
    elif sample.get("limit"):
        lim = sample["limit"]
        extra["terminated"] = f"limit:{lim.get('type') if isinstance(lim, dict) else lim}"
    target = sample.get("target")
    meta = dict(sample.get("metadata") or {}) if isinstance(sample.get("metadata"), dict) else {}
    meta["inspect_id"] = sample["id"]  # not the epoch: every epoch of a sample is the same case
    if system is not None:
        meta["system"] = system
    image = _first_image(messages, attachments)
    case = FailureCase(inputs=Inputs(prompt=goal, image=image), id=sid, expected=target, meta=meta)
    traj = Trajectory(
        sample_id=sid,
        goal=goal,
        steps=steps,
        final_answer=final,
        ground_truth=target,
        outcome=outcome,
        metrics=_metrics(steps, final, extra),
        attempt=epoch,
    )
    return case, traj


def _add_event_spans(steps: list, messages: list, events: Any, attachments: Optional[dict]) -> None:
    """Copy model and tool events' timing, tokens, logprobs and errors onto the steps they produced."""
    if not isinstance(events, list) or not events:
        return
    by_message: dict = {}  # message id -> step index
    by_call: dict = {}  # tool call id -> the tool step answering it
    k = 0
    for msg in messages:
        if not isinstance(msg, dict) or msg.get("role") in ("system", "developer"):
            continue  # messages_to_steps makes no step of these
        if msg.get("id"):
            by_message[msg["id"]] = k
        if msg.get("role") == "tool" and msg.get("tool_call_id"):
            by_call[msg["tool_call_id"]] = k
        k += 1
    unmatched: list = []
    for ev in events:
        if not isinstance(ev, dict):
            continue
        kind = ev.get("event")
        if kind == "model":
            span, message_id = _model_span(ev, attachments)
            if message_id in by_message:
                steps[by_message[message_id]].span.update(span)
            else:  # a scorer's or sub-agent's call, or a log from before messages had ids
                unmatched.append(span)
        elif kind == "tool" and ev.get("id") in by_call:
            span = _timing(ev)
            err = ev.get("error")
            if err:
                span["tool_error"] = True
                if isinstance(err, dict) and err.get("type"):
                    span["tool_error_type"] = str(err["type"])
            steps[by_call[ev["id"]]].span.update(span)
    plain = [s for s in steps if s.role is StepRole.ACTOR and "started_at" not in s.span]
    if not by_message and len(unmatched) == len(plain):  # no ids at all: one model event per turn, in order
        for step, span in zip(plain, unmatched):
            step.span.update(span)


def _timing(ev: dict) -> dict:
    span: dict = {}
    if ev.get("timestamp"):
        span["started_at"] = str(ev["timestamp"])
    if isinstance(ev.get("working_time"), (int, float)):
        span["latency_ms"] = round(float(ev["working_time"]) * 1000, 3)
    return span


def _model_span(ev: dict, attachments: Optional[dict]) -> tuple[dict, Optional[str]]:
    """A model event's span fields and the id of the message it produced."""
    span = _timing(ev)
    out = ev.get("output") if isinstance(ev.get("output"), dict) else {}
    if "latency_ms" not in span and isinstance(out.get("time"), (int, float)):
        span["latency_ms"] = round(float(out["time"]) * 1000, 3)
    usage = out.get("usage") if isinstance(out.get("usage"), dict) else {}
    for ours, theirs in (
        ("prompt_tokens", "input_tokens"),
        ("completion_tokens", "output_tokens"),
        ("cached_tokens", "input_tokens_cache_read"),
        ("reasoning_tokens", "reasoning_tokens"),
    ):
        if isinstance(usage.get(theirs), int):
            span[ours] = usage[theirs]
    if ev.get("error"):
        span["model_error"] = _resolve(str(ev["error"]), attachments)
    choices = out.get("choices") if isinstance(out.get("choices"), list) else []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    logprobs = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    if isinstance(logprobs, list) and logprobs:
        span["logprobs"] = [_logprob(lp) for lp in logprobs if isinstance(lp, dict)]
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    return span, message.get("id")


def _logprob(lp: dict) -> dict:
    """One token's logprob without its byte list (the token text says the same)."""
    out = {"token": lp.get("token"), "logprob": lp.get("logprob")}
    top = lp.get("top_logprobs")
    if isinstance(top, list) and top:
        out["top_logprobs"] = [
            {"token": t.get("token"), "logprob": t.get("logprob")} for t in top if isinstance(t, dict)
        ]
    return out


def _first_image(messages: list, attachments: Optional[dict]) -> Optional[bytes]:
    """The first image of the first user message, as bytes (a VLM case's input image), when it is inline."""
    import base64

    for msg in messages:
        if not isinstance(msg, dict) or msg.get("role") != "user":
            continue
        blocks = msg.get("content") if isinstance(msg.get("content"), list) else []
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "image" and isinstance(block.get("image"), str):
                uri = _resolve(block["image"], attachments)
                if uri.startswith("data:") and ";base64," in uri:
                    try:
                        return base64.b64decode(uri.split(";base64,", 1)[1], validate=True)
                    except ValueError:
                        raise ValueError("the input image is not valid base64") from None
        return None
    return None


def inspect_run_info(log: dict) -> tuple[str, dict]:
    """A run name and config for an Inspect log's header."""
    ev = log.get("eval") or {}
    task, model = ev.get("task") or "inspect", ev.get("model") or "unknown"
    config = {
        "model": {"name": model, "backend": "inspect"},
        "inspect": {k: ev.get(k) for k in ("task", "task_id", "run_id", "created", "model", "dataset") if k in ev},
    }
    return f"{task} ({model})", config
