"""The tools a trajectory was offered, and saved MCP servers.

`tool_specs` holds each offered tool once by the digest of its description (name, description,
JSON Schema, source, origin, annotations); `trajectory_offered_tools` lists a trajectory's, in the
order the model saw them (`trajectory_tools` keeps the tools it called). `mcp_servers` is the New
run page's saved server list: `mcpServers` entries whose secrets are `${VAR}` names, never values.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "tool_specs",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("origin", sa.String(length=500), nullable=False),
        sa.Column("spec", JSON, nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_tool_specs")),
    )
    op.create_table(
        "trajectory_offered_tools",
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("tool_digest", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["trajectory_id"],
            ["trajectories.id"],
            name=op.f("fk_trajectory_offered_tools_trajectory_id_trajectories"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tool_digest"], ["tool_specs.digest"], name=op.f("fk_trajectory_offered_tools_tool_digest_tool_specs")
        ),
        sa.PrimaryKeyConstraint("trajectory_id", "position", name=op.f("pk_trajectory_offered_tools")),
    )
    with op.batch_alter_table("trajectory_offered_tools", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_trajectory_offered_tools_tool_digest"), ["tool_digest"], unique=False)
    op.create_table(
        "mcp_servers",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("config", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_mcp_servers")),
    )


def downgrade() -> None:
    op.drop_table("mcp_servers")
    with op.batch_alter_table("trajectory_offered_tools", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_trajectory_offered_tools_tool_digest"))
    op.drop_table("trajectory_offered_tools")
    op.drop_table("tool_specs")
