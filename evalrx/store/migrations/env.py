"""Alembic environment for the evalrx store (run through `evalrx db upgrade`)."""

from __future__ import annotations

from alembic import context

from evalrx.store.engine import SchemaError, make_engine, migration_connection
from evalrx.store.schema import include_object, metadata

config = context.config


def _run(connection) -> None:
    # Batch mode: SQLite cannot ALTER most things, Alembic copies the table instead.
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=True,
        compare_type=True,
        include_object=include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise SchemaError("the migration config names no sqlalchemy.url; migrate with `evalrx db upgrade`")
    engine = make_engine(url)
    with migration_connection(engine) as conn:  # what `evalrx db upgrade` does too
        _run(conn)
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
