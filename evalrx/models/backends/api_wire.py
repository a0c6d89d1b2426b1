"""The OpenAI wire format: images as data URLs, messages to and from the chat-completions
format, and the reply of a chat completion as a `ChatTurn`.

Pure Python (PIL only to decode or re-encode an image), shared by the api backend and
`evalrx.serve`, which speaks the same protocol.
"""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path
from typing import Any, Optional

from evalrx.core.content import IMAGE_SUFFIXES, content_text, sniff_mime
from evalrx.core.tool import ChatTurn

_SUFFIX_MIME = {suffix: mime for mime, suffix in IMAGE_SUFFIXES.items()} | {".jpeg": "image/jpeg"}
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<b64>;base64)?,(?P<data>.*)$", re.DOTALL)


def _bytes_to_data_url(data: bytes, mime: Optional[str] = None) -> str:
    mime = mime or sniff_mime(data)  # None: bytes of no known image type
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


def _wire_call(call: Any) -> Any:
    """A native call in wire format; one without a function name is kept as sent, so the codec
    records it as a malformed call instead of it vanishing from the trajectory."""
    fn = call.get("function") if isinstance(call, dict) else None
    if isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"].strip():
        function = {"name": fn["name"], "arguments": fn.get("arguments")}
        return {"id": call.get("id"), "type": "function", "function": function}
    return call


def chat_turn(payload: Any) -> Optional[ChatTurn]:
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
        text=content_text(message.get("content")),
        tool_calls=calls,
        finish_reason=choice.get("finish_reason"),
        usage=usage,
        logprobs=logprobs,
    )


__all__ = [
    "chat_turn",
    "data_url_to_image",
    "from_wire_messages",
    "image_to_data_url",
    "to_wire_messages",
]
