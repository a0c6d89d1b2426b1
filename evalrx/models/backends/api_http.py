"""The api backend's HTTP side: the budget of one model call, its retry policy, and the
deadline-bounded HTTP client that holds every socket wait to that budget.

One model call has one budget, `RuntimeConfig.timeout` seconds, that covers every try, every
wait between tries (Retry-After included) and every byte of the answer: each socket wait is
cut to what is left of it, so a server that hangs or trickles bytes ends the call on time.
"""

from __future__ import annotations

import contextvars
import email.utils
import importlib
import random
import time
from typing import Any, Optional

# The accepted range of a call's budget and of its retries (RuntimeConfig, `evalrx run`, the app).
MAX_TIMEOUT_S = 3600.0
MAX_RETRIES = 10
_RETRY_STATUSES = frozenset({408, 409, 429})
_FIRST_BACKOFF_S = 0.5
_MAX_BACKOFF_S = 8.0


def check_call_budget(timeout: Any, max_retries: Any) -> "tuple[float, int]":
    """Validate a model call's budget in seconds and its retry count.

    Returns:
        (timeout, max_retries) as float and int.

    Raises:
        ValueError: timeout not in (0, 3600] or max_retries not in 0..10.
    """
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 < seconds <= MAX_TIMEOUT_S:  # also rejects NaN
        raise ValueError(f"timeout must be a number of seconds > 0 and <= {MAX_TIMEOUT_S:g}, not {timeout!r}.")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or not 0 <= max_retries <= MAX_RETRIES:
        raise ValueError(f"max_retries must be a whole number from 0 to {MAX_RETRIES}, not {max_retries!r}.")
    return seconds, max_retries


# ----------------------------------------------------------------------------- retries


def backoff(tries: int) -> float:
    """The wait after the `tries`-th failed try: 0.5 s doubling to 8 s, with jitter (the SDK's schedule)."""
    return min(_FIRST_BACKOFF_S * 2.0 ** (tries - 1), _MAX_BACKOFF_S) * (1.0 - 0.25 * random.random())


def should_retry(response: Any) -> bool:
    verdict = response.headers.get("x-should-retry", "").lower()
    if verdict in ("true", "false"):  # the server's own word wins, as in the SDK
        return verdict == "true"
    return response.status_code in _RETRY_STATUSES or response.status_code >= 500


def retry_after_seconds(headers: Any) -> Optional[float]:
    """Seconds the server asked us to wait (`retry-after-ms`, `retry-after` seconds or HTTP date), or None."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(float(value) / scale, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


# ----------------------------------------------------------------------------- the call deadline

# When the running model call must end (time.monotonic()); set per call, so per thread.
DEADLINE: "contextvars.ContextVar[Optional[float]]" = contextvars.ContextVar("evalrx_api_deadline", default=None)
# A socket wait after the deadline still gets this long, so the library raises its own timeout error.
EXPIRED_S = 0.001


def _cap(timeout: Optional[float]) -> Optional[float]:
    """A socket timeout cut to what is left of the current call's budget."""
    deadline = DEADLINE.get()
    if deadline is None:
        return timeout
    left = max(deadline - time.monotonic(), EXPIRED_S)
    return left if timeout is None else min(timeout, left)


class _DeadlineStream:
    """An httpcore network stream whose every read, write and TLS handshake ends by the deadline.

    httpcore gives each socket operation the request's fixed per-operation timeout, so a server
    that sends one byte just before each read times out is never cut; this caps each wait anew.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        return self._inner.read(max_bytes, _cap(timeout))

    def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        self._inner.write(buffer, _cap(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: Optional[str] = None, timeout: Optional[float] = None
    ) -> Any:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, _cap(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend:
    """An httpcore network backend whose connections are `_DeadlineStream`s."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: Optional[float] = None,
        local_address: Optional[str] = None,
        socket_options: Any = None,
    ) -> _DeadlineStream:
        return _DeadlineStream(self._inner.connect_tcp(host, port, _cap(timeout), local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: Optional[float] = None, socket_options: Any = None
    ) -> _DeadlineStream:
        return _DeadlineStream(self._inner.connect_unix_socket(path, _cap(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def deadline_http_client() -> Any:
    """The SDK's own HTTP client class (httpx or httpx2, whichever it speaks) over a deadline-capped transport.

    Returns None when the HTTP library's layout is not the known one; each try then keeps only
    the per-read timeout (the remaining budget), which bounds a hanging server but not a trickling one.
    """
    import openai

    client_cls = openai.DefaultHttpxClient
    base = next((c for c in client_cls.__mro__ if c.__name__ == "Client"), None)
    if base is None:
        return None
    httpx_module = importlib.import_module(base.__module__.split(".")[0])
    transport = httpx_module.HTTPTransport()
    pool = getattr(transport, "_pool", None)  # httpcore's ConnectionPool: new connections come from its backend
    if pool is None or getattr(pool, "_network_backend", None) is None:
        return None
    pool._network_backend = _DeadlineBackend(pool._network_backend)
    return client_cls(transport=transport)


__all__ = [
    "DEADLINE",
    "EXPIRED_S",
    "MAX_RETRIES",
    "MAX_TIMEOUT_S",
    "backoff",
    "check_call_budget",
    "deadline_http_client",
    "retry_after_seconds",
    "should_retry",
]
