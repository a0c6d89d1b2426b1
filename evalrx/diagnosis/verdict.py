"""A judge's answer read: its JSON object (the whole text, a fenced block, or the first `{...}`) and its
fields, each checked for presence and type, with one line saying what is wrong.

Whether the verdict holds up against the trajectory (the kind, the step, the quote) is `judge.check_verdict`.
"""

from __future__ import annotations

import json
import re
from typing import Any


def inert_repr(value: Any, limit: int = 80) -> str:
    """A value as one inert line for an error: repr'd (quotes and escapes shown), cut."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def parse_verdict(text: str) -> dict:
    """The answer's JSON object: the whole text, a fenced block, or the first `{...}` in it.

    Raises:
        ValueError: one line saying what is wrong (not JSON, not an object, a field missing or mistyped).
    """
    return verdict_fields(json_object(text))


def json_object(text: str) -> dict:
    """The JSON object an answer holds: the whole text, a fenced block, or the first `{...}` in it.

    Raises:
        ValueError: one line: empty, not JSON, or not an object.
    """
    text = (text or "").strip()
    if not text:
        raise ValueError("the answer is empty")
    fenced = _FENCE.search(text)
    body = fenced.group(1).strip() if fenced else text
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        start = body.find("{")
        if start < 0:
            raise ValueError(f"the answer is not JSON ({exc.msg} at char {exc.pos})") from None
        try:
            value, _ = json.JSONDecoder().raw_decode(body, start)
        except json.JSONDecodeError as inner:
            raise ValueError(f"the answer is not JSON ({inner.msg} at char {inner.pos})") from None
    if not isinstance(value, dict):
        raise ValueError(f"the answer is a JSON {type(value).__name__}, not an object")
    return value


def verdict_fields(value: dict) -> dict:
    """A verdict's fields from an answer's JSON object, checked for presence and type.

    Raises:
        ValueError: one line naming the field missing or mistyped.
    """
    missing = [k for k in ("kind", "first_wrong_step", "evidence", "confidence") if k not in value]
    if missing:
        raise ValueError(f"the answer has no {', '.join(repr(k) for k in missing)}")
    kind, step, evidence = value["kind"], value["first_wrong_step"], value["evidence"]
    if kind is not None and not isinstance(kind, str):
        raise ValueError(f"'kind' must be a string or null, not {inert_repr(kind)}")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise ValueError(f"'first_wrong_step' must be a step number or null, not {inert_repr(step)}")
    if not isinstance(evidence, str):
        raise ValueError(f"'evidence' must be a quote (a string), not {inert_repr(evidence)}")
    explanation = value.get("explanation", "")
    if not isinstance(explanation, str):
        raise ValueError(f"'explanation' must be a string, not {inert_repr(explanation)}")
    confidence = value["confidence"]
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 <= confidence <= 1:
        raise ValueError(f"'confidence' must be a number from 0 to 1, not {inert_repr(confidence)}")
    out = {
        "kind": kind,
        "first_wrong_step": step,
        "evidence": evidence,
        "explanation": explanation,
        "confidence": float(confidence),
    }
    if "agent" in value:  # a team's answer names the agent (a single agent's never needs to)
        if value["agent"] is not None and not isinstance(value["agent"], str):
            raise ValueError(f"'agent' must be an agent's name or null, not {inert_repr(value['agent'])}")
        out["agent"] = value["agent"]
    return out
