"""People's marks of what a tool does (read or write), which the diagnosis reads before a tool name's verb.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from evalrx.store.migrations._helpers import primary_key, timestamp

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_marks",
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("effect", sa.String(length=8), nullable=False),
        sa.Column("annotator", sa.String(length=100), nullable=False),
        timestamp("created_at", nullable=False),
        primary_key("tool_marks", "name"),
    )


def downgrade() -> None:
    op.drop_table("tool_marks")
