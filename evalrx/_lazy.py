"""A package attribute loaded from its module on first use (PEP 562), so importing the package stays light."""

from __future__ import annotations

import importlib
from typing import Any, Mapping


def lazy_attribute(package: str, exports: Mapping[str, str], name: str) -> Any:
    """`name` from the module `exports` maps it to; AttributeError, as Python says it, for any other name."""
    module = exports.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
