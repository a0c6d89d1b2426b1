"""PLACEHOLDER - being written (hf_local backend)."""
from __future__ import annotations
from evalrx.core.capability import Capability
from evalrx.models.backends import BackendInfo, register_backend
def _provides(spec):
    if spec.api_only:
        return frozenset()
    return frozenset(Capability) if spec.vision else frozenset(Capability) - {Capability.VISION}
def _build(spec, runtime, want):
    raise NotImplementedError
register_backend(BackendInfo("hf_local", "transformers in-process, full internals", _provides, _build))
