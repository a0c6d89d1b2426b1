"""`compose(spec, backend)`: the one way a model handle is built."""

from __future__ import annotations

from typing import Any, Iterable, Optional, TypeVar

from evalrx.core.capability import Capability, CapabilityError
from evalrx.core.model import Model
from evalrx.models.toolcodec import missing_codec
from evalrx.specs import ModelSpec

H = TypeVar("H", bound=Model)


def negotiate(handle: H, want: Iterable[Capability], *, model_id: str, where: str) -> H:
    """Check a live handle provides `want`; return it unchanged or raise CapabilityError."""
    missing = frozenset(want) - frozenset(getattr(handle, "capabilities", frozenset()))
    if missing:
        raise CapabilityError(analyzer=where, model=model_id, missing=missing)
    return handle


def compose(spec: ModelSpec, backend: str, runtime: Optional[Any] = None, want: Iterable[Capability] = ()) -> Model:
    """Build a handle for `spec` on `backend`, negotiating `want` before any weight or network access."""
    from evalrx.models.backends import RuntimeConfig, get_backend

    info = get_backend(backend)
    want = frozenset(Capability.parse(w) for w in want)
    provided = info.provides(spec)
    if not provided:
        raise ValueError(
            f"Backend {backend!r} cannot serve {spec.key!r}"
            + (" (an API-only model: use backend 'api')." if spec.api_only else ".")
        )
    no_codec = missing_codec(spec, backend)
    if no_codec:  # the backend could chat with tools, but nothing would read the calls
        provided = provided - {Capability.TOOL_CALLS}
    missing = want - provided
    if missing:
        raise CapabilityError(
            analyzer=f"load({spec.key!r}, backend={backend!r})",
            model=f"{spec.key} on {backend}",
            missing=missing,
            hint=no_codec
            if no_codec and Capability.TOOL_CALLS in missing
            else "Choose a backend that provides them (hf_local gives model internals).",
        )
    handle = info.build(spec, runtime or RuntimeConfig(), want)
    return negotiate(handle, want, model_id=f"{spec.key} on {backend}", where="compose")
