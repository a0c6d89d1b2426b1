"""Rebuild a stored trajectory's conversation and plan the teacher-forced passes over it.

`messages_from_trajectory` reproduces the messages the agent loop sent to the model:
model turns keep their raw text (Hermes style, so re-rendering gives back the model's
own tokens) or, for turns recorded from an API server, carry OpenAI-format
`tool_calls` that the local model's chat template writes in its own format. Tool
observations, parse-error feedback, repeat-blocked nudges, tool-returned images
(as placeholders) and the forced-final nudge come back in the loop's order.

`plan_passes` renders the conversation once and checks, per model turn, that the
prompt the model saw at that turn is a token prefix of the full rendering. Turns
that pass are analysed together in ONE teacher-forced pass (attention is causal, so
the prefix's hidden states are the same); turns whose template rewrites history
(or whose tools differ, such as the forced final turn) get a pass of their own.

`ReplayAnalyzer` re-scores any trajectory, including one produced by an API model,
on a chosen local model. Nothing here imports torch at module level.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from evalrx.analyzers._base import AnalysisResult, Analyzer, model_id, register_analyzer, register_result
from evalrx.analyzers.positions import first_token_at, tokenize_with_offsets
from evalrx.core.capability import Capability
from evalrx.core.case import Step, StepRole, Trajectory
from evalrx.core.tool import normalize_call
from evalrx.models.agent import FINAL_NUDGE  # the loop's own text: the rebuilt prompt is byte-identical

__all__ = [
    "ActorTurn",
    "Conversation",
    "PassTurn",
    "ReplayAnalyzer",
    "ReplayResult",
    "TeacherForcedPass",
    "conversation_from_trajectory",
    "messages_from_trajectory",
    "normalize_call",
    "normalize_tools",
    "plan_passes",
    "render_conversation",
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


# ----------------------------------------------------------------------------- rendering and passes


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


def _has_images(messages: list) -> bool:
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


@dataclass
class PassTurn:
    """One model turn inside a teacher-forced pass.

    Attributes:
        step_idx: the trajectory step.
        gen_chars: `[start, end)` characters of the text the model generated (end-of-turn token included).
        gen_tokens: `[start, end)` token indices of that text.
    """

    step_idx: int
    gen_chars: tuple
    gen_tokens: tuple
    turn: ActorTurn


@dataclass
class TeacherForcedPass:
    """One forward pass: the token ids, their offsets in the rendered text, the turns it covers."""

    text: str
    ids: list
    offsets: list
    turns: list
    tools: Optional[list] = None  # the tool schemas the text was rendered with
    shared: bool = False  # the full conversation's pass (as opposed to one turn's own)

    @property
    def steps(self) -> list:
        return [t.step_idx for t in self.turns]


def _eos_text(tokenizer: Any) -> Optional[str]:
    tok = getattr(tokenizer, "tokenizer", tokenizer)
    eos = getattr(tok, "eos_token", None)
    return str(eos) if eos else None


def _generated_chars(text: str, start: int, end_hint: int, content: str, eos: Optional[str]) -> int:
    """End of what the model generated in a turn starting at `start`: its text plus the end-of-turn token."""
    if content and text.startswith(content, start):
        end = start + len(content)
    else:  # the template wrote the turn (OpenAI-style calls): take the rendered message up to eos
        end = end_hint
        if eos:
            at = text.find(eos, start, end_hint)
            if at >= 0:
                return at + len(eos)
        return end
    if eos and text.startswith(eos, end):
        end += len(eos)
    return end


def _batch_ids(tokenizer: Any, texts: list) -> list:
    """Token ids of several texts without added special tokens."""
    tok = getattr(tokenizer, "tokenizer", tokenizer)
    return [list(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]


def _own_pass(tokenizer: Any, prompt: str, completion: str, turn: ActorTurn, eos: Optional[str]) -> TeacherForcedPass:
    """A pass holding one turn: the prompt the model saw, then what it generated."""
    p_ids, p_off = tokenize_with_offsets(tokenizer, prompt)
    text = prompt + completion
    ids, offs = tokenize_with_offsets(tokenizer, text)
    if ids[: len(p_ids)] != p_ids:  # tokens merged across the boundary: keep the model's prompt tokens
        c_ids, c_off = tokenize_with_offsets(tokenizer, completion)
        ids = p_ids + c_ids
        offs = p_off + [(s + len(prompt), e + len(prompt)) for s, e in c_off]
    gen_end = _generated_chars(text, len(prompt), len(text), turn.content, eos)
    g0 = len(p_ids)
    g1 = first_token_at(offs, gen_end)
    turns = [PassTurn(turn.step_idx, (len(prompt), gen_end), (g0, g1), turn)]
    return TeacherForcedPass(text, ids, offs, turns, turn.tools)


def plan_passes(
    tokenizer: Any, conversation: Conversation, *, mode: str = "auto", renderer: Any = None
) -> "list[TeacherForcedPass]":
    """Group the conversation's model turns into as few teacher-forced passes as the template allows.

    Args:
        tokenizer: the local model's tokenizer (or processor) with its chat template.
        conversation: from `conversation_from_trajectory`.
        mode: "auto" (one pass for every prefix-stable turn, own passes for the rest)
            or "per_step" (one pass per turn; the reference the one-pass result must match).
        renderer: what renders the chat template (a local handle's `render`); the tokenizer when None.

    Returns:
        The passes; the shared pass (if any) first, truncated after its last turn.
    """
    if mode not in ("auto", "per_step"):
        raise ValueError(f"mode must be 'auto' or 'per_step', got {mode!r}")
    msgs = conversation.messages
    eos = _eos_text(tokenizer)
    renderer = renderer if renderer is not None else tokenizer
    full_text = render_conversation(renderer, msgs, conversation.tools, False)
    full_ids, full_off = tokenize_with_offsets(tokenizer, full_text) if mode == "auto" else ([], [])
    rendered = []
    for turn in conversation.turns:
        mi = turn.message_index
        prompt = render_conversation(renderer, msgs[:mi], turn.tools, True)
        upto = render_conversation(renderer, msgs[: mi + 1], turn.tools, False)
        # Stable when the full rendering starts with this turn as the model saw and wrote it:
        # the prompt (compared as tokens) and the turn itself (a template may rewrite past turns).
        candidate = mode == "auto" and upto.startswith(prompt) and full_text.startswith(upto)
        rendered.append((turn, prompt, upto, candidate))
    # One batched call tokenizes every candidate prompt (the fast tokenizer runs it in parallel).
    texts = [prompt for _, prompt, _, candidate in rendered if candidate]
    prompt_ids = iter(_batch_ids(tokenizer, texts) if texts else [])
    shared: list = []
    own: list = []
    for turn, prompt, upto, candidate in rendered:
        p_ids = next(prompt_ids) if candidate else None
        if p_ids is not None and full_ids[: len(p_ids)] == p_ids:
            gen_end = _generated_chars(full_text, len(prompt), len(upto), turn.content, eos)
            g0 = len(p_ids)
            g1 = first_token_at(full_off, gen_end)
            shared.append(PassTurn(turn.step_idx, (len(prompt), gen_end), (g0, g1), turn))
        else:
            completion = upto[len(prompt):] if upto.startswith(prompt) else (turn.content + (eos or ""))
            own.append(_own_pass(tokenizer, prompt, completion, turn, eos))
    passes: list = []
    if shared:
        n = max(t.gen_tokens[1] for t in shared)
        passes.append(TeacherForcedPass(full_text, full_ids[:n], full_off[:n], shared, conversation.tools, True))
    return passes + own


def describe_passes(passes: Sequence[TeacherForcedPass]) -> dict:
    """JSON-safe summary of a plan: mode and per-pass steps and lengths."""
    if all(p.shared for p in passes):
        mode = "one_pass"
    elif not any(p.shared for p in passes):
        mode = "per_step"
    else:
        mode = "mixed"
    return {
        "mode": mode,
        "passes": [{"steps": p.steps, "n_tokens": len(p.ids), "shared": p.shared} for p in passes],
    }


# ----------------------------------------------------------------------------- replay


@register_result
class ReplayResult(AnalysisResult):
    """A trajectory re-scored on a local model: per-turn summaries plus the analyses asked for.

    Attributes:
        step: trajectory step index per model turn.
        n_tokens: generated tokens re-scored per turn.
        sum_logprob / mean_logprob / min_logprob: teacher-forced log-probs of each turn's tokens.
        parts: the sub-results by analyzer name (token_uncertainty, tool_decision, logit_lens, ...).
        source_model / scoring_model: who produced the trajectory, who re-scored it.
    """

    result_type = "replay"

    def __init__(self, step, n_tokens, sum_logprob, mean_logprob, min_logprob, parts, source_model, scoring_model):
        self.step = np.asarray(step, dtype=np.int32)
        self.n_tokens = np.asarray(n_tokens, dtype=np.int32)
        self.sum_logprob = np.asarray(sum_logprob, dtype=np.float32)
        self.mean_logprob = np.asarray(mean_logprob, dtype=np.float32)
        self.min_logprob = np.asarray(min_logprob, dtype=np.float32)
        self.parts = dict(parts)
        self.source_model = source_model
        self.scoring_model = scoring_model

    def to_arrays(self) -> dict:
        arrays = {
            "step": self.step,
            "n_tokens": self.n_tokens,
            "sum_logprob": self.sum_logprob,
            "mean_logprob": self.mean_logprob,
            "min_logprob": self.min_logprob,
        }
        for name, part in self.parts.items():
            for key, value in part.to_arrays().items():
                arrays[f"{name}/{key}"] = value
        return arrays

    @property
    def meta(self) -> dict:
        return {
            "result_type": self.result_type,
            "analyzer": ReplayAnalyzer.name,
            "source_model": self.source_model,
            "scoring_model": self.scoring_model,
            "parts": {name: part.meta for name, part in self.parts.items()},
        }

    @classmethod
    def from_arrays(cls, arrays: dict, meta: dict) -> "ReplayResult":
        from evalrx.analyzers._base import result_from_arrays

        parts = {}
        for name, part_meta in (meta.get("parts") or {}).items():
            prefix = f"{name}/"
            sub = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
            parts[name] = result_from_arrays(sub, part_meta)
        return cls(
            arrays["step"], arrays["n_tokens"], arrays["sum_logprob"], arrays["mean_logprob"],
            arrays["min_logprob"], parts, meta.get("source_model"), meta.get("scoring_model"),
        )

    def turn_summary(self) -> list:
        """One dict per model turn: step, tokens and log-prob statistics."""
        return [
            {
                "step": int(s),
                "n_tokens": int(n),
                "sum_logprob": float(a),
                "mean_logprob": float(m),
                "min_logprob": float(lo),
            }
            for s, n, a, m, lo in zip(self.step, self.n_tokens, self.sum_logprob, self.mean_logprob, self.min_logprob)
        ]


@register_analyzer
class ReplayAnalyzer(Analyzer):
    """Re-score a stored trajectory teacher-forced on a local model.

    Works on trajectories from any backend: API turns with native calls are written
    in the local model's own call format by its chat template, so a black-box run
    gets white-box evidence (how likely the local model finds each turn, where its
    tool decision would have gone, what its layers predicted).

    Args:
        parts: the analyzers to run on the local model, by registry name.
        source_model: recorded as who produced the trajectory (e.g. "gpt-4o-mini on api").
        **options: keyword arguments for the part analyzers keyed by name,
            e.g. `logit_lens={"top_k": 5}`.
    """

    name = "replay"
    requires = frozenset({Capability.LOGITS})
    api_hint = (
        "Pass the local model to score on (evalrx.load(..., backend='hf_local') or evalrx.wrap(model, tokenizer)); "
        "the trajectory itself may come from any backend."
    )

    def __init__(
        self,
        parts: Sequence[str] = ("token_uncertainty", "tool_decision"),
        *,
        source_model: Optional[str] = None,
        mode: str = "auto",
        **options: Any,
    ) -> None:
        self.parts = tuple(parts)
        self.source_model = source_model
        self.mode = mode
        self.options = options

    def check(self, model: Any) -> None:
        from evalrx.analyzers._base import get_analyzer

        super().check(model)
        for name in self.parts:
            get_analyzer(name, **self.options.get(name, {})).check(model)

    def run_trajectory(
        self,
        model: Any,
        trajectory: Trajectory,
        *,
        tools: Optional[list] = None,
        system: Optional[str] = None,
    ) -> ReplayResult:
        """Re-score `trajectory` on `model` (a local handle) and run the part analyzers.

        Raises:
            CapabilityError: `model` lacks what a part needs (an API handle cannot score).
        """
        from evalrx.analyzers._base import get_analyzer

        self.check(model)
        parts = {}
        for name in dict.fromkeys(("token_uncertainty",) + self.parts):
            opts = dict(self.options.get(name, {}))
            analyzer = get_analyzer(name, **opts)
            if hasattr(analyzer, "mode"):
                analyzer.mode = self.mode
            parts[name] = analyzer.run_trajectory(model, trajectory, tools=tools, system=system)
        unc = parts["token_uncertainty"]
        steps, n, total, mean, low = [], [], [], [], []
        for step in unc.steps():
            lp = unc.logprob[unc.step == step]
            steps.append(step)
            n.append(len(lp))
            total.append(float(lp.sum()) if len(lp) else 0.0)
            mean.append(float(lp.mean()) if len(lp) else float("nan"))
            low.append(float(lp.min()) if len(lp) else float("nan"))
        if "token_uncertainty" not in self.parts:
            parts.pop("token_uncertainty")
        source = self.source_model or trajectory.metrics.get("model")
        return ReplayResult(steps, n, total, mean, low, parts, source, model_id(model))


def plan_trajectory(
    tokenizer: Any,
    trajectory: Trajectory,
    *,
    tools: Optional[Sequence[Any]] = None,
    system: Optional[str] = None,
    mode: str = "auto",
    renderer: Any = None,
) -> "tuple[Conversation, list]":
    """Rebuild the conversation of `trajectory` and plan its teacher-forced passes.

    Image blocks are dropped (trajectories do not keep the pixels a vision model would
    need); the turns are still scored on their text.
    """
    conv = conversation_from_trajectory(trajectory, system, tools)
    if _has_images(conv.messages):
        conv = drop_images(conv)
    return conv, plan_passes(tokenizer, conv, mode=mode, renderer=renderer)


def pass_decisions(tokenizer: Any, tf_pass: TeacherForcedPass, **caps: Any) -> list:
    """Decision points of every turn in a pass (see `positions.find_decision_points`)."""
    from evalrx.analyzers.positions import find_decision_points

    eos = _eos_text(tokenizer)
    points: list = []
    for pt in tf_pass.turns:
        points.extend(
            find_decision_points(
                pt.step_idx,
                tf_pass.text,
                tf_pass.offsets,
                pt.gen_chars,
                pt.gen_tokens,
                pt.turn.calls,
                is_answer=pt.turn.is_answer,
                eos_text=eos,
                **caps,
            )
        )
    return points
