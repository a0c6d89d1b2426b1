"""Native calls returned by an OpenAI-compatible server (`ChatTurn.tool_calls`)."""

from __future__ import annotations

import itertools
import json
from typing import Any

from evalrx.core.tool import ChatTurn, ToolCall
from evalrx.models.codecs._base import ParsedTurn, ToolCallCodec, coerce_args, snippet, strip_think


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
                shown = snippet(json.dumps(wire, default=str) if isinstance(wire, dict) else str(wire))
                errors.append(f'{where}: "name" must be a non-empty string, got {name!r}: {shown}')
                continue
            raw_args = _field(fn, "arguments")
            args, error = coerce_args(raw_args, f"{where} ({name})")
            if args is None:
                errors.append(error)
                continue
            call_id = _field(wire, "id") or f"call_{next(self._ids)}"
            raw = raw_args if isinstance(raw_args, str) else None
            calls.append(ToolCall(name=name.strip(), args=args, id=str(call_id), raw=raw))
        return ParsedTurn(calls=calls, errors=errors, text=strip_think(chat.text or "").strip())

    def assistant_message(self, chat: ChatTurn, calls: "list[ToolCall] | ToolCall | None") -> dict:
        """Content plus the well-formed calls with their ids (arguments as dicts inside evalrx)."""
        return self.structured_message(chat, calls)
