"""The agent a diagnosis blames in a team (`diagnoses.agent`), copied for the top one onto `trajectories`
(`diagnosis_agent`, indexed per run) so the list filters and sorts by it.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa

from evalrx.store.migrations._helpers import add_columns, create_indexes, drop_columns, drop_indexes

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns("diagnoses", sa.Column("agent", sa.String(length=200), nullable=True))
    add_columns("trajectories", sa.Column("diagnosis_agent", sa.String(length=200), nullable=True))
    create_indexes("trajectories", ["run_id", "diagnosis_agent"])


def downgrade() -> None:
    drop_indexes("trajectories", ["run_id", "diagnosis_agent"])
    drop_columns("trajectories", "diagnosis_agent")
    drop_columns("diagnoses", "agent")
