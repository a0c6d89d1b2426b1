"""Chat messages to trajectory steps, shared by the OpenAI chat and Inspect readers.

Each reader turns one record into a (FailureCase, Trajectory) pair, raising `ValueError` with a short
description of the problem; the import bridge (`evalrx.interop.bridge`) adds the file and line.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from evalrx.core.case import Label, Step, StepRole, Termination
from evalrx.core.content import content_text, is_picture_block
from evalrx.core.effects import is_handoff
from evalrx.core.observation import PICTURE_MARKER, Observation
from evalrx.core.tool import ToolCall
from evalrx.interop.pictures import data_url_bytes


def as_dict(value: Any) -> dict:
    """`value` when it is an object, else an empty one (foreign JSON may hold anything anywhere)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list:
    """`value` when it is a list, else an empty one."""
    return value if isinstance(value, list) else []


_ROLES = ("system", "developer", "user", "assistant", "tool")
# Every role a chat message is known to have, across frameworks and formats, as one of ours.
CHAT_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "model": "assistant",
    "ai": "assistant",
    "tool-call": "assistant",  # smolagents' record of the calls a model turn made
    "tool": "tool",
    "tool-response": "tool",
    "tool_response": "tool",
    "function": "tool",
    "ipython": "tool",
}
_PASS = {"c", "correct", "pass", "passed", "true", "1", "1.0", "yes"}
_FAIL = {"i", "incorrect", "fail", "failed", "false", "0", "0.0", "no"}


def message_text(content: Any) -> str:
    """A message's content as text: a string as is, content parts by their text, any other JSON value as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        text = content_text(content, sep="\n", image=PICTURE_MARKER)
        if text or not content:
            return text
    return json.dumps(content, ensure_ascii=False, default=str)


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


def resolve_attachment(text: str, attachments: Optional[dict]) -> str:
    if attachments and text.startswith("attachment://"):
        value = attachments.get(text[len("attachment://") :])
        return value if isinstance(value, str) else text  # an attachment that is not text is not resolved
    return text


def _inline_picture(block: Any, attachments: Optional[dict]) -> Optional[bytes]:
    """The bytes of an image block written inline as a base64 `data:` URL (Inspect's `image`, the OpenAI
    wire's `image_url`, the Responses format's `input_image`); None for a link or any other block."""
    if not is_picture_block(block):
        return None
    ref = block.get("image") if block.get("type") == "image" else block.get("image_url")
    if isinstance(ref, dict):
        ref = ref.get("url")
    if not isinstance(ref, str):
        return None
    return data_url_bytes(resolve_attachment(ref, attachments))  # a link gives None: nothing here fetches it


def message_pictures(
    messages: Any, steps: list, attachments: Optional[dict] = None
) -> "tuple[Optional[bytes], dict[int, list[bytes]]]":
    """The inline pictures of a transcript: the case's (the first picture of the first user message) and,
    by step, every other one (a tool's result, a user turn showing what a tool returned), in order.

    `steps` are `messages_to_steps`' (each knows its message by `span["message"]`).
    """
    case: Optional[bytes] = None
    by_step: dict = {}
    first_user = True
    for step in steps:
        at = (step.span or {}).get("message")
        msg = messages[at - 1] if isinstance(at, int) and 0 < at <= len(messages) else None
        content = msg.get("content") if isinstance(msg, dict) else None
        if not isinstance(content, list):
            first_user = first_user and step.role is not StepRole.USER
            continue
        pictures = [p for p in (_inline_picture(b, attachments) for b in content) if p is not None]
        if step.role is StepRole.USER and first_user:
            first_user = False
            if pictures:
                case, pictures = pictures[0], pictures[1:]
        if pictures:
            by_step[step.idx] = pictures
    return case, by_step


def parse_tool_call(raw: Any, i: int, style: str) -> tuple[ToolCall, Optional[str]]:
    """One tool call plus a parse error (if its arguments were not JSON)."""
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
        except RecursionError:
            parsed, error = None, f"arguments of {name!r} are JSON nested too deeply to read"
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
    return ToolCall.from_dict(call), error  # read from its dict: exported as imported, key order included


def messages_to_steps(
    messages: Any, *, style: str = "openai", attachments: Optional[dict] = None
) -> tuple[list, Optional[str], Optional[str], str]:
    """Convert a chat transcript to steps.

    Each step's `span["message"]` is its message's 1-based position in the transcript (the system
    message counted), so labels given by message index find their step.

    Returns:
        (steps, system prompt, final answer, goal): the final answer is the agent's last message to
        the user (an assistant message without calls), even when the user spoke after it (a
        conversation the user ended); any call after it means there is none.
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
        text = content_text(
            msg.get("content"),
            sep="\n",
            image=PICTURE_MARKER,
            reasoning=True,
            resolve=lambda t: resolve_attachment(t, attachments),
            strict=True,
        )
        if role in ("system", "developer"):
            system = text if system is None else f"{system}\n{text}"
            continue
        content = msg.get("content")
        shown = sum(1 for b in content if is_picture_block(b)) if isinstance(content, list) else 0
        if role == "user":
            if goal is None:
                goal = text
            user_span: dict = {"message": i + 1, **({"n_images": shown} if shown else {})}
            steps.append(Step(idx=len(steps), role=StepRole.USER, content=text, span=user_span))
        elif role == "assistant":
            turn += 1
            calls, errors = [], []
            raw_calls = msg.get("tool_calls") or []
            if not isinstance(raw_calls, list):
                raise ValueError(f"message {i}: `tool_calls` must be a list")
            for j, raw in enumerate(raw_calls):
                try:
                    call, err = parse_tool_call(raw, j, style)
                except ValueError as exc:
                    raise ValueError(f"message {i}: {exc}") from None
                calls.append(call)
                if call.id:
                    names[call.id] = call.name
                if err:
                    errors.append(err)
            turn_ids = [c.id for c in calls]
            steps.append(
                Step(
                    idx=len(steps),
                    role=StepRole.ACTOR,
                    content=text,
                    tool_calls=calls,
                    parse_error="; ".join(errors) or None,
                    span={"turn": turn, "message": i + 1},
                )
            )
            final = text if not calls and not errors else None
        else:  # tool
            call_id = msg.get("tool_call_id")
            name = msg.get("function") or msg.get("name") or names.get(call_id) or ""
            span: dict = {"turn": turn, "message": i + 1, **({"n_images": shown} if shown else {})}
            if call_id and call_id in turn_ids:  # results may come back in any order: pair them by id
                span["call"] = turn_ids.index(call_id)
            err = msg.get("error")
            if err:
                span["tool_error"] = True
                if isinstance(err, dict) and err.get("message"):
                    text = text or str(err["message"])
            steps.append(
                Step(idx=len(steps), role=StepRole.TOOL, content=str(name), observation=Observation(text), span=span)
            )
            final = None
    if goal is None:
        raise ValueError("the transcript has no user message")
    return steps, system, final, goal


def ended_by_handoff(steps: list) -> bool:
    """Whether a transcript ends with the agent handing the conversation to a person: its last model turn
    called a hand-off tool (`evalrx.core.effects.is_handoff`) and nothing but that call's results follow."""
    actor = next((s for s in reversed(steps) if s.role is StepRole.ACTOR), None)
    if actor is None or any(s.role is StepRole.USER for s in steps[actor.idx + 1 :]):
        return False
    return any(is_handoff(c.name) for c in actor.tool_calls)


def termination_of(steps: list, final: Optional[str]) -> str:
    """How an imported transcript ended: with the agent's answer, a hand-off to a person, or unfinished."""
    if ended_by_handoff(steps):
        return Termination.HANDOFF.value
    return Termination.FINAL.value if final is not None else Termination.INCOMPLETE.value


def trajectory_metrics(steps: list, final: Optional[str], extra: Optional[dict] = None) -> dict:
    actor = [s for s in steps if s.role is StepRole.ACTOR]
    m: dict = {
        "n_steps": len(steps),
        "n_turns": len(actor),
        "n_tool_calls": sum(len(s.tool_calls) for s in actor),
        "n_parse_errors": sum(1 for s in actor if s.parse_error),
        "terminated": termination_of(steps, final),
    }
    m.update(extra or {})
    return m
