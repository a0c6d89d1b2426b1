"""The backend registry and what a backend's `build` takes (`RuntimeConfig`, from `evalrx.config`): `BackendInfo`, `register_backend`.

Below the backend modules, which register themselves here; `evalrx.models.backends` re-exports it all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from evalrx.config import RuntimeConfig  # what a run says about how to run its model
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
