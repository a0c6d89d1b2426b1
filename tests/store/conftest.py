"""Fixtures for the store and worker tests: throwaway SQLite files and a real PostgreSQL."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))  # pgserver, helpers
# Tests share builders across the subfolders (the kill tests use the judge and diagnosis tests' runs): each folder
# is on the path whatever order pytest collects them in.
sys.path[1:1] = [str(_HERE / sub) for sub in ("diagnosis", "interop", "queue")]

from pgserver import INSTALL_HINT, PostgresServer, find_bindir  # noqa: E402


@pytest.fixture(scope="session")
def pg_server():
    """A PostgreSQL server for the whole session (fails, never skips, when not installed)."""
    if find_bindir() is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture
def sqlite_url(tmp_path):
    """An upgraded, empty SQLite store."""
    import evalrx.store as S

    url = f"sqlite:///{tmp_path / 'sqlite-store.sqlite'}"
    S.upgrade(url)
    yield url
    S.forget(url)


@pytest.fixture
def pg_url(pg_server):
    """An upgraded, empty PostgreSQL database."""
    import evalrx.store as S

    url = pg_server.create_database()
    S.upgrade(url)
    yield url
    S.forget(url)
    pg_server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """The same test on an upgraded SQLite store and on an upgraded PostgreSQL database."""
    import evalrx.store as S

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.sqlite'}"
        S.upgrade(url)
        yield url
        S.forget(url)
    else:
        server = request.getfixturevalue("pg_server")
        url = server.create_database()
        S.upgrade(url)
        yield url
        S.forget(url)
        server.drop_database(url)


@pytest.fixture(autouse=True)
def _no_default_store(monkeypatch, tmp_path):
    """Tests never touch the developer's db/evalrx.sqlite."""
    monkeypatch.setenv("EVALRX_DATABASE_URL", f"sqlite:///{tmp_path / 'default-unused.sqlite'}")
