"""An analyzer entry, as a run config's `analyzers` list and `evalrx.analyzers.analyze` take it.

An entry is a registry name (`"logit_lens"`) or `{"name": ..., **kwargs}`; names are read
case- and space-insensitively. `AnalyzerEntry` is the parsed form a `RunConfig` holds; one parser
for the runner's hooks and the shared-pass analyzers, and for whatever else reads a run config's
analyzers. No third-party imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["AnalyzerEntry", "parse_analyzer_entry"]


@dataclass
class AnalyzerEntry:
    """One analyzer of a run: its registry name (stripped, lower-cased) and its settings."""

    name: str
    kwargs: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, entry: Any) -> "AnalyzerEntry":
        """An entry from a name, `{"name": ..., **kwargs}` or an `AnalyzerEntry`.

        Raises:
            ValueError: neither a name nor an object with a string `name`.
        """
        if isinstance(entry, AnalyzerEntry):
            return entry
        if isinstance(entry, str):
            return cls(entry.strip().lower())
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            return cls(entry["name"].strip().lower(), {k: v for k, v in entry.items() if k != "name"})
        raise ValueError(f"an analyzer entry must be a name or {{'name': ..., ...}}, got {entry!r}")

    def to_dict(self) -> "str | dict":
        """The entry as a run config stores it: the name alone when it has no settings."""
        return {"name": self.name, **self.kwargs} if self.kwargs else self.name


def parse_analyzer_entry(entry: Any) -> "tuple[str, dict]":
    """`(name, kwargs)` of an analyzer entry: the name stripped and lower-cased, the other keys as kwargs.

    Raises:
        ValueError: neither a name nor an object with a string `name`.
    """
    parsed = AnalyzerEntry.parse(entry)
    return parsed.name, dict(parsed.kwargs)
