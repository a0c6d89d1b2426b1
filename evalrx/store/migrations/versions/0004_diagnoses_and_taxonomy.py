"""Diagnoses and the failure taxonomy in the store; old failure-mode keys mapped to the one vocabulary.

`diagnoses` keeps each trajectory's ranked diagnoses (kind, first wrong step, evidence,
confidence, source); `trajectories.failure_kind` copies the top one's kind for the list's
filter and the dashboard's counts. `failure_kinds` is the taxonomy every app process shares
(built-in kinds seeded here, users' own added later, one key binding each). Labels written
with older keys (`looping`, `wrong_answer`, ...) are rewritten to the current ones; any other
key a label used becomes a custom kind, so no label loses its meaning. The `heuristic:*` tags
of the removed heuristics analyzer are dropped (diagnoses replace them).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

from evalrx.store.migrations._helpers import (
    JSON,
    add_columns,
    create_indexes,
    drop_columns,
    drop_indexes,
    foreign_key,
    primary_key,
    timestamp,
    unique,
)

# The vocabulary as this revision knew it (a migration imports nothing of evalrx, so it never changes).
BUILTIN_KINDS = [
    ("wrong_tool", "called a tool other than the one the task needed"),
    ("unknown_tool", "called a tool that does not exist"),
    ("bad_arguments", "called the right tool with wrong or missing arguments"),
    ("misread_observation", "copied a value from a tool's output wrongly into a call or the answer"),
    ("malformed_call", "wrote a tool call that could not be parsed"),
    ("ignored_observation", "answered against what the last relevant tool output said"),
    ("ignored_tool_error", "went on as if a call had succeeded after the tool reported an error"),
    ("repeated_calls", "made the same call again without making progress"),
    ("no_tool_call", "answered without calling a tool the task needed"),
    ("unneeded_tool_call", "called a tool the task did not need"),
    ("no_final_answer", "stopped, or ran out of turns, without a final answer"),
    ("wrong_final_answer", "used the tools well but gave a wrong final answer"),
    ("infra_error", "the model server or the harness failed (HTTP 5xx, timeout, crash): not a model failure"),
]
DEFAULT_HOTKEYS = {
    "bad_arguments": "1",
    "misread_observation": "2",
    "wrong_tool": "3",
    "no_tool_call": "4",
    "ignored_observation": "5",
    "malformed_call": "6",
    "repeated_calls": "7",
    "no_final_answer": "8",
    "wrong_final_answer": "9",
}
LEGACY_KINDS = {
    "repeated_identical_calls": "repeated_calls",
    "repeated_call": "repeated_calls",
    "looping": "repeated_calls",
    "observation_ignored": "ignored_observation",
    "tool_error": "ignored_tool_error",
    "hallucinated_tool": "unknown_tool",
    "malformed_tool_call": "malformed_call",
    "ran_out_of_turns": "no_final_answer",
    "out_of_turns": "no_final_answer",
    "no_answer": "no_final_answer",
    "run_error": "infra_error",
    "error": "infra_error",
    "wrong_arguments": "bad_arguments",
    "wrong_answer": "wrong_final_answer",
    "missing_call": "no_tool_call",
}

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns("trajectories", sa.Column("failure_kind", sa.String(length=100), nullable=True))
    create_indexes("trajectories", ["run_id", "failure_kind"])

    op.create_table(
        "diagnoses",
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=100), nullable=True),
        sa.Column("first_wrong_step", sa.Integer(), nullable=True),
        sa.Column("evidence", JSON, nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        timestamp("created_at", nullable=False),
        foreign_key("diagnoses", "trajectory_id", "trajectories", cascade=True),
        primary_key("diagnoses", "trajectory_id", "rank"),
    )
    create_indexes("diagnoses", ["kind"])

    kinds = op.create_table(
        "failure_kinds",
        sa.Column("key", sa.String(length=100), nullable=False),
        sa.Column("definition", sa.Text(), nullable=False),
        sa.Column("hotkey", sa.String(length=1), nullable=True),
        sa.Column("builtin", sa.Boolean(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        timestamp("created_at", nullable=False),
        primary_key("failure_kinds", "key"),
        unique("failure_kinds", "hotkey"),
    )
    bind = op.get_bind()
    now = datetime.now(timezone.utc)
    if bind.dialect.name == "sqlite":  # naive UTC text, as the store writes there
        now = now.replace(tzinfo=None)
    rows = [
        {"key": key, "definition": text, "hotkey": DEFAULT_HOTKEYS.get(key), "builtin": True, "position": i}
        for i, (key, text) in enumerate(BUILTIN_KINDS)
    ]

    labels = sa.table("labels", sa.column("failure_mode", sa.String))
    trajectories = sa.table("trajectories", sa.column("failure_mode", sa.String))
    for old, new in LEGACY_KINDS.items():
        for table in (labels, trajectories):
            bind.execute(table.update().where(table.c.failure_mode == old).values(failure_mode=new))
    builtin = {key for key, _ in BUILTIN_KINDS}
    used = bind.execute(sa.select(labels.c.failure_mode).where(labels.c.failure_mode.is_not(None)).distinct()).scalars()
    for key in sorted({u for u in used if u not in builtin}):
        rows.append({"key": key[:100], "definition": "", "hotkey": None, "builtin": False, "position": len(rows)})
    bind.execute(kinds.insert(), [dict(r, created_at=now) for r in rows])

    bind.execute(
        sa.text("DELETE FROM trajectory_tags WHERE tag_id IN (SELECT id FROM tags WHERE name LIKE 'heuristic:%')")
    )
    bind.execute(sa.text("DELETE FROM tags WHERE name LIKE 'heuristic:%'"))


def downgrade() -> None:
    op.drop_table("failure_kinds")
    drop_indexes("diagnoses", ["kind"])
    op.drop_table("diagnoses")
    drop_indexes("trajectories", ["run_id", "failure_kind"])
    drop_columns("trajectories", "failure_kind")
