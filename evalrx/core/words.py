"""Counts said in words, one way for the library, the CLI and the app."""

from __future__ import annotations

from typing import Optional


def counted(n: int, word: str, many: Optional[str] = None) -> str:
    """`n` and `word`, plural unless one ("1 case", "3 cases", "1 trajectory"; `many` for an irregular plural)."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"
