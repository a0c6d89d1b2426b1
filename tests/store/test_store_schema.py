"""Schema, migrations, engine settings and the schema-version check."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from sqlalchemy import text

import evalrx.store as S
from evalrx.store import schema


def test_migration_head_is_the_code_schema_version():
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from evalrx.store.engine import DB_DIR

    cfg = Config()
    cfg.set_main_option("script_location", str(DB_DIR))
    assert ScriptDirectory.from_config(cfg).get_current_head() == schema.SCHEMA_VERSION


def test_migrated_schema_matches_the_models(store_url):
    """Alembic's autogenerate finds nothing to change after `upgrade`: migrations and models agree."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    store = S.connect(store_url)
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), schema.metadata)
    assert diff == []


def test_empty_store_refuses_with_the_upgrade_command(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    with pytest.raises(S.SchemaError, match="evalrx db upgrade"):
        S.connect(url)
    assert S.upgrade(url) == schema.SCHEMA_VERSION
    S.connect(url)  # now accepted
    assert S.upgrade(url) == schema.SCHEMA_VERSION  # a second upgrade is a no-op


def test_older_schema_refuses_with_the_upgrade_command(sqlite_url):
    store = S.connect(sqlite_url)
    with store.write() as s:
        s.execute(text("UPDATE alembic_version SET version_num = '0000'"))
    S.forget(sqlite_url)  # a new process: the schema is checked afresh
    with pytest.raises(S.SchemaError, match=r"older .*evalrx db upgrade"):
        S.connect(sqlite_url)


def test_newer_schema_asks_to_upgrade_evalrx(sqlite_url):
    store = S.connect(sqlite_url)
    with store.write() as s:
        s.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    S.forget(sqlite_url)
    with pytest.raises(S.SchemaError, match="newer"):
        S.connect(sqlite_url)


def test_default_url_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("EVALRX_DATABASE_URL", "postgresql://u@h:5/x")
    assert S.default_url() == "postgresql://u@h:5/x"
    monkeypatch.delenv("EVALRX_DATABASE_URL")
    assert S.default_url().startswith("sqlite:///") and S.default_url().endswith("db/evalrx.sqlite")


def test_sqlite_pragmas(sqlite_url):
    store = S.connect(sqlite_url)
    with store.read() as s:
        assert s.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert s.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert s.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
        assert s.execute(text("PRAGMA busy_timeout")).scalar() >= 5000


def test_write_transaction_takes_the_write_lock_at_begin(sqlite_url, tmp_path):
    """`Store.write()` holds SQLite's write lock before its first statement (BEGIN IMMEDIATE)."""
    store = S.connect(sqlite_url)
    path = sqlite_url[len("sqlite:///"):]
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    with store.write() as s:
        s.execute(text("SELECT 1"))  # a read only: a deferred BEGIN would hold no write lock yet
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
    other.execute("BEGIN IMMEDIATE")  # released at commit
    other.execute("ROLLBACK")
    with store.read() as s:  # a read transaction does not block writers
        s.execute(text("SELECT count(*) FROM runs")).scalar()
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    other.close()


def test_read_transaction_is_a_consistent_snapshot(sqlite_url):
    store = S.connect(sqlite_url)
    with store.read() as s:
        before = s.execute(text("SELECT count(*) FROM runs")).scalar()

        def writer():
            with store.write() as w:
                w.execute(text("INSERT INTO runs (name, status, source, config, meta, n_cases, n_done, n_pass, "
                               "n_fail, n_error, created_at) VALUES ('x','queued','queue','{}','{}',0,0,0,0,0,"
                               "'2020-01-01 00:00:00')"))

        th = threading.Thread(target=writer)
        th.start()
        th.join()
        assert s.execute(text("SELECT count(*) FROM runs")).scalar() == before
    with store.read() as s:
        assert s.execute(text("SELECT count(*) FROM runs")).scalar() == before + 1


def test_foreign_keys_cascade_on_run_delete(store_url):
    from storehelpers import fill_run

    store = S.connect(store_url)
    run_id, _, _ = fill_run(store, 3)
    tid = S.list_trajectories(run_id=run_id, store=store).rows[0].id
    S.set_label(tid, "fail", store=store)
    assert S.delete_run(run_id, store=store)
    with store.read() as s:
        for table in ("trajectories", "steps", "labels", "trajectory_tools", "run_cases"):
            assert s.execute(text(f"SELECT count(*) FROM {table}")).scalar() == 0, table
        assert s.execute(text("SELECT count(*) FROM cases")).scalar() == 3  # cases outlive runs
