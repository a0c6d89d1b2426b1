"""The backend registry and what a backend's `build` takes: `RuntimeConfig`, `BackendInfo`, `register_backend`.

Below the backend modules, which register themselves here; `evalrx.models.backends` re-exports it all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from evalrx.core.model import Model
from evalrx.specs import ModelSpec


@dataclass
class RuntimeConfig:
    """How to run a model: device and dtype locally, URL and key for APIs, decoding limits."""

    device: Optional[str] = None
    dtype: Optional[str] = None
    max_new_tokens: int = 256
    temperature: float = 0.0
    base_url: Optional[str] = None
    api_key: Optional[str] = field(default=None, repr=False)  # never printed
    timeout: float = 60.0  # api: seconds for one model call, every try, wait and byte included
    max_retries: int = 3  # api: tries after the first, while that budget lasts
    attn_implementation: Optional[str] = None
    trust_remote_code: bool = False
    # hf_local: keep the last conversation's KV cache and prefill only what a new prompt adds to it
    # (a conversation's next turn, a suite's shared system prompt). Greedy text can differ from a
    # cold prefill only where two tokens tie within float rounding; False prefills every prompt whole.
    prefix_cache: bool = True
    extra: dict = field(default_factory=dict)

    def resolved_base_url(self) -> Optional[str]:
        return self.base_url or os.environ.get("OPENAI_BASE_URL")

    def resolved_api_key(self) -> Optional[str]:
        return self.api_key or os.environ.get("OPENAI_API_KEY")


@dataclass(frozen=True)
class BackendInfo:
    """A registered backend: its name, what it provides for a spec, and how to build it."""

    name: str
    description: str
    provides: Callable[[ModelSpec], frozenset]
    build: Callable[[ModelSpec, RuntimeConfig, frozenset], Model]
    install_hint: str = ""


BACKENDS: dict[str, BackendInfo] = {}


def register_backend(info: BackendInfo) -> BackendInfo:
    BACKENDS[info.name] = info
    return info


def get_backend(name: str) -> BackendInfo:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"Unknown backend {name!r}. Known backends: {', '.join(sorted(BACKENDS))}.") from None


def backends_for(spec: ModelSpec) -> list[BackendInfo]:
    """Backends that can serve a spec (API-only specs are served by `api` alone)."""
    return [b for b in BACKENDS.values() if b.provides(spec)]
