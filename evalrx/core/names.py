"""Names in prose: a capitalised word inside a sentence is a name; one that starts a sentence says nothing.

One rule for the diagnosis (the values a text states) and the white-box decision points (an answer's values).
No third-party imports.
"""

from __future__ import annotations

import re

__all__ = ["is_name"]

_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+|\n)\W*$")


def is_name(before: str, word: str) -> bool:
    """Whether `word`, written after `before` (its text up to the word), is a name: capitalised, not a
    sentence's first word."""
    return bool(word) and word[0].isupper() and not _SENTENCE_START.search(before)
