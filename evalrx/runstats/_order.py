"""Stable ordering for ids that may mix types."""

from __future__ import annotations

from collections.abc import Iterable


def sorted_ids(ids: Iterable) -> list:
    """Ids in natural order, falling back to (type name, text) when the types do not compare."""
    ids = list(ids)
    try:
        return sorted(ids)
    except TypeError:
        return sorted(ids, key=lambda x: (type(x).__name__, str(x)))
