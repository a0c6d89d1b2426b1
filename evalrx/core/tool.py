"""Tools the agent can call, the calls it makes, what tools return, and one model turn."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional


@dataclass
class Tool:
    """A callable tool described by an OpenAI-style JSON schema for its parameters."""

    name: str
    description: str
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}})
    fn: Optional[Callable[..., Any]] = None

    def to_openai(self) -> dict:
        """The OpenAI / chat-template tool schema (`{"type": "function", "function": {...}}`)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass
class ToolCall:
    """One decoded tool call. `raw` keeps the text it was decoded from, when there was one."""

    name: str
    args: dict = field(default_factory=dict)
    id: Optional[str] = None
    raw: Optional[str] = None

    def to_dict(self) -> dict:
        d: dict = {"name": self.name, "args": self.args}
        if self.id is not None:
            d["id"] = self.id
        if self.raw is not None:
            d["raw"] = self.raw
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ToolCall":
        return cls(name=d["name"], args=dict(d.get("args") or {}), id=d.get("id"), raw=d.get("raw"))

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
