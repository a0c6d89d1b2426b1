"""Text put on one line, one way for error messages, notes and logs."""

from __future__ import annotations

from typing import Any, Optional


def one_line(text: Any, limit: Optional[int] = None) -> str:
    """`text` on one line: each line's runs of whitespace one space, blank lines dropped, lines joined by "; ",
    characters that do not print "?"; cut at `limit` characters (ending "...") when given."""
    parts = (" ".join(line.split()) for line in str(text).splitlines())
    flat = "".join(ch if ch.isprintable() else "?" for ch in "; ".join(p for p in parts if p))
    return flat if limit is None or len(flat) <= limit else flat[: max(0, limit - 3)] + "..."


def first_line(text: Any) -> str:
    """The first line of `text` that is not blank, stripped: a driver's or parser's message may run over many
    lines and the first says what went wrong. "" when there is none, or an error's type name for an error."""
    found = next((line.strip() for line in str(text).splitlines() if line.strip()), "")
    return found or (type(text).__name__ if isinstance(text, BaseException) else "")


__all__ = ["first_line", "one_line"]
