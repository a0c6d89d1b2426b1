"""Llama 3.1 / 3.2 JSON tool calls: `{"name": ..., "parameters": {...}}` in the text.

Quirks of the family, from Meta's chat templates and vLLM's `llama3_json` parser:

* A call is a bare JSON object; `parameters` is the trained key, `arguments` is accepted.
* With built-in tools (an `ipython` environment) calls follow `<|python_tag|>` and end
  with `<|eom_id|>`. Those are special tokens, so a backend that decodes with
  `skip_special_tokens` drops them: the codec works with or without them.
* Several calls are separated by `;`. Text may surround them.
* Tool results go back in the `ipython` role (the template also accepts `tool`, and
  JSON-encodes the content); tool schemas go into the first user turn (3.1) or the
  system turn (3.2 with `tools_in_user_message=False`), both placed by the template.
* The template renders a structured `tool_calls` message for one call only, so the
  assistant turn is kept as the raw generated text, which also keeps the model's own
  tokens for teacher-forced replay.
"""

from __future__ import annotations

import json
import re
from typing import Optional

from evalrx.core.tool import ChatTurn, ToolCall
from evalrx.models.codecs._base import (
    ParsedTurn,
    ToolCallCodec,
    call_from_object,
    decode_json_at,
    join_answer,
    json_unclosed,
    snippet,
    strip_think,
)

PYTHON_TAG = "<|python_tag|>"
_END_TOKENS = re.compile(r"<\|(?:eom_id|eot_id|end_of_text)\|>")
_CALL_START = re.compile(r'\{\s*"name"\s*:')
# Where the next call can start after a malformed one: after a separator, at top level.
_NEXT_CALL = re.compile(r'[;\n]\s*(?=\{\s*"name"\s*:)')
_SEPARATORS = re.compile(r"[\s;]*")
_EMPTY_FENCE = re.compile(r"```[a-zA-Z]*\s*```")
_CALL_KEYS = frozenset({"name", "type"})


def _is_call_object(obj: object) -> bool:
    """A decoded object that is a call attempt, not JSON data in an answer."""
    if not isinstance(obj, dict) or "name" not in obj:
        return False
    return "parameters" in obj or "arguments" in obj or set(obj) <= _CALL_KEYS


class Llama3ToolCodec(ToolCallCodec):
    """Llama 3.1 / 3.2 JSON calls (style `llama3`).

    Without `<|python_tag|>`, only JSON objects shaped like a call count
    (`{"name": ..., "parameters"|"arguments": ...}`, or `{"name": ...}` alone), so an
    answer that quotes JSON data stays an answer; an object that starts like a call
    (`{"name":`) but does not parse is a malformed call. After `<|python_tag|>`
    everything is a call attempt.
    """

    name = "llama3"
    control_tokens: "tuple[str, ...]" = (PYTHON_TAG,)

    def parse(self, chat: ChatTurn) -> ParsedTurn:
        """Read every call; malformed ones become errors with a snippet, never exceptions."""
        text = _END_TOKENS.sub("", strip_think(chat.text or ""))
        if "{" not in text and PYTHON_TAG not in text:  # fast path for plain answers
            return ParsedTurn(text=text.strip())
        before, tag, after = text.partition(PYTHON_TAG)
        calls: list = []
        errors: list = []
        if tag:
            pieces = self._scan(before, calls, errors, strict=False)
            self._scan(after, calls, errors, strict=True)
        else:
            pieces = self._scan(text, calls, errors, strict=False)
        answer = _EMPTY_FENCE.sub("", join_answer(pieces)).strip()
        return ParsedTurn(calls=calls, errors=errors, text=answer)

    @staticmethod
    def _scan(text: str, calls: list, errors: list, *, strict: bool) -> list:
        """Collect the calls in `text` into `calls`/`errors`; return the answer pieces around them.

        `strict`: everything but separators is a call attempt (the text after `<|python_tag|>`).
        """
        pieces: list = []
        pos = i = 0
        while True:
            if strict:
                sep = _SEPARATORS.match(text, i)  # `*`: it always matches
                i = sep.end() if sep else i
                if i >= len(text):
                    break
                if text[i] != "{":  # built-in tool syntax or code: not a JSON call
                    stop = text.find(";", i)
                    stop = len(text) if stop < 0 else stop
                    errors.append(
                        f"call #{len(calls) + len(errors) + 1}: expected a JSON call after <|python_tag|>: "
                        f"{snippet(text[i:stop])}"
                    )
                    pos = i = stop
                    continue
                j = i
            else:
                j = text.find("{", i)
                if j < 0:
                    break
            where = f"call #{len(calls) + len(errors) + 1}"
            try:
                obj, end = decode_json_at(text, j)
            except json.JSONDecodeError as exc:
                if not strict and not _CALL_START.match(text, j):
                    i = j + 1  # a brace in prose
                    continue
                nxt = _NEXT_CALL.search(text, j + 1)
                stop = nxt.start() if nxt else len(text)
                truncated = " (generation truncated?)" if json_unclosed(text[j:stop]) else ""
                errors.append(
                    f"{where}: invalid JSON{truncated} ({exc.msg}; char {exc.pos - j}): {snippet(text[j:stop])}"
                )
                pieces.append(text[pos:j])
                pos = i = stop
                continue
            if not strict and not _is_call_object(obj):
                i = end  # JSON data in the answer, not a call
                continue
            source = text[j:end]
            call, error = call_from_object(obj, where, source, raw=source)
            if call is not None:
                calls.append(call)
            else:
                errors.append(error)
            pieces.append(text[pos:j])
            pos = i = end
        pieces.append(text[pos:])
        return pieces

    def assistant_message(self, chat: ChatTurn, calls: "list[ToolCall] | ToolCall | None") -> dict:
        """The raw generated text verbatim (the template renders at most one structured call)."""
        return {"role": "assistant", "content": chat.text or ""}

    def tool_message(self, call: ToolCall, text: str) -> dict:
        """A result in the `ipython` role, where Llama 3 reads tool output."""
        return {"role": "ipython", "name": call.name, "content": text}

    def feedback_message(self, text: str) -> dict:
        """Parse errors come back where tool output does (`ipython`)."""
        return {"role": "ipython", "name": "parse_error", "content": text}

    def call_format_hint(self) -> str:
        return (
            'Write each call as {"name": <tool name>, "parameters": {<JSON object>}}, several calls separated by ";".'
        )

    def call_prefix(self, name: Optional[str] = None) -> Optional[str]:
        """`{"name":`, or with `name` `{"name": "<name>", "parameters":`."""
        if name is None:
            return '{"name":'
        return f'{{"name": {json.dumps(name, ensure_ascii=False)}, "parameters":'
