"""Searchable text in its own table, with a substring index.

`trajectories.search_text` (2.6 KB a row on average) moves to `trajectory_texts`, so
scans over a run's trajectories (aggregates, counts) read small rows. The text gets a
substring index: on SQLite an FTS5 table with the trigram tokenizer (the same matches
as LIKE '%q%' for 3+ characters) kept in sync by triggers; on PostgreSQL a pg_trgm GIN
index, which LIKE uses directly, when the extension can be created. Measured at 100k
trajectories on SQLite: a rare term across all runs in 2 ms instead of 420-600 ms; the
index adds about 45% to the file and 0.4 ms per inserted trajectory.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from evalrx.store.migrations._helpers import add_columns, drop_columns, foreign_key, primary_key

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SQLITE_FTS = [
    "CREATE VIRTUAL TABLE trajectory_fts USING fts5("
    "search_text, content='trajectory_texts', content_rowid='trajectory_id', tokenize='trigram')",
    "CREATE TRIGGER trajectory_fts_ai AFTER INSERT ON trajectory_texts BEGIN "
    "INSERT INTO trajectory_fts(rowid, search_text) VALUES (new.trajectory_id, new.search_text); END",
    "CREATE TRIGGER trajectory_fts_ad AFTER DELETE ON trajectory_texts BEGIN "
    "INSERT INTO trajectory_fts(trajectory_fts, rowid, search_text) "
    "VALUES ('delete', old.trajectory_id, old.search_text); END",
    "CREATE TRIGGER trajectory_fts_au AFTER UPDATE ON trajectory_texts BEGIN "
    "INSERT INTO trajectory_fts(trajectory_fts, rowid, search_text) "
    "VALUES ('delete', old.trajectory_id, old.search_text); "
    "INSERT INTO trajectory_fts(rowid, search_text) VALUES (new.trajectory_id, new.search_text); END",
    "INSERT INTO trajectory_fts(trajectory_fts) VALUES ('rebuild')",
]


def create_sqlite_fts(bind) -> bool:
    """Create the FTS5 trigram index and its triggers; False when this SQLite lacks FTS5 trigram."""
    try:
        bind.exec_driver_sql("CREATE VIRTUAL TABLE temp.evalrx_fts_probe USING fts5(x, tokenize='trigram')")
        bind.exec_driver_sql("DROP TABLE temp.evalrx_fts_probe")
    except Exception:  # SQLite older than 3.34 or built without FTS5: searches scan with LIKE
        return False
    for stmt in SQLITE_FTS:
        bind.exec_driver_sql(stmt)
    return True


def upgrade() -> None:
    op.create_table(
        "trajectory_texts",
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("search_text", sa.Text(), nullable=False),
        foreign_key("trajectory_texts", "trajectory_id", "trajectories", cascade=True),
        primary_key("trajectory_texts", "trajectory_id"),
    )
    op.execute("INSERT INTO trajectory_texts (trajectory_id, search_text) SELECT id, search_text FROM trajectories")
    drop_columns("trajectories", "search_text")

    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        create_sqlite_fts(bind)
    elif bind.dialect.name == "postgresql":
        try:
            with bind.begin_nested():  # needs the right to create the extension; the index is optional
                bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
                bind.exec_driver_sql(
                    "CREATE INDEX ix_trajectory_texts_search_trgm ON trajectory_texts "
                    "USING gin (search_text gin_trgm_ops)"
                )
        except Exception:
            pass


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for name in ("trajectory_fts_ai", "trajectory_fts_ad", "trajectory_fts_au"):
            bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
        bind.exec_driver_sql("DROP TABLE IF EXISTS trajectory_fts")
    add_columns("trajectories", sa.Column("search_text", sa.Text(), nullable=False, server_default=""))
    op.execute(
        "UPDATE trajectories SET search_text = (SELECT x.search_text FROM trajectory_texts x "
        "WHERE x.trajectory_id = trajectories.id)"
    )
    op.drop_table("trajectory_texts")
