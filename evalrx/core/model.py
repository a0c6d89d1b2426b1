"""The protocols every backend's model handle satisfies (`Model`), a white-box one (`WhiteBoxModel`), and a
handle's short name (`model_id`)."""

from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

from evalrx.core.capability import Capability
from evalrx.core.tool import ChatTurn


class ContextOverflow(ValueError):
    """The conversation no longer fits the model's context window: it is not sent (a backend raises it)."""

    def __init__(self, tokens: int, context: int) -> None:
        super().__init__(f"the conversation is {tokens:,} tokens, over the model's context of {context:,}")
        self.tokens, self.context = tokens, context


@runtime_checkable
class Model(Protocol):
    """A model handle: a spec, the capabilities it provides, and a tool-aware chat.

    White-box handles (hf_local) also offer `forward(...)` returning logits,
    hidden states and, when asked, attentions.
    """

    # Read-only: a handle may hold each as an attribute or compute it (hf_local's capabilities).
    @property
    def spec(self) -> Any: ...
    @property
    def capabilities(self) -> frozenset[Capability]: ...
    @property
    def backend(self) -> str: ...

    # `chat(messages, tools=None, **options)`: each backend names the options it takes (max_new_tokens,
    # temperature, logprobs; hf_local's capture and prefill, api's response_format).
    @property
    def chat(self) -> Callable[..., ChatTurn]: ...


@runtime_checkable
class WhiteBoxModel(Model, Protocol):
    """A handle whose internals the analyzers read (hf_local, `evalrx.wrap`): the transformers module and
    its tokenizer (or processor) beside the chat. An analyzer takes any `Model` and checks its
    capabilities first (`CapabilityError` for an API handle); it reads these only on a white-box one.
    """

    model: Any
    tokenizer: Any


def model_id(model: Any) -> str:
    """A short human-readable name for a handle: its spec key and backend when it has them."""
    if model is None:
        return "no model"
    spec = getattr(model, "spec", None)
    key = getattr(spec, "key", None)
    backend = getattr(model, "backend", None)
    if key and backend:
        return f"{key} on {backend}"
    return key or type(model).__name__
