"""Tool-call codecs: the one model-specific piece of the agent loop.

A codec turns `Tool`s into the schemas passed to `chat`, reads the calls out of a
`ChatTurn`, and writes the assistant and tool messages that go back into the
conversation. Malformed calls are data, not exceptions: `parse` returns them as
short error strings next to the calls it could read.

Styles are looked up in `CODECS` (name -> factory); add your own with
`register_codec`.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from evalrx.core.tool import ChatTurn, Tool, ToolCall

__all__ = [
    "CODECS",
    "OpenAIToolCodec",
    "ParsedTurn",
    "QwenToolCodec",
    "ToolCallCodec",
    "codec_for",
    "register_codec",
    "strip_think",
]

_SNIPPET_CHARS = 120


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


def _snippet(text: str, limit: int = _SNIPPET_CHARS) -> str:
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


def _coerce_args(value: Any, where: str) -> "tuple[Optional[dict], Optional[str]]":
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
            return None, f"{where}: arguments are not valid JSON ({exc.msg} at char {exc.pos}): {_snippet(value)}"
        if isinstance(decoded, dict):
            return decoded, None
        return None, f"{where}: arguments must be a JSON object, got {type(decoded).__name__}: {_snippet(value)}"
    return None, f"{where}: arguments must be an object, got {type(value).__name__}"


class ToolCallCodec:
    """Base codec: OpenAI-style tool schemas, plain-text answers, no calls.

    Subclasses override `parse` and the message builders.
    """

    name = "base"

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

    def tool_message(self, call: ToolCall, text: str) -> dict:
        """The message carrying one tool's observation back to the model."""
        msg = {"role": "tool", "name": call.name, "content": text}
        if call.id is not None:
            msg["tool_call_id"] = call.id
        return msg

    def parse_error_message(self, errors: "list[str]") -> dict:
        """The message telling the model its call could not be read, so it can retry."""
        return {"role": "user", "content": _parse_error_text(errors, self.call_format_hint())}

    def call_format_hint(self) -> str:
        """One line describing the expected call format, used in parse-error feedback."""
        return "Call tools with the function-calling interface, arguments as a JSON object."

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _parse_error_text(errors: "list[str]", hint: str) -> str:
    lines = "\n".join(f"- {e}" for e in errors)
    return (
        f"[tool call parse error] These tool calls could not be parsed and were not executed:\n{lines}\n"
        f"{hint} Then try again, or give your final answer as plain text."
    )


_CALL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)


class QwenToolCodec(ToolCallCodec):
    """Hermes-style calls in the generated text (Qwen2.5 and models prompted the same way).

    Every `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` block is one
    call; `parameters` is accepted for `arguments`, and `arguments` may be a JSON
    string. Reasoning in `<think>` blocks is ignored, so a call written while
    thinking is not a call. Bare JSON without the markup is an answer, not a call.
    """

    name = "qwen"

    def parse(self, chat: ChatTurn) -> ParsedTurn:
        """Read every `<tool_call>` block; malformed ones become errors, never exceptions."""
        text = strip_think(chat.text or "")
        if "tool_call>" not in text:  # fast path for plain answers
            return ParsedTurn(text=text.strip())
        calls: list = []
        errors: list = []
        pieces: list = []
        pos = 0
        index = 0
        for m in _CALL_BLOCK.finditer(text):
            pieces.append(text[pos : m.start()])
            pos = m.end()
            index += 1
            call, error = self._parse_block(m.group(1), index, m.group(0))
            if call is not None:
                calls.append(call)
            else:
                errors.append(error)
        rest = text[pos:]
        if "<tool_call>" in rest:  # an opening tag never closed: the generation was cut off
            before, after = rest.split("<tool_call>", 1)
            index += 1
            errors.append(f"call #{index}: unclosed <tool_call> (generation truncated?): {_snippet(after)}")
            rest = before
        pieces.append(rest)
        answer = "".join(pieces)
        if "</tool_call>" in answer:  # a call written without its opening tag is still an attempted call
            before, after = answer.split("</tool_call>", 1)
            errors.append(f"stray </tool_call> without an opening <tool_call>: {_snippet(before[-_SNIPPET_CHARS:])}")
            answer = before + after.replace("</tool_call>", "")
        return ParsedTurn(calls=calls, errors=errors, text=answer.strip())

    @staticmethod
    def _parse_block(body: str, index: int, raw: str) -> "tuple[Optional[ToolCall], Optional[str]]":
        where = f"call #{index}"
        payload = body.strip()
        fenced = _FENCE.match(payload)
        if fenced:  # ```json fences inside the block: the intent is unambiguous
            payload = fenced.group(1).strip()
        if not payload:
            return None, f"{where}: empty <tool_call> block"
        try:
            obj, end = json.JSONDecoder(strict=False).raw_decode(payload)
        except json.JSONDecodeError as exc:
            return None, f"{where}: invalid JSON ({exc.msg} at char {exc.pos}): {_snippet(payload)}"
        if payload[end:].strip():
            return None, f"{where}: extra text after the JSON object: {_snippet(payload)}"
        if not isinstance(obj, dict):
            return None, f"{where}: expected a JSON object, got {type(obj).__name__}: {_snippet(payload)}"
        name = obj.get("name")
        if name is None:
            return None, f"{where}: missing \"name\": {_snippet(payload)}"
        if not isinstance(name, str) or not name.strip():
            return None, f"{where}: \"name\" must be a non-empty string, got {name!r}"
        raw_args = obj["arguments"] if "arguments" in obj else obj.get("parameters")
        args, error = _coerce_args(raw_args, where)
        if error is not None:
            return None, error
        return ToolCall(name=name.strip(), args=args, raw=raw), None

    def assistant_message(self, chat: ChatTurn, calls: "list[ToolCall] | ToolCall | None") -> dict:
        """The raw generated text verbatim, so re-rendering reproduces the model's own tokens."""
        return {"role": "assistant", "content": chat.text or ""}

    def parse_error_message(self, errors: "list[str]") -> dict:
        """Parse errors come back in the tool-response channel, where Hermes models expect feedback."""
        return {"role": "tool", "name": "parse_error", "content": _parse_error_text(errors, self.call_format_hint())}

    def call_format_hint(self) -> str:
        return 'Write each call as <tool_call>\n{"name": <tool name>, "arguments": {<JSON object>}}\n</tool_call>.'


def _field(obj: Any, key: str) -> Any:
    """Read `key` from a dict or an SDK object alike."""
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)


class OpenAIToolCodec(ToolCallCodec):
    """Native calls returned by an OpenAI-compatible server in `ChatTurn.tool_calls`.

    `function.arguments` is a JSON string on the wire (an object is accepted too);
    ids are kept, and `call_<n>` ids are generated for calls that lack one.
    """

    name = "openai"

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    def parse(self, chat: ChatTurn) -> ParsedTurn:
        """Read `chat.tool_calls`; a call with unreadable arguments becomes an error."""
        calls: list = []
        errors: list = []
        for index, wire in enumerate(chat.tool_calls or [], start=1):
            where = f"call #{index}"
            fn = _field(wire, "function") or {}
            name = _field(fn, "name")
            if not isinstance(name, str) or not name.strip():
                shown = _snippet(json.dumps(wire, default=str) if isinstance(wire, dict) else str(wire))
                errors.append(f"{where}: \"name\" must be a non-empty string, got {name!r}: {shown}")
                continue
            raw_args = _field(fn, "arguments")
            args, error = _coerce_args(raw_args, f"{where} ({name})")
            if error is not None:
                errors.append(error)
                continue
            call_id = _field(wire, "id") or f"call_{next(self._ids)}"
            raw = raw_args if isinstance(raw_args, str) else None
            calls.append(ToolCall(name=name.strip(), args=args, id=str(call_id), raw=raw))
        return ParsedTurn(calls=calls, errors=errors, text=strip_think(chat.text or "").strip())

    def assistant_message(self, chat: ChatTurn, calls: "list[ToolCall] | ToolCall | None") -> dict:
        """Content plus the well-formed calls with their ids (arguments as dicts inside evalrx)."""
        if isinstance(calls, ToolCall):
            calls = [calls]
        msg: dict = {"role": "assistant", "content": chat.text or ""}
        if calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.args}}
                for c in calls
            ]
        return msg


CODECS: "dict[str, Callable[[], ToolCallCodec]]" = {
    "hermes": QwenToolCodec,
    "qwen": QwenToolCodec,
    "openai": OpenAIToolCodec,
}


def register_codec(style: str, factory: "Callable[[], ToolCallCodec]", *, replace: bool = False) -> None:
    """Register a codec factory under a `ModelSpec.tool_call_style` name.

    Args:
        style: the style name specs refer to.
        factory: a zero-argument callable (usually the class) returning a codec.
        replace: allow overriding an existing style.

    Raises:
        ValueError: the style is taken and `replace` is False.
    """
    key = style.strip().lower()
    if key in CODECS and not replace:
        raise ValueError(f"Codec style {key!r} is already registered; pass replace=True to override it.")
    CODECS[key] = factory


def codec_for(handle: Any) -> ToolCallCodec:
    """Pick the codec for a model handle.

    API handles get native calls (`OpenAIToolCodec`); local backends follow
    `handle.spec.tool_call_style`.

    Args:
        handle: a model handle (`backend` and `spec` attributes).

    Returns:
        A fresh codec instance.

    Raises:
        ValueError: the spec's style has no registered codec.
    """
    if getattr(handle, "backend", None) == "api":
        return OpenAIToolCodec()
    spec = getattr(handle, "spec", None)
    style = str(getattr(spec, "tool_call_style", None) or "hermes").strip().lower()
    factory = CODECS.get(style)
    if factory is None:
        key = getattr(spec, "key", "?")
        raise ValueError(
            f"No tool-call codec for style {style!r} (spec {key!r}). Known styles: "
            f"{', '.join(sorted(CODECS))}. Register one with evalrx.models.toolcodec.register_codec, "
            "or pass codec=... to Agent."
        )
    return factory()
