"""A tool step's observation (`Observation`) and its text: the one reading every part of evalrx uses.

What a step records of a tool's return, and stores, is its `Observation.value`: a string, a
`ToolResult`'s record (`{"text", "n_images"[, "meta"]}`), or any JSON value a tool or
an imported log gave (a dict, a list, a number; a list may be chat content blocks).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from evalrx.core.content import content_text, is_picture_block
from evalrx.core.tool import ToolResult

__all__ = ["PICTURE_MARKER", "Observation", "canonical_json", "observation_text", "picture_count"]

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
        and all(isinstance(b, dict) and (b.get("type") == "text" or is_picture_block(b)) for b in value)
    )


@dataclass
class Observation:
    """What a tool step recorded of a tool's return. `value` is the recorded (and stored) form, see the module
    doc; `text` is how it reads, `pictures` how many pictures it showed the model, `structured` the structured
    value the tool returned (a `ToolResult`'s meta, a JSON value; None for text)."""

    value: Any = None

    @classmethod
    def of(cls, returned: Any) -> "Observation":
        """The observation of what a tool returned in the agent loop: a `ToolResult` as its record, a string as
        plain text, any other JSON value as itself, anything else as its str."""
        if isinstance(returned, Observation):
            return returned
        if isinstance(returned, ToolResult):
            record: dict = {"text": returned.text, "n_images": len(returned.images)}
            if returned.meta:
                record["meta"] = returned.meta
            return cls(record)
        if isinstance(returned, str):
            return cls(str(returned))  # drop a str subclass (ToolError) so records compare equal after a round trip
        if returned is None or isinstance(returned, (bool, int, float, dict, list)):
            return cls(returned)
        return cls(str(returned))

    @property
    def text(self) -> str:
        return observation_text(self.value)

    def __str__(self) -> str:  # reads as its text, as a ToolResult does
        return self.text

    @property
    def pictures(self) -> int:
        return picture_count(self.value)

    @property
    def structured(self) -> Any:
        if _is_record(self.value):
            return self.value.get("meta")
        return None if isinstance(self.value, str) else self.value


def _is_record(value: Any) -> bool:
    """Whether a value is the record the loop keeps of a `ToolResult`."""
    return isinstance(value, dict) and "text" in value and "n_images" in value


def picture_count(observation: Any) -> int:
    """How many pictures a tool showed the model with this observation: a `ToolResult`'s, its record's
    `n_images`; 0 for anything else (the loop shows no other value's pictures)."""
    if isinstance(observation, Observation):
        observation = observation.value
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

    `observation` is an `Observation` or its value.
    """
    if isinstance(observation, Observation):
        observation = observation.value
    if shown:
        if _is_record(observation):
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
