"""`lookup`: deterministic keyword search over the bundled fictional-world knowledge base."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from evalrx.core.tool import Tool

DEFAULT_KB_PATH = Path(__file__).resolve().parent.parent / "demo" / "kb.json"

SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "e.g. population of Arland"}},
    "required": ["query"],
}

# Words that point at an attribute; the attribute's own words count too.
ATTRIBUTE_SYNONYMS: dict[str, tuple[str, ...]] = {
    "population": ("population", "people", "inhabitants", "populous", "residents"),
    "capital": ("capital",),
    "currency": ("currency", "money", "coin"),
    "founding year": ("founded", "founding", "established", "built"),
    "birth year": ("born", "birth"),
    "profession": ("profession", "job", "occupation", "work", "does"),
    "home city": ("home", "lives", "live", "living", "reside"),
    "length": ("length", "long"),
    "height": ("height", "tall", "high", "elevation"),
    "country": ("country", "located", "where", "nation"),
}

_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


@lru_cache(maxsize=8)
def load_kb(path: str | None = None) -> dict:
    """Load (and cache) a knowledge-base JSON file: `{"entities": [{"name", "type", "attributes"}]}`."""
    kb_path = Path(path) if path else DEFAULT_KB_PATH
    with open(kb_path, encoding="utf-8") as fh:
        return json.load(fh)


def fact_sentence(name: str, attribute: str, value: Any, unit: str = "") -> str:
    """The one sentence form every fact takes (the demo model learns to copy it)."""
    suffix = f" {unit}" if unit else ""
    return f"The {attribute} of {name} is {value}{suffix}."


def _entity_score(entity: dict, query_words: set[str]) -> int:
    name_words = _words(entity["name"])
    if name_words and all(w in query_words for w in name_words):
        return 10 * len(name_words)
    return 0


def _attribute_score(attribute: str, query_words: set[str]) -> int:
    keys = set(_words(attribute)) | set(ATTRIBUTE_SYNONYMS.get(attribute, ()))
    return sum(1 for k in keys if k in query_words)


def search(query: str, kb: dict) -> str:
    """Answer `query` from `kb`: best entity by name, best attribute by keyword.

    Returns one fact sentence when an entity and one of its attributes match, a summary of the
    entity when no attribute is named, and `no results for '...'` otherwise.
    """
    if not isinstance(query, str) or not query.strip():
        return "error: query must be a non-empty string"
    qwords = set(_words(query))
    scored = [(_entity_score(e, qwords), i, e) for i, e in enumerate(kb.get("entities", []))]
    scored = [s for s in scored if s[0] > 0]
    if not scored:
        return f"no results for {query.strip()!r}"
    # Highest score wins; ties go to the entity listed first (deterministic).
    best_score = max(s[0] for s in scored)
    entity = min((s for s in scored if s[0] == best_score), key=lambda s: s[1])[2]
    attrs: dict = entity.get("attributes", {})
    units: dict = entity.get("units", {})
    asked = [(a, _attribute_score(a, qwords)) for a in ATTRIBUTE_SYNONYMS]
    asked = [(a, s) for a, s in asked if s > 0]
    if not asked:
        facts = "; ".join(f"{a} {v}{' ' + units[a] if a in units else ''}" for a, v in attrs.items())
        return f"{entity['name']} ({entity.get('type', 'entity')}): {facts}."
    top = max(s for _, s in asked)
    for attribute, score in asked:
        if score == top and attribute in attrs:
            return fact_sentence(entity["name"], attribute, attrs[attribute], units.get(attribute, ""))
    return f"no results for {query.strip()!r}"


def make_lookup(case: Any = None, kb_path: str | None = None) -> Tool:
    """Build the `lookup` tool over the bundled knowledge base (or `kb_path`)."""

    def lookup(query: str = "") -> str:
        try:
            kb = load_kb(str(kb_path) if kb_path else None)
        except (OSError, ValueError) as exc:
            return f"error: knowledge base unavailable ({exc})"
        return search(query, kb)

    return Tool(
        name="lookup",
        description="Look up a fact in the knowledge base.",
        parameters=SCHEMA,
        fn=lookup,
    )
