"""Hermes-style calls: `<tool_call>{json}</tool_call>` blocks in the text (Qwen2.5, Qwen3 and
models prompted the same way)."""

from __future__ import annotations

import json
import re
from typing import Optional

from evalrx.core.tool import ChatTurn, ToolCall
from evalrx.models.codecs._base import (
    SNIPPET_CHARS,
    ParsedTurn,
    ToolCallCodec,
    call_from_object,
    decode_json_at,
    snippet,
    strip_think,
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
    control_tokens: "tuple[str, ...]" = ("<tool_call>", "</tool_call>")

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
            errors.append(f"call #{index}: unclosed <tool_call> (generation truncated?): {snippet(after)}")
            rest = before
        pieces.append(rest)
        answer = "".join(pieces)
        if "</tool_call>" in answer:  # a call written without its opening tag is still an attempted call
            before, after = answer.split("</tool_call>", 1)
            errors.append(f"stray </tool_call> without an opening <tool_call>: {snippet(before[-SNIPPET_CHARS:])}")
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
            obj, end = decode_json_at(payload, 0)
        except json.JSONDecodeError as exc:
            return None, f"{where}: invalid JSON ({exc.msg} at char {exc.pos}): {snippet(payload)}"
        if payload[end:].strip():
            return None, f"{where}: extra text after the JSON object: {snippet(payload)}"
        return call_from_object(obj, where, payload, raw=raw)

    def assistant_message(self, chat: ChatTurn, calls: "list[ToolCall] | ToolCall | None") -> dict:
        """The raw generated text verbatim, so re-rendering reproduces the model's own tokens."""
        return {"role": "assistant", "content": chat.text or ""}

    def feedback_message(self, text: str) -> dict:
        """Parse errors come back in the tool-response channel, where Hermes models expect feedback."""
        return {"role": "tool", "name": "parse_error", "content": text}

    def call_format_hint(self) -> str:
        return 'Write each call as <tool_call>\n{"name": <tool name>, "arguments": {<JSON object>}}\n</tool_call>.'

    def call_prefix(self, name: Optional[str] = None) -> Optional[str]:
        """`<tool_call>\\n{"name":`, or with `name` `<tool_call>\\n{"name": "<name>", "arguments":`."""
        if name is None:
            return '<tool_call>\n{"name":'
        return f'<tool_call>\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments":'


class Qwen3ToolCodec(QwenToolCodec):
    """Qwen3: Hermes calls after a `<think>...</think>` reasoning block.

    Parsing is Qwen2.5's (reasoning is never a call, never answer text). The
    assistant message splits the turn as Qwen3's template and reasoning parsers do:
    the reasoning goes to `reasoning_content`, the rest (calls included, verbatim) to
    `content`. The template shows the reasoning of turns after the last user query
    and drops it from earlier turns, so a multi-query conversation is not
    prefix-stable (replay must fall back to one pass per step).
    """

    name = "qwen3"
    control_tokens = ("<tool_call>", "</tool_call>", "<think>", "</think>")

    def assistant_message(self, chat: ChatTurn, calls: "list[ToolCall] | ToolCall | None") -> dict:
        """`content` after the last `</think>`, `reasoning_content` inside it (split as the template does)."""
        text = chat.text or ""
        if "</think>" not in text:
            return {"role": "assistant", "content": text}
        reasoning = text.split("</think>")[0].split("<think>")[-1].strip("\n")
        content = text.split("</think>")[-1].lstrip("\n")
        return {"role": "assistant", "content": content, "reasoning_content": reasoning}
