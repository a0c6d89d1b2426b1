"""Saved MCP servers: the New run page's list, one `mcpServers` entry per name.

Entries are stored as given to `save_mcp_server` (an `McpServer.to_dict()`, whose secrets are
`${VAR}` names); a value whose key names a secret is refused here as well, so no caller can
put one in the store by mistake.
"""

from __future__ import annotations

from sqlalchemy import delete, select

from evalrx.core.secrets import has_env_reference, is_secret_name
from evalrx.store import convert
from evalrx.store import schema as t
from evalrx.store.engine import Store, changed_rows, resolve


def _check_no_secret(name: str, config: dict) -> None:
    for section in ("env", "headers"):
        for key, value in (config.get(section) or {}).items():
            if is_secret_name(key) and not has_env_reference(value):
                raise ValueError(
                    f"MCP server {name!r}: {section}.{key} holds a secret; write the secret part as ${{VAR}} "
                    '(e.g. "Bearer ${VAR}") and export VAR where the worker runs'
                )


def save_mcp_server(name: str, config: dict, *, store: "Store | str | None" = None) -> None:
    """Save (or replace) a named server entry.

    Raises:
        ValueError: no name, or a secret written as a value.
    """
    name = (name or "").strip()
    if not name:
        raise ValueError("an MCP server needs a name")
    if len(name) > 100:  # the column's width: PostgreSQL would refuse it with a traceback
        raise ValueError(f"an MCP server's name is at most 100 characters, not {len(name)}; shorten it")
    config = convert.jsonable(dict(config))
    _check_no_secret(name, config)
    with resolve(store).write() as s:
        row = s.get(t.McpServer, name)
        if row is None:
            s.add(t.McpServer(name=name, config=config))
        else:
            row.config = config


def list_mcp_servers(*, store: "Store | str | None" = None) -> "list[dict]":
    """Every saved server entry, by name."""
    with resolve(store).read() as s:
        rows = s.execute(select(t.McpServer).order_by(t.McpServer.name)).scalars()
        return [dict(row.config or {}, name=row.name) for row in rows]


def delete_mcp_server(name: str, *, store: "Store | str | None" = None) -> bool:
    with resolve(store).write() as s:
        return bool(changed_rows(s.execute(delete(t.McpServer).where(t.McpServer.name == name))))


__all__ = ["delete_mcp_server", "list_mcp_servers", "save_mcp_server"]
