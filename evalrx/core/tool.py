"""Tools the agent can call, the calls it makes, what tools return, and one model turn."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

# Where a tool came from (`Tool.source`): the project's registry, the case's own documents, a Python
# function named by its import path, an MCP server, or a stateful environment's method (`evalrx.tools.environment`).
TOOL_SOURCES = ("builtin", "case", "python", "mcp", "environment")
# The names OpenAI's API and most chat templates accept for a function.
_WIRE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_NOT_WIRE = re.compile(r"[^A-Za-z0-9_-]")


def wire_name(name: str) -> str:
    """`name` as a valid OpenAI tool name (`math.factorial` -> `math_factorial`); valid names are unchanged."""
    if _WIRE_NAME.match(name):
        return name
    return (_NOT_WIRE.sub("_", name) or "tool")[:64]


@dataclass
class Tool:
    """A callable tool described by an OpenAI-style JSON schema for its parameters.

    `name` is the tool's own name (what grades, references and the store see); the model is shown
    `wire_name(name)` where that differs. `source` is one of `TOOL_SOURCES`, `origin` says which
    one (the Python path, the MCP server's name), `annotations` keeps a server's hints
    (`read_only_hint`, `destructive_hint`, ...). A tool without `fn` can be offered but not run.
    """

    name: str
    description: str
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}})
    fn: Optional[Callable[..., Any]] = None
    source: str = "builtin"
    origin: str = ""
    annotations: dict = field(default_factory=dict)

    @property
    def wire_name(self) -> str:
        return wire_name(self.name)

    def to_openai(self) -> dict:
        """The OpenAI / chat-template tool schema (`{"type": "function", "function": {...}}`), as the model sees it."""
        return {
            "type": "function",
            "function": {
                "name": self.wire_name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def describe(self) -> dict:
        """What a trajectory keeps of a tool it was offered (JSON: no implementation)."""
        out: dict = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "source": self.source,
        }
        if self.origin:
            out["origin"] = self.origin
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out

    @classmethod
    def from_document(cls, doc: dict, *, source: str = "case", origin: str = "") -> "Tool":
        """A tool without implementation from a function document (`{"name", "description", "parameters"}`,
        or OpenAI's `{"type": "function", "function": {...}}`).

        Raises:
            ValueError: a document without a name, or whose parameters are not an object.
        """
        if isinstance(doc, dict) and isinstance(doc.get("function"), dict):
            doc = doc["function"]
        if not isinstance(doc, dict) or not isinstance(doc.get("name"), str) or not doc["name"].strip():
            raise ValueError('a tool document needs a "name" (a non-empty string)')
        params = doc.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise ValueError(f"tool {doc['name']!r}: parameters must be a JSON Schema object")
        if not isinstance(doc.get("annotations") or {}, dict):
            raise ValueError(f"tool {doc['name']!r}: annotations must be an object of hints")
        return cls(
            name=doc["name"],
            description=str(doc.get("description") or ""),
            parameters=params,
            source=str(doc.get("source") or source),
            origin=str(doc.get("origin") or origin),
            annotations=dict(doc.get("annotations") or {}),
        )


@dataclass
class ToolCall:
    """One decoded tool call. `raw` keeps the text it was decoded from, when there was one; `extra` keeps
    any other key an imported or stored call carries, so `to_dict(from_dict(d)) == d`, key order included."""

    name: str
    args: dict = field(default_factory=dict)
    id: Optional[str] = None
    raw: Optional[str] = None
    extra: dict = field(default_factory=dict)
    # The keys of the dict the call was read from, in order: written back as they came (JSON is stored as text).
    key_order: tuple = field(default=(), repr=False, compare=False)

    def to_dict(self) -> dict:
        d: dict = {"name": self.name, "args": self.args}
        if self.id is not None:
            d["id"] = self.id
        if self.raw is not None:
            d["raw"] = self.raw
        d.update(self.extra)
        if self.key_order:  # the keys the call came with, in their order
            if "name" not in self.key_order and not self.name:
                del d["name"]
            if "args" not in self.key_order and not self.args:
                del d["args"]
            first = {k: d[k] for k in self.key_order if k in d}
            d = {**first, **{k: v for k, v in d.items() if k not in first}}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ToolCall":
        """A call from its dict (`to_dict`'s shape). Other keys, and a known key whose value does not fit its
        field (an id of None, arguments that are not an object), go to `extra` as written.

        Raises:
            ValueError: `d` is not an object.
        """
        if not isinstance(d, dict):
            raise ValueError(f"a tool call must be an object, not {type(d).__name__}")
        fits = {
            "name": isinstance(d.get("name"), str),
            "args": isinstance(d.get("args"), dict),
            "id": d.get("id") is not None,
            "raw": isinstance(d.get("raw"), str),
        }
        return cls(
            name=d["name"] if fits["name"] else "",
            args=dict(d["args"]) if fits["args"] else {},
            id=d["id"] if fits["id"] else None,
            raw=d["raw"] if fits["raw"] else None,
            extra={k: v for k, v in d.items() if not fits.get(k, False)},
            key_order=tuple(d),
        )

    def signature(self) -> tuple[str, str]:
        """Name plus canonical JSON of the arguments: equal for identical calls."""
        return self.name, json.dumps(self.args or {}, sort_keys=True, default=str)


@dataclass
class ToolResult:
    """What a tool returns: text for the model, images to show it, and host-only meta."""

    text: str
    images: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return self.text


@dataclass
class ChatTurn:
    """One model reply.

    `text` is the raw generated text (for hf_local it still holds `<tool_call>` blocks);
    `tool_calls` are native calls from an API server in OpenAI wire format;
    `usage` has `prompt_tokens` / `completion_tokens`; `logprobs` is a list of
    `{"token": str, "logprob": float}` when the backend returned them; `capture` is what a
    local backend kept of its own forward passes when asked (`chat(..., capture=...)`, hf_local's
    `GenerationCapture`), for the white-box analyzers; it is never stored with a trajectory.
    """

    text: str = ""
    tool_calls: list = field(default_factory=list)
    finish_reason: Optional[str] = None
    usage: dict = field(default_factory=dict)
    logprobs: Optional[list] = None
    capture: Any = field(default=None, repr=False, compare=False)


def normalize_call(call: Any) -> dict:
    """A call as `{"name", "args", "id"}` from evalrx's `ToolCall.to_dict` or OpenAI wire format.

    OpenAI-format `function.arguments` may be a JSON string; unreadable arguments
    become `{}` (the call is still scored by name).
    """
    if not isinstance(call, dict):
        call = {"name": getattr(call, "name", ""), "args": getattr(call, "args", {}), "id": getattr(call, "id", None)}
    if "function" in call:
        fn = call.get("function") or {}
        args: Any = fn.get("arguments")
        name = fn.get("name") or ""
    else:
        args = call.get("args", call.get("arguments"))
        name = call.get("name") or ""
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            args = {}
    if not isinstance(args, dict):
        args = {}
    return {"name": str(name), "args": args, "id": call.get("id")}
