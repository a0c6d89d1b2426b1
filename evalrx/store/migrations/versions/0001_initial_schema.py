"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 22:19:13.686168
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from evalrx.store.migrations._helpers import (
    JSON,
    create_indexes,
    drop_indexes,
    foreign_key,
    primary_key,
    timestamp,
    unique,
)

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BYTES = sa.LargeBinary().with_variant(postgresql.BYTEA(), "postgresql")
# Indexes on (run_id, column) for the Trajectories page's sorts and filters.
TRAJECTORY_RUN_INDEXES = ("id", "label", "latency_ms", "outcome", "sample_id", "terminated")
# At most one current label a step, and one for the whole trajectory (step_idx NULL): (name, columns, where).
CURRENT_LABEL_INDEXES = (
    ("uq_labels_current_step", ["trajectory_id", "step_idx"], "is_current AND step_idx IS NOT NULL"),
    ("uq_labels_current_trajectory", ["trajectory_id"], "is_current AND step_idx IS NULL"),
)


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("mime", sa.String(length=100), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("data", BYTES, nullable=False),
        timestamp("created_at", nullable=False),
        primary_key("blobs", "sha256"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("spec_key", sa.String(length=200), nullable=True),
        sa.Column("backend", sa.String(length=32), nullable=True),
        sa.Column("config", JSON, nullable=False),
        sa.Column("meta", JSON, nullable=False),
        sa.Column("n_cases", sa.Integer(), nullable=False),
        sa.Column("n_done", sa.Integer(), nullable=False),
        sa.Column("n_pass", sa.Integer(), nullable=False),
        sa.Column("n_fail", sa.Integer(), nullable=False),
        sa.Column("n_error", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        timestamp("created_at", nullable=False),
        timestamp("started_at", nullable=True),
        timestamp("finished_at", nullable=True),
        primary_key("runs", "id"),
    )
    create_indexes("runs", ["status"])

    op.create_table(
        "tags",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        primary_key("tags", "id"),
        unique("tags", "name"),
    )
    op.create_table(
        "workers",
        sa.Column("id", sa.String(length=120), nullable=False),
        sa.Column("hostname", sa.String(length=200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        timestamp("started_at", nullable=False),
        timestamp("heartbeat_at", nullable=False),
        primary_key("workers", "id"),
    )
    create_indexes("workers", ["heartbeat_at"])

    op.create_table(
        "cases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("case_key", sa.String(length=300), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("expected", JSON, nullable=True),
        sa.Column("grader", JSON, nullable=True),
        sa.Column("meta", JSON, nullable=False),
        sa.Column("image_sha256", sa.String(length=64), nullable=True),
        foreign_key("cases", "image_sha256", "blobs", parent_key="sha256"),
        primary_key("cases", "id"),
        unique("cases", "digest"),
    )
    create_indexes("cases", ["case_key"])

    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("worker_id", sa.String(length=120), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("progress_done", sa.Integer(), nullable=False),
        sa.Column("progress_total", sa.Integer(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        timestamp("created_at", nullable=False),
        timestamp("claimed_at", nullable=True),
        timestamp("heartbeat_at", nullable=True),
        timestamp("finished_at", nullable=True),
        foreign_key("jobs", "run_id", "runs", cascade=True),
        primary_key("jobs", "id"),
    )
    create_indexes("jobs", ["run_id"], ["status", "id"])

    op.create_table(
        "run_cases",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        foreign_key("run_cases", "case_id", "cases"),
        foreign_key("run_cases", "run_id", "runs", cascade=True),
        primary_key("run_cases", "run_id", "case_id"),
        unique("run_cases", "run_id", "position"),
    )
    create_indexes("run_cases", ["case_id"])

    op.create_table(
        "trajectories",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.Integer(), nullable=False),
        sa.Column("sample_id", sa.String(length=300), nullable=False),
        sa.Column("goal", sa.Text(), nullable=False),
        sa.Column("final_answer", sa.Text(), nullable=True),
        sa.Column("ground_truth", JSON, nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("terminated", sa.String(length=32), nullable=False),
        sa.Column("metrics", JSON, nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("n_steps", sa.Integer(), nullable=False),
        sa.Column("n_turns", sa.Integer(), nullable=False),
        sa.Column("n_tool_calls", sa.Integer(), nullable=False),
        sa.Column("n_parse_errors", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("tool_latency_ms", sa.Float(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("label", sa.String(length=16), nullable=True),
        sa.Column("failure_mode", sa.String(length=100), nullable=True),
        timestamp("labelled_at", nullable=True),
        sa.Column("search_text", sa.Text(), nullable=False),
        timestamp("created_at", nullable=False),
        foreign_key("trajectories", "case_id", "cases"),
        foreign_key("trajectories", "run_id", "runs", cascade=True),
        primary_key("trajectories", "id"),
        unique("trajectories", "run_id", "case_id"),
    )
    create_indexes(
        "trajectories",
        ["case_id"],
        ["label"],
        *(["run_id", column] for column in TRAJECTORY_RUN_INDEXES),
    )

    op.create_table(
        "analyses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("step_idx", sa.Integer(), nullable=True),
        sa.Column("analyzer", sa.String(length=100), nullable=False),
        sa.Column("meta", JSON, nullable=False),
        timestamp("created_at", nullable=False),
        foreign_key("analyses", "trajectory_id", "trajectories", cascade=True),
        primary_key("analyses", "id"),
    )
    create_indexes("analyses", ["trajectory_id", "analyzer"])

    op.create_table(
        "labels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("step_idx", sa.Integer(), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("failure_mode", sa.String(length=100), nullable=True),
        sa.Column("first_wrong_step", sa.Integer(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("annotator", sa.String(length=100), nullable=True),
        timestamp("created_at", nullable=False),
        sa.Column("is_current", sa.Boolean(), nullable=False),
        sa.Column("superseded_by", sa.Integer(), nullable=True),
        foreign_key("labels", "superseded_by", "labels"),
        foreign_key("labels", "trajectory_id", "trajectories", cascade=True),
        primary_key("labels", "id"),
    )
    create_indexes("labels", ["trajectory_id", "step_idx"])
    with op.batch_alter_table("labels", schema=None) as batch_op:
        for name, columns, where in CURRENT_LABEL_INDEXES:
            batch_op.create_index(
                name, columns, unique=True, sqlite_where=sa.text(where), postgresql_where=sa.text(where)
            )

    op.create_table(
        "steps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=8), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("tool_calls", JSON, nullable=False),
        sa.Column("tool_name", sa.String(length=100), nullable=True),
        sa.Column("observation", JSON, nullable=True),
        sa.Column("parse_error", sa.Text(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("flags", sa.String(length=200), nullable=True),
        sa.Column("span", JSON, nullable=False),
        foreign_key("steps", "trajectory_id", "trajectories", cascade=True),
        primary_key("steps", "id"),
        unique("steps", "trajectory_id", "idx"),
    )
    op.create_table(
        "trajectory_tags",
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("tag_id", sa.Integer(), nullable=False),
        foreign_key("trajectory_tags", "tag_id", "tags", cascade=True),
        foreign_key("trajectory_tags", "trajectory_id", "trajectories", cascade=True),
        primary_key("trajectory_tags", "trajectory_id", "tag_id"),
    )
    create_indexes("trajectory_tags", ["tag_id", "trajectory_id"])

    op.create_table(
        "trajectory_tools",
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(length=100), nullable=False),
        foreign_key("trajectory_tools", "trajectory_id", "trajectories", cascade=True),
        primary_key("trajectory_tools", "trajectory_id", "tool"),
    )
    create_indexes("trajectory_tools", ["tool", "trajectory_id"])

    op.create_table(
        "analysis_arrays",
        sa.Column("analysis_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("dtype", sa.String(length=16), nullable=False),
        sa.Column("shape", JSON, nullable=False),
        sa.Column("data", BYTES, nullable=False),
        foreign_key("analysis_arrays", "analysis_id", "analyses", cascade=True),
        primary_key("analysis_arrays", "analysis_id", "name"),
    )
    op.create_table(
        "step_media",
        sa.Column("step_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("blob_sha256", sa.String(length=64), nullable=False),
        foreign_key("step_media", "blob_sha256", "blobs", parent_key="sha256"),
        foreign_key("step_media", "step_id", "steps", cascade=True),
        primary_key("step_media", "step_id", "position"),
    )


def downgrade() -> None:
    op.drop_table("step_media")
    op.drop_table("analysis_arrays")
    drop_indexes("trajectory_tools", ["tool", "trajectory_id"])
    op.drop_table("trajectory_tools")
    drop_indexes("trajectory_tags", ["tag_id", "trajectory_id"])
    op.drop_table("trajectory_tags")
    op.drop_table("steps")
    with op.batch_alter_table("labels", schema=None) as batch_op:
        for name, _, where in reversed(CURRENT_LABEL_INDEXES):
            batch_op.drop_index(name, sqlite_where=sa.text(where), postgresql_where=sa.text(where))
    drop_indexes("labels", ["trajectory_id", "step_idx"])
    op.drop_table("labels")
    drop_indexes("analyses", ["trajectory_id", "analyzer"])
    op.drop_table("analyses")
    drop_indexes(
        "trajectories",
        *(["run_id", column] for column in reversed(TRAJECTORY_RUN_INDEXES)),
        ["label"],
        ["case_id"],
    )
    op.drop_table("trajectories")
    drop_indexes("run_cases", ["case_id"])
    op.drop_table("run_cases")
    drop_indexes("jobs", ["status", "id"], ["run_id"])
    op.drop_table("jobs")
    drop_indexes("cases", ["case_key"])
    op.drop_table("cases")
    drop_indexes("workers", ["heartbeat_at"])
    op.drop_table("workers")
    op.drop_table("tags")
    drop_indexes("runs", ["status"])
    op.drop_table("runs")
    op.drop_table("blobs")
