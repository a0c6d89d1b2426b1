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

from evalrx.store.migrations._helpers import JSON, create_indexes, drop_indexes, foreign_key, primary_key, timestamp

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_specs",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("origin", sa.String(length=500), nullable=False),
        sa.Column("spec", JSON, nullable=False),
        primary_key("tool_specs", "digest"),
    )
    op.create_table(
        "trajectory_offered_tools",
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("tool_digest", sa.String(length=64), nullable=False),
        foreign_key("trajectory_offered_tools", "trajectory_id", "trajectories", cascade=True),
        foreign_key("trajectory_offered_tools", "tool_digest", "tool_specs", parent_key="digest"),
        primary_key("trajectory_offered_tools", "trajectory_id", "position"),
    )
    create_indexes("trajectory_offered_tools", ["tool_digest"])
    op.create_table(
        "mcp_servers",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("config", JSON, nullable=False),
        timestamp("created_at", nullable=False),
        primary_key("mcp_servers", "name"),
    )


def downgrade() -> None:
    op.drop_table("mcp_servers")
    drop_indexes("trajectory_offered_tools", ["tool_digest"])
    op.drop_table("trajectory_offered_tools")
    op.drop_table("tool_specs")
