"""How the store reads a driver's error: a refused write, an outage to wait out, or neither (a bad query)."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy.exc import OperationalError

from evalrx.store import unreachable
from evalrx.store.engine import unwritable


def _wrapped(message: str) -> OperationalError:
    # Built by hand, the sqlite3 error has no `sqlite_errorname`, as on Python 3.10: the message must decide.
    return OperationalError("INSERT INTO runs", {}, sqlite3.OperationalError(message))


@pytest.mark.parametrize(
    "message, refused, away",
    [
        ("attempt to write a readonly database", True, False),
        ("database or disk is full", True, False),
        ("database is locked", False, True),
        ("unable to open database file", False, True),
        ("no such table: runs", False, False),
    ],
)
def test_a_sqlite_error_is_read_by_its_message_where_it_carries_no_name(message, refused, away):
    exc = _wrapped(message)
    assert (unwritable(exc, "sqlite:///x.sqlite") is not None) is refused
    assert unreachable(exc) is away
