"""One vocabulary: labels and diagnoses say `failure_kind`, the copies on `trajectories` say whose they are.

`labels.failure_mode` becomes `labels.failure_kind` (a human label names a kind of the same taxonomy a
diagnosis does). The two copies kept on `trajectories` for the list's filters are renamed after their
owners: `failure_mode` (the current human label's kind) becomes `label_kind` and `failure_kind` (the
top diagnosis's kind) becomes `diagnosis_kind`, with its index. A case's string id `cases.case_key`
becomes `cases.sample_id`, the name `trajectories.sample_id` already has. Only names change: every
label, diagnosis and case keeps its values.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# (table, old name, new name, length of the String column)
RENAMES = (
    ("labels", "failure_mode", "failure_kind", 100),
    ("trajectories", "failure_mode", "label_kind", 100),
    ("trajectories", "failure_kind", "diagnosis_kind", 100),
    ("cases", "case_key", "sample_id", 300),
)
# Indexes on renamed columns: (table, columns before, columns after); named by the naming convention.
INDEXES = (
    ("trajectories", ["run_id", "failure_kind"], ["run_id", "diagnosis_kind"]),
    ("cases", ["case_key"], ["sample_id"]),
)


def _index_name(table: str, columns: list) -> str:
    return f"ix_{table}_{'_'.join(columns)}"


def _rename(down: bool) -> None:
    for table in ("labels", "trajectories", "cases"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for ix_table, before, after in INDEXES:
                if ix_table == table:
                    columns = after if down else before
                    batch_op.drop_index(_index_name(table, columns))
            for r_table, old, new, length in RENAMES:
                if r_table != table:
                    continue
                src, dst = (new, old) if down else (old, new)
                batch_op.alter_column(
                    src,
                    new_column_name=dst,
                    existing_type=sa.String(length=length),
                    existing_nullable=table != "cases",
                )
        with op.batch_alter_table(table, schema=None) as batch_op:  # on the renamed columns (a second batch)
            for ix_table, before, after in INDEXES:
                if ix_table == table:
                    cols = before if down else after
                    batch_op.create_index(_index_name(table, cols), cols, unique=False)


def upgrade() -> None:
    _rename(down=False)


def downgrade() -> None:
    _rename(down=True)
