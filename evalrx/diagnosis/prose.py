"""Reading an agent's prose against the JSON tool outputs it rests on.

A message that says "there are 12 available options" where the output it read lists 12 options of
which 10 are available counted the whole list and missed the qualifier: a misread. Field names come
from the output itself (a boolean field whose name the sentence uses), so the reading holds for
any tool that returns JSON, not for one domain.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator, Optional

from evalrx.core.effects import name_words

# A small whole number written as a count: not part of an id, an amount, a decimal or a percentage.
_COUNT = re.compile(r"(?<![\w#$.,/-])(\d{1,3})(?![\w%/-]|[.,]\d)")
_SENTENCE = re.compile(r"(?<=[.!?:])\s+|\n+")
_WORDS = re.compile(r"[a-z]+")


def parsed_json(text: Any) -> Any:
    """The JSON object or array an observation holds (None: it is plain text)."""
    text = str(text or "").strip()
    if not text or text[0] not in "{[":
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, (dict, list)) else None


def collections(data: Any) -> Iterator[list]:
    """Every collection of records in a JSON value: lists of objects, and objects whose values are all objects
    (records keyed by id), each as a list of its records."""
    if isinstance(data, list):
        if len(data) >= 2 and all(isinstance(x, dict) for x in data):
            yield data
        for x in data:
            yield from collections(x)
    elif isinstance(data, dict):
        values = list(data.values())
        if len(values) >= 2 and all(isinstance(v, dict) for v in values):
            yield values
        for v in values:
            yield from collections(v)


def _flags(records: list) -> "dict[str, int]":
    """Boolean fields every record has, and how many records have each one true."""
    common = set.intersection(*(set(k for k, v in r.items() if isinstance(v, bool)) for r in records))
    return {f: sum(1 for r in records if r[f]) for f in sorted(common)}


def count_misread(text: str, observations: list) -> Optional[dict]:
    """The first count in `text` that miscounted a collection whose boolean field (`available`, `active`, ...) the
    sentence names: a number between the records with that field true and all the records, but not the
    former (the whole list counted, or a miscount of it); None when none does."""
    for sentence in _SENTENCE.split(text):
        words = set(_WORDS.findall(sentence.lower()))
        counts = [int(m.group(1)) for m in _COUNT.finditer(sentence)]
        if not counts or not words:
            continue
        for data in observations:
            for records in collections(data):
                for field, true in _flags(records).items():
                    if not set(name_words(field)) & words:
                        continue
                    for n in counts:
                        if n != true and min(true, len(records)) <= n <= max(true, len(records)):
                            return {
                                "text": f"said {n} {field} where the output it read has {true} of {len(records)} "
                                f"with {field} true",
                                "evidence": {"stated": n, "field": field, "observed": true, "of": len(records)},
                            }
    return None


__all__ = ["collections", "count_misread", "parsed_json"]
