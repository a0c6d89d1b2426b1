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

from evalrx.store.migrations._helpers import JSON, create_indexes, drop_indexes, foreign_key, primary_key, timestamp

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "analysis_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("analyzers", JSON, nullable=False),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("worker_id", sa.String(length=120), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        timestamp("created_at", nullable=False),
        timestamp("started_at", nullable=True),
        timestamp("finished_at", nullable=True),
        foreign_key("analysis_requests", "trajectory_id", "trajectories", cascade=True),
        primary_key("analysis_requests", "id"),
    )
    create_indexes("analysis_requests", ["status", "id"], ["trajectory_id"])

    op.create_table(
        "trajectory_scores",
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=60), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        foreign_key("trajectory_scores", "trajectory_id", "trajectories", cascade=True),
        primary_key("trajectory_scores", "trajectory_id", "name"),
    )
    create_indexes("trajectory_scores", ["name", "value", "trajectory_id"])


def downgrade() -> None:
    drop_indexes("trajectory_scores", ["name", "value", "trajectory_id"])
    op.drop_table("trajectory_scores")
    drop_indexes("analysis_requests", ["trajectory_id"], ["status", "id"])
    op.drop_table("analysis_requests")
