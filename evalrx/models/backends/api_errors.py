"""The api backend's errors, and the one-line messages they carry (which never contain the API key:
callers scrub server text with `evalrx.models.backends.api_secrets.scrub` first).
"""

from __future__ import annotations

from typing import Any, Optional

from evalrx.core import one_line


class APIBackendError(RuntimeError):
    """Base class of the api backend's errors; messages never contain the API key.

    Attributes:
        elapsed_ms: wall time of the failed model call (every try and wait), set by `APIModel.chat`.
    """

    elapsed_ms: Optional[float] = None


class APIConnectionFailed(APIBackendError):
    """The server could not be reached (refused, DNS failure, timeout)."""


class APIAuthenticationFailed(APIBackendError):
    """The server rejected the API key (401) or the key lacks permission (403)."""


class APIRequestFailed(APIBackendError):
    """The server answered with an error status other than an authentication failure."""

    def __init__(self, message: str, status_code: Optional[int] = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class CallFailure:
    """A failed try, kept as data until the caller knows how many tries and seconds it took."""

    def __init__(
        self,
        error_cls: type,
        what: str,
        fix: str,
        *,
        status_code: Optional[int] = None,
        retry: bool = False,
        retry_after: Optional[float] = None,
        tries: int = 1,
        elapsed_s: float = 0.0,
    ) -> None:
        self.error_cls, self.what, self.fix = error_cls, what, fix
        self.status_code, self.retry, self.retry_after = status_code, retry, retry_after
        self.tries, self.elapsed_s = tries, elapsed_s

    def asked_too_long(self, left: float, budget: float) -> "CallFailure":
        """The server's Retry-After does not fit in what is left of the budget: fail now, not at the deadline."""
        self.what += (
            f"; it asked to retry after {self.retry_after:g} s, more than the {max(left, 0.0):.1f} s "
            f"left of the {budget:g} s budget of one model call"
        )
        self.fix = "Raise --timeout to wait for it, or lower the run's concurrency."
        return self

    def error(self) -> APIBackendError:
        tried = ""
        if self.retry:
            tried = f" ({self.tries} {'try' if self.tries == 1 else 'tries'} in {self.elapsed_s:.1f} s)"
        message = one_line(f"{self.what}{tried}. {self.fix}")
        if self.error_cls is APIRequestFailed:
            return APIRequestFailed(message, status_code=self.status_code)
        return self.error_cls(message)


def quoted_start(text: str, limit: int = 60) -> str:
    """The first characters of a body, quoted, on one line."""
    flat = one_line(text)
    return repr(flat[:limit] + "...") if len(flat) > limit else repr(flat)


def error_detail(exc: Any) -> str:
    """The server's error message, on one line; an HTML error page is named as such."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return one_line(err["message"])[:500]
        if isinstance(err, str):
            return one_line(err)[:500]
    if isinstance(body, str) and body.lstrip().startswith("<"):
        return f"an HTML page (starts {quoted_start(body)}), not a JSON error"
    if isinstance(body, str) and body.strip():
        return one_line(body)[:500]
    return one_line(getattr(exc, "message", "") or exc)[:500]


__all__ = [
    "APIAuthenticationFailed",
    "APIBackendError",
    "APIConnectionFailed",
    "APIRequestFailed",
    "CallFailure",
    "error_detail",
    "quoted_start",
]
