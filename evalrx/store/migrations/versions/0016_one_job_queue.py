"""One job queue: `jobs` holds the queue state of every kind of background work (`kind`: run, judge, analysis);
judge jobs and analysis requests keep what to do and point at their job (`job_id`). Each existing judge job and
analysis request gets a jobs row with its status, worker, progress, cancel flag, error and times.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# What moves from each table to its jobs row: (its column, the jobs column).
JUDGE_STATE = (
    ("status", "status"),
    ("worker_id", "worker_id"),
    ("progress_done", "progress_done"),
    ("progress_total", "progress_total"),
    ("cancel_requested", "cancel_requested"),
    ("error", "error"),
    ("created_at", "created_at"),
    ("started_at", "claimed_at"),
    ("finished_at", "finished_at"),
)
ANALYSIS_STATE = (
    ("status", "status"),
    ("worker_id", "worker_id"),
    ("error", "error"),
    ("created_at", "created_at"),
    ("started_at", "claimed_at"),
    ("finished_at", "finished_at"),
)


def _move_state(table: str, kind: str, state: tuple) -> None:
    """Give each row of `table` a jobs row of `kind` with its queue state (one insert and one update a row)."""
    conn = op.get_bind()
    cols = ", ".join(c for c, _ in state)
    for row in conn.execute(sa.text(f"SELECT id, {cols} FROM {table} ORDER BY id")).mappings().all():
        values = {dst: row[src] for src, dst in state}
        values.setdefault("progress_done", 0)
        values.setdefault("progress_total", 0)
        values["cancel_requested"] = bool(values.get("cancel_requested") or False)
        names = ", ".join(values)
        params = ", ".join(f":{k}" for k in values)
        job_id = conn.execute(
            sa.text(
                f"INSERT INTO jobs (kind, attempts, idle_claims, {names}) VALUES (:kind, 0, 0, {params}) RETURNING id"
            ),
            dict(values, kind=kind),
        ).scalar_one()
        conn.execute(sa.text(f"UPDATE {table} SET job_id = :job WHERE id = :id"), {"job": job_id, "id": row["id"]})


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("kind", sa.String(length=16), server_default="run", nullable=False))
        batch_op.alter_column("run_id", existing_type=sa.Integer(), nullable=True)
        batch_op.drop_index("ix_jobs_status_id")
        batch_op.create_index("ix_jobs_kind_status_id", ["kind", "status", "id"], unique=False)
    for table in ("judge_jobs", "analysis_requests"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("job_id", sa.Integer(), nullable=True))
    _move_state("judge_jobs", "judge", JUDGE_STATE)
    _move_state("analysis_requests", "analysis", ANALYSIS_STATE)
    with op.batch_alter_table("judge_jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_judge_jobs_status_id")
        for col, _ in JUDGE_STATE:
            if col != "created_at":
                batch_op.drop_column(col)
        batch_op.alter_column("job_id", existing_type=sa.Integer(), nullable=False)
        batch_op.create_foreign_key("fk_judge_jobs_job_id_jobs", "jobs", ["job_id"], ["id"], ondelete="CASCADE")
        batch_op.create_index("ix_judge_jobs_job_id", ["job_id"], unique=True)
    with op.batch_alter_table("analysis_requests", schema=None) as batch_op:
        batch_op.drop_index("ix_analysis_requests_status_id")
        for col, _ in ANALYSIS_STATE:
            if col != "created_at":
                batch_op.drop_column(col)
        batch_op.alter_column("job_id", existing_type=sa.Integer(), nullable=False)
        batch_op.create_foreign_key("fk_analysis_requests_job_id_jobs", "jobs", ["job_id"], ["id"], ondelete="CASCADE")
        batch_op.create_index("ix_analysis_requests_job_id", ["job_id"], unique=True)


# The columns 0013 and 0003 made, given back on a downgrade: (name, type, nullable).
STATE_TYPES: "dict[str, tuple[sa.types.TypeEngine, bool]]" = {
    "status": (sa.String(length=16), False),
    "worker_id": (sa.String(length=120), True),
    "progress_done": (sa.Integer(), False),
    "progress_total": (sa.Integer(), False),
    "cancel_requested": (sa.Boolean(), False),
    "error": (sa.Text(), True),
    "started_at": (sa.DateTime(timezone=True), True),
    "finished_at": (sa.DateTime(timezone=True), True),
}


def _restore_state(table: str, state: tuple) -> None:
    cols = [(src, dst) for src, dst in state if src != "created_at"]
    with op.batch_alter_table(table, schema=None) as batch_op:
        for src, _ in cols:
            batch_op.add_column(sa.Column(src, STATE_TYPES[src][0], nullable=True))
    sets = ", ".join(f"{src} = (SELECT j.{dst} FROM jobs j WHERE j.id = {table}.job_id)" for src, dst in cols)
    op.get_bind().execute(sa.text(f"UPDATE {table} SET {sets}"))
    with op.batch_alter_table(table, schema=None) as batch_op:
        batch_op.drop_index(f"ix_{table}_job_id")
        batch_op.drop_constraint(f"fk_{table}_job_id_jobs", type_="foreignkey")
        batch_op.drop_column("job_id")
        for src, _ in cols:
            typ, nullable = STATE_TYPES[src]
            if not nullable:
                batch_op.alter_column(src, existing_type=typ, nullable=False)
        batch_op.create_index(f"ix_{table}_status_id", ["status", "id"], unique=False)


def downgrade() -> None:
    _restore_state("judge_jobs", JUDGE_STATE)
    _restore_state("analysis_requests", ANALYSIS_STATE)
    op.get_bind().execute(sa.text("DELETE FROM jobs WHERE kind <> 'run'"))
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_kind_status_id")
        batch_op.create_index("ix_jobs_status_id", ["status", "id"], unique=False)
        batch_op.alter_column("run_id", existing_type=sa.Integer(), nullable=False)
        batch_op.drop_column("kind")
