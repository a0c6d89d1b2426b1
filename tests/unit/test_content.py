"""One reading of message content (`evalrx.core.content`): text, has-image, MIME sniffing."""

from __future__ import annotations

import pytest

from evalrx.core.content import content_text, has_picture, is_picture_block, sniff_mime

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 8


def test_an_image_block_is_a_typed_image_or_an_untyped_image_key_never_text():
    # The rule both backends check with: the api wire encoder sends `{"image": ...}` as an image and
    # a vision chat template renders it as one; a text block stays text whatever else it holds.
    assert is_picture_block({"type": "image", "image": None})
    assert is_picture_block({"type": "image_url", "image_url": {"url": "data:image/png;base64,"}})
    assert is_picture_block({"type": "input_image", "image_url": "x"})
    assert is_picture_block({"image": "cat.png"})
    assert not is_picture_block({"type": "text", "text": "hi", "image": "ignored"})
    assert not is_picture_block({"type": "text", "text": "image"})
    assert not is_picture_block("image")


def test_has_image_reads_list_contents_only():
    assert has_picture([{"role": "user", "content": "an image"}, {"role": "user", "content": [{"image": b""}]}])
    assert not has_picture([{"role": "user", "content": [{"type": "text", "text": "x"}]}, {"role": "tool"}])
    assert not has_picture([])


def test_content_text_joins_text_blocks_and_marks_images_only_when_asked():
    blocks = [{"type": "image", "image": None}, {"type": "text", "text": "a"}, "b", {"text": "c"}, {"type": "x"}]
    assert content_text(blocks) == "abc"
    assert content_text(blocks, sep="\n", image="[image]") == "[image]\na\nb\nc"
    assert content_text("plain") == "plain"
    assert content_text(None) == "" and content_text(3) == ""
    assert content_text([{"type": "text", "text": None}]) == ""


def test_content_text_reasoning_resolve_and_strict():
    blocks = [{"type": "reasoning", "reasoning": "r"}, {"type": "text", "text": "attachment://k"}]
    assert content_text(blocks) == "attachment://k"
    assert (
        content_text(blocks, reasoning=True, resolve=lambda t: t.replace("attachment://k", "v")) == "<think>r</think>v"
    )
    with pytest.raises(ValueError, match="string or a list"):
        content_text(3, strict=True)
    with pytest.raises(ValueError, match="not a string or object"):
        content_text([1], strict=True)
    assert content_text([1]) == ""


def test_sniff_mime_names_image_types_and_the_callers_fallback():
    assert sniff_mime(PNG) == "image/png"
    assert sniff_mime(b"\xff\xd8\xff\xe0") == "image/jpeg"
    assert sniff_mime(b"GIF89a...") == "image/gif"
    assert sniff_mime(b"RIFF\0\0\0\0WEBPVP8 ") == "image/webp"
    # The wire encoder re-encodes unknown bytes (None); the store keeps them as octet-stream.
    assert sniff_mime(b"not an image") is None
    assert sniff_mime(b"not an image", "application/octet-stream") == "application/octet-stream"
