"""Rebuild the conversation an agent loop produced for a stored trajectory.

`conversation_from_trajectory` reproduces the messages the agent loop sent to the
model: model turns keep their raw text (Hermes style, so re-rendering gives back the
model's own tokens) or, for turns recorded from an API server, carry OpenAI-format
`tool_calls` that the local model's chat template writes in its own format. Tool
observations, parse-error feedback, repeat-blocked nudges, tool-returned images (as
placeholders) and the forced-final nudge come back in the loop's order.
`render_conversation` turns messages into chat-template text. Pure Python: nothing
here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from evalrx.core.case import Step, StepRole, Trajectory
from evalrx.core.tool import normalize_call
from evalrx.models.agent import FINAL_NUDGE  # the loop's own text: the rebuilt prompt is byte-identical

__all__ = [
    "ActorTurn",
    "Conversation",
    "conversation_from_trajectory",
    "drop_images",
    "has_images",
    "messages_from_trajectory",
    "normalize_call",
    "normalize_tools",
    "render_conversation",
    "tool_names",
]


def normalize_tools(tools: Optional[Sequence[Any]]) -> Optional[list]:
    """Tool schemas (OpenAI function format) from `Tool` objects or schema dicts; None stays None."""
    if tools is None:
        return None
    out = []
    for t in tools:
        out.append(t.to_openai() if hasattr(t, "to_openai") else dict(t))
    return out


def tool_names(tools: Optional[Sequence[Any]]) -> list:
    """Names of the tools in OpenAI schema dicts or `Tool` objects."""
    names = []
    for t in normalize_tools(tools) or []:
        fn = t.get("function", t)
        if fn.get("name"):
            names.append(str(fn["name"]))
    return names


@dataclass
class ActorTurn:
    """A model turn of the trajectory and where it sits in the rebuilt conversation.

    Attributes:
        step_idx: the trajectory step index.
        message_index: index of its assistant message in `Conversation.messages`.
        tools: the tool schemas the model saw (None for the forced final turn).
        calls: its well-formed calls, normalised.
        is_answer: a final answer (no calls, no parse error).
        content: the raw text the step recorded.
    """

    step_idx: int
    message_index: int
    tools: Optional[list]
    calls: list
    is_answer: bool
    content: str


@dataclass
class Conversation:
    """The rebuilt conversation: messages, the tools the loop passed, its model turns.

    `message_info` has one entry per message: `{"kind", "step"}` with kind one of
    system, prompt, user, assistant, tool, parse_error, nudge, image.
    """

    messages: list
    tools: Optional[list]
    turns: list
    style: str
    message_info: list = field(default_factory=list)


def _observation_text(observation: Any) -> str:
    """The text the loop put in the tool message for a stored observation record."""
    if isinstance(observation, dict) and "text" in observation and "n_images" in observation:
        return str(observation["text"])
    return str(observation)


def _n_images(observation: Any) -> int:
    if isinstance(observation, dict) and "n_images" in observation:
        try:
            return int(observation.get("n_images") or 0)
        except (TypeError, ValueError):
            return 0
    return 0


def _image_message(n: int, tool_name: str) -> dict:
    many = n > 1
    blocks: list = [{"type": "image", "image": None} for _ in range(n)]
    blocks.append(
        {
            "type": "text",
            "text": f"The image{'s' if many else ''} above {'were' if many else 'was'} "
            f"returned by the {tool_name!r} tool call.",
        }
    )
    return {"role": "user", "content": blocks}


def _detect_style(steps: Sequence[Step]) -> str:
    """Hermes when any model turn holds `<tool_call>` markup; OpenAI when calls carry no markup."""
    has_calls = False
    for s in steps:
        if s.role is not StepRole.ACTOR:
            continue
        if "<tool_call>" in (s.content or ""):
            return "hermes"
        if s.tool_calls:
            has_calls = True
    return "openai" if has_calls else "hermes"


def conversation_from_trajectory(
    trajectory: Trajectory,
    system: Optional[str] = None,
    tools: Optional[Sequence[Any]] = None,
    *,
    style: str = "auto",
    image: Any = None,
) -> Conversation:
    """Rebuild the conversation the agent loop produced for `trajectory`.

    Args:
        trajectory: a stored trajectory.
        system: the system prompt the run used (None when it had none).
        tools: the tools the run offered (`Tool` objects or OpenAI schema dicts).
        style: "hermes" (model turns are raw text holding `<tool_call>` blocks),
            "openai" (turns carry native calls the template renders) or "auto".
        image: the case image, when the first user turn had one (a placeholder otherwise).

    Returns:
        The `Conversation`.
    """
    from evalrx.core.tool import ChatTurn, ToolCall
    from evalrx.models.toolcodec import OpenAIToolCodec, QwenToolCodec

    schemas = normalize_tools(tools)
    steps = list(trajectory.steps)
    if style == "auto":
        style = _detect_style(steps)
    if style not in ("hermes", "openai"):
        raise ValueError(f"style must be 'auto', 'hermes' or 'openai', got {style!r}")
    codec = QwenToolCodec() if style == "hermes" else OpenAIToolCodec()

    messages: list = []
    info: list = []
    turns: list = []
    if system:
        messages.append({"role": "system", "content": system})
        info.append({"kind": "system", "step": None})

    last_calls: list = []
    pending_images: list = []
    seen_prompt = False

    def flush_images() -> None:
        for n, name, step in pending_images:
            messages.append(_image_message(n, name))
            info.append({"kind": "image", "step": step})
        pending_images.clear()

    for s in steps:
        if s.role is StepRole.USER:
            flush_images()
            content: Any = s.content
            if not seen_prompt and s.span.get("has_image"):
                content = [{"type": "image", "image": image}, {"type": "text", "text": s.content}]
            messages.append({"role": "user", "content": content})
            info.append({"kind": "user" if seen_prompt else "prompt", "step": s.idx})
            seen_prompt = True
        elif s.role is StepRole.ACTOR:
            flush_images()
            forced = bool(s.span.get("forced_final"))
            if forced:
                messages.append({"role": "user", "content": FINAL_NUDGE})
                info.append({"kind": "nudge", "step": None})
            calls = [] if forced else [normalize_call(c) for c in (s.tool_calls or [])]
            text = s.content or ""
            if style == "openai" and calls and "<tool_call>" not in text:
                ids = [c["id"] or f"call_{s.idx}_{i}" for i, c in enumerate(calls)]
                tc = [ToolCall(name=c["name"], args=c["args"], id=cid) for c, cid in zip(calls, ids)]
                msg = codec.assistant_message(ChatTurn(text=text), tc)
                for c, cid in zip(calls, ids):
                    c["id"] = cid
            else:
                msg = {"role": "assistant", "content": text}
            messages.append(msg)
            info.append({"kind": "assistant", "step": s.idx})
            turns.append(
                ActorTurn(
                    step_idx=s.idx,
                    message_index=len(messages) - 1,
                    tools=None if forced else schemas,
                    calls=calls,
                    is_answer=not calls and not s.parse_error,
                    content=text,
                )
            )
            last_calls = calls
        elif s.role is StepRole.TOOL:
            text = _observation_text(s.observation)
            if s.span.get("parse_error"):
                role = "tool" if style == "hermes" else "user"
                msg = {"role": role, "content": text}
                if role == "tool":
                    msg["name"] = "parse_error"
                messages.append(msg)
                info.append({"kind": "parse_error", "step": s.idx})
                continue
            i = int(s.span.get("call", 0) or 0)
            call = last_calls[i] if i < len(last_calls) else {"name": s.content, "id": None}
            tc = ToolCall(name=s.content or call["name"], id=call.get("id"))
            messages.append(codec.tool_message(tc, text))
            info.append({"kind": "tool", "step": s.idx})
            n = _n_images(s.observation)
            if n:
                pending_images.append((n, tc.name, s.idx))
    flush_images()
    return Conversation(messages=messages, tools=schemas, turns=turns, style=style, message_info=info)


def messages_from_trajectory(
    trajectory: Trajectory,
    system: Optional[str] = None,
    tools: Optional[Sequence[Any]] = None,
    *,
    style: str = "auto",
) -> list:
    """The chat messages of the conversation that produced `trajectory` (see `conversation_from_trajectory`)."""
    return conversation_from_trajectory(trajectory, system, tools, style=style).messages




# ----------------------------------------------------------------------------- rendering


def render_conversation(renderer: Any, messages: list, tools: Optional[list], add_generation_prompt: bool) -> str:
    """Render messages as chat-template text.

    Args:
        renderer: a local handle with `render(messages, tools, add_generation_prompt)`
            (what its `chat` tokenizes), or a tokenizer/processor with a chat template.
        messages: the conversation.
        tools: tool schemas or None.
        add_generation_prompt: append the assistant header.
    """
    render = getattr(renderer, "render", None)
    if callable(render) and not hasattr(renderer, "apply_chat_template"):
        out = render(messages, tools or None, add_generation_prompt)
    else:
        out = renderer.apply_chat_template(
            messages, tools=tools or None, tokenize=False, add_generation_prompt=add_generation_prompt
        )
    if isinstance(out, list):  # some processors return one string per conversation
        out = out[0]
    return str(out)


def has_images(messages: list) -> bool:
    return any(
        isinstance(m.get("content"), list) and any(b.get("type") in ("image", "image_url") for b in m["content"])
        for m in messages
    )


def drop_images(conversation: Conversation) -> Conversation:
    """The conversation with image blocks removed (for scoring on a text-only model)."""
    msgs = []
    for m in conversation.messages:
        content = m.get("content")
        if isinstance(content, list):
            kept = [b for b in content if b.get("type") not in ("image", "image_url")]
            m = dict(m, content="".join(b.get("text", "") for b in kept))
        msgs.append(m)
    return Conversation(msgs, conversation.tools, conversation.turns, conversation.style, conversation.message_info)

