"""The `api` backend: any OpenAI-compatible chat-completions server through the `openai` SDK.

Black-box by construction: it provides GENERATE, TOOL_CALLS and LOGPROBS (plus VISION for
vision specs), never logits, hidden states or attention, so asking for those fails in
`compose` before any network call. The API key is read from the runtime config or
`OPENAI_API_KEY` and is never printed, logged, raised or saved.

The wire-format helpers (`to_wire_messages`, `from_wire_messages`, image data URLs) are
pure Python and shared with `evalrx.serve`, which speaks the same protocol.

One model call has one budget, `RuntimeConfig.timeout` seconds, that covers every try, every
wait between tries (Retry-After included) and every byte of the answer: each socket wait is
cut to what is left of it, so a server that hangs or trickles bytes ends the call on time.
"""

from __future__ import annotations

import base64
import contextvars
import email.utils
import importlib
import io
import json
import random
import re
import time
from pathlib import Path
from typing import Any, Optional

from evalrx.core.capability import Capability
from evalrx.core.tool import ChatTurn
from evalrx.models.backends import BackendInfo, RuntimeConfig, register_backend
from evalrx.specs import ModelSpec

INSTALL_HINT = "pip install 'evalrx[api]'"
# A local server (vLLM, `evalrx serve`) needs no key, but the SDK refuses to start without one.
PLACEHOLDER_KEY = "EMPTY"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
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


# ----------------------------------------------------------------------------- wire format

_MAGIC = [
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
]
_SUFFIX_MIME = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<b64>;base64)?,(?P<data>.*)$", re.DOTALL)


def _sniff_mime(data: bytes) -> Optional[str]:
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _bytes_to_data_url(data: bytes, mime: Optional[str] = None) -> str:
    mime = mime or _sniff_mime(data)
    if mime is None:
        # Unknown bytes: let PIL decode and re-encode them as PNG (raises on non-images).
        return image_to_data_url(_open_image(data))
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _open_image(data: bytes) -> Any:
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    img.load()
    return img


def image_to_data_url(image: Any) -> str:
    """Encode an image as a `data:` URL for the OpenAI `image_url` content block.

    Args:
        image: a PIL image (encoded as PNG), raw image bytes, a file path (str or Path),
            or a string that already is a `data:` / `http(s)://` URL (returned as is).

    Returns:
        The URL string.

    Raises:
        FileNotFoundError: a path that does not exist.
        TypeError: anything else.
    """
    if isinstance(image, (bytes, bytearray, memoryview)):
        return _bytes_to_data_url(bytes(image))
    if isinstance(image, str) and (image.startswith("data:") or re.match(r"^https?://", image)):
        return image
    if isinstance(image, (str, Path)):
        path = Path(image)
        if not path.is_file():
            raise FileNotFoundError(f"Image file not found: {path}")
        return _bytes_to_data_url(path.read_bytes(), _SUFFIX_MIME.get(path.suffix.lower()))
    if hasattr(image, "save") and hasattr(image, "mode"):  # a PIL image, without importing PIL
        buf = io.BytesIO()
        img = image if image.mode in ("RGB", "RGBA", "L", "LA", "P", "1", "I;16") else image.convert("RGB")
        img.save(buf, format="PNG")
        return f"data:image/png;base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"
    raise TypeError(f"Cannot send an image of type {type(image).__name__}; use a PIL image, bytes or a path.")


def data_url_to_image(url: str) -> Any:
    """Decode a base64 `data:` URL into a PIL image.

    Raises:
        ValueError: the string is not a base64 data URL of a decodable image.
    """
    m = _DATA_URL.match(url or "")
    if not m or not m.group("b64"):
        raise ValueError("Only base64 data: URLs are accepted for images (remote URLs are not fetched).")
    try:
        data = base64.b64decode(m.group("data"), validate=True)
        return _open_image(data)
    except Exception as exc:
        raise ValueError(f"The image data URL could not be decoded: {type(exc).__name__}") from None


def _wire_content(content: Any) -> Any:
    """evalrx content (str, None or blocks) -> OpenAI wire content."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, (list, tuple)):
        return str(content)
    blocks: list[dict] = []
    for part in content:
        if isinstance(part, str):
            blocks.append({"type": "text", "text": part})
            continue
        kind = part.get("type")
        if kind == "text":
            blocks.append({"type": "text", "text": part.get("text", "")})
        elif kind == "image_url":
            blocks.append(part)  # already wire format
        elif kind == "image" or "image" in part:
            src = part.get("image", part.get("url", part.get("path")))
            blocks.append({"type": "image_url", "image_url": {"url": image_to_data_url(src)}})
        else:
            raise ValueError(f"Unsupported content block type {kind!r}.")
    return blocks


def _wire_arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)


def to_wire_messages(messages: list[dict]) -> list[dict]:
    """Convert evalrx chat messages to OpenAI wire format.

    Assistant tool-call arguments become JSON strings, image blocks become `image_url`
    blocks with data URLs, and missing tool-call ids are filled in (`call_<msg>_<n>`) and
    handed in order to the tool messages that lack a `tool_call_id`, since OpenAI requires
    them to match.

    Args:
        messages: evalrx/OpenAI-style message dicts.

    Returns:
        New message dicts; the input is not modified.
    """
    out: list[dict] = []
    pending_ids: list[str] = []
    for i, msg in enumerate(messages):
        role = msg.get("role")
        wire: dict = {"role": role, "content": _wire_content(msg.get("content"))}
        if msg.get("name"):
            wire["name"] = msg["name"]
        if role == "assistant" and msg.get("tool_calls"):
            calls = []
            pending_ids = []
            for j, call in enumerate(msg["tool_calls"]):
                fn = call.get("function", call)  # tolerate flat {"name", "arguments"} calls
                call_id = call.get("id") or f"call_{i}_{j}"
                pending_ids.append(call_id)
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": fn.get("name"),
                            "arguments": _wire_arguments(fn.get("arguments", fn.get("args"))),
                        },
                    }
                )
            wire["tool_calls"] = calls
        elif role == "tool":
            content = wire["content"]
            if content is not None and not isinstance(content, (str, list)):
                wire["content"] = str(content)
            call_id = msg.get("tool_call_id") or (pending_ids.pop(0) if pending_ids else None)
            if call_id is not None:
                wire["tool_call_id"] = call_id
            if call_id in pending_ids:
                pending_ids.remove(call_id)
        out.append(wire)
    return out


def from_wire_messages(messages: Any, *, allow_images: bool) -> list[dict]:
    """Convert OpenAI wire messages back to evalrx messages (the server side of `to_wire_messages`).

    Tool-call argument JSON strings become dicts and `image_url` data URLs become PIL images
    in `{"type": "image", "image": ...}` blocks.

    Args:
        messages: the request's `messages` value.
        allow_images: whether the model accepts images; if not, an image block is an error.

    Raises:
        ValueError: with a message fit for a 400 response.
    """
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list.")
    out: list[dict] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ValueError(f"messages[{i}] must be an object.")
        role = msg.get("role")
        if role == "developer":
            role = "system"  # OpenAI's newer name for the system role
        if role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"messages[{i}].role must be system, user, assistant or tool, not {role!r}.")
        content = msg.get("content")
        if isinstance(content, list):
            blocks: list[dict] = []
            for k, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind == "text":
                    blocks.append({"type": "text", "text": str(part.get("text", ""))})
                elif kind == "image_url":
                    if not allow_images:
                        raise ValueError(f"messages[{i}].content[{k}]: this model does not accept images.")
                    url = part.get("image_url")
                    url = url.get("url") if isinstance(url, dict) else url
                    blocks.append({"type": "image", "image": data_url_to_image(str(url))})
                else:
                    raise ValueError(f"messages[{i}].content[{k}]: unsupported content type {kind!r}.")
            # Plain text joined back to a string keeps the prompt identical to a direct call.
            content = "".join(b["text"] for b in blocks) if all(b["type"] == "text" for b in blocks) else blocks
        elif content is not None and not isinstance(content, str):
            raise ValueError(f"messages[{i}].content must be a string, a list of blocks or null.")
        item: dict = {"role": role, "content": content if content is not None else ""}
        if role == "assistant" and msg.get("tool_calls"):
            calls = []
            for j, call in enumerate(msg["tool_calls"]):
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not fn.get("name"):
                    raise ValueError(f"messages[{i}].tool_calls[{j}] needs function.name.")
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args) if args.strip() else {}
                    except json.JSONDecodeError:
                        raise ValueError(
                            f"messages[{i}].tool_calls[{j}].function.arguments is not valid JSON."
                        ) from None
                calls.append(
                    {
                        "id": call.get("id"),
                        "type": "function",
                        "function": {"name": fn["name"], "arguments": args or {}},
                    }
                )
            item["tool_calls"] = calls
        if role == "tool" and msg.get("tool_call_id") is not None:
            item["tool_call_id"] = msg["tool_call_id"]
        if msg.get("name"):
            item["name"] = msg["name"]
        out.append(item)
    return out


# ----------------------------------------------------------------------------- secrets


def redact_url(url: Optional[str]) -> str:
    """A URL fit for messages: any `user:password@` part is replaced by `***@`."""
    if not url:
        return ""
    return re.sub(r"(^[a-zA-Z][\w+.-]*://)[^/@]*@", r"\1***@", url)


def _scrub(text: str, secret: Optional[str]) -> str:
    if secret and secret != PLACEHOLDER_KEY and len(secret) >= 4:
        text = text.replace(secret, "***")
    return text


# ----------------------------------------------------------------------------- the call deadline

# When the running model call must end (time.monotonic()); set per call, so per thread.
_DEADLINE: "contextvars.ContextVar[Optional[float]]" = contextvars.ContextVar("evalrx_api_deadline", default=None)
# A socket wait after the deadline still gets this long, so the library raises its own timeout error.
_EXPIRED_S = 0.001


def _cap(timeout: Optional[float]) -> Optional[float]:
    """A socket timeout cut to what is left of the current call's budget."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = max(deadline - time.monotonic(), _EXPIRED_S)
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


def _deadline_http_client() -> Any:
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


# ----------------------------------------------------------------------------- the handle


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
        self._scrub = lambda text: _scrub(text, key)
        # Retries are ours (`_call`), so that they and their waits stay inside the call's budget.
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=key,
            timeout=self._budget_s,
            max_retries=0,
            http_client=_deadline_http_client(),
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
    ) -> ChatTurn:
        """Send one chat-completions request and return the reply.

        Args:
            messages: evalrx chat messages (converted with `to_wire_messages`).
            tools: OpenAI tool schemas (`Tool.to_openai()`), or None.
            logprobs: ask for the generated tokens' log-probabilities.
            max_new_tokens: overrides `runtime.max_new_tokens`.
            temperature: overrides `runtime.temperature`.

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
        if Capability.VISION not in self.capabilities and _has_image(messages):
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
        started = time.monotonic()
        token = _DEADLINE.set(started + self._budget_s)
        try:
            outcome = self._call(request, started)
        finally:
            _DEADLINE.reset(token)
        if isinstance(outcome, ChatTurn):
            return outcome
        failure = outcome.error()
        failure.elapsed_ms = round((time.monotonic() - started) * 1000.0, 3)
        # Raised outside any except block: no __context__ chain that could carry the request headers.
        raise failure from None

    def _call(self, request: dict, started: float) -> "ChatTurn | _Failure":
        """Try the request until it succeeds, fails for good, or the budget cannot cover another try."""
        import openai

        deadline = started + self._budget_s
        tries = 0
        while True:
            tries += 1
            try:
                raw = self._client.chat.completions.with_raw_response.create(
                    **request, timeout=max(deadline - time.monotonic(), _EXPIRED_S)
                )
            except openai.APITimeoutError:  # every socket wait is cut at the deadline: the budget is spent
                return self._out_of_time(tries, started)
            except openai.APIConnectionError as exc:
                failure = self._connection_failure(exc)
            except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
                return _Failure(
                    APIAuthenticationFailed,
                    f"The server at {self._url} rejected the API key (HTTP {exc.status_code})",
                    "Set a valid key in OPENAI_API_KEY or RuntimeConfig(api_key=...).",
                    status_code=exc.status_code,
                )
            except openai.APIStatusError as exc:
                failure = self._status_failure(exc)
            except openai.OpenAIError as exc:
                return _Failure(
                    APIRequestFailed,
                    f"The request to the server at {self._url} failed: {type(exc).__name__}: "
                    f"{_one_line(self._scrub(str(exc)))[:300]}",
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
            wait = failure.retry_after if failure.retry_after is not None else _backoff(tries)
            if wait >= left:
                if failure.retry_after is not None:
                    return failure.asked_too_long(left, self._budget_s)
                return failure
            time.sleep(wait)

    @property
    def _url(self) -> str:
        return redact_url(self.base_url)

    def _out_of_time(self, tries: int, started: float) -> "_Failure":
        return _Failure(
            APIConnectionFailed,
            f"The server at {self._url} did not answer within {self._budget_s:g} s, the budget of one model call",
            "Check that the server is running and not overloaded, or raise --timeout (RuntimeConfig.timeout).",
            retry=True,
            tries=tries,
            elapsed_s=time.monotonic() - started,
        )

    def _connection_failure(self, exc: Any) -> "_Failure":
        cause = exc.__cause__
        if cause is None or type(cause).__name__ in ("ConnectError", "ConnectTimeout"):
            return _Failure(
                APIConnectionFailed,
                f"Could not connect to the OpenAI-compatible server at {self._url}",
                "Check that the server is running and that base_url / OPENAI_BASE_URL points at it "
                "(for example http://127.0.0.1:8000/v1), or raise --retries while it starts.",
                retry=True,
            )
        detail = _one_line(self._scrub(str(cause)))[:200] or "no detail"
        return _Failure(
            APIConnectionFailed,
            f"The connection to the server at {self._url} broke before its answer was complete "
            f"({type(cause).__name__}: {detail})",
            "Check the server's log, or raise --retries if it happens only now and then.",
            retry=True,
        )

    def _status_failure(self, exc: Any) -> "_Failure":
        status = exc.status_code
        response = exc.response
        detail = self._scrub(_error_detail(exc))
        what = f"The server at {self._url} answered HTTP {status} for model {self.spec.served_name!r}: {detail}"
        retry = _should_retry(response)
        if retry:
            fix = "Raise --retries or --timeout if the server is only busy."
        elif status == 404:
            fix = "Check the model name, and that base_url is the API root, ending in /v1."
        else:
            fix = "Check the request options and the model name."
        return _Failure(
            APIRequestFailed,
            what,
            fix,
            status_code=status,
            retry=retry,
            retry_after=_retry_after(response.headers) if retry else None,
        )

    def _read_turn(self, response: Any) -> "ChatTurn | _Failure":
        """The reply from a 2xx answer; an HTML page, invalid JSON or another shape is a failure."""
        status = response.status_code
        body = response.content.decode("utf-8", errors="replace")
        if "html" in response.headers.get("content-type", "").lower() or body.lstrip().startswith("<"):
            return _Failure(
                APIRequestFailed,
                f"The server at {self._url} answered HTML, not JSON "
                f"(HTTP {status}, starts {_start(self._scrub(body))})",
                "Is base_url the API root, ending in /v1?",
                status_code=status,
            )
        try:
            payload = json.loads(body)
        except json.JSONDecodeError as exc:
            return _Failure(
                APIRequestFailed,
                f"The server at {self._url} answered invalid JSON (HTTP {status}, {exc.msg} at char {exc.pos}, "
                f"starts {_start(self._scrub(body))})",
                "Is it an OpenAI-compatible chat-completions server, and base_url its API root ending in /v1?",
                status_code=status,
            )
        turn = _chat_turn(payload)
        if turn is None:
            return _Failure(
                APIRequestFailed,
                f"The server at {self._url} answered JSON that is not a chat completion with a message "
                f"(HTTP {status}, starts {_start(self._scrub(body))})",
                "Is it an OpenAI-compatible chat-completions server?",
                status_code=status,
            )
        return turn


class _Failure:
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

    def asked_too_long(self, left: float, budget: float) -> "_Failure":
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
        message = _one_line(f"{self.what}{tried}. {self.fix}")
        if self.error_cls is APIRequestFailed:
            return APIRequestFailed(message, status_code=self.status_code)
        return self.error_cls(message)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _start(text: str, limit: int = 60) -> str:
    """The first characters of a body, quoted, on one line."""
    flat = _one_line(text)
    return repr(flat[:limit] + "...") if len(flat) > limit else repr(flat)


def _backoff(tries: int) -> float:
    """The wait after the `tries`-th failed try: 0.5 s doubling to 8 s, with jitter (the SDK's schedule)."""
    return min(_FIRST_BACKOFF_S * 2.0 ** (tries - 1), _MAX_BACKOFF_S) * (1.0 - 0.25 * random.random())


def _should_retry(response: Any) -> bool:
    verdict = response.headers.get("x-should-retry", "").lower()
    if verdict in ("true", "false"):  # the server's own word wins, as in the SDK
        return verdict == "true"
    return response.status_code in _RETRY_STATUSES or response.status_code >= 500


def _retry_after(headers: Any) -> Optional[float]:
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


def _has_image(messages: list[dict]) -> bool:
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and (part.get("type") in ("image", "image_url") or "image" in part):
                    return True
    return False


def _error_detail(exc: Any) -> str:
    """The server's error message, on one line; an HTML error page is named as such."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return _one_line(err["message"])[:500]
        if isinstance(err, str):
            return _one_line(err)[:500]
    if isinstance(body, str) and body.lstrip().startswith("<"):
        return f"an HTML page (starts {_start(body)}), not a JSON error"
    if isinstance(body, str) and body.strip():
        return _one_line(body)[:500]
    return _one_line(getattr(exc, "message", "") or exc)[:500]


def _message_text(content: Any) -> str:
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content if isinstance(content, str) else ""


def _wire_call(call: Any) -> Any:
    """A native call in wire format; one without a function name is kept as sent, so the codec
    records it as a malformed call instead of it vanishing from the trajectory."""
    fn = call.get("function") if isinstance(call, dict) else None
    if isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"].strip():
        function = {"name": fn["name"], "arguments": fn.get("arguments")}
        return {"id": call.get("id"), "type": "function", "function": function}
    return call


def _chat_turn(payload: Any) -> Optional[ChatTurn]:
    """The ChatTurn of a chat-completion JSON object, or None when it has no first choice with a message."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        return None
    raw_calls = message.get("tool_calls") or []
    calls = [_wire_call(c) for c in (raw_calls if isinstance(raw_calls, list) else [raw_calls])]
    usage_in = payload.get("usage")
    usage = {}
    if isinstance(usage_in, dict):
        usage = {k: usage_in[k] for k in ("prompt_tokens", "completion_tokens") if usage_in.get(k) is not None}
    logprobs = None
    content = choice.get("logprobs", {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    if isinstance(content, list):
        logprobs = [
            {"token": t.get("token"), "logprob": float(t["logprob"])}
            for t in content
            if isinstance(t, dict) and isinstance(t.get("logprob"), (int, float))
        ]
    return ChatTurn(
        text=_message_text(message.get("content")),
        tool_calls=calls,
        finish_reason=choice.get("finish_reason"),
        usage=usage,
        logprobs=logprobs,
    )


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

__all__ = [
    "APIAuthenticationFailed",
    "APIBackendError",
    "APIConnectionFailed",
    "APIModel",
    "APIRequestFailed",
    "MAX_RETRIES",
    "MAX_TIMEOUT_S",
    "check_call_budget",
    "data_url_to_image",
    "from_wire_messages",
    "image_to_data_url",
    "to_wire_messages",
]
