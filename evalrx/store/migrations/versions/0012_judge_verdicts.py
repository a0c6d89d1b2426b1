"""A judge's verdicts, cached by the digest of what it was asked: running the judge again on the same
trajectory costs nothing.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from evalrx.store.migrations._helpers import JSON, primary_key, timestamp

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "judge_verdicts",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("spec", sa.String(length=200), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("prompt_version", sa.Integer(), nullable=False),
        sa.Column("diagnosis", JSON, nullable=True),
        sa.Column("refusal", sa.Text(), nullable=True),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("meta", JSON, nullable=False),
        timestamp("created_at", nullable=False),
        primary_key("judge_verdicts", "digest"),
    )


def downgrade() -> None:
    op.drop_table("judge_verdicts")
