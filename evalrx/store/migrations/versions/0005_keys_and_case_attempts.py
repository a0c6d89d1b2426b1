"""Keys bound to one run, and crash loops counted per case.

`runs.key_bound`: the run's API key was given for it alone (on New run or `evalrx run`); only a
worker started for that run (`evalrx worker --run ID`) claims it. `run_cases.attempts`: how often
a worker started the case; a case that killed its worker that many times is recorded as an error
trajectory and the run goes on. `jobs.idle_claims`: claims in a row that stored no case (a
model that kills its worker while loading), which fail the job at a limit.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa

from evalrx.store.migrations._helpers import add_columns, drop_columns

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns("runs", sa.Column("key_bound", sa.Boolean(), server_default=sa.text("false"), nullable=False))
    add_columns("run_cases", sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False))
    add_columns("jobs", sa.Column("idle_claims", sa.Integer(), server_default=sa.text("0"), nullable=False))


def downgrade() -> None:
    drop_columns("jobs", "idle_claims")
    drop_columns("run_cases", "attempts")
    drop_columns("runs", "key_bound")
