"""The kinds real data sets label: policy violations, invented facts, wrong goals, unsupported tasks, user errors.

Seeds them in `failure_kinds` as built-in kinds after the existing ones. A store whose users already
made a custom kind of one of these keys keeps its hotkey and gets the built-in definition.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# As this revision knew them (a migration imports nothing of evalrx, so it never changes).
NEW_KINDS = [
    (
        "policy_violation",
        "acted against a rule the system prompt or policy states (e.g. acted without a confirmation it requires)",
    ),
    ("invented_information", "stated a fact that no tool, user or document gave"),
    ("wrong_goal", "pursued another objective than the one the user asked for"),
    ("task_not_supported", "the request cannot be done with the tools at hand"),
    ("user_error", "the user's message was wrong, missing or changed: not the agent's failure (like infra_error)"),
]

_kinds = sa.table(
    "failure_kinds",
    sa.column("key", sa.String),
    sa.column("definition", sa.Text),
    sa.column("hotkey", sa.String),
    sa.column("builtin", sa.Boolean),
    sa.column("position", sa.Integer),
    sa.column("created_at", sa.DateTime(timezone=True)),
)


def upgrade() -> None:
    bind = op.get_bind()
    now = datetime.now(timezone.utc)
    if bind.dialect.name == "sqlite":  # naive UTC text, as the store writes there
        now = now.replace(tzinfo=None)
    existing = set(bind.execute(sa.select(_kinds.c.key)).scalars())
    last_builtin = bind.execute(sa.select(sa.func.max(_kinds.c.position)).where(_kinds.c.builtin.is_(True))).scalar()
    for i, (key, text) in enumerate(NEW_KINDS):
        position = (last_builtin or 0) + 1 + i
        if key in existing:
            bind.execute(
                _kinds.update().where(_kinds.c.key == key).values(definition=text, builtin=True, position=position)
            )
        else:
            bind.execute(
                _kinds.insert().values(
                    key=key, definition=text, hotkey=None, builtin=True, position=position, created_at=now
                )
            )


def downgrade() -> None:
    # Labels may use these keys now: they stay as custom kinds rather than disappear.
    bind = op.get_bind()
    bind.execute(_kinds.update().where(_kinds.c.key.in_([k for k, _ in NEW_KINDS])).values(builtin=False))
