"""Repeated attempts of a case, and imported files known by their content hash.

A run may run each case K times (`repeats`): `run_cases` gets an `attempt` (1..K) in its key and
`trajectories` one in its unique key, so resume, cancel and the crash guard work per attempt.
The crash counter `run_cases.attempts` is renamed `starts` so "attempt" has one meaning.
`runs.source_sha256` is the content hash of an imported file: importing it again is refused.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _rename_crash_counter(batch_op, old: str, new: str) -> None:
    batch_op.alter_column(
        old,
        new_column_name=new,
        existing_type=sa.Integer(),
        existing_nullable=False,
        existing_server_default=sa.text("0"),
    )


def upgrade() -> None:
    with op.batch_alter_table("run_cases", schema=None) as batch_op:
        _rename_crash_counter(batch_op, "attempts", "starts")
        batch_op.add_column(sa.Column("attempt", sa.Integer(), server_default=sa.text("1"), nullable=False))
        batch_op.drop_constraint("uq_run_cases_run_id_position", type_="unique")
        batch_op.drop_constraint("pk_run_cases", type_="primary")
        batch_op.create_primary_key("pk_run_cases", ["run_id", "case_id", "attempt"])
        batch_op.create_unique_constraint("uq_run_cases_run_id_position_attempt", ["run_id", "position", "attempt"])
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempt", sa.Integer(), server_default=sa.text("1"), nullable=False))
        batch_op.drop_constraint("uq_trajectories_run_id_case_id", type_="unique")
        batch_op.create_unique_constraint("uq_trajectories_run_id_case_id_attempt", ["run_id", "case_id", "attempt"])
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source_sha256", sa.String(length=64), nullable=True))
        batch_op.create_index("ix_runs_source_sha256", ["source_sha256"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_source_sha256")
        batch_op.drop_column("source_sha256")
    # Attempts after the first have no place in the older schema.
    op.execute("DELETE FROM trajectories WHERE attempt > 1")
    op.execute("DELETE FROM run_cases WHERE attempt > 1")
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.drop_constraint("uq_trajectories_run_id_case_id_attempt", type_="unique")
        batch_op.create_unique_constraint("uq_trajectories_run_id_case_id", ["run_id", "case_id"])
        batch_op.drop_column("attempt")
    with op.batch_alter_table("run_cases", schema=None) as batch_op:
        batch_op.drop_constraint("uq_run_cases_run_id_position_attempt", type_="unique")
        batch_op.drop_constraint("pk_run_cases", type_="primary")
        batch_op.create_primary_key("pk_run_cases", ["run_id", "case_id"])
        batch_op.create_unique_constraint("uq_run_cases_run_id_position", ["run_id", "position"])
        batch_op.drop_column("attempt")
        _rename_crash_counter(batch_op, "starts", "attempts")
