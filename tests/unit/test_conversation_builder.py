"""The one conversation builder (`evalrx.models.conversation`) the agent loop and replay share."""

from __future__ import annotations

from evalrx.core.tool import ChatTurn, ToolCall
from evalrx.models.conversation import FINAL_NUDGE, ConversationBuilder
from evalrx.models.toolcodec import CODECS


def test_tool_images_follow_the_turns_results_and_feedback_and_info_names_each_message():
    built = ConversationBuilder(CODECS["hermes"](), "sys")
    built.prompt("look", None, with_image=True)
    call = ToolCall(name="image_zoom", args={"x": 1}, id="c1")
    built.assistant(ChatTurn(text="<tool_call>...</tool_call>"), [call], step=1)
    built.tool(call, "zoomed", [None, None], step=2)
    built.parse_error(["bad json"], step=3)
    built.final_nudge()
    kinds = [i["kind"] for i in built.info]
    assert kinds == ["system", "prompt", "assistant", "tool", "parse_error", "image", "nudge"]
    assert built.messages[1]["content"][0] == {"type": "image", "image": None}
    image = built.messages[5]["content"]
    assert [b["type"] for b in image] == ["image", "image", "text"]
    assert image[-1]["text"] == "The images above were returned by the 'image_zoom' tool call."
    assert built.info[5]["step"] == 2
    assert built.messages[-1] == {"role": "user", "content": FINAL_NUDGE}


def test_a_prompt_without_an_image_is_plain_text_and_no_system_means_none():
    built = ConversationBuilder(CODECS["hermes"]())
    built.prompt("hi")
    built.end_turn()
    assert built.messages == [{"role": "user", "content": "hi"}]
