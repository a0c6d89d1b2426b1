"""Judge jobs: a judge model's work handed to the workers (`evalrx diagnose --judge SPEC --queue`, the app's
"Diagnose with a judge"), with its progress, cancel and one line per refusal; never a key, only its variable's name.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from evalrx.store.migrations._helpers import JSON, create_indexes, drop_indexes, foreign_key, primary_key, timestamp

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "judge_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("scope", sa.String(length=300), nullable=False),
        sa.Column("trajectory_ids", JSON, nullable=False),
        sa.Column("spec", sa.String(length=200), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("base_url", sa.Text(), nullable=True),
        sa.Column("api_key_env", sa.String(length=200), nullable=True),
        sa.Column("with_findings", sa.Boolean(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("options", JSON, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("worker_id", sa.String(length=120), nullable=True),
        sa.Column("progress_done", sa.Integer(), nullable=False),
        sa.Column("progress_total", sa.Integer(), nullable=False),
        sa.Column("n_verdicts", sa.Integer(), nullable=False),
        sa.Column("n_refused", sa.Integer(), nullable=False),
        sa.Column("n_failed", sa.Integer(), nullable=False),
        sa.Column("n_cached", sa.Integer(), nullable=False),
        sa.Column("notes", JSON, nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        timestamp("created_at", nullable=False),
        timestamp("started_at", nullable=True),
        timestamp("finished_at", nullable=True),
        foreign_key("judge_jobs", "run_id", "runs", cascade=True),
        primary_key("judge_jobs", "id"),
    )
    create_indexes("judge_jobs", ["status", "id"], ["run_id"])


def downgrade() -> None:
    drop_indexes("judge_jobs", ["run_id"], ["status", "id"])
    op.drop_table("judge_jobs")
