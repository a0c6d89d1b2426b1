"""Shapes the migrations share: the JSON type, timestamps, named keys, and index and column changes in batch mode.

Frozen like the revisions that use them (a migration is a snapshot): a change here changes what past revisions
create, so add a new helper rather than alter one. Names follow the store's naming convention (`pk_`, `fk_`,
`uq_`, `ix_` + table + columns), written out with `op.f` as Alembic's autogenerate writes them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def timestamp(name: str, *, nullable: bool) -> sa.Column:
    """A timezone-aware time column."""
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def primary_key(table: str, *columns: str) -> sa.PrimaryKeyConstraint:
    return sa.PrimaryKeyConstraint(*columns, name=op.f(f"pk_{table}"))


def unique(table: str, *columns: str) -> sa.UniqueConstraint:
    return sa.UniqueConstraint(*columns, name=op.f(f"uq_{table}_{'_'.join(columns)}"))


def foreign_key(
    table: str, column: str, parent: str, *, parent_key: str = "id", cascade: bool = False
) -> sa.ForeignKeyConstraint:
    """`table.column` refers to `parent.parent_key`; `cascade` deletes the row with its parent."""
    name = op.f(f"fk_{table}_{column}_{parent}")
    ondelete = "CASCADE" if cascade else None
    return sa.ForeignKeyConstraint([column], [f"{parent}.{parent_key}"], name=name, ondelete=ondelete)


def _index_name(table: str, columns: Sequence[str]) -> str:
    return f"ix_{table}_{'_'.join(columns)}"


def create_indexes(table: str, *indexes: Sequence[str]) -> None:
    """Plain (not unique) indexes on `table`, one a list of columns, named by the convention."""
    with op.batch_alter_table(table, schema=None) as batch_op:
        for columns in indexes:
            batch_op.create_index(batch_op.f(_index_name(table, columns)), list(columns), unique=False)


def drop_indexes(table: str, *indexes: Sequence[str]) -> None:
    """Drop what `create_indexes` made (list them in the reverse order)."""
    with op.batch_alter_table(table, schema=None) as batch_op:
        for columns in indexes:
            batch_op.drop_index(batch_op.f(_index_name(table, columns)))


def add_columns(table: str, *columns: sa.Column) -> None:
    with op.batch_alter_table(table, schema=None) as batch_op:
        for column in columns:
            batch_op.add_column(column)


def drop_columns(table: str, *names: str) -> None:
    with op.batch_alter_table(table, schema=None) as batch_op:
        for name in names:
            batch_op.drop_column(name)
