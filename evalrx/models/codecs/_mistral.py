"""Mistral tool calls: `[TOOL_CALLS]` followed by the calls.

Quirks of the family, from Mistral's chat templates, mistral-common and vLLM's
`mistral` parser:

* Tokenizer v3 (Mistral-7B-Instruct-v0.3): `[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`,
  one JSON list. Newer tokenizers (v11+): `[TOOL_CALLS]name{json}` once per call, with
  `[ARGS]` (and sometimes `[CALL_ID]id`) between the name and the arguments.
* `[TOOL_CALLS]` is a special token: a backend decoding with `skip_special_tokens`
  drops it, so a turn that starts with a JSON list of call objects is read as calls too.
* Every call needs an id of exactly 9 alphanumeric characters: the template refuses
  any other id on assistant calls and on tool results (`tool_call_id`).
* The assistant turn must carry structured `tool_calls` (the template writes
  `[TOOL_CALLS] [...]` from them, ids included); tool results are `tool` messages
  rendered as `[TOOL_RESULTS] {"content": ..., "call_id": ...}[/TOOL_RESULTS]`.
* Tool schemas and the system prompt are placed by the template before / inside the
  last user turn.
* Outside tool traffic the roles must alternate user / assistant.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import string
import threading
from typing import Optional, TypeGuard

from evalrx.core.tool import ChatTurn, ToolCall
from evalrx.models.codecs._base import (
    ParsedTurn,
    ToolCallCodec,
    as_call_list,
    call_from_object,
    decode_json_at,
    join_answer,
    json_unclosed,
    snippet,
    strip_think,
)

TOOL_CALLS = "[TOOL_CALLS]"
ID_LENGTH = 9
_ALPHANUMERIC = string.ascii_letters + string.digits
_EOS = re.compile(r"</s>")
_BARE_LIST = re.compile(r'\s*\[\s*\{\s*"name"\s*:')


def is_mistral_id(value: object) -> TypeGuard[str]:
    """True for an id Mistral's template accepts: 9 ASCII letters or digits."""
    return isinstance(value, str) and len(value) == ID_LENGTH and all(c in _ALPHANUMERIC for c in value)


def _id_from(value: str) -> str:
    """A stable 9-character id for a foreign id (`call_1`), so a call and its result still match."""
    digest = int.from_bytes(hashlib.sha256(value.encode("utf-8")).digest()[:8], "big")
    chars = []
    for _ in range(ID_LENGTH):
        digest, r = divmod(digest, len(_ALPHANUMERIC))
        chars.append(_ALPHANUMERIC[r])
    return "".join(chars)


class MistralToolCodec(ToolCallCodec):
    """Mistral `[TOOL_CALLS]` calls (style `mistral`), v3 list form and v11+ `name{json}` form.

    Calls get the id the model wrote when it is valid, otherwise `call00001`,
    `call00002`, ... (9 alphanumeric characters, unique per codec instance).
    """

    name = "mistral"
    control_tokens = (TOOL_CALLS, "[ARGS]", "[CALL_ID]")

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        # Whether the turn being recorded sent tool results (see parse_error_message).
        self._turn = threading.local()

    def new_id(self) -> str:
        """The next generated call id."""
        return f"call{next(self._ids):05d}"[-ID_LENGTH:]

    def parse(self, chat: ChatTurn) -> ParsedTurn:
        """Read every call after `[TOOL_CALLS]`; malformed ones become errors with a snippet."""
        text = _EOS.sub("", strip_think(chat.text or ""))
        head, segments = _split(text)
        if not segments:
            return ParsedTurn(text=text.strip())
        calls: list = []
        errors: list = []
        tail: list = [head]
        for segment in segments:
            if segment.lstrip().startswith("["):
                tail.append(self._read_list(segment, calls, errors))
            else:
                tail.append(self._read_named(segment, calls, errors))
        return ParsedTurn(calls=calls, errors=errors, text=join_answer(tail))

    def _where(self, calls: list, errors: list) -> str:
        return f"call #{len(calls) + len(errors) + 1}"

    def _read_list(self, segment: str, calls: list, errors: list) -> str:
        """v3: `[{call}, {call}]`, read item by item so the calls before a broken one survive.

        Returns the text after the list (answer text).
        """
        i = segment.index("[") + 1
        while True:
            i = _skip_space(segment, i)
            if i < len(segment) and segment[i] == "]":
                return segment[i + 1 :]
            where = self._where(calls, errors)
            try:
                obj, end = decode_json_at(segment, i)
            except json.JSONDecodeError as exc:
                truncated = " (generation truncated?)" if json_unclosed(segment) else ""
                errors.append(
                    f"{where}: invalid JSON in the [TOOL_CALLS] list{truncated} ({exc.msg}): {snippet(segment[i:])}"
                )
                return ""
            source = segment[i:end]
            call, error = call_from_object(obj, where, source, raw=source, call_id=self._model_id(obj))
            if call is not None:
                calls.append(call)
            else:
                errors.append(error)
            i = _skip_space(segment, end)
            if i < len(segment) and segment[i] == ",":
                i += 1
                continue
            if i < len(segment) and segment[i] == "]":
                return segment[i + 1 :]
            errors.append(
                f"{self._where(calls, errors)}: the [TOOL_CALLS] list is not closed with ']' "
                f"(generation truncated?): {snippet(segment[i:] or segment)}"
            )
            return ""

    def _read_named(self, segment: str, calls: list, errors: list) -> str:
        """v11+: `name[ARGS]{json}` / `name[CALL_ID]id[ARGS]{json}` / `name{json}`; returns trailing text."""
        where = self._where(calls, errors)
        brace = segment.find("{")
        if brace < 0:
            errors.append(f"{where}: no JSON arguments after the tool name: {snippet(segment)}")
            return ""
        label = segment[:brace].replace("[ARGS]", "")
        label, _, model_id = label.partition("[CALL_ID]")
        name = label.strip()
        if not name or any(c.isspace() for c in name):
            errors.append(f"{where}: expected a tool name before the arguments: {snippet(segment)}")
            return ""
        try:
            args, end = decode_json_at(segment, brace)
        except json.JSONDecodeError as exc:
            errors.append(f"{where} ({name}): arguments are not valid JSON ({exc.msg}): {snippet(segment)}")
            return ""
        source = TOOL_CALLS + segment[:end]
        model_id = model_id.strip()
        call, error = call_from_object(
            {"name": name, "arguments": args},
            where,
            source,
            raw=source,
            call_id=model_id if is_mistral_id(model_id) else self.new_id(),
        )
        if call is not None:
            calls.append(call)
        else:
            errors.append(error)
        return segment[end:]

    def _model_id(self, obj: object) -> str:
        given = obj.get("id") if isinstance(obj, dict) else None
        return given if is_mistral_id(given) else self.new_id()

    def call_id(self, call: ToolCall) -> str:
        """The call's id as the template needs it; a call without one gets a new id, kept on the call."""
        if is_mistral_id(call.id):
            return call.id
        if call.id:
            return _id_from(str(call.id))
        call.id = self.new_id()
        return call.id

    def assistant_message(self, chat: ChatTurn, calls: "list[ToolCall] | ToolCall | None") -> dict:
        """Structured `tool_calls` with 9-character ids (what the template renders); raw text without calls."""
        calls = as_call_list(calls)
        self._turn.sent_results = bool(calls)
        if not calls:
            return {"role": "assistant", "content": chat.text or ""}
        head, _ = _split(_EOS.sub("", strip_think(chat.text or "")))
        return {
            "role": "assistant",
            "content": head.strip(),
            "tool_calls": [
                {"id": self.call_id(c), "type": "function", "function": {"name": c.name, "arguments": c.args}}
                for c in calls
            ],
        }

    def tool_message(self, call: ToolCall, text: str) -> dict:
        """A `tool` result answering the call's id."""
        return {"role": "tool", "name": call.name, "tool_call_id": self.call_id(call), "content": text}

    def structured_message(self, chat: ChatTurn, calls: "list[ToolCall] | ToolCall | None") -> dict:
        """The same as `assistant_message`: the template always writes the calls from `tool_calls`."""
        return self.assistant_message(chat, calls)

    def feedback_message(self, text: str) -> dict:
        """Feedback where the template allows it.

        After tool results a user turn would break the template's user/assistant
        alternation, so the feedback is one more tool result; after a turn without
        well-formed calls it is a user turn. The result's id is derived from the text,
        so a stored conversation rebuilds with the id the model saw.
        """
        if getattr(self._turn, "sent_results", False):
            self._turn.sent_results = False
            return {"role": "tool", "name": "parse_error", "tool_call_id": _id_from(text), "content": text}
        return {"role": "user", "content": text}

    def final_nudge_message(self, messages: list, text: str) -> dict:
        """A user turn where the template's user/assistant alternation allows one, else one more tool result.

        The template counts every message but tool results and assistant calls; a user
        turn must come at an even count (after tool results it usually does not).
        """
        counted = [m for m in messages if m.get("role") != "tool" and not m.get("tool_calls")]
        if counted and counted[0].get("role") == "system":
            counted = counted[1:]
        if len(counted) % 2 == 0:
            return {"role": "user", "content": text}
        return {"role": "tool", "name": "tool_budget", "tool_call_id": _id_from(text), "content": text}

    def call_format_hint(self) -> str:
        return 'Write the calls as [TOOL_CALLS] [{"name": <tool name>, "arguments": {<JSON object>}}, ...].'

    def call_prefix(self, name: Optional[str] = None) -> Optional[str]:
        """The list form: `[TOOL_CALLS] [{"name":`, or with `name` `[TOOL_CALLS] [{"name": "<name>", "arguments":`."""
        if name is None:
            return TOOL_CALLS + ' [{"name":'
        return TOOL_CALLS + f' [{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments":'


def _split(text: str) -> "tuple[str, list]":
    """The text before the calls and one segment per call group ([] when the turn has no calls)."""
    if TOOL_CALLS in text:
        head, *segments = text.split(TOOL_CALLS)
        return head, segments
    if _BARE_LIST.match(text):  # the marker was a special token, decoded away
        return "", [text]
    return text, []


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i
