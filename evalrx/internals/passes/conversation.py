"""Rebuild the conversation an agent loop produced for a stored trajectory.

`conversation_from_trajectory` reproduces the messages the agent loop sent to the
model, built by the tool-call codec of the model that scores them (`CODECS`, picked
with `replay_style(handle)`): model turns written in that codec's format are recorded
as the codec records them (raw text for Hermes, Qwen3, Llama 3 and pythonic, so
re-rendering gives back the model's own tokens; structured calls with 9-character ids
for Mistral), and turns whose calls were made natively (an API server) carry
`tool_calls` that the local model's chat template writes in its own format. Tool
observations, parse-error feedback, repeat-blocked nudges, tool-returned images (as
placeholders) and the forced-final nudge come back in the loop's order, with the
roles and ids the codec gives them.
`render_conversation` turns messages into chat-template text. Pure Python: nothing
here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from evalrx.core.case import Step, StepRole, Trajectory
from evalrx.core.content import content_text
from evalrx.core.observation import observation_text, picture_count
from evalrx.core.tool import normalize_call
from evalrx.models.conversation import ConversationBuilder  # the agent loop's own builder

__all__ = [
    "ActorTurn",
    "Conversation",
    "conversation_from_trajectory",
    "drop_pictures",
    "messages_from_trajectory",
    "normalize_call",
    "normalize_tools",
    "render_conversation",
    "replay_style",
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
        verbatim: `content` is the turn as the model wrote it, in the format of the codec
            that built the conversation, so a teacher-forced pass scores `content` plus the
            end-of-turn token even where the template renders the turn otherwise (Mistral
            adds call ids and a leading space). False for calls made natively (an API run),
            which only the template's rendering writes out.
    """

    step_idx: int
    message_index: int
    tools: Optional[list]
    calls: list
    is_answer: bool
    content: str
    verbatim: bool = True


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
    _renders: dict = field(default_factory=dict, repr=False, compare=False)

    def render(self, renderer: Any, upto: int, tools: Optional[list], add_generation_prompt: bool) -> str:
        """`render_conversation` of the first `upto` messages, rendered once per plan (the planner and the
        attention segments ask for the same prefixes)."""
        key = (id(renderer), upto, None if tools is None else id(tools), bool(add_generation_prompt))
        if key not in self._renders:
            self._renders[key] = render_conversation(renderer, self.messages[:upto], tools, add_generation_prompt)
        return self._renders[key]


def _detect_style(steps: Sequence[Step]) -> str:
    """The codec style whose call format the model turns are written in (a guess for `style="auto"`).

    Markup decides first (`[TOOL_CALLS]`: mistral; `<tool_call>`: qwen3 after a think
    block, hermes otherwise); bare calls are pythonic or llama3 when that codec reads
    the recorded calls back from the text; calls with no markup are native (openai);
    a trajectory without calls is hermes (its turns are raw text in any style).
    """
    from evalrx.models.toolcodec import CODECS

    actor = [s for s in steps if s.role is StepRole.ACTOR]
    texts = [s.content or "" for s in actor]
    if any("[TOOL_CALLS]" in t for t in texts):
        return "mistral"
    if any("<tool_call>" in t for t in texts):
        return "qwen3" if any("</think>" in t for t in texts) else "hermes"
    with_calls = [s for s in actor if s.tool_calls]
    if not with_calls:
        return "hermes"
    for style in ("pythonic", "llama3"):
        codec = CODECS[style]()
        if all(_reads_calls(codec, s.content or "", s.tool_calls) for s in with_calls):
            return style
    return "openai"


def _reads_calls(codec: Any, text: str, calls: Sequence[Any]) -> bool:
    """Whether `codec` reads exactly the recorded calls (names and arguments) from the turn's text."""
    from evalrx.core.tool import ChatTurn

    read = [(c.name, c.args) for c in codec.parse(ChatTurn(text=text)).calls]
    return bool(read) and read == [(c["name"], c["args"]) for c in map(normalize_call, calls)]


def replay_style(model: Any) -> str:
    """The codec style to rebuild a conversation in for scoring on `model`: its handle's
    `tool_call_style` (`codec_style`), or "auto" for something without a spec (a bare tokenizer)."""
    from evalrx.models.toolcodec import codec_style

    spec = getattr(model, "spec", None)
    if spec is None:
        return "auto"
    return codec_style(spec, getattr(model, "backend", None))


def conversation_from_trajectory(
    trajectory: Trajectory,
    system: Optional[str] = None,
    tools: Optional[Sequence[Any]] = None,
    *,
    style: str = "auto",
    image: Any = None,
    images: Optional[dict] = None,
) -> Conversation:
    """Rebuild the conversation the agent loop produced for `trajectory`.

    The messages are built by the codec of `style` (`CODECS`), as the agent loop
    built them: a model turn whose text holds calls in that codec's format is kept as
    the codec records it (raw text for most families, so re-rendering gives back the
    model's own tokens; structured calls with 9-character ids for Mistral); a turn
    whose calls were made natively (an API run, or another family's format) becomes
    structured `tool_calls` the template writes in its own format. Tool results,
    parse-error feedback and the forced-final nudge take the roles, names and ids
    that codec gives them.

    Args:
        trajectory: a stored trajectory.
        system: the system prompt the run used (None when it had none).
        tools: the tools the run offered (`Tool` objects or OpenAI schema dicts).
        style: the tool-call style of the model that will score the conversation
            (`replay_style(handle)`), or "auto" to guess the style the turns were
            written in (`_detect_style`).
        image: the case image, when the first user turn had one (a placeholder otherwise).
        images: `{step: [image, ...]}` the pictures steps showed: the case image on the prompt's
            step (in place of `image`), the images a tool returned on its step (placeholders otherwise).

    Returns:
        The `Conversation`.

    Raises:
        ValueError: `style` names no registered codec.
    """
    from evalrx.core.tool import ChatTurn, ToolCall, wire_name
    from evalrx.models.toolcodec import CODECS
    from evalrx.specs import style_key

    schemas = normalize_tools(tools)
    steps = list(trajectory.steps)
    style = _detect_style(steps) if style == "auto" else style_key(style)
    if style not in CODECS:
        raise ValueError(f"style must be 'auto' or a codec style ({', '.join(sorted(CODECS))}), got {style!r}")
    codec = CODECS[style]()

    built = ConversationBuilder(codec, system)  # the agent loop's builder: its messages, in its order
    turns: list = []
    last_calls: list = []
    seen_prompt = False
    for s in steps:
        if s.role is StepRole.USER:
            # What the turn showed: the pictures given, else placeholders as many as it recorded.
            pictures = list((images or {}).get(s.idx) or [])
            if not seen_prompt and not pictures and image is not None:
                pictures = [image]
            n = max(
                len(pictures),
                s.span_int("n_images"),
                int(not seen_prompt and bool(s.span.get("has_image"))),
            )
            pictures += [None] * (n - len(pictures))
            if seen_prompt:
                built.user(s.content, step=s.idx, images=pictures)
            else:
                built.prompt(s.content, pictures[0] if n else None, with_image=n > 0, step=s.idx, more=pictures[1:])
            seen_prompt = True
        elif s.role is StepRole.ACTOR:
            forced = bool(s.span.get("forced_final"))
            if forced:
                built.final_nudge()
            # The model saw and wrote each tool's wire name (`math_factorial`); the step keeps its own (`math.factorial`).
            calls = [] if forced else [dict(normalize_call(c)) for c in (s.tool_calls or [])]
            for c in calls:
                c["name"] = wire_name(c["name"])
            text = s.content or ""
            chat = ChatTurn(text=text)
            native = bool(calls) and not codec.parse(chat).calls  # no markup this codec reads
            if native:
                for i, c in enumerate(calls):
                    c["id"] = c["id"] or f"call_{s.idx}_{i}"
            turn_calls = [ToolCall(name=c["name"], args=c["args"], id=c["id"]) for c in calls]
            built.assistant(chat, turn_calls, native=native, step=s.idx)
            for c, t in zip(calls, turn_calls):  # an id the codec gave a call goes to its results too
                c["id"] = t.id
            turns.append(
                ActorTurn(
                    step_idx=s.idx,
                    message_index=len(built.messages) - 1,
                    tools=None if forced else schemas,
                    calls=calls,
                    is_answer=not calls and not s.parse_error,
                    content=text,
                    verbatim=not native,
                )
            )
            last_calls = calls
        elif s.role is StepRole.TOOL:
            text = observation_text(s.observation, shown=True)
            if s.span.get("parse_error"):
                built.feedback(text, step=s.idx)
                continue
            i = s.span_int("call")
            call: dict = last_calls[i] if i < len(last_calls) else {"name": s.content, "id": None}
            tc = ToolCall(name=wire_name(s.content) if s.content else call["name"], id=call.get("id"))
            returned = list((images or {}).get(s.idx) or [])
            n = max(picture_count(s.observation), s.span_int("n_images"), len(returned))
            built.tool(tc, text, returned[:n] + [None] * (n - len(returned)), step=s.idx)  # placeholders if unknown
    built.end_turn()
    messages, info = built.messages, built.info
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


def drop_pictures(conversation: Conversation) -> Conversation:
    """The conversation with image blocks removed (for scoring on a text-only model)."""
    msgs = []
    for m in conversation.messages:
        content = m.get("content")
        if isinstance(content, list):
            m = dict(m, content=content_text(content))  # the text blocks only
        msgs.append(m)
    return Conversation(msgs, conversation.tools, conversation.turns, conversation.style, conversation.message_info)
