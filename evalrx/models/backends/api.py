"""The `api` backend: any OpenAI-compatible chat-completions server through the `openai` SDK.

Black-box by construction: it provides GENERATE, TOOL_CALLS and LOGPROBS (plus VISION for
vision specs), never logits, hidden states or attention, so asking for those fails in
`compose` before any network call. The API key is read from the runtime config or
`OPENAI_API_KEY` and is never printed, logged, raised or saved.

The wire-format helpers (`to_wire_messages`, `from_wire_messages`, image data URLs) are
pure Python and shared with `evalrx.serve`, which speaks the same protocol.
"""

from __future__ import annotations

import base64
import io
import json
import re
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


class APIBackendError(RuntimeError):
    """Base class of the api backend's errors; messages never contain the API key."""


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
                        "function": {"name": fn.get("name"), "arguments": _wire_arguments(fn.get("arguments", fn.get("args")))},
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
                        raise ValueError(f"messages[{i}].tool_calls[{j}].function.arguments is not valid JSON.") from None
                calls.append(
                    {"id": call.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args or {}}}
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
        runtime: base_url / api_key (else `OPENAI_BASE_URL` / `OPENAI_API_KEY`), timeout,
            max_retries (the SDK retries with exponential backoff), temperature and
            max_new_tokens.

    Raises:
        ImportError: the `openai` package is missing.
    """

    backend = "api"

    def __init__(self, spec: ModelSpec, runtime: Optional[RuntimeConfig] = None) -> None:
        try:
            import openai
        except ImportError:
            raise ImportError(f"The 'api' backend needs the openai package: {INSTALL_HINT}") from None
        self.spec = spec
        self.runtime = runtime or RuntimeConfig()
        self.capabilities = _provides(spec)
        self.load_ms: Optional[float] = None  # the server holds the weights: nothing loads in this process
        self.base_url = self.runtime.resolved_base_url() or DEFAULT_BASE_URL
        key = self.runtime.resolved_api_key() or PLACEHOLDER_KEY
        # The key lives only inside the SDK client and a closure for scrubbing; no attribute shows it.
        self._scrub = lambda text: _scrub(text, key)
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=key,
            timeout=self.runtime.timeout,
            max_retries=self.runtime.max_retries,
        )

    def __repr__(self) -> str:
        return f"APIModel(spec={self.spec.key!r}, model={self.spec.served_name!r}, base_url={redact_url(self.base_url)!r})"

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
            format (arguments as JSON strings), `usage` prompt/completion token counts and
            `logprobs` a list of `{"token", "logprob"}` when the server returned them.

        Raises:
            APIConnectionFailed: the server could not be reached.
            APIAuthenticationFailed: the key was rejected.
            APIRequestFailed: any other error status.
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
        response = self._send(request)
        return _chat_turn(response)

    def _send(self, request: dict) -> Any:
        import openai

        failure: Optional[APIBackendError] = None
        url = redact_url(self.base_url)
        try:
            return self._client.chat.completions.create(**request)
        except openai.APITimeoutError:
            failure = APIConnectionFailed(
                f"The OpenAI-compatible server at {url} did not answer within {self.runtime.timeout:g} s "
                f"(after {self.runtime.max_retries} retries). Check that the server is running and not "
                "overloaded, or raise the timeout."
            )
        except openai.APIConnectionError:
            failure = APIConnectionFailed(
                f"Could not connect to the OpenAI-compatible server at {url} "
                f"(after {self.runtime.max_retries} retries). Check that the server is running and that "
                "base_url / OPENAI_BASE_URL points at it (for example http://127.0.0.1:8000/v1)."
            )
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            failure = APIAuthenticationFailed(
                f"The server at {url} rejected the API key (HTTP {exc.status_code}). Set a valid key "
                "in OPENAI_API_KEY or RuntimeConfig(api_key=...)."
            )
        except openai.APIStatusError as exc:
            detail = self._scrub(_error_detail(exc))
            failure = APIRequestFailed(
                f"The server at {url} answered HTTP {exc.status_code} for model "
                f"{self.spec.served_name!r}: {detail}",
                status_code=exc.status_code,
            )
        except openai.OpenAIError as exc:  # e.g. a response that does not parse
            failure = APIRequestFailed(f"Request to {url} failed: {type(exc).__name__}: {self._scrub(str(exc))}")
        # Raised outside the except blocks: no __context__ chain that could carry the request headers.
        raise failure from None


def _has_image(messages: list[dict]) -> bool:
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and (part.get("type") in ("image", "image_url") or "image" in part):
                    return True
    return False


def _error_detail(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
    return str(getattr(exc, "message", "") or exc)[:500]


def _chat_turn(response: Any) -> ChatTurn:
    if not response.choices:
        raise APIRequestFailed("The server returned no choices.")
    choice = response.choices[0]
    message = choice.message
    calls = []
    for call in message.tool_calls or []:
        fn = getattr(call, "function", None)
        if fn is None:  # custom (non-function) tool calls carry no schema we can use
            continue
        calls.append({"id": call.id, "type": "function", "function": {"name": fn.name, "arguments": fn.arguments}})
    usage: dict = {}
    if response.usage is not None:
        usage = {
            "prompt_tokens": response.usage.prompt_tokens,
            "completion_tokens": response.usage.completion_tokens,
        }
    logprobs = None
    if choice.logprobs is not None and choice.logprobs.content is not None:
        logprobs = [{"token": t.token, "logprob": float(t.logprob)} for t in choice.logprobs.content]
    return ChatTurn(
        text=message.content or "",
        tool_calls=calls,
        finish_reason=choice.finish_reason,
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
    "data_url_to_image",
    "from_wire_messages",
    "image_to_data_url",
    "to_wire_messages",
]
