"""The integer key of a `cases` row has its own name: `case_row_id` on `run_cases` and `trajectories`.

A case's string id is `sample_id` everywhere (0007); `case_id` named both that string (in exports) and
this integer key. Only names change: the key, the foreign key, the unique constraint and the indexes on
it are renamed, every row keeps its values.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _rename(old: str, new: str) -> None:
    # Two batches a table: SQLite's copy drops constraints named on a column renamed in the same batch.
    with op.batch_alter_table("run_cases", schema=None) as batch_op:
        batch_op.drop_index(f"ix_run_cases_{old}")
        batch_op.drop_constraint(f"fk_run_cases_{old}_cases", type_="foreignkey")
        batch_op.drop_constraint("pk_run_cases", type_="primary")
        batch_op.alter_column(old, new_column_name=new, existing_type=sa.Integer(), existing_nullable=False)
    with op.batch_alter_table("run_cases", schema=None) as batch_op:
        batch_op.create_primary_key("pk_run_cases", ["run_id", new, "attempt"])
        batch_op.create_foreign_key(f"fk_run_cases_{new}_cases", "cases", [new], ["id"])
        batch_op.create_index(f"ix_run_cases_{new}", [new], unique=False)
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.drop_index(f"ix_trajectories_{old}")
        batch_op.drop_constraint(f"fk_trajectories_{old}_cases", type_="foreignkey")
        batch_op.drop_constraint(f"uq_trajectories_run_id_{old}_attempt", type_="unique")
        batch_op.alter_column(old, new_column_name=new, existing_type=sa.Integer(), existing_nullable=False)
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.create_unique_constraint(f"uq_trajectories_run_id_{new}_attempt", ["run_id", new, "attempt"])
        batch_op.create_foreign_key(f"fk_trajectories_{new}_cases", "cases", [new], ["id"])
        batch_op.create_index(f"ix_trajectories_{new}", [new], unique=False)


def upgrade() -> None:
    _rename("case_id", "case_row_id")


def downgrade() -> None:
    _rename("case_row_id", "case_id")
