"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 22:19:13.686168
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("mime", sa.String(length=100), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary().with_variant(postgresql.BYTEA(), "postgresql"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_blobs")),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("spec_key", sa.String(length=200), nullable=True),
        sa.Column("backend", sa.String(length=32), nullable=True),
        sa.Column(
            "config", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column(
            "meta", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("n_cases", sa.Integer(), nullable=False),
        sa.Column("n_done", sa.Integer(), nullable=False),
        sa.Column("n_pass", sa.Integer(), nullable=False),
        sa.Column("n_fail", sa.Integer(), nullable=False),
        sa.Column("n_error", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_status"), ["status"], unique=False)

    op.create_table(
        "tags",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tags")),
        sa.UniqueConstraint("name", name=op.f("uq_tags_name")),
    )
    op.create_table(
        "workers",
        sa.Column("id", sa.String(length=120), nullable=False),
        sa.Column("hostname", sa.String(length=200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
    )
    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_workers_heartbeat_at"), ["heartbeat_at"], unique=False)

    op.create_table(
        "cases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("case_key", sa.String(length=300), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column(
            "expected", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=True
        ),
        sa.Column(
            "grader", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=True
        ),
        sa.Column(
            "meta", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("image_sha256", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(["image_sha256"], ["blobs.sha256"], name=op.f("fk_cases_image_sha256_blobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cases")),
        sa.UniqueConstraint("digest", name=op.f("uq_cases_digest")),
    )
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_cases_case_key"), ["case_key"], unique=False)

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
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_jobs_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_jobs_run_id"), ["run_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_status_id"), ["status", "id"], unique=False)

    op.create_table(
        "run_cases",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["case_id"], ["cases.id"], name=op.f("fk_run_cases_case_id_cases")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_run_cases_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "case_id", name=op.f("pk_run_cases")),
        sa.UniqueConstraint("run_id", "position", name=op.f("uq_run_cases_run_id_position")),
    )
    with op.batch_alter_table("run_cases", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_cases_case_id"), ["case_id"], unique=False)

    op.create_table(
        "trajectories",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.Integer(), nullable=False),
        sa.Column("sample_id", sa.String(length=300), nullable=False),
        sa.Column("goal", sa.Text(), nullable=False),
        sa.Column("final_answer", sa.Text(), nullable=True),
        sa.Column(
            "ground_truth", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=True
        ),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("terminated", sa.String(length=32), nullable=False),
        sa.Column(
            "metrics", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
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
        sa.Column("labelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("search_text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["case_id"], ["cases.id"], name=op.f("fk_trajectories_case_id_cases")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_trajectories_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trajectories")),
        sa.UniqueConstraint("run_id", "case_id", name=op.f("uq_trajectories_run_id_case_id")),
    )
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_trajectories_case_id"), ["case_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_trajectories_label"), ["label"], unique=False)
        batch_op.create_index(batch_op.f("ix_trajectories_run_id_id"), ["run_id", "id"], unique=False)
        batch_op.create_index(batch_op.f("ix_trajectories_run_id_label"), ["run_id", "label"], unique=False)
        batch_op.create_index(batch_op.f("ix_trajectories_run_id_latency_ms"), ["run_id", "latency_ms"], unique=False)
        batch_op.create_index(batch_op.f("ix_trajectories_run_id_outcome"), ["run_id", "outcome"], unique=False)
        batch_op.create_index(batch_op.f("ix_trajectories_run_id_sample_id"), ["run_id", "sample_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_trajectories_run_id_terminated"), ["run_id", "terminated"], unique=False)

    op.create_table(
        "analyses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("step_idx", sa.Integer(), nullable=True),
        sa.Column("analyzer", sa.String(length=100), nullable=False),
        sa.Column(
            "meta", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["trajectory_id"],
            ["trajectories.id"],
            name=op.f("fk_analyses_trajectory_id_trajectories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_analyses")),
    )
    with op.batch_alter_table("analyses", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_analyses_trajectory_id_analyzer"), ["trajectory_id", "analyzer"], unique=False
        )

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
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("is_current", sa.Boolean(), nullable=False),
        sa.Column("superseded_by", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["superseded_by"], ["labels.id"], name=op.f("fk_labels_superseded_by_labels")),
        sa.ForeignKeyConstraint(
            ["trajectory_id"],
            ["trajectories.id"],
            name=op.f("fk_labels_trajectory_id_trajectories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_labels")),
    )
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_labels_trajectory_id_step_idx"), ["trajectory_id", "step_idx"], unique=False
        )
        batch_op.create_index(
            "uq_labels_current_step",
            ["trajectory_id", "step_idx"],
            unique=True,
            sqlite_where=sa.text("is_current AND step_idx IS NOT NULL"),
            postgresql_where=sa.text("is_current AND step_idx IS NOT NULL"),
        )
        batch_op.create_index(
            "uq_labels_current_trajectory",
            ["trajectory_id"],
            unique=True,
            sqlite_where=sa.text("is_current AND step_idx IS NULL"),
            postgresql_where=sa.text("is_current AND step_idx IS NULL"),
        )

    op.create_table(
        "steps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=8), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column(
            "tool_calls", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("tool_name", sa.String(length=100), nullable=True),
        sa.Column(
            "observation", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=True
        ),
        sa.Column("parse_error", sa.Text(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("flags", sa.String(length=200), nullable=True),
        sa.Column(
            "span", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["trajectory_id"], ["trajectories.id"], name=op.f("fk_steps_trajectory_id_trajectories"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_steps")),
        sa.UniqueConstraint("trajectory_id", "idx", name=op.f("uq_steps_trajectory_id_idx")),
    )
    op.create_table(
        "trajectory_tags",
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("tag_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tag_id"], ["tags.id"], name=op.f("fk_trajectory_tags_tag_id_tags"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["trajectory_id"],
            ["trajectories.id"],
            name=op.f("fk_trajectory_tags_trajectory_id_trajectories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("trajectory_id", "tag_id", name=op.f("pk_trajectory_tags")),
    )
    with op.batch_alter_table("trajectory_tags", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_trajectory_tags_tag_id_trajectory_id"), ["tag_id", "trajectory_id"], unique=False
        )

    op.create_table(
        "trajectory_tools",
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(length=100), nullable=False),
        sa.ForeignKeyConstraint(
            ["trajectory_id"],
            ["trajectories.id"],
            name=op.f("fk_trajectory_tools_trajectory_id_trajectories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("trajectory_id", "tool", name=op.f("pk_trajectory_tools")),
    )
    with op.batch_alter_table("trajectory_tools", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_trajectory_tools_tool_trajectory_id"), ["tool", "trajectory_id"], unique=False
        )

    op.create_table(
        "analysis_arrays",
        sa.Column("analysis_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("dtype", sa.String(length=16), nullable=False),
        sa.Column(
            "shape", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"), nullable=False
        ),
        sa.Column("data", sa.LargeBinary().with_variant(postgresql.BYTEA(), "postgresql"), nullable=False),
        sa.ForeignKeyConstraint(
            ["analysis_id"], ["analyses.id"], name=op.f("fk_analysis_arrays_analysis_id_analyses"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("analysis_id", "name", name=op.f("pk_analysis_arrays")),
    )
    op.create_table(
        "step_media",
        sa.Column("step_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("blob_sha256", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["blob_sha256"], ["blobs.sha256"], name=op.f("fk_step_media_blob_sha256_blobs")),
        sa.ForeignKeyConstraint(
            ["step_id"], ["steps.id"], name=op.f("fk_step_media_step_id_steps"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("step_id", "position", name=op.f("pk_step_media")),
    )


def downgrade() -> None:
    op.drop_table("step_media")
    op.drop_table("analysis_arrays")
    with op.batch_alter_table("trajectory_tools", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_trajectory_tools_tool_trajectory_id"))

    op.drop_table("trajectory_tools")
    with op.batch_alter_table("trajectory_tags", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_trajectory_tags_tag_id_trajectory_id"))

    op.drop_table("trajectory_tags")
    op.drop_table("steps")
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_labels_current_trajectory",
            sqlite_where=sa.text("is_current AND step_idx IS NULL"),
            postgresql_where=sa.text("is_current AND step_idx IS NULL"),
        )
        batch_op.drop_index(
            "uq_labels_current_step",
            sqlite_where=sa.text("is_current AND step_idx IS NOT NULL"),
            postgresql_where=sa.text("is_current AND step_idx IS NOT NULL"),
        )
        batch_op.drop_index(batch_op.f("ix_labels_trajectory_id_step_idx"))

    op.drop_table("labels")
    with op.batch_alter_table("analyses", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_analyses_trajectory_id_analyzer"))

    op.drop_table("analyses")
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_trajectories_run_id_terminated"))
        batch_op.drop_index(batch_op.f("ix_trajectories_run_id_sample_id"))
        batch_op.drop_index(batch_op.f("ix_trajectories_run_id_outcome"))
        batch_op.drop_index(batch_op.f("ix_trajectories_run_id_latency_ms"))
        batch_op.drop_index(batch_op.f("ix_trajectories_run_id_label"))
        batch_op.drop_index(batch_op.f("ix_trajectories_run_id_id"))
        batch_op.drop_index(batch_op.f("ix_trajectories_label"))
        batch_op.drop_index(batch_op.f("ix_trajectories_case_id"))

    op.drop_table("trajectories")
    with op.batch_alter_table("run_cases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_cases_case_id"))

    op.drop_table("run_cases")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_status_id"))
        batch_op.drop_index(batch_op.f("ix_jobs_run_id"))

    op.drop_table("jobs")
    with op.batch_alter_table("cases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_cases_case_key"))

    op.drop_table("cases")
    with op.batch_alter_table("workers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_workers_heartbeat_at"))

    op.drop_table("workers")
    op.drop_table("tags")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_status"))

    op.drop_table("runs")
    op.drop_table("blobs")
