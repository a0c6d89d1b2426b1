"""Tools from MCP servers: a session per case (or shared), and each call's observation.

The servers come from an `mcpServers` config (`McpServer`, `load_mcp_config`: `evalrx.config.mcp`).
A `${VAR}` in an `env` or `headers` value is expanded only when a session starts, from the environment of
the process that starts it (the worker). The SDK is async: each `McpToolbox` runs one event loop on a daemon
thread and its tools' `fn` submit calls to it, so the agent loop calls them like any other tool. A failed call
(an error result, a server that hung past its deadline or crashed) raises `McpToolError`, which the agent
loop's executor turns into an error observation. `mcp` is imported only when a session starts.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import io
import json
import logging
import os
import re
import threading
from typing import Any, Iterable, Mapping, Optional

from evalrx.config.mcp import MIN_START_S, McpServer, load_mcp_config
from evalrx.core.secrets import ENV_REFERENCE
from evalrx.core.tool import Tool, ToolResult

__all__ = [
    "McpServer",
    "McpServerError",
    "McpSessionPool",
    "McpToolError",
    "McpToolbox",
    "load_mcp_config",
    "open_mcp_tools",
]

log = logging.getLogger("evalrx.worker")

INSTALL_HINT = "pip install 'evalrx[tools]' (the MCP SDK)"
_CLOSE_WAIT_S = 15.0  # the SDK's stdio shutdown is bounded near 5 s (stdin close, SIGTERM, SIGKILL)
_LIST_PAGES = 100
_CONNECTION_CLOSED = -32000  # JSON-RPC code the SDK gives pending requests when the server goes away


class McpServerError(RuntimeError):
    """A server that could not start or list its tools (one line: the server, what happened, the fix)."""


class McpToolError(RuntimeError):
    """A tool call that failed: an error result, a deadline passed, a server that went away.

    Raised by an MCP tool's `fn`; the agent loop's executor turns it into an error observation.
    """


def _expand(name: str, key: str, values: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """`values` with each `${VAR}` replaced from `environ`; a VAR that is not set is a one-line error."""

    def one(k: str, v: str) -> str:
        def sub(m: re.Match) -> str:
            var = m.group(1)
            if var not in environ:
                raise McpServerError(
                    f'MCP server {name!r}: "{key}" {k} needs ${{{var}}}, which is not set; '
                    f"export {var} in the environment of the worker (or of this process)"
                )
            return environ[var]

        return ENV_REFERENCE.sub(sub, v)

    return {k: one(k, v) for k, v in values.items()}


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (nested) exception groups."""
    while getattr(exc, "exceptions", None):  # duck-typed: Python 3.10 has only the exceptiongroup backport
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


def _describe(exc: BaseException) -> str:
    exc = _leaf(exc)
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _stderr_to_log(name: str) -> Any:
    """A writable pipe for a server's stderr; a daemon thread logs each line to `evalrx.worker`."""
    read_fd, write_fd = os.pipe()

    def pump() -> None:
        with os.fdopen(read_fd, "r", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if line.strip():
                    log.info("[mcp %s] %s", name, line.rstrip())

    threading.Thread(target=pump, name=f"mcp-stderr-{name}", daemon=True).start()
    return os.fdopen(write_fd, "w")


def _image(data: str, mime: str) -> Any:
    """A PIL image from base64 data, or None when it cannot be decoded."""
    from PIL import Image

    try:
        img = Image.open(io.BytesIO(base64.b64decode(data)))
        img.load()
        return img
    except Exception:  # a bad image is reported in the text, not raised
        return None


def _observation(result: Any, server: str, tool: str) -> Any:
    """A `CallToolResult` as the tool's return value: text (str), or a `ToolResult` when it carries images.

    Text blocks are joined with newlines; structured content is compact JSON when no block is text; images,
    resources and audio leave a short placeholder in the text.

    Raises:
        McpToolError: the result is an error (`is_error`), with its text.
    """
    parts: list[str] = []
    images: list = []
    has_text = False
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
            has_text = True
        elif kind == "image":
            img = _image(block.data, block.mime_type)
            if img is None:
                parts.append(f"[image {block.mime_type}: could not be decoded]")
            else:
                images.append(img)
                parts.append(f"[image {block.mime_type} {img.width}x{img.height}]")
        elif kind == "audio":
            parts.append(f"[audio {block.mime_type}: not shown]")
        elif kind == "resource":
            res = block.resource
            parts.append(f"[resource {res.uri} ({getattr(res, 'mime_type', None) or 'unknown type'}): not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content: not shown]")
    if not has_text and result.structured_content is not None:
        parts.insert(0, json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False, default=str))
    text = "\n".join(parts)
    if result.is_error:
        raise McpToolError(text or f"MCP server {server!r} reported an error in {tool!r} without a message")
    if images:
        return ToolResult(text=text, images=images, meta={"mcp_server": server})
    return text


class _Session:
    """One server's session, living on the toolbox's event loop: started, listed, called, stopped."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.client: Any = None
        self.broken: Optional[str] = None  # why later calls are refused at once
        self.task: Optional[asyncio.Task] = None
        self._stop: Optional[asyncio.Event] = None

    @property
    def start_s(self) -> float:
        return max(self.server.timeout_s, MIN_START_S)

    async def start(self) -> list:
        """Start the server and list its tools; raises McpServerError (the session is stopped first)."""
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        ready: asyncio.Future = loop.create_future()
        self.task = asyncio.create_task(self._serve(ready), name=f"mcp-{self.server.name}")
        try:
            return await asyncio.wait_for(asyncio.shield(ready), self.start_s)
        except asyncio.TimeoutError:
            await self.stop()
            raise McpServerError(
                f"MCP server {self.server.name!r} did not start and list its tools within {self.start_s:g} s; "
                'check its command (its stderr is in the evalrx.worker log) or raise its "timeout"'
            ) from None
        except McpServerError:
            await self.stop()
            raise
        except BaseException as exc:
            await self.stop()
            if isinstance(exc, asyncio.CancelledError):
                raise
            hint = "check its command and args" if self.server.transport == "stdio" else "check the url and headers"
            raise McpServerError(
                f"MCP server {self.server.name!r} could not start: {_describe(exc)}; {hint} "
                "(its stderr is in the evalrx.worker log)"
            ) from None

    async def _serve(self, ready: asyncio.Future) -> None:
        """Hold the connection open until `stop()`: the SDK's contexts must exit in the task that entered them."""
        from contextlib import AsyncExitStack

        try:
            from mcp import Client
        except ImportError:
            ready.set_exception(McpServerError(f"MCP servers need the MCP SDK: {INSTALL_HINT}"))
            return
        server = self.server
        try:
            async with AsyncExitStack() as stack:
                errlog = None
                if server.transport == "stdio":
                    from mcp.client.stdio import StdioServerParameters, stdio_client

                    params = StdioServerParameters(
                        command=server.command,  # type: ignore[arg-type]
                        args=server.args,
                        env=_expand(server.name, "env", server.env, os.environ) or None,
                        cwd=server.cwd,
                    )
                    errlog = _stderr_to_log(server.name)
                    transport: Any = stdio_client(params, errlog=errlog)
                else:
                    from mcp.client.streamable_http import streamable_http_client
                    from mcp.shared._httpx_utils import create_mcp_http_client  # the SDK's own timeouts, plus headers

                    headers = _expand(server.name, "headers", server.headers, os.environ)
                    http = await stack.enter_async_context(create_mcp_http_client(headers=headers or None))
                    transport = streamable_http_client(server.url, http_client=http)  # type: ignore[arg-type]
                log.info("starting MCP server %r (%s)", server.name, server.command or "http")
                try:
                    client = await stack.enter_async_context(Client(transport))
                finally:
                    if errlog is not None:
                        errlog.close()  # the child holds its own copy; ours would keep the pump from seeing EOF
                tools = await self._list(client)
                self.client = client
                ready.set_result(tools)
                await self._stop.wait()  # type: ignore[union-attr]
        except BaseException as exc:
            if not ready.done():
                if isinstance(exc, asyncio.CancelledError):  # stopped while starting: start() reports it
                    ready.cancel()
                else:
                    ready.set_exception(exc if isinstance(exc, McpServerError) else RuntimeError(_describe(exc)))
            elif not isinstance(exc, asyncio.CancelledError):
                self.broken = self.broken or f"the session ended: {_describe(exc)}"
                log.warning("MCP server %r: session ended with %s", server.name, _describe(exc))
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            self.client = None

    @staticmethod
    async def _list(client: Any) -> list:
        tools: list = []
        cursor = None
        for _ in range(_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def call(self, tool: str, args: dict) -> Any:
        """One call, within the server's deadline; a hang or a lost connection breaks the session."""
        name = self.server.name
        if self.broken or self.client is None:
            raise McpToolError(f"MCP server {name!r} is unavailable ({self.broken or 'not started'}); not called")
        try:
            result = await asyncio.wait_for(self.client.call_tool(tool, args), self.server.timeout_s)
        except asyncio.TimeoutError:
            self._break(f"no answer to {tool!r} within {self.server.timeout_s:g} s")
            raise McpToolError(
                f"MCP server {name!r} did not answer within {self.server.timeout_s:g} s; "
                "its session is closed for the rest of this case"
            ) from None
        except Exception as exc:
            leaf = _leaf(exc)
            code = getattr(leaf, "code", None)
            if type(leaf).__name__ == "ValidationError":  # a malformed result spoils that call only
                raise McpToolError(f"MCP server {name!r} sent a malformed result: {_describe(leaf)}") from None
            if isinstance(code, int) and code != _CONNECTION_CLOSED:  # a JSON-RPC error (unknown tool, bad params)
                raise McpToolError(f"MCP server {name!r} refused the call: {_describe(leaf)}") from None
            self._break(f"the connection was lost: {_describe(leaf)}")
            raise McpToolError(
                f"MCP server {name!r} went away during {tool!r} ({_describe(leaf)}); "
                "its tools are unavailable for the rest of this case"
            ) from None
        return _observation(result, name, tool)

    def _break(self, why: str) -> None:
        """Refuse later calls and stop the server now, in the background (close() waits for it)."""
        self.broken = self.broken or why
        log.warning("MCP server %r: %s; closing its session", self.server.name, why)
        if self._stop is not None:
            self._stop.set()

    async def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self.task is not None and not self.task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self.task), _CLOSE_WAIT_S)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self.task.cancel()
                await asyncio.gather(self.task, return_exceptions=True)


def _annotations(mcp_tool: Any) -> dict:
    """The tool's hints that are set, snake_case (`read_only_hint`, `destructive_hint`, ...)."""
    ann = getattr(mcp_tool, "annotations", None)
    if ann is None:
        return {}
    return {k: v for k, v in ann.model_dump(by_alias=False).items() if v is not None}


class McpToolbox:
    """The tools of one or more running MCP servers, and the sessions behind them.

    `tools` are `Tool(source="mcp", origin=<server name>)` whose `fn(**arguments)` calls the server and
    returns its text (a `ToolResult` when there are images) or raises `McpToolError`. `close()` (or leaving
    the `with` block) stops every server; it is safe to call twice.
    """

    def __init__(self, tools: Optional[list] = None) -> None:
        self.tools: list[Tool] = list(tools or [])
        self._sessions: list[_Session] = []
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self._lock = threading.Lock()

    @property
    def servers(self) -> list[str]:
        """The names of the servers this toolbox started."""
        return [s.server.name for s in self._sessions]

    @property
    def broken(self) -> dict[str, str]:
        """`{server name: why}` for each session that hung, crashed or ended."""
        return {s.server.name: s.broken for s in self._sessions if s.broken}

    @property
    def closed(self) -> bool:
        return self._closed

    def _submit(self, coro: Any, timeout: float) -> Any:
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def _open(self, servers: list[McpServer]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-toolbox", daemon=True)
        self._thread.start()
        self._sessions = [_Session(s) for s in servers]
        listings = self._submit(self._start_all(), max(s.start_s for s in self._sessions) + _CLOSE_WAIT_S + 5)
        owner: dict[str, str] = {t.name: t.origin for t in self.tools}
        for session, listing in zip(self._sessions, listings):
            for mcp_tool in listing:
                if mcp_tool.name in owner:
                    raise ValueError(
                        f"MCP servers {owner[mcp_tool.name]!r} and {session.server.name!r} both offer a tool named "
                        f"{mcp_tool.name!r}; remove one of them from the config"
                    )
                owner[mcp_tool.name] = session.server.name
                self.tools.append(self._tool(session, mcp_tool))

    async def _start_all(self) -> list:
        results = await asyncio.gather(*(s.start() for s in self._sessions), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results

    def _tool(self, session: _Session, mcp_tool: Any) -> Tool:
        tool_name = mcp_tool.name
        deadline = session.server.timeout_s + _CLOSE_WAIT_S

        def call(**arguments: Any) -> Any:
            if self._closed:
                raise McpToolError(f"the MCP toolbox is closed; {tool_name!r} was not called")
            try:
                return self._submit(session.call(tool_name, arguments), deadline)
            except concurrent.futures.TimeoutError:  # the loop itself is stuck: give up on the session
                session.broken = session.broken or "the event loop did not answer"
                raise McpToolError(f"MCP server {session.server.name!r} did not answer; not called") from None

        call.__name__ = tool_name
        call.__doc__ = mcp_tool.description
        schema = mcp_tool.input_schema or {"type": "object", "properties": {}}
        return Tool(
            name=tool_name,
            description=mcp_tool.description or getattr(mcp_tool, "title", None) or "",
            parameters=dict(schema),
            fn=call,
            source="mcp",
            origin=session.server.name,
            annotations=_annotations(mcp_tool),
        )

    def close(self) -> None:
        """Stop every server this toolbox started (no child process is left) and the event loop."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        loop, thread = self._loop, self._thread
        if loop is None:
            return
        if self._sessions and thread is not None and thread.is_alive():

            async def stop_all() -> None:
                await asyncio.gather(*(s.stop() for s in self._sessions), return_exceptions=True)

            try:
                self._submit(stop_all(), _CLOSE_WAIT_S + 5)
            except Exception as exc:  # closing goes on: the loop stops below
                log.warning("MCP toolbox: stopping the servers failed: %s", _describe(exc))
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(5)
        if not loop.is_running():
            loop.close()

    def __enter__(self) -> "McpToolbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"McpToolbox(servers={self.servers}, tools={[t.name for t in self.tools]}, {state})"


def _as_servers(servers: Any) -> list[McpServer]:
    if isinstance(servers, McpServer):
        return [servers]
    if isinstance(servers, (str, os.PathLike, Mapping)):
        return load_mcp_config(servers)
    out = list(servers)
    if not all(isinstance(s, McpServer) for s in out):
        raise ValueError("open_mcp_tools takes McpServer objects, or a config path / dict for load_mcp_config")
    return out


def open_mcp_tools(servers: "Iterable[McpServer] | McpServer | str | os.PathLike | Mapping[str, Any]") -> McpToolbox:
    """Start the servers (all at once), list their tools and return them in an open `McpToolbox`.

    Args:
        servers: `McpServer`s, or what `load_mcp_config` takes.

    Raises:
        ValueError: a bad config, or two servers offering the same tool name (naming both).
        McpServerError: a server that could not start or list its tools within its timeout (no process is
            left running).
    """
    chosen = _as_servers(servers)
    names = [s.name for s in chosen]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"MCP server name(s) {dup} appear more than once; give each server its own name")
    box = McpToolbox()
    if not chosen:
        box._closed = True
        return box
    try:
        box._open(chosen)
    except BaseException:
        box.close()
        raise
    return box


class McpSessionPool:
    """Opens each case's MCP tools: servers with `share_session` once for every case, the others per case.

    `open_case()` returns a toolbox with every server's tools; closing it stops only the per-case servers.
    A shared session that hung or crashed is restarted for the next case. `close()` stops the shared ones.
    """

    def __init__(self, servers: "Iterable[McpServer] | str | os.PathLike | Mapping[str, Any]") -> None:
        chosen = _as_servers(servers)
        self._shared = [s for s in chosen if s.share_session]
        self._per_case = [s for s in chosen if not s.share_session]
        self._shared_box: Optional[McpToolbox] = None
        self._lock = threading.Lock()

    def _shared_tools(self) -> list[Tool]:
        with self._lock:
            box = self._shared_box
            if box is not None and box.broken:
                log.info("MCP: restarting shared session(s) %s", sorted(box.broken))
                box.close()
                box = None
            if box is None and self._shared:
                box = self._shared_box = open_mcp_tools(self._shared)
            return list(box.tools) if box is not None else []

    def open_case(self) -> McpToolbox:
        """The tools for one case (shared and fresh); close the toolbox when the case ends."""
        shared = self._shared_tools()
        if not self._per_case:
            return McpToolbox(shared)
        box = McpToolbox(shared)
        try:
            box._open(self._per_case)
        except BaseException:
            box.close()
            raise
        return box

    def close(self) -> None:
        """Stop the shared sessions."""
        with self._lock:
            if self._shared_box is not None:
                self._shared_box.close()
                self._shared_box = None

    def __enter__(self) -> "McpSessionPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
