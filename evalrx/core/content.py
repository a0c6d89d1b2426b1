"""Chat message content, read the one way every part of evalrx reads it.

A message's `content` is a string, None, or a list of content blocks: `{"type": "text",
"text": ...}`, image blocks (`{"type": "image", "image": ...}` as evalrx writes them,
`{"type": "image_url", "image_url": {...}}` on the OpenAI wire), bare strings. Plain
functions, no third-party imports: the backends, the analyzers and the file formats read
content through them, and the store sniffs image bytes with `sniff_mime`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

__all__ = [
    "IMAGE_BLOCK_TYPES",
    "IMAGE_SUFFIXES",
    "content_text",
    "has_picture",
    "is_picture_block",
    "sniff_mime",
]

# Block types that carry an image: evalrx's own, the OpenAI chat wire's, the OpenAI Responses format's.
IMAGE_BLOCK_TYPES = ("image", "image_url", "input_image")

# The picture types every part of evalrx shows and writes, with the file suffix each is written under.
IMAGE_SUFFIXES = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def is_picture_block(block: Any) -> bool:
    """Whether a content block carries an image.

    An object whose type is one of `IMAGE_BLOCK_TYPES`, or any other object but a text
    block that holds an `image` key: what the api backend's wire encoder sends as an image
    and what vision chat templates (Qwen2-VL's) render as one. A text block stays text
    whatever else it holds; strings and other values are never images.
    """
    if not isinstance(block, dict):
        return False
    kind = block.get("type")
    return kind in IMAGE_BLOCK_TYPES or (kind != "text" and "image" in block)


def has_picture(messages: Iterable[Any]) -> bool:
    """Whether any message's content holds an image block (`is_picture_block`)."""
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(is_picture_block(b) for b in content):
            return True
    return False


def _is_text_block(block: dict) -> bool:
    kind = block.get("type")
    return kind == "text" or (kind is None and "text" in block)


def content_text(
    content: Any,
    *,
    sep: str = "",
    image: Optional[str] = None,
    reasoning: bool = False,
    resolve: Optional[Callable[[str], str]] = None,
    strict: bool = False,
) -> str:
    """The text of a message content.

    A string is its own text. A list of blocks gives the texts of its blocks in order,
    the non-empty ones joined by `sep`: a string block is itself, a text block (type
    "text", or no type and a `text` key) its `text`; an image block (`is_picture_block`)
    the marker `image` when one is given; a reasoning block, with `reasoning`, its text
    as `<think>...</think>`; any other block nothing. None gives "".

    Args:
        content: the message content.
        sep: what joins the blocks' texts ("" as a chat template folds them).
        image: the text an image block stands as (e.g. "[image]"); None leaves images out.
        reasoning: keep reasoning blocks (`{"type": "reasoning", "reasoning": ...}`).
        resolve: applied to every text read (an importer resolving `attachment://` references).
        strict: raise instead of reading "" from content that is neither a string, None
            nor a list, or from a block that is neither a string nor an object.

    Raises:
        ValueError: with `strict`, as above.
    """
    fix = resolve or (lambda text: text)
    if content is None:
        return ""
    if isinstance(content, str):
        return fix(content)
    if not isinstance(content, list):
        if strict:
            raise ValueError(f"message content must be a string or a list of blocks, not {type(content).__name__}")
        return ""
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(fix(block))
        elif isinstance(block, dict):
            if _is_text_block(block):
                parts.append(fix(str(block.get("text") or "")))
            elif is_picture_block(block):
                parts.append(image or "")
            elif reasoning and block.get("type") == "reasoning":
                parts.append(f"<think>{fix(str(block.get('reasoning') or ''))}</think>")
        elif strict:
            raise ValueError(f"content block of type {type(block).__name__} is not a string or object")
    return sep.join(p for p in parts if p)


def sniff_mime(data: bytes, default: Optional[str] = None) -> Optional[str]:
    """An image's MIME type from its first bytes (PNG, JPEG, GIF, WebP), or `default` for other bytes.

    Callers name their own fallback: the wire encoder passes None (it re-encodes unknown
    bytes as PNG), the store "application/octet-stream" (it keeps the bytes as they are).
    """
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return default
