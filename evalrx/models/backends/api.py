"""The `api` backend: any OpenAI-compatible chat-completions server through the `openai` SDK.

Black-box by construction: it provides GENERATE, TOOL_CALLS and LOGPROBS (plus VISION for
vision specs), never logits, hidden states or attention, so asking for those fails in
`compose` before any network call. The API key is read from the runtime config or
`OPENAI_API_KEY` and is never printed, logged, raised or saved.

The mechanisms it is built from live beside it: `api_wire` (messages, images and replies in
the OpenAI wire format, shared with `evalrx.serve`), `api_http` (the budget of one model call,
its retry policy and the deadline-bounded HTTP client), `api_errors` (the error classes and
their one-line messages) and `api_secrets` (URL redaction and key scrubbing). Retries are
this handle's own, so that they and their waits stay inside the call's budget.
"""

from __future__ import annotations

import json
import time
from typing import Any, Optional

from evalrx.core import one_line
from evalrx.core.capability import Capability
from evalrx.core.content import has_picture
from evalrx.core.tool import ChatTurn
from evalrx.models.backends.api_errors import (
    APIAuthenticationFailed,
    APIConnectionFailed,
    APIRequestFailed,
    CallFailure,
    error_detail,
    quoted_start,
)
from evalrx.models.backends.api_http import (
    DEADLINE,
    EXPIRED_S,
    backoff,
    check_call_budget,
    deadline_http_client,
    retry_after_seconds,
    should_retry,
)
from evalrx.models.backends.api_secrets import PLACEHOLDER_KEY, redact_url, scrub
from evalrx.models.backends.api_wire import chat_turn, to_wire_messages
from evalrx.models.backends.registry import BackendInfo, RuntimeConfig, register_backend
from evalrx.specs import ModelSpec

INSTALL_HINT = "pip install 'evalrx[api]'"
DEFAULT_BASE_URL = "https://api.openai.com/v1"


def _provides(spec: ModelSpec) -> frozenset:
    caps = {Capability.GENERATE, Capability.TOOL_CALLS, Capability.LOGPROBS}
    if spec.vision:
        caps.add(Capability.VISION)
    return frozenset(caps)


class APIModel:
    """A model served by an OpenAI-compatible chat-completions endpoint.

    Args:
        spec: the model spec; `spec.served_name` is the model name sent.
        runtime: base_url / api_key (else `OPENAI_BASE_URL` / `OPENAI_API_KEY`), timeout (the
            budget of one model call in seconds, every try and wait included), max_retries
            (tries after the first, with exponential backoff or the server's Retry-After, while
            the budget lasts), temperature and max_new_tokens.

    Raises:
        ImportError: the `openai` package is missing.
        ValueError: timeout not in (0, 3600] or max_retries not in 0..10.
    """

    backend = "api"

    def __init__(self, spec: ModelSpec, runtime: Optional[RuntimeConfig] = None) -> None:
        try:
            import openai
        except ImportError:
            raise ImportError(f"The 'api' backend needs the openai package: {INSTALL_HINT}") from None
        self.spec = spec
        self.runtime = runtime or RuntimeConfig()
        self._budget_s, self._retries = check_call_budget(self.runtime.timeout, self.runtime.max_retries)
        self.capabilities = _provides(spec)
        self.load_ms: Optional[float] = None  # the server holds the weights: nothing loads in this process
        self.base_url = self.runtime.resolved_base_url() or DEFAULT_BASE_URL
        key = self.runtime.resolved_api_key() or PLACEHOLDER_KEY
        # The key lives only inside the SDK client and a closure for scrubbing; no attribute shows it.
        self._scrub = lambda text: scrub(text, key)
        # Retries are ours (`_call`), so that they and their waits stay inside the call's budget.
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=key,
            timeout=self._budget_s,
            max_retries=0,
            http_client=deadline_http_client(),
        )

    def __repr__(self) -> str:
        return (
            f"APIModel(spec={self.spec.key!r}, model={self.spec.served_name!r}, base_url={redact_url(self.base_url)!r})"
        )

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> "APIModel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def chat(
        self,
        messages: list[dict],
        tools: Optional[list[dict]] = None,
        *,
        logprobs: bool = False,
        max_new_tokens: Optional[int] = None,
        temperature: Optional[float] = None,
        response_format: Optional[dict] = None,
    ) -> ChatTurn:
        """Send one chat-completions request and return the reply.

        Args:
            messages: evalrx chat messages (converted with `to_wire_messages`).
            tools: OpenAI tool schemas (`Tool.to_openai()`), or None.
            logprobs: ask for the generated tokens' log-probabilities.
            max_new_tokens: overrides `runtime.max_new_tokens`.
            temperature: overrides `runtime.temperature`.
            response_format: the OpenAI `response_format` (e.g. a JSON schema the answer must follow), sent as
                is; a server without it answers HTTP 400 (`APIRequestFailed.status_code`).

        Returns:
            A ChatTurn: `text` is the message content, `tool_calls` the native calls in wire
            format (arguments as JSON strings); a call without a function name is kept as the
            server sent it, for the codec to record as malformed. `usage` has prompt/completion
            token counts and `logprobs` a list of `{"token", "logprob"}` when the server returned them.

        Raises:
            APIConnectionFailed: the server could not be reached, the connection broke, or the
                call's budget ran out.
            APIAuthenticationFailed: the key was rejected.
            APIRequestFailed: any other error status, or an answer that is not a chat completion.
            Each carries `elapsed_ms`, the failed call's wall time; every message is one line
            naming the server.
        """
        if Capability.VISION not in self.capabilities and has_picture(messages):
            raise ValueError(f"{self.spec.key} does not accept images (no VISION capability).")
        request: dict = {
            "model": self.spec.served_name,
            "messages": to_wire_messages(messages),
            "temperature": self.runtime.temperature if temperature is None else temperature,
            "max_tokens": int(max_new_tokens or self.runtime.max_new_tokens),
        }
        if tools:
            request["tools"] = list(tools)
        if logprobs:
            request["logprobs"] = True
        if response_format:
            request["response_format"] = response_format
        started = time.monotonic()
        token = DEADLINE.set(started + self._budget_s)
        try:
            outcome = self._call(request, started)
        finally:
            DEADLINE.reset(token)
        if isinstance(outcome, ChatTurn):
            return outcome
        failure = outcome.error()
        failure.elapsed_ms = round((time.monotonic() - started) * 1000.0, 3)
        # Raised outside any except block: no __context__ chain that could carry the request headers.
        raise failure from None

    def _call(self, request: dict, started: float) -> "ChatTurn | CallFailure":
        """Try the request until it succeeds, fails for good, or the budget cannot cover another try."""
        import openai

        deadline = started + self._budget_s
        tries = 0
        while True:
            tries += 1
            try:
                raw = self._client.chat.completions.with_raw_response.create(
                    **request, timeout=max(deadline - time.monotonic(), EXPIRED_S)
                )
            except openai.APITimeoutError:  # every socket wait is cut at the deadline: the budget is spent
                return self._out_of_time(tries, started)
            except openai.APIConnectionError as exc:
                failure = self._connection_failure(exc)
            except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
                return CallFailure(
                    APIAuthenticationFailed,
                    f"The server at {self._url} rejected the API key (HTTP {exc.status_code})",
                    "Set a valid key in OPENAI_API_KEY or RuntimeConfig(api_key=...).",
                    status_code=exc.status_code,
                )
            except openai.APIStatusError as exc:
                failure = self._status_failure(exc)
            except openai.OpenAIError as exc:
                return CallFailure(
                    APIRequestFailed,
                    f"The request to the server at {self._url} failed: {type(exc).__name__}: "
                    f"{one_line(self._scrub(str(exc)))[:300]}",
                    "Check that base_url is the API root of an OpenAI-compatible server, ending in /v1.",
                )
            else:
                return self._read_turn(raw.http_response)
            if not failure.retry:
                return failure
            failure.tries, failure.elapsed_s = tries, time.monotonic() - started
            if tries > self._retries:
                return failure
            left = deadline - time.monotonic()
            wait = failure.retry_after if failure.retry_after is not None else backoff(tries)
            if wait >= left:
                if failure.retry_after is not None:
                    return failure.asked_too_long(left, self._budget_s)
                return failure
            time.sleep(wait)

    @property
    def _url(self) -> str:
        return redact_url(self.base_url)

    def _out_of_time(self, tries: int, started: float) -> "CallFailure":
        return CallFailure(
            APIConnectionFailed,
            f"The server at {self._url} did not answer within {self._budget_s:g} s, the budget of one model call",
            "Check that the server is running and not overloaded, or raise --timeout (RuntimeConfig.timeout).",
            retry=True,
            tries=tries,
            elapsed_s=time.monotonic() - started,
        )

    def _connection_failure(self, exc: Any) -> "CallFailure":
        cause = exc.__cause__
        if cause is None or type(cause).__name__ in ("ConnectError", "ConnectTimeout"):
            return CallFailure(
                APIConnectionFailed,
                f"Could not connect to the OpenAI-compatible server at {self._url}",
                "Check that the server is running and that base_url / OPENAI_BASE_URL points at it "
                "(for example http://127.0.0.1:8000/v1), or raise --retries while it starts.",
                retry=True,
            )
        detail = one_line(self._scrub(str(cause)))[:200] or "no detail"
        return CallFailure(
            APIConnectionFailed,
            f"The connection to the server at {self._url} broke before its answer was complete "
            f"({type(cause).__name__}: {detail})",
            "Check the server's log, or raise --retries if it happens only now and then.",
            retry=True,
        )

    def _status_failure(self, exc: Any) -> "CallFailure":
        status = exc.status_code
        response = exc.response
        detail = self._scrub(error_detail(exc))
        what = f"The server at {self._url} answered HTTP {status} for model {self.spec.served_name!r}: {detail}"
        retry = should_retry(response)
        if retry:
            fix = "Raise --retries or --timeout if the server is only busy."
        elif status == 404:
            fix = "Check the model name, and that base_url is the API root, ending in /v1."
        else:
            fix = "Check the request options and the model name."
        return CallFailure(
            APIRequestFailed,
            what,
            fix,
            status_code=status,
            retry=retry,
            retry_after=retry_after_seconds(response.headers) if retry else None,
        )

    def _read_turn(self, response: Any) -> "ChatTurn | CallFailure":
        """The reply from a 2xx answer; an HTML page, invalid JSON or another shape is a failure."""
        status = response.status_code
        body = response.content.decode("utf-8", errors="replace")
        if "html" in response.headers.get("content-type", "").lower() or body.lstrip().startswith("<"):
            return CallFailure(
                APIRequestFailed,
                f"The server at {self._url} answered HTML, not JSON "
                f"(HTTP {status}, starts {quoted_start(self._scrub(body))})",
                "Is base_url the API root, ending in /v1?",
                status_code=status,
            )
        try:
            payload = json.loads(body)
        except json.JSONDecodeError as exc:
            return CallFailure(
                APIRequestFailed,
                f"The server at {self._url} answered invalid JSON (HTTP {status}, {exc.msg} at char {exc.pos}, "
                f"starts {quoted_start(self._scrub(body))})",
                "Is it an OpenAI-compatible chat-completions server, and base_url its API root ending in /v1?",
                status_code=status,
            )
        turn = chat_turn(payload)
        if turn is None:
            return CallFailure(
                APIRequestFailed,
                f"The server at {self._url} answered JSON that is not a chat completion with a message "
                f"(HTTP {status}, starts {quoted_start(self._scrub(body))})",
                "Is it an OpenAI-compatible chat-completions server?",
                status_code=status,
            )
        return turn


def _build(spec: ModelSpec, runtime: RuntimeConfig, want: frozenset) -> APIModel:
    return APIModel(spec, runtime)


register_backend(
    BackendInfo(
        "api",
        "OpenAI-compatible HTTP server (vLLM, evalrx serve, OpenAI): black-box, tool calls and logprobs",
        _provides,
        _build,
        install_hint=INSTALL_HINT,
    )
)

__all__ = ["APIModel", "DEFAULT_BASE_URL", "INSTALL_HINT"]
