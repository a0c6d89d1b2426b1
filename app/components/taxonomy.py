"""The failure-mode taxonomy the label form offers (short, editable, one key per mode).

The defaults describe how tool-calling agents fail. Edits made in the app are saved to
a small JSON file next to the SQLite store (or `$EVALRX_TAXONOMY_FILE`), so every tab
and every restart sees them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Optional

DEFAULT_TAXONOMY: list[tuple[str, str]] = [
    ("wrong_tool", "called the wrong tool, or none when one was needed"),
    ("bad_arguments", "right tool, wrong or missing arguments"),
    ("malformed_call", "a tool call that could not be parsed"),
    ("ignored_observation", "ignored or misread what a tool returned"),
    ("looping", "repeated calls without making progress"),
    ("wrong_answer", "the tools were used well but the final answer is wrong"),
    ("no_answer", "stopped or ran out of turns without an answer"),
    ("hallucinated", "made up a fact or a tool result"),
]
MAX_MODES = 9  # keys 1-9
_NAME = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,59}$")


def taxonomy_path(store_url: str) -> Path:
    """Where the edited taxonomy lives for a store."""
    env = os.environ.get("EVALRX_TAXONOMY_FILE")
    if env:
        return Path(env)
    if store_url.startswith("sqlite:///") and store_url != "sqlite:///:memory:":
        db = Path(store_url[len("sqlite:///"):])
        return db.with_name(db.name + ".taxonomy.json")
    digest = hashlib.sha256(store_url.encode()).hexdigest()[:16]
    return Path.home() / ".config" / "evalrx" / f"taxonomy-{digest}.json"


def clean_modes(rows: list) -> list[tuple[str, str]]:
    """Validate edited rows: lower-case snake names, unique, at most `MAX_MODES`.

    Raises:
        ValueError: naming the bad row.
    """
    out: list[tuple[str, str]] = []
    seen = set()
    for i, row in enumerate(rows, start=1):
        if isinstance(row, dict):
            name, desc = row.get("name"), row.get("description")
        else:
            name, desc = (list(row) + [None, None])[:2]
        name = str(name or "").strip().lower().replace(" ", "_")
        if not name:
            continue
        if not _NAME.match(name):
            raise ValueError(f"row {i}: {name!r} is not a valid failure-mode name (use a-z, 0-9, _ and -)")
        if name in seen:
            raise ValueError(f"row {i}: {name!r} appears twice")
        seen.add(name)
        out.append((name, str(desc or "").strip()))
    if len(out) > MAX_MODES:
        raise ValueError(f"at most {MAX_MODES} failure modes (one key each); got {len(out)}")
    return out


def load_taxonomy(store_url: str) -> list[tuple[str, str]]:
    """The taxonomy for a store: the saved edit, else the defaults."""
    path = taxonomy_path(store_url)
    try:
        return clean_modes(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return list(DEFAULT_TAXONOMY)


def save_taxonomy(store_url: str, rows: list) -> list[tuple[str, str]]:
    """Validate and save an edited taxonomy; returns what was saved."""
    modes = clean_modes(rows)
    if not modes:
        raise ValueError("keep at least one failure mode")
    path = taxonomy_path(store_url)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"name": n, "description": d} for n, d in modes], indent=1))
    tmp.replace(path)
    return modes


def mode_names(store_url: str, extra: Optional[list] = None) -> list[str]:
    """Taxonomy names plus any other modes already used in labels (for filters)."""
    names = [n for n, _ in load_taxonomy(store_url)]
    for m in extra or []:
        if m and m not in names:
            names.append(m)
    return names
