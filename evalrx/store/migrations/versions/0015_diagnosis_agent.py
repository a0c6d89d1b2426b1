"""The agent a diagnosis blames in a team (`diagnoses.agent`), copied for the top one onto `trajectories`
(`diagnosis_agent`, indexed per run) so the list filters and sorts by it.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("diagnoses", schema=None) as batch_op:
        batch_op.add_column(sa.Column("agent", sa.String(length=200), nullable=True))
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.add_column(sa.Column("diagnosis_agent", sa.String(length=200), nullable=True))
    op.create_index(
        op.f("ix_trajectories_run_id_diagnosis_agent"), "trajectories", ["run_id", "diagnosis_agent"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_trajectories_run_id_diagnosis_agent"), table_name="trajectories")
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.drop_column("diagnosis_agent")
    with op.batch_alter_table("diagnoses", schema=None) as batch_op:
        batch_op.drop_column("agent")
