"""PLACEHOLDER - being written (api backend)."""
from __future__ import annotations
from evalrx.core.capability import Capability
from evalrx.models.backends import BackendInfo, register_backend
def _provides(spec):
    caps = {Capability.GENERATE, Capability.TOOL_CALLS, Capability.LOGPROBS}
    if spec.vision:
        caps.add(Capability.VISION)
    return frozenset(caps)
def _build(spec, runtime, want):
    raise NotImplementedError
class APIModel:  # noqa
    pass
register_backend(BackendInfo("api", "OpenAI-compatible HTTP server", _provides, _build))
