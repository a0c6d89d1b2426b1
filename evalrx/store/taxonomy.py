"""The failure taxonomy in the store: the built-in kinds plus users' own, each with an optional label key.

Kept in the `failure_kinds` table (seeded by migration 0004) so every app process and every
machine on a shared PostgreSQL store sees the same kinds and keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from sqlalchemy import delete, func, select, update

from evalrx.core.failures import canonical_kind
from evalrx.store import schema as t
from evalrx.store.engine import Store, resolve

HOTKEYS = tuple("123456789")
_KEY = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,59}$")


@dataclass(frozen=True)
class KindInfo:
    """One kind of the taxonomy."""

    key: str
    definition: str
    hotkey: Optional[str]
    builtin: bool


def list_kinds(*, store: "Store | str | None" = None) -> "list[KindInfo]":
    """Every kind, built-in ones first, in their stored order."""
    with resolve(store).read() as s:
        rows = s.execute(
            select(t.FailureKindRow).order_by(
                t.FailureKindRow.builtin.desc(), t.FailureKindRow.position, t.FailureKindRow.key
            )
        ).scalars()
        return [KindInfo(r.key, r.definition or "", r.hotkey, bool(r.builtin)) for r in rows]


def clean_key(key: str) -> str:
    """A kind key as stored (lower-case snake); raises ValueError naming what is wrong."""
    key = canonical_kind(str(key or "").strip().lower().replace(" ", "_")) or ""
    if not _KEY.match(key):
        raise ValueError(f"{key!r} is not a valid failure kind (use a-z, 0-9, _ and -, at most 60 characters)")
    return key


KEEP = "keep"


def save_kind(
    key: str, definition: str = "", *, hotkey: Optional[str] = KEEP, store: "Store | str | None" = None
) -> KindInfo:
    """Add a custom kind or edit one (a built-in kind's key and definition stay; its hotkey may change).

    `hotkey` "1".."9" binds the kind (taking the key from another kind), None unbinds it, and the
    default keeps what it had. Raises ValueError for a bad key or hotkey.
    """
    key = clean_key(key)
    keep = hotkey == KEEP
    if keep:
        hotkey = None
    if hotkey is not None and hotkey not in HOTKEYS:
        raise ValueError(f"hotkey {hotkey!r} must be one of 1-9 (or none)")
    with resolve(store).write() as s:
        if hotkey is not None:
            s.execute(
                update(t.FailureKindRow)
                .where(t.FailureKindRow.hotkey == hotkey, t.FailureKindRow.key != key)
                .values(hotkey=None)
            )
        row = s.get(t.FailureKindRow, key)
        if row is None:
            position = (s.execute(select(func.max(t.FailureKindRow.position))).scalar() or 0) + 1
            row = t.FailureKindRow(
                key=key, definition=definition.strip(), hotkey=hotkey, builtin=False, position=position
            )
            s.add(row)
        else:
            if not row.builtin:
                row.definition = definition.strip()
            if not keep:
                row.hotkey = hotkey
        s.flush()
        return KindInfo(row.key, row.definition or "", row.hotkey, bool(row.builtin))


def delete_kind(key: str, *, store: "Store | str | None" = None) -> None:
    """Remove a custom kind (labels that used it keep their text). Built-in kinds cannot be removed."""
    key = clean_key(key)
    with resolve(store).write() as s:
        row = s.get(t.FailureKindRow, key)
        if row is None:
            raise ValueError(f"no failure kind {key!r}")
        if row.builtin:
            raise ValueError(f"{key!r} is built in; unbind its key instead of removing it")
        s.execute(delete(t.FailureKindRow).where(t.FailureKindRow.key == key))


def ensure_kind(session, key: str) -> str:
    """The canonical key for a label's failure mode, added as a custom kind when it is new."""
    key = clean_key(key)
    if session.get(t.FailureKindRow, key) is None:
        position = (session.execute(select(func.max(t.FailureKindRow.position))).scalar() or 0) + 1
        session.add(t.FailureKindRow(key=key, definition="", hotkey=None, builtin=False, position=position))
        session.flush()
    return key


__all__ = ["HOTKEYS", "KindInfo", "clean_key", "delete_kind", "ensure_kind", "list_kinds", "save_kind"]
