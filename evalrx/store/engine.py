"""Engines, sessions, the schema-version check and the dialect-aware statements (`insert_ignore`).

SQLite (DESIGN.md §4): Python 3.11's sqlite3 runs in legacy transaction mode, so the
driver's own BEGIN is switched off (`isolation_level = None`) and SQLAlchemy's `begin`
event emits ours: `BEGIN IMMEDIATE` for sessions opened with `Store.write()` (the write
lock is taken up front, so read-then-write transactions never die with "database is
locked"), a plain deferred `BEGIN` for readers. WAL lets readers run beside one writer.
"""

from __future__ import annotations

import os
import re
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, cast

from sqlalchemy import create_engine, event, insert, inspect, select, text
from sqlalchemy.engine import CursorResult, Engine, Result, make_url
from sqlalchemy.orm import Session, sessionmaker

from evalrx.core import first_line
from evalrx.core.secrets import redact_url
from evalrx.store.schema import SCHEMA_VERSION

ENV_URL = "EVALRX_DATABASE_URL"
# Seconds a writer waits for SQLite's write lock before giving up.
SQLITE_BUSY_TIMEOUT_S = 60.0

_REPO = Path(__file__).resolve().parents[2]
DB_DIR = _REPO / "db"  # the default SQLite file, in a checkout
# Alembic's scripts ship inside the package, so an installed wheel can migrate a store.
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


class SchemaError(RuntimeError):
    """The store's schema is missing, older or newer than this code expects."""


class StoreUnwritable(SchemaError):
    """The store refused a write: a read-only file or database, a full disk (a SchemaError, so every
    place that turns a store problem into one line does so for this too)."""


# NUL and lone surrogates: PostgreSQL text and JSONB reject both, and UTF-8 cannot encode a lone surrogate.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """`text` with its NUL characters and lone surrogates replaced by U+FFFD (isascii is a flag check)."""
    if text.isascii() and "\x00" not in text:
        return text
    return _UNSTORABLE.sub("\ufffd", text)


def _unstorable(value: Any) -> bool:
    return type(value) is str and not (value.isascii() and "\x00" not in value) and bool(_UNSTORABLE.search(value))


def _storable(value: Any) -> Any:
    return storable_text(value) if type(value) is str else value


def storable_parameters(parameters: Any, executemany: bool) -> Any:
    """A statement's parameters with every unstorable text replaced: every statement binds through here, so text
    from any source (an import's ids and names) is stored, and looked up, as U+FFFD rather than failing. JSON
    values are bound serialized (escaped, or as psycopg's Jsonb): `convert.jsonable` cleans those before."""
    # Row sets come as a list; "insertmanyvalues" hands a batch as one flat tuple or dict with executemany set.
    many = executemany and isinstance(parameters, list)
    sets = parameters if many else [parameters]
    rows = [p.values() if isinstance(p, dict) else p for p in sets if p]
    if not any(_unstorable(v) for row in rows for v in row):
        return parameters
    fixed = [
        {k: _storable(v) for k, v in p.items()} if isinstance(p, dict) else type(p)(_storable(v) for v in p)
        for p in sets
    ]
    return fixed if many else fixed[0]


class StoreUnavailable(SchemaError):
    """The store could not be opened at all: a database server that is down or refuses us, a SQLite file on a full
    disk (its -wal and -shm files cannot be made) or in a folder it cannot write (a SchemaError, for the same reason)."""


# SQLite's extended result names and PostgreSQL's SQLSTATEs (read-only transaction, disk full) for "cannot write".
_SQLITE_UNWRITABLE = ("SQLITE_READONLY", "SQLITE_FULL")
_PG_UNWRITABLE = ("25006", "53100")
# Python 3.10's sqlite3 errors carry no `sqlite_errorname`: SQLite's own message for each name.
_SQLITE_MESSAGES = {
    "attempt to write a readonly database": "SQLITE_READONLY",
    "database or disk is full": "SQLITE_FULL",
    "database is locked": "SQLITE_BUSY",
    "database table is locked": "SQLITE_LOCKED",
    "unable to open database file": "SQLITE_CANTOPEN",
    "disk i/o error": "SQLITE_IOERR",
}


def _sqlite_name(orig: Any) -> Optional[str]:
    """A sqlite3 error's result name ("SQLITE_READONLY"), "" for another sqlite3 error, None for another driver."""
    if type(orig).__module__ != "sqlite3":
        return None
    name = getattr(orig, "sqlite_errorname", None)
    if name:
        return str(name)
    text_ = str(orig).strip().lower()
    return next((n for m, n in _SQLITE_MESSAGES.items() if text_.startswith(m)), "")


def unwritable(exc: BaseException, display_url: str) -> Optional[StoreUnwritable]:
    """The one-line `StoreUnwritable` for a driver error that says the store cannot be written, else None."""
    orig = getattr(exc, "orig", None)
    if orig is None:
        return None
    name = _sqlite_name(orig) or ""
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None) or ""
    if not (name.startswith(_SQLITE_UNWRITABLE) or state.startswith(_PG_UNWRITABLE)):
        return None
    return StoreUnwritable(
        f"the store at {display_url} cannot be written ({first_line(orig)}); nothing was changed: "
        "free disk space or make the store writable, then try again"
    )


# SQLite's busy/locked/cannot-open and PostgreSQL's connection and shutdown SQLSTATEs (classes 08 and 57P).
_SQLITE_AWAY = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_CANTOPEN", "SQLITE_IOERR")
_PG_AWAY = ("08", "57P")


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the database could not be reached just now (a server restarting, a dropped
    connection, a locked file): worth waiting out and retrying, unlike a bad query or a refused write."""
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if not isinstance(exc, (OperationalError, InterfaceError)):
        return False
    orig = getattr(exc, "orig", None)
    name = _sqlite_name(orig)
    if name is not None:
        return name.startswith(_SQLITE_AWAY)
    state = getattr(orig, "sqlstate", None)
    return state is None or str(state).startswith(_PG_AWAY)  # no state: the connection itself failed


def default_url() -> str:
    """The store URL: `$EVALRX_DATABASE_URL`, else a SQLite file `db/evalrx.sqlite` in the checkout."""
    env = os.environ.get(ENV_URL)
    if env:
        return env
    folder = DB_DIR if DB_DIR.is_dir() else Path.home() / ".local" / "share" / "evalrx"
    return f"sqlite:///{folder / 'evalrx.sqlite'}"


def _normalise(url: str) -> str:
    """Accept `postgresql://` and `postgres://` for the psycopg 3 driver we ship."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


def make_engine(url: str, **kw: Any) -> Engine:
    """Create an engine configured for the store (SQLite pragmas and BEGIN handling included).

    Args:
        url: a SQLAlchemy URL (`sqlite:///path`, `postgresql://user@host:port/db`).
        **kw: extra `create_engine` arguments.
    """
    url = _normalise(url)
    try:
        parsed = make_url(url)
        parsed.get_dialect()
    except Exception:  # NoSuchModuleError, ArgumentError: say what a store URL looks like
        shown = re.sub(r"//[^/@]*@", "//***@", url)  # never echo a password
        raise SchemaError(
            f"{shown!r} is not a store URL this evalrx can open; use sqlite:///path/to/evalrx.sqlite "
            "or postgresql+psycopg://user@host/db"
        ) from None
    if parsed.get_backend_name() != "sqlite":
        kw.setdefault("pool_pre_ping", True)
        return _storing_text(create_engine(url, **kw))

    if parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)  # a `file:` URI (uri=true) is opened as given
    connect_args = dict(kw.pop("connect_args", {}))
    connect_args.setdefault("timeout", SQLITE_BUSY_TIMEOUT_S)
    connect_args.setdefault("check_same_thread", False)
    engine = create_engine(url, connect_args=connect_args, **kw)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (see module doc)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        write = conn.get_execution_options().get("evalrx_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return _storing_text(engine)


def _storing_text(engine: Engine) -> Engine:
    """`engine`, binding every text it is given as text the database can keep (`storable_parameters`)."""

    @event.listens_for(engine, "before_cursor_execute", retval=True)
    def _before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> Any:
        return statement, storable_parameters(parameters, executemany)

    return engine


class Store:
    """A store at one URL: its engine plus read and write session factories.

    Use `connect()` rather than building one: stores are cached per URL.
    """

    def __init__(self, url: str, engine: Optional[Engine] = None) -> None:
        self.url = _normalise(url)
        self.engine = engine or make_engine(self.url)
        self.dialect = self.engine.dialect.name
        self._schema_ok = False
        self._read = sessionmaker(bind=self.engine, expire_on_commit=False)
        self._write = sessionmaker(bind=self.engine.execution_options(evalrx_write=True), expire_on_commit=False)

    @property
    def display_url(self) -> str:
        """The URL with its user and password masked (safe for messages and logs): SQLAlchemy's own masking
        shows the tail of a password with an unescaped `@` as the host."""
        return redact_url(self.engine.url.render_as_string(hide_password=False))

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session in a read transaction (one consistent snapshot); rolled back at the end."""
        with self._read() as session:
            with session.begin():
                yield session
                session.rollback()

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session in a write transaction (`BEGIN IMMEDIATE` on SQLite); committed on success.

        Raises:
            StoreUnwritable: the store refused the write (read-only, disk full); the transaction rolled back.
        """
        from sqlalchemy.exc import DBAPIError

        try:
            with self._write() as session:
                with session.begin():
                    yield session
        except DBAPIError as exc:
            refused = unwritable(exc, self.display_url)
            if refused is None:
                raise
            raise refused from None

    def schema_revision(self) -> Optional[str]:
        """The Alembic revision the database is at, or None for an empty database.

        Raises:
            StoreUnavailable: no connection could be made (nothing was read or written).
        """
        from sqlalchemy.exc import OperationalError

        try:
            with self.engine.connect() as conn:
                if not inspect(conn).has_table("alembic_version"):
                    return None
                rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
                conn.rollback()
        except OperationalError as exc:
            raise StoreUnavailable(
                f"the store at {self.display_url} cannot be opened ({first_line(exc.orig or exc)}): start its database "
                "server, free disk space or fix --url / $EVALRX_DATABASE_URL, then try again"
            ) from None
        return rows[0] if rows else None

    def check_schema(self) -> None:
        """Raise `SchemaError` unless the database is at this code's schema version."""
        if self._schema_ok:  # checked once per process; a schema does not go back
            return
        rev = self.schema_revision()
        if rev == SCHEMA_VERSION:
            self._schema_ok = True
            return
        if rev is None:
            raise SchemaError(
                f"The store at {self.display_url} has no evalrx schema yet. Run `evalrx db upgrade` first."
            )
        if rev < SCHEMA_VERSION:
            raise SchemaError(
                f"The store at {self.display_url} is at schema {rev}, older than this evalrx "
                f"({SCHEMA_VERSION}). Run `evalrx db upgrade` first."
            )
        raise SchemaError(
            f"The store at {self.display_url} is at schema {rev}, newer than this evalrx "
            f"({SCHEMA_VERSION}). Upgrade evalrx."
        )

    def dispose(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Store({self.display_url!r})"


_STORES: dict[str, Store] = {}
_LOCK = threading.Lock()


def connect(url: Optional[str] = None, *, check: bool = True) -> Store:
    """Return the (cached) store at `url`, by default `default_url()`.

    Args:
        url: a SQLAlchemy URL; None reads `$EVALRX_DATABASE_URL` or uses the default file.
        check: verify the schema is current (raises `SchemaError` naming `evalrx db upgrade`).
    """
    key = _normalise(url or default_url())
    with _LOCK:
        store = _STORES.get(key)
        if store is None:
            store = _STORES[key] = Store(key)
    if check:
        store.check_schema()
    return store


def forget(url: Optional[str] = None) -> None:
    """Drop cached stores (all when `url` is None), disposing their connections."""
    with _LOCK:
        keys = list(_STORES) if url is None else [_normalise(url)]
        for k in keys:
            store = _STORES.pop(k, None)
            if store is not None:
                store.dispose()


def resolve(store: "Store | str | None") -> Store:
    """Accept a Store, a URL or None (the default store) wherever functions take `store=`."""
    if isinstance(store, Store):
        return store
    return connect(store)


def changed_rows(result: Result) -> int:
    """How many rows an UPDATE or DELETE changed (`Session.execute` types its CursorResult as a plain Result)."""
    return cast(CursorResult, result).rowcount


def dialect_insert(dialect: str) -> Any:
    """The dialect's own `insert` (PostgreSQL's or SQLite's), which has `on_conflict_do_nothing`."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert
    from sqlalchemy.dialects import sqlite

    return sqlite.insert


def insert_ignore(session: Session, model: Any, values: dict, key: Sequence[str]) -> None:
    """INSERT a row unless one with the same `key` columns exists (race-free on PostgreSQL too)."""
    dialect = session.get_bind().dialect.name
    if dialect not in ("postgresql", "sqlite"):  # pragma: no cover - other databases are not supported targets
        if session.execute(select(model).filter_by(**{k: values[k] for k in key})).first() is None:
            session.execute(insert(model), [values])
        return
    stmt = dialect_insert(dialect)(model).values(**values).on_conflict_do_nothing(index_elements=list(key))
    session.execute(stmt)


@contextmanager
def migration_connection(engine: Engine) -> Iterator[Any]:
    """A connection in one write transaction for migrations (`BEGIN IMMEDIATE` on SQLite).

    On SQLite, foreign keys are switched off outside the transaction (SQLite's procedure
    for changing a table: batch mode copies and drops it, and dropping a parent table
    with foreign keys on would cascade into its children) and checked with
    `foreign_key_check` before the commit.
    """
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as conn:
        if sqlite:
            conn.connection.cursor().execute("PRAGMA foreign_keys=OFF")
        try:
            with conn.execution_options(evalrx_write=True).begin():
                yield conn
                if sqlite:
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise SchemaError(f"migration left rows with broken foreign keys: {broken[:5]}")
        finally:
            if sqlite:
                conn.connection.cursor().execute("PRAGMA foreign_keys=ON")


def upgrade(url: Optional[str] = None, revision: str = "head") -> str:
    """Bring the store's schema up to `revision` with Alembic (`evalrx db upgrade`).

    Safe to run concurrently and repeatedly: the migration runs in a write transaction.

    Args:
        url: the store URL; None for the default.
        revision: an Alembic revision (default "head").

    Returns:
        The revision the store is at afterwards.
    """
    return _migrate(url, revision, down=False)


def downgrade(url: Optional[str], revision: str) -> str:
    """Take the store's schema back to `revision` (what a newer revision added is dropped)."""
    return _migrate(url, revision, down=True)


def _migrate(url: Optional[str], revision: str, *, down: bool) -> str:
    from alembic import command
    from alembic.config import Config

    target = _normalise(url or default_url())
    store = connect(target, check=False)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", target.replace("%", "%%"))
    with migration_connection(store.engine) as conn:
        cfg.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(cfg, revision)
    return store.schema_revision() or ""


def sqlite_file(url: Optional[str]) -> Optional[Path]:
    """The absolute path of a SQLite store's file, or None (another database, in memory, or a bad URL)."""
    if not url:
        return None
    try:
        parsed = make_url(url)
    except Exception:  # the worker reports a bad URL itself
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).absolute()
