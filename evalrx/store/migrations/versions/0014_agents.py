"""Teams of agents: who took each step (`steps.agent`, `steps.addressee`), a trajectory's roster, the agents
that took part (`trajectory_agents`, indexed for the filter) and the agent a label blames (`labels.agent`).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from evalrx.store.migrations._helpers import (
    JSON,
    add_columns,
    create_indexes,
    drop_columns,
    drop_indexes,
    foreign_key,
    primary_key,
)

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "trajectory_agents",
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("agent", sa.String(length=200), nullable=False),
        sa.Column("n_steps", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        foreign_key("trajectory_agents", "trajectory_id", "trajectories", cascade=True),
        primary_key("trajectory_agents", "trajectory_id", "agent"),
    )
    create_indexes("trajectory_agents", ["agent", "trajectory_id"])
    add_columns(
        "steps",
        sa.Column("agent", sa.String(length=200), nullable=True),
        sa.Column("addressee", sa.String(length=200), nullable=True),
    )
    add_columns("trajectories", sa.Column("roster", JSON, nullable=True))
    add_columns("labels", sa.Column("agent", sa.String(length=200), nullable=True))


def downgrade() -> None:
    drop_columns("labels", "agent")
    drop_columns("trajectories", "roster")
    drop_columns("steps", "addressee", "agent")
    drop_indexes("trajectory_agents", ["agent", "trajectory_id"])
    op.drop_table("trajectory_agents")
