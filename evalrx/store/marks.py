"""People's marks of what a tool does: `read` (a look-up) or `write` (it changes state), by tool name.

The diagnosis matches reference calls by what changes state (`evalrx.core.effects`); a mark here is the
user's word, read after the tool's own annotations and before the verb of its name.
"""

from __future__ import annotations

from typing import Optional

from sqlalchemy import delete, select

from evalrx.core.effects import READ, WRITE
from evalrx.store import schema as t
from evalrx.store.engine import Store, resolve


def mark_tool(name: str, effect: Optional[str], *, annotator: str = "", store: "Store | str | None" = None) -> None:
    """Mark tool `name` as `read` or `write`; None removes the mark. Raises ValueError naming a bad value."""
    name = str(name or "").strip()
    if not name or len(name) > 300:
        raise ValueError("a tool mark needs the tool's name (at most 300 characters)")
    if effect not in (READ, WRITE, None):
        raise ValueError(f"a tool is marked {READ!r} or {WRITE!r} (or unmarked), not {effect!r}")
    with resolve(store).write() as s:
        s.execute(delete(t.ToolMark).where(t.ToolMark.name == name))
        if effect is not None:
            s.add(t.ToolMark(name=name, effect=effect, annotator=str(annotator or "")[:100]))


def tool_marks(*, store: "Store | str | None" = None) -> "dict[str, str]":
    """Every marked tool: name -> `read` / `write`."""
    with resolve(store).read() as s:
        return {r.name: r.effect for r in s.execute(select(t.ToolMark)).scalars()}


__all__ = ["mark_tool", "tool_marks"]
