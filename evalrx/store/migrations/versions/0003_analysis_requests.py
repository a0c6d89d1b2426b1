"""Analysis requests (queued from the Trajectory page, run by a worker) and trajectory scores.

`analysis_requests` holds analyses asked for an already stored trajectory, with their
status; `trajectory_scores` keeps numbers derived from analyses (the smallest tool-decision
margin) with an index on (name, value) so the Trajectories page can filter by them.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "analysis_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column(
            "analyzers", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("worker_id", sa.String(length=120), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["trajectory_id"],
            ["trajectories.id"],
            name=op.f("fk_analysis_requests_trajectory_id_trajectories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_analysis_requests")),
    )
    with op.batch_alter_table("analysis_requests", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_analysis_requests_status_id"), ["status", "id"], unique=False)
        batch_op.create_index(batch_op.f("ix_analysis_requests_trajectory_id"), ["trajectory_id"], unique=False)

    op.create_table(
        "trajectory_scores",
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=60), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["trajectory_id"],
            ["trajectories.id"],
            name=op.f("fk_trajectory_scores_trajectory_id_trajectories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("trajectory_id", "name", name=op.f("pk_trajectory_scores")),
    )
    with op.batch_alter_table("trajectory_scores", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_trajectory_scores_name_value_trajectory_id"),
            ["name", "value", "trajectory_id"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("trajectory_scores", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_trajectory_scores_name_value_trajectory_id"))

    op.drop_table("trajectory_scores")
    with op.batch_alter_table("analysis_requests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_analysis_requests_trajectory_id"))
        batch_op.drop_index(batch_op.f("ix_analysis_requests_status_id"))

    op.drop_table("analysis_requests")
