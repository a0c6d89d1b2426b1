"""The `mcpServers` config: one `McpServer` per entry, checked when it is read, and the file that lists them.

The config is the JSON that Claude Desktop, Cursor and Inspect read::

    {"mcpServers": {
        "time": {"command": "python", "args": ["-m", "mcp_server_time"], "env": {"TZ": "UTC"}},
        "docs": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
                 "shareSession": true, "timeout": 10}}}

A `${VAR}` in an `env` or `headers` value stays unexpanded here (the stored config keeps it; a session
expands it when it starts, `evalrx.tools.mcp_servers`). A secret-looking key with a literal value is refused.
Reading a config needs no MCP SDK.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from evalrx.core.secrets import has_env_reference, is_secret_name

__all__ = ["DEFAULT_TIMEOUT_S", "MIN_START_S", "McpServer", "load_mcp_config"]

log = logging.getLogger("evalrx.worker")

DEFAULT_TIMEOUT_S = 30.0
MIN_START_S = 60.0  # a start may download its package (npx, uvx): a short call deadline must not fail it
_KNOWN_KEYS = {"command", "args", "env", "cwd", "url", "headers", "shareSession", "timeout", "type", "disabled"}
_HTTP_TYPES = ("http", "streamable-http", "streamableHttp", "streamable_http")


def _check_str_map(name: str, key: str, value: Any) -> dict[str, str]:
    """An `env` or `headers` object as a dict of strings; a literal secret is refused (write `${VAR}`)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f'MCP server {name!r}: "{key}" must be an object of strings, like {{"NAME": "value"}}')
    for k, v in value.items():
        if v and is_secret_name(k) and not has_env_reference(v):
            var = re.sub(r"[^A-Za-z0-9_]", "_", k).upper()
            raise ValueError(
                f'MCP server {name!r}: "{key}" value for {k} looks like a secret written literally; '
                f'write "${{{var}}}" and export {var} in the environment of the worker'
            )
    return dict(value)


@dataclass
class McpServer:
    """One MCP server: `command` (+ `args`, `env`, `cwd`) for stdio, or `url` (+ `headers`) for streamable HTTP.

    `env` and `headers` keep `${VAR}` references unexpanded; they are expanded when a session starts.
    `share_session` keeps one session open across cases (`McpSessionPool`); `timeout_s` is the deadline
    of each call (a start gets at least `MIN_START_S`).

    Raises:
        ValueError: one line naming the server, the key and the fix (neither or both of command and url,
            a literal secret, a bad type).
    """

    name: str
    command: Optional[str] = None
    args: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    cwd: Optional[str] = None
    url: Optional[str] = None
    headers: dict = field(default_factory=dict)
    share_session: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not name.strip():
            raise ValueError('an MCP server needs a name (the key under "mcpServers"), a non-empty string')
        if (self.command is None) == (self.url is None):
            both = "both" if self.command is not None else "neither"
            raise ValueError(
                f'MCP server {name!r} has {both} "command" and "url"; give "command" (stdio) or "url" (HTTP)'
            )
        if self.command is not None and (not isinstance(self.command, str) or not self.command.strip()):
            raise ValueError(f'MCP server {name!r}: "command" must be a non-empty string, like "npx" or "python"')
        if not isinstance(self.args, (list, tuple)) or not all(isinstance(a, str) for a in self.args):
            raise ValueError(f'MCP server {name!r}: "args" must be a list of strings')
        self.args = list(self.args)
        if self.cwd is not None and not isinstance(self.cwd, str):
            raise ValueError(f'MCP server {name!r}: "cwd" must be a string (a directory)')
        if self.url is not None and (not isinstance(self.url, str) or not self.url.startswith(("http://", "https://"))):
            raise ValueError(f'MCP server {name!r}: "url" must start with http:// or https://')
        if self.url is not None and self.env:
            raise ValueError(f'MCP server {name!r}: "env" applies to a command; an HTTP server takes "headers"')
        if self.command is not None and self.headers:
            raise ValueError(f'MCP server {name!r}: "headers" apply to a url; a command takes "env"')
        self.env = _check_str_map(name, "env", self.env)
        self.headers = _check_str_map(name, "headers", self.headers)
        if not isinstance(self.share_session, bool):
            raise ValueError(f'MCP server {name!r}: "shareSession" must be true or false')
        ok_timeout = isinstance(self.timeout_s, (int, float)) and not isinstance(self.timeout_s, bool)
        if not ok_timeout or not 0 < self.timeout_s <= 3600:
            raise ValueError(f'MCP server {name!r}: "timeout" must be a number of seconds between 0 and 3600')
        self.timeout_s = float(self.timeout_s)

    @property
    def transport(self) -> str:
        """ "stdio" or "http"."""
        return "stdio" if self.command is not None else "http"

    def to_dict(self) -> dict:
        """The server as JSON for a run's config: its `mcpServers` entry plus `"name"` (`${VAR}`s unexpanded)."""
        out: dict = {"name": self.name}
        if self.command is not None:
            out["command"] = self.command
            out["args"] = list(self.args)
            if self.env:
                out["env"] = dict(self.env)
            if self.cwd is not None:
                out["cwd"] = self.cwd
        else:
            out["url"] = self.url
            if self.headers:
                out["headers"] = dict(self.headers)
        if self.share_session:
            out["shareSession"] = True
        if self.timeout_s != DEFAULT_TIMEOUT_S:
            out["timeout"] = self.timeout_s
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], name: Optional[str] = None) -> "McpServer":
        """A server from its `mcpServers` entry (`name` is the entry's key) or from `to_dict()` output.

        Raises:
            ValueError: one line naming the server and the key.
        """
        name = name if name is not None else (d.get("name") if isinstance(d, Mapping) else None)
        if not isinstance(d, Mapping):
            raise ValueError(f'MCP server {name!r}: its entry must be an object with "command" or "url"')
        kind = d.get("type")
        if kind == "sse":
            raise ValueError(f'MCP server {name!r}: "type": "sse" is not supported; use its streamable HTTP url')
        if kind is not None and kind not in ("stdio", *_HTTP_TYPES):
            raise ValueError(f'MCP server {name!r}: unknown "type" {kind!r}; use "stdio" or "http" (or leave it out)')
        unknown = sorted(set(d) - _KNOWN_KEYS - {"name"})
        if unknown:  # other clients' keys (autoApprove, description) are harmless: noted, not refused
            log.debug("MCP server %r: ignoring config keys %s", name, unknown)
        return cls(
            name=name,  # type: ignore[arg-type]  # checked in __post_init__
            command=d.get("command"),
            args=d.get("args") or [],
            env=d.get("env") or {},
            cwd=d.get("cwd"),
            url=d.get("url"),
            headers=d.get("headers") or {},
            share_session=d.get("shareSession", False),
            timeout_s=d.get("timeout", DEFAULT_TIMEOUT_S),
        )


def load_mcp_config(source: "str | os.PathLike | Mapping[str, Any]") -> list[McpServer]:
    """The servers of an `mcpServers` config: a JSON file's path, its text, or the parsed dict.

    Entries with `"disabled": true` are skipped.

    Raises:
        ValueError: one line: the file missing, bad JSON, no `mcpServers` object, or a bad entry (naming it).
    """
    where = "MCP config"
    if isinstance(source, Mapping):
        data: Any = source
    else:
        text_given = isinstance(source, str) and (source.lstrip()[:1] in ("{", "[") or "\n" in source)
        if text_given:
            text = str(source)
        else:
            path = Path(source)
            where = f"MCP config {path}"
            try:
                is_file = path.is_file()
            except OSError:  # a name too long to be a file
                is_file = False
            if not is_file:
                raise ValueError(f'{where}: no such file; pass the path of a JSON file with an "mcpServers" object')
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"{where}: cannot be read ({type(exc).__name__}); check the file") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); fix the JSON"
            ) from None
    servers = data.get("mcpServers") if isinstance(data, Mapping) else None
    if not isinstance(servers, Mapping):
        raise ValueError(f'{where}: needs a top-level "mcpServers" object, like {{"mcpServers": {{"time": {{...}}}}}}')
    if not servers:
        raise ValueError(f'{where}: "mcpServers" is empty; add a server or leave the config out')
    out = []
    for name, entry in servers.items():
        if isinstance(entry, Mapping) and entry.get("disabled") is True:
            continue
        out.append(McpServer.from_dict(entry, name=name))
    return out
