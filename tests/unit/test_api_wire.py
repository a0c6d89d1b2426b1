"""The OpenAI wire format (`evalrx.models.backends.api_wire`): messages and images to and from it.

Pure Python, no server: the backend and `evalrx serve` over real HTTP are tests/unit/test_api_backend.py.
"""

from __future__ import annotations

import base64
import json

import pytest

from evalrx.models.backends.api_wire import data_url_to_image, from_wire_messages, image_to_data_url, to_wire_messages


def png_image(color=(255, 0, 0), size=(4, 3)):
    from PIL import Image

    return Image.new("RGB", size, color)


def test_to_wire_converts_arguments_ids_and_leaves_input_untouched():
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "What is 3*4?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "3*4"}}},
                {"id": "abc", "type": "function", "function": {"name": "search", "arguments": {"query": "é"}}},
            ],
        },
        {"role": "tool", "content": "12"},
        {"role": "tool", "tool_call_id": "abc", "content": "found"},
    ]
    snapshot = json.dumps(messages)
    wire = to_wire_messages(messages)
    assert json.dumps(messages) == snapshot
    calls = wire[2]["tool_calls"]
    assert calls[0]["function"]["arguments"] == '{"expression": "3*4"}'
    assert json.loads(calls[1]["function"]["arguments"]) == {"query": "é"}
    assert calls[0]["id"] == "call_2_0" and calls[1]["id"] == "abc"
    # The tool message without an id gets the first unanswered call's id.
    assert wire[3]["tool_call_id"] == "call_2_0"
    assert wire[4]["tool_call_id"] == "abc"


def test_images_become_data_urls_from_pil_path_and_bytes(tmp_path):
    img = png_image((10, 200, 30))
    path = tmp_path / "pic.png"
    img.save(path)
    raw = path.read_bytes()
    wire = to_wire_messages(
        [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": img},
                    {"type": "image", "image": str(path)},
                    {"type": "image", "image": raw},
                    {"type": "text", "text": "describe"},
                ],
            }
        ]
    )
    blocks = wire[0]["content"]
    assert [b["type"] for b in blocks] == ["image_url"] * 3 + ["text"]
    for block in blocks[:3]:
        url = block["image_url"]["url"]
        assert url.startswith("data:image/png;base64,")
        back = data_url_to_image(url)
        assert back.size == (4, 3) and back.convert("RGB").getpixel((1, 1)) == (10, 200, 30)
    # Path and bytes are sent as they are, not re-encoded.
    assert base64.b64decode(blocks[1]["image_url"]["url"].split(",", 1)[1]) == raw


def test_image_helpers_reject_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError):
        image_to_data_url(tmp_path / "missing.png")
    with pytest.raises(TypeError):
        image_to_data_url(12345)
    with pytest.raises(ValueError, match="base64 data"):
        data_url_to_image("https://example.com/a.png")
    with pytest.raises(ValueError, match="could not be decoded"):
        data_url_to_image("data:image/png;base64," + base64.b64encode(b"not an image").decode())


def test_from_wire_round_trip_restores_dicts_and_images():
    img = png_image((1, 2, 3))
    original = [
        {"role": "developer", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
        {"role": "user", "content": [{"type": "image", "image": img}, {"type": "text", "text": "zoom"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "zoom", "arguments": {"box": [1, 2, 3, 4]}}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    back = from_wire_messages(json.loads(json.dumps(to_wire_messages(original))), allow_images=True)
    assert back[0] == {"role": "system", "content": "be brief"}
    assert back[1]["content"][0]["type"] == "image"
    assert back[1]["content"][0]["image"].getpixel((0, 0)) == (1, 2, 3)
    assert back[2]["content"] == ""
    assert back[2]["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "zoom", "arguments": {"box": [1, 2, 3, 4]}}}
    ]
    assert back[3] == {"role": "tool", "content": "done", "tool_call_id": "c1"}


@pytest.mark.parametrize(
    "messages, match",
    [
        ([], "non-empty list"),
        ("hello", "non-empty list"),
        ([{"role": "robot", "content": "x"}], "role"),
        ([{"role": "user", "content": 5}], "content"),
        ([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{bad"}}]}], "not valid JSON"),
        ([{"role": "assistant", "tool_calls": [{"function": {}}]}], "function.name"),
        ([{"role": "user", "content": [{"type": "audio"}]}], "unsupported content type"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,x"}}]}],
            "does not accept images",
        ),
    ],
)
def test_from_wire_rejects_bad_messages(messages, match):
    with pytest.raises(ValueError, match=match):
        from_wire_messages(messages, allow_images=False)
