"""Pythonic tool calls: `[get_weather(city="Paris"), get_time()]` (Llama 3.2 / Llama 4 style).

The list is parsed with `ast` and only literal values are accepted (strings, numbers,
booleans, None, and lists / dicts of them); nothing is ever evaluated. Llama 4
wraps the list in `<|python_start|>...<|python_end|>`; Llama 3.2 may put
`<|python_tag|>` first; both are special tokens and may already be decoded away.
Tool results go back in the `ipython` role (the template wraps them as
`{"output": ...}`); tool schemas go into the system turn, placed by the template.
The assistant turn is kept as the raw generated text: the template's own rendering
of structured calls prints string values without quotes.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Optional

from evalrx.core.tool import ChatTurn, ToolCall
from evalrx.models.codecs._base import (
    ParsedTurn,
    join_answer,
    snippet,
    strip_think,
)
from evalrx.models.codecs._llama import Llama3ToolCodec

_MARKERS = re.compile(r"<\|(?:python_start|python_end|python_tag|eom_id|eot_id|eom|eot)\|>")
_LIST_START = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")
_JSON_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


class _NotLiteral(ValueError):
    """An argument value that is not a plain literal."""


def _literal(node: ast.AST) -> Any:
    """The value of a literal expression node; anything else raises `_NotLiteral` (never evaluated)."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (str, int, float, bool)) or node.value is None:
            return node.value
        raise _NotLiteral(f"{type(node.value).__name__} constant")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
        raise _NotLiteral("sign on a non-number")
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for key, value in zip(node.keys, node.values):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise _NotLiteral("dict key that is not a string")
            out[key.value] = _literal(value)
        return out
    if isinstance(node, ast.Name):
        if node.id in _JSON_NAMES:
            return _JSON_NAMES[node.id]
        raise _NotLiteral(f"variable {node.id!r}")
    raise _NotLiteral(type(node).__name__)


def _dotted_name(node: ast.AST) -> "str | None":
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _list_end(text: str, start: int) -> "int | None":
    """The index after the `]` closing the list opened at `start`, or None (unclosed)."""
    depth = 0
    quote = ""
    i = start
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
        elif c in "'\"":
            quote = text[i : i + 3] if text[i : i + 3] in ("'''", '"""') else c
            i += len(quote)
            continue
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


class PythonicToolCodec(Llama3ToolCodec):
    """Pythonic call lists (style `pythonic`): keyword arguments, literal values only.

    The messages are Llama's (the model's text verbatim, results in the `ipython` role); only the call syntax differs.
    """

    name = "pythonic"
    control_tokens = ("<|python_tag|>", "<|python_start|>", "<|python_end|>")

    def parse(self, chat: ChatTurn) -> ParsedTurn:
        """Read every `[f(a=1), ...]` list; a bad list or call becomes an error with a snippet."""
        text = _MARKERS.sub("", strip_think(chat.text or ""))
        if "(" not in text:  # fast path for plain answers
            return ParsedTurn(text=text.strip())
        calls: list = []
        errors: list = []
        pieces: list = []
        pos = 0
        while True:
            m = _LIST_START.search(text, pos)
            if m is None:
                break
            start = m.start()
            pieces.append(text[pos:start])
            end = _list_end(text, start)
            if end is None:
                where = f"call #{len(calls) + len(errors) + 1}"
                errors.append(f"{where}: unclosed call list (generation truncated?): {snippet(text[start:])}")
                pos = len(text)
                break
            self._read_list(text[start:end], calls, errors)
            pos = end
        pieces.append(text[pos:])
        return ParsedTurn(calls=calls, errors=errors, text=join_answer(pieces))

    @staticmethod
    def _read_list(source: str, calls: list, errors: list) -> None:
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as exc:
            where = f"call #{len(calls) + len(errors) + 1}"
            errors.append(f"{where}: not a valid Python call list ({exc.msg}): {snippet(source)}")
            return
        except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
            where = f"call #{len(calls) + len(errors) + 1}"
            errors.append(f"{where}: not a valid Python call list ({type(exc).__name__}): {snippet(source)}")
            return
        elements = tree.body.elts if isinstance(tree.body, ast.List) else [tree.body]
        for element in elements:
            where = f"call #{len(calls) + len(errors) + 1}"
            segment = ast.get_source_segment(source, element) or source
            if not isinstance(element, ast.Call):
                errors.append(f"{where}: expected a function call, got {type(element).__name__}: {snippet(segment)}")
                continue
            name = _dotted_name(element.func)
            if name is None:
                errors.append(f"{where}: the called thing is not a tool name: {snippet(segment)}")
                continue
            if element.args:
                errors.append(
                    f"{where} ({name}): positional arguments are not allowed, write name=value: {snippet(segment)}"
                )
                continue
            args: dict = {}
            problem = ""
            for keyword in element.keywords:
                if keyword.arg is None:
                    problem = "**-unpacking is not allowed"
                    break
                try:
                    args[keyword.arg] = _literal(keyword.value)
                except _NotLiteral as exc:
                    problem = f"argument {keyword.arg!r} is not a literal ({exc})"
                    break
            if problem:
                errors.append(f"{where} ({name}): {problem}: {snippet(segment)}")
                continue
            calls.append(ToolCall(name=name, args=args, raw=segment))

    def call_format_hint(self) -> str:
        return "Write the calls as a Python list: [tool_name(argument=value, ...), ...], with literal values only."

    def call_prefix(self, name: Optional[str] = None) -> Optional[str]:
        """`[`, or with `name` `[<name>(`."""
        return "[" if name is None else f"[{name}("
