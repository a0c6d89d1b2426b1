"""What every codec shares: the `ParsedTurn` contract, the base codec, and the small readers
(think blocks, call objects, argument coercion) the family codecs are built from."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from evalrx.core.tool import ChatTurn, Tool, ToolCall

SNIPPET_CHARS = 120


@dataclass
class ParsedTurn:
    """What a codec read from one model turn.

    Attributes:
        calls: well-formed tool calls, in the order the model made them.
        errors: one short string per malformed call (reason plus a truncated snippet).
        text: the answer text, with think blocks and call markup removed.
    """

    calls: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    text: str = ""


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """A short, quoted excerpt of model output for an error message."""
    text = text.strip()
    if len(text) > limit:
        text = text[:limit] + "..."
    return repr(text)


_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)


def strip_think(text: str) -> str:
    """Remove reasoning blocks from model text.

    Handles closed `<think>...</think>` blocks, an unclosed `<think>` (generation
    stopped while thinking: the rest is reasoning), and a lone leading `</think>`
    (templates that open the think block inside the prompt).

    Args:
        text: raw generated text.

    Returns:
        The text outside any reasoning block.
    """
    if "think>" not in text:  # fast path: most turns have no reasoning markup
        return text
    text = _THINK_BLOCK.sub("", text)
    if "</think>" in text:  # opening tag was in the prompt, so everything before it is reasoning
        text = text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    return text


def coerce_args(value: Any, where: str) -> "tuple[Optional[dict], Optional[str]]":
    """Arguments as a dict, or an error: accepts an object, a JSON string of one, or nothing."""
    if value is None:
        return {}, None
    if isinstance(value, dict):
        return value, None
    if isinstance(value, str):
        if not value.strip():  # some servers send "" for a call without arguments
            return {}, None
        try:
            decoded = json.loads(value, strict=False)
        except json.JSONDecodeError as exc:
            return None, f"{where}: arguments are not valid JSON ({exc.msg} at char {exc.pos}): {snippet(value)}"
        except RecursionError:
            return None, f"{where}: arguments are not valid JSON (nested too deeply): {snippet(value)}"
        if isinstance(decoded, dict):
            return decoded, None
        return None, f"{where}: arguments must be a JSON object, got {type(decoded).__name__}: {snippet(value)}"
    return None, f"{where}: arguments must be an object, got {type(value).__name__}"


def call_from_object(
    obj: Any, where: str, source: str, *, raw: Optional[str] = None, call_id: Optional[str] = None
) -> "tuple[Optional[ToolCall], Optional[str]]":
    """A `ToolCall` from a decoded `{"name": ..., "arguments"|"parameters": ...}` object, or an error.

    Args:
        obj: the decoded JSON value.
        where: the call's label in error messages ("call #2").
        source: the text it was decoded from, quoted in errors.
        raw: the text kept on the call (`ToolCall.raw`).
        call_id: the call's id, when the format carries one.
    """
    if not isinstance(obj, dict):
        return None, f"{where}: expected a JSON object, got {type(obj).__name__}: {snippet(source)}"
    name = obj.get("name")
    if name is None:
        return None, f'{where}: missing "name": {snippet(source)}'
    if not isinstance(name, str) or not name.strip():
        return None, f'{where}: "name" must be a non-empty string, got {name!r}'
    raw_args = obj["arguments"] if "arguments" in obj else obj.get("parameters")
    args, error = coerce_args(raw_args, where)
    if args is None:
        return None, error
    return ToolCall(name=name.strip(), args=args, id=call_id, raw=raw), None


_DECODER = json.JSONDecoder(strict=False)


def decode_json_at(text: str, index: int) -> "tuple[Any, int]":
    """The JSON value starting at `text[index]` and the index after it.

    Raises:
        json.JSONDecodeError: not valid JSON there, including nesting too deep to decode.
    """
    try:
        return _DECODER.raw_decode(text, index)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, index) from None


def json_unclosed(text: str) -> bool:
    """True when `text` opens more JSON brackets or a string than it closes (a cut-off generation)."""
    depth = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
    return in_string or depth > 0


def join_answer(pieces: "list[str]") -> str:
    """The answer text around calls: the non-empty pieces, each trimmed of call separators."""
    kept = [p.strip().strip(";").strip() for p in pieces]
    return "\n".join(p for p in kept if p)


def as_call_list(calls: "list[ToolCall] | ToolCall | None") -> list:
    if isinstance(calls, ToolCall):
        return [calls]
    return list(calls or [])


class ToolCallCodec:
    """Base codec: OpenAI-style tool schemas, plain-text answers, no calls.

    Subclasses override `parse` and the message builders.
    """

    name = "base"
    # Special tokens that belong to the call format (`[TOOL_CALLS]`, `<|python_tag|>`): a
    # backend keeps them in the generated text, so the stored turn re-tokenizes into the ids
    # the model generated and the parser sees the marker.
    control_tokens: "tuple[str, ...]" = ()

    def encode(self, tools: "list[Tool]") -> list:
        """The tool schemas passed to `chat(tools=...)` (OpenAI function format)."""
        return [t.to_openai() for t in tools]

    def parse(self, chat: ChatTurn) -> ParsedTurn:
        """Read calls, errors and answer text from one turn. Never raises on model output."""
        return ParsedTurn(text=strip_think(chat.text or "").strip())

    def decode(self, chat: ChatTurn) -> Optional[ToolCall]:
        """The first well-formed call of the turn, or None (kept for seed compatibility)."""
        calls = self.parse(chat).calls
        return calls[0] if calls else None

    def final_text(self, chat: ChatTurn) -> str:
        """The answer text of a turn, without reasoning or call markup."""
        return self.parse(chat).text

    def assistant_message(self, chat: ChatTurn, calls: "list[ToolCall] | ToolCall | None") -> dict:
        """The assistant message that records this turn in the conversation."""
        return {"role": "assistant", "content": chat.text or ""}

    def structured_message(self, chat: ChatTurn, calls: "list[ToolCall] | ToolCall | None") -> dict:
        """The assistant message for calls made natively (recorded as calls, not written in the text).

        The calls go in OpenAI-style `tool_calls` (arguments as dicts) for the family's chat
        template to write in its own format; used when a turn made by another model (an API
        run) is replayed on this family's model.
        """
        calls = as_call_list(calls)
        msg: dict = {"role": "assistant", "content": chat.text or ""}
        if calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.args}} for c in calls
            ]
        return msg

    def tool_message(self, call: ToolCall, text: str) -> dict:
        """The message carrying one tool's observation back to the model."""
        msg = {"role": "tool", "name": call.name, "content": text}
        if call.id is not None:
            msg["tool_call_id"] = call.id
        return msg

    def parse_error_message(self, errors: "list[str]") -> dict:
        """The message telling the model its call could not be read, so it can retry."""
        return self.feedback_message(parse_error_text(errors, self.call_format_hint()))

    def feedback_message(self, text: str) -> dict:
        """The message carrying parse-error feedback `text` (what `parse_error_message` sends).

        Separate so a stored conversation rebuilds the same message from the stored text.
        """
        return {"role": "user", "content": text}

    def final_nudge_message(self, messages: list, text: str) -> dict:
        """The message asking for a final answer once the tool budget is spent, to append to `messages`.

        A user turn by default; a family whose template forbids one at that point
        (Mistral's user/assistant alternation after tool results) overrides it.
        """
        return {"role": "user", "content": text}

    def call_format_hint(self) -> str:
        """One line describing the expected call format, used in parse-error feedback."""
        return "Call tools with the function-calling interface, arguments as a JSON object."

    def call_prefix(self, name: Optional[str] = None) -> Optional[str]:
        """The text a call in this format starts with, for forcing one by prefilling the reply.

        Without `name`, the opening of any call, up to where the model writes the tool's name;
        with it, the opening of a call of that tool, up to where the model writes the arguments.
        Each prefix ends on the key's colon: BPE tokenizers put the following space on the next
        token (`' "'`, `' {"'`), so a prefix ending on a space is one the model never saw.
        `parse` reads the prefix and the generated rest as one call.

        Returns:
            The prefix, or None where calls are not written in the text (native calls): none
            can be forced by prefilling.
        """
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def parse_error_text(errors: "list[str]", hint: str) -> str:
    """The feedback a model gets for calls that could not be read."""
    lines = "\n".join(f"- {e}" for e in errors)
    return (
        f"[tool call parse error] These tool calls could not be parsed and were not executed:\n{lines}\n"
        f"{hint} Then try again, or give your final answer as plain text."
    )
