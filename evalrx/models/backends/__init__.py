"""Backends: the runtimes that turn a spec into a model handle.

Each backend is registered by name with a class exposing
`provides(spec) -> frozenset[Capability]` (answered without loading anything) and
`build(spec, runtime, want) -> Model`. Heavy dependencies are imported inside `build`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from evalrx.config import RuntimeConfig  # what a run says about how to run its model
from evalrx.core.capability import Capability
from evalrx.core.model import Model
from evalrx.specs import ModelSpec


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


# Registration imports no heavy dependency: each module imports torch/openai/vllm lazily.
from evalrx.models.backends import api as _api  # noqa: E402,F401
from evalrx.models.backends import hf_local as _hf_local  # noqa: E402,F401
from evalrx.models.backends import vllm_offline as _vllm_offline  # noqa: E402,F401

__all__ = [
    "BACKENDS",
    "BackendInfo",
    "Capability",
    "RuntimeConfig",
    "backends_for",
    "get_backend",
    "register_backend",
]
