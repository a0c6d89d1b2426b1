"""Tables describing the spec registry and backends, as plain rows (testable without Streamlit)."""

from __future__ import annotations

from evalrx.core import Capability
from evalrx.models import BACKENDS
from evalrx.specs import REGISTRY


def spec_rows() -> list[dict]:
    """One row per registered spec with what each backend provides for it."""
    rows = []
    for key in sorted(REGISTRY):
        spec = REGISTRY[key]
        row = {
            "spec": key,
            "family": spec.family,
            "weights / served name": spec.hf_repo or spec.served_name,
            "tool calls": spec.tool_call_style,
            "vision": "yes" if spec.vision else "",
            "context": spec.context_length,
        }
        for name in sorted(BACKENDS):
            caps = BACKENDS[name].provides(spec)
            row[name] = ", ".join(c.value for c in Capability if c in caps) or "—"
        rows.append(row)
    return rows


def backend_rows() -> list[dict]:
    return [
        {"backend": b.name, "what it is": b.description, "install": b.install_hint or ""}
        for b in (BACKENDS[n] for n in sorted(BACKENDS))
    ]
