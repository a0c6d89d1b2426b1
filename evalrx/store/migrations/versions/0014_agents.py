"""Teams of agents: who took each step (`steps.agent`, `steps.addressee`), a trajectory's roster, the agents
that took part (`trajectory_agents`, indexed for the filter) and the agent a label blames (`labels.agent`).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "trajectory_agents",
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("agent", sa.String(length=200), nullable=False),
        sa.Column("n_steps", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["trajectory_id"],
            ["trajectories.id"],
            name=op.f("fk_trajectory_agents_trajectory_id_trajectories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("trajectory_id", "agent", name=op.f("pk_trajectory_agents")),
    )
    op.create_index(
        op.f("ix_trajectory_agents_agent_trajectory_id"), "trajectory_agents", ["agent", "trajectory_id"], unique=False
    )
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("agent", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("addressee", sa.String(length=200), nullable=True))
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.add_column(sa.Column("roster", JSON, nullable=True))
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.add_column(sa.Column("agent", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.drop_column("agent")
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.drop_column("roster")
    with op.batch_alter_table("steps", schema=None) as batch_op:
        batch_op.drop_column("addressee")
        batch_op.drop_column("agent")
    op.drop_index(op.f("ix_trajectory_agents_agent_trajectory_id"), table_name="trajectory_agents")
    op.drop_table("trajectory_agents")
