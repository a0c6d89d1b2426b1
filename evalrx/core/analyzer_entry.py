"""An analyzer entry, as a run config's `analyzers` list and `evalrx.analyzers.analyze` take it.

An entry is a registry name (`"logit_lens"`) or `{"name": ..., **kwargs}`; names are read
case- and space-insensitively. One parser for the runner's hooks and the shared-pass
analyzers, and for whatever else reads a run config's analyzers. No third-party imports.
"""

from __future__ import annotations

from typing import Any

__all__ = ["parse_analyzer_entry"]


def parse_analyzer_entry(entry: Any) -> "tuple[str, dict]":
    """`(name, kwargs)` of an analyzer entry: the name stripped and lower-cased, the other keys as kwargs.

    Raises:
        ValueError: neither a name nor an object with a string `name`.
    """
    if isinstance(entry, str):
        return entry.strip().lower(), {}
    if isinstance(entry, dict) and isinstance(entry.get("name"), str):
        return entry["name"].strip().lower(), {k: v for k, v in entry.items() if k != "name"}
    raise ValueError(f"an analyzer entry must be a name or {{'name': ..., ...}}, got {entry!r}")
