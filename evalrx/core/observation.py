"""A tool's observation as text: the one reading every part of evalrx uses.

A step's `observation` is what the agent loop recorded of a tool's return: a string, a
`ToolResult`'s record (`{"text", "n_images"[, "meta"]}`), None, or any JSON value a tool or
an imported log gave (a dict, a list, a number; a list may be chat content blocks).
"""

from __future__ import annotations

import json
from typing import Any

from evalrx.core.content import content_text, is_image_block
from evalrx.core.tool import ToolResult

__all__ = ["PICTURE_MARKER", "canonical_json", "observation_text", "picture_count"]

# What a picture stands as in an observation's text (importers store the same words in their texts).
PICTURE_MARKER = "[image]"


def canonical_json(value: Any) -> str:
    """The one JSON text of a value: sorted keys, compact, non-ASCII kept, unknown objects as their str."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))


def _is_content(value: Any) -> bool:
    """Whether a list is chat content blocks (every item a text or picture block), not a JSON array."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(b, dict) and (b.get("type") == "text" or is_image_block(b)) for b in value)
    )


def picture_count(observation: Any) -> int:
    """How many pictures a tool showed the model with this observation: a `ToolResult`'s, its record's
    `n_images`; 0 for anything else (the loop shows no other value's pictures)."""
    if isinstance(observation, ToolResult):
        return len(observation.images)
    if isinstance(observation, dict) and "n_images" in observation:
        try:
            return int(observation.get("n_images") or 0)
        except (TypeError, ValueError):
            return 0
    return 0


def observation_text(observation: Any, *, shown: bool = False) -> str:
    """An observation as text.

    Read (the default), as the store, the exports, the judge, the rules and the app show it:
    None is ""; a string is itself; a `ToolResult` its text; a dict whose `text` is a string (a `ToolResult`'s record,
    an imported `{"text": ...}`) is that text; content blocks are their texts joined by a
    newline, each picture as `PICTURE_MARKER` (never its bytes); any other value is its
    `canonical_json`.

    `shown`: the text the agent loop put in the model's tool message, which a teacher-forced
    pass must reproduce byte for byte: a `ToolResult` or its record is its text, anything
    else `str()` of it as the loop wrote it (a dict as Python's repr, None as "None").
    """
    if shown:
        if isinstance(observation, dict) and "text" in observation and "n_images" in observation:
            return str(observation["text"])  # the record the loop keeps of a `ToolResult`
        return str(observation)
    if observation is None:
        return ""
    if isinstance(observation, str):
        return observation
    if isinstance(observation, ToolResult):
        return observation.text
    if isinstance(observation, dict) and isinstance(observation.get("text"), str):
        return str(observation["text"])
    if _is_content(observation):
        return content_text(observation, sep="\n", image=PICTURE_MARKER)
    return canonical_json(observation)
