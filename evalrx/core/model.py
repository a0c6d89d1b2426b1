"""The protocol every backend's model handle satisfies."""

from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable

from evalrx.core.capability import Capability
from evalrx.core.tool import ChatTurn


@runtime_checkable
class Model(Protocol):
    """A model handle: a spec, the capabilities it provides, and a tool-aware chat.

    White-box handles (hf_local) also offer `forward(...)` returning logits,
    hidden states and, when asked, attentions.
    """

    spec: Any
    capabilities: frozenset[Capability]
    backend: str

    def chat(self, messages: list[dict], tools: Optional[list[dict]] = None, **kw: Any) -> ChatTurn: ...
