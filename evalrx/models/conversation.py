"""The messages of a tool-calling conversation, built one way.

`ConversationBuilder` is what the agent loop appends to while it talks to the model, and
what `evalrx.analyzers` replays a stored trajectory through to score it: the system prompt,
the prompt (after the case image when there is one), the model's turns, tool results (the
images a tool returned follow the turn's results in a user message), parse-error feedback
and the forced-final nudge all come from here and from the tool-call codec, in one order,
so a rebuilt prompt is the generation's prompt by construction. Torch-free.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from evalrx.core.tool import ChatTurn, ToolCall

__all__ = ["FINAL_NUDGE", "REPEAT_NUDGE", "ConversationBuilder", "picture_message"]

# Loop-policy nudges: scaffold messages the model sees, not task prompts.
REPEAT_NUDGE = (
    "[repeat blocked] You already made this exact tool call; the result would be identical "
    "to what you already received. Choose DIFFERENT arguments or give your final answer now."
)
FINAL_NUDGE = (
    "You have used your entire tool budget. Based on everything you have already seen, "
    "give your final answer NOW as plain text."
)


def picture_message(images: Sequence[Any], tool_name: str) -> dict:
    """The user message that shows the model the images a tool call returned (None: a placeholder)."""
    many = len(images) > 1
    blocks: list = [{"type": "image", "image": im} for im in images]
    blocks.append(
        {
            "type": "text",
            "text": f"The image{'s' if many else ''} above {'were' if many else 'was'} "
            f"returned by the {tool_name!r} tool call.",
        }
    )
    return {"role": "user", "content": blocks}


class ConversationBuilder:
    """Appends a conversation's messages in the agent loop's order, through a tool-call codec.

    `messages` is the conversation so far; `info` has one `{"kind", "step"}` per message, kind
    one of system, prompt, user, assistant, tool, parse_error, nudge, image (`step` is the
    trajectory step a message stands for, where the caller names it). The images a tool
    returns wait until the turn ends (`end_turn`, or the next user or model turn): the OpenAI
    format wants every tool reply right after its call.

    Args:
        codec: the `ToolCallCodec` that writes the model turns, tool results and feedback.
        system: the system prompt, or None for none.
    """

    def __init__(self, codec: Any, system: Optional[str] = None) -> None:
        self.codec = codec
        self.messages: list = []
        self.info: list = []
        self._images: list = []
        if system:
            self._add({"role": "system", "content": system}, "system", None)

    def _add(self, message: dict, kind: str, step: Optional[int]) -> dict:
        self.messages.append(message)
        self.info.append({"kind": kind, "step": step})
        return message

    def prompt(
        self,
        text: str,
        image: Any = None,
        *,
        with_image: Optional[bool] = None,
        step: int = 0,
        more: Sequence[Any] = (),
    ) -> dict:
        """The first user turn: `text`, after `image` as a content block when the case has one.

        `with_image` says whether it has one (default: `image` is not None), so a replay without
        the image bytes still writes the block (`image=None`, a placeholder). `more`: further
        pictures the turn showed after the case's (an imported conversation's).
        """
        self.end_turn()
        with_image = image is not None if with_image is None else with_image
        blocks = [{"type": "image", "image": im} for im in ([image, *more] if with_image else [])]
        content: Any = [*blocks, {"type": "text", "text": text}] if with_image else text
        return self._add({"role": "user", "content": content}, "prompt", step)

    def user(self, text: str, step: Optional[int] = None, images: Sequence[Any] = ()) -> dict:
        """A later user turn (an imported conversation's), after the `images` it showed."""
        self.end_turn()
        content: Any = [*({"type": "image", "image": im} for im in images), {"type": "text", "text": text}]
        return self._add({"role": "user", "content": content if images else text}, "user", step)

    def assistant(
        self, chat: ChatTurn, calls: "list[ToolCall]", *, native: bool = False, step: Optional[int] = None
    ) -> dict:
        """A model turn as the codec records it; `native`: calls made natively (structured `tool_calls`)."""
        self.end_turn()
        codec = self.codec
        message = codec.structured_message(chat, calls) if native else codec.assistant_message(chat, calls)
        return self._add(message, "assistant", step)

    def tool(self, call: ToolCall, text: str, images: Sequence[Any] = (), step: Optional[int] = None) -> dict:
        """A tool's result for `call`; the `images` it returned are shown once the turn ends."""
        message = self._add(self.codec.tool_message(call, text), "tool", step)
        if images:
            self._images.append((list(images), call.name, step))
        return message

    def parse_error(self, errors: "list[str]", step: Optional[int] = None) -> dict:
        """The feedback for calls the codec could not read (its `content` is what the step records)."""
        return self._add(self.codec.parse_error_message(errors), "parse_error", step)

    def feedback(self, text: str, step: Optional[int] = None) -> dict:
        """The same feedback rebuilt from its recorded text."""
        return self._add(self.codec.feedback_message(text), "parse_error", step)

    def final_nudge(self) -> dict:
        """The request for a final answer once the tool budget is spent, placed where the codec allows."""
        self.end_turn()
        return self._add(self.codec.final_nudge_message(self.messages, FINAL_NUDGE), "nudge", None)

    def end_turn(self) -> None:
        """Show the images the turn's tools returned, after all of its tool messages and feedback."""
        for images, name, step in self._images:
            self._add(picture_message(images, name), "image", step)
        self._images.clear()
