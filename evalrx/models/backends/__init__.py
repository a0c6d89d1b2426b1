"""Backends: the runtimes that turn a spec into a model handle.

Each backend is registered by name with a class exposing
`provides(spec) -> frozenset[Capability]` (answered without loading anything) and
`build(spec, runtime, want) -> Model`. Heavy dependencies are imported inside `build`.
"""

from __future__ import annotations

from evalrx.core.capability import Capability

# Registration imports no heavy dependency: each module imports torch/openai/vllm lazily.
from evalrx.models.backends import api as _api  # noqa: F401
from evalrx.models.backends import hf_local as _hf_local  # noqa: F401
from evalrx.models.backends import vllm_offline as _vllm_offline  # noqa: F401
from evalrx.models.backends.registry import (
    BACKENDS,
    BackendInfo,
    RuntimeConfig,
    backends_for,
    get_backend,
    register_backend,
)

__all__ = [
    "BACKENDS",
    "BackendInfo",
    "Capability",
    "RuntimeConfig",
    "backends_for",
    "get_backend",
    "register_backend",
]
