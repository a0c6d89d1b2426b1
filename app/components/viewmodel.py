"""Pure-Python view models of a trajectory: step cards and chart rows (no Streamlit)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

# Loop-policy and error markers from `Step.span`, with the badge text the timeline shows.
FLAG_BADGES = {
    "parse_error": "parse error",
    "repeat_blocked": "repeat blocked",
    "forced_final": "forced final answer",
    "tool_error": "tool error",
    "ignored_calls": "calls ignored",
}


def _role(step: Any) -> str:
    role = getattr(step, "role", "")
    return getattr(role, "value", str(role))


@dataclass
class StepView:
    """One step as the timeline shows it."""

    idx: int
    role: str  # user | actor | tool
    title: str
    text: str = ""
    calls: list = field(default_factory=list)  # [(name, args)]
    observation: Optional[str] = None
    n_images: int = 0
    parse_error: Optional[str] = None
    badges: list = field(default_factory=list)
    latency_ms: Optional[float] = None
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    turn: Optional[int] = None


def _observation_text(obs: Any) -> tuple[Optional[str], int]:
    if obs is None:
        return None, 0
    if isinstance(obs, dict) and "text" in obs:
        return str(obs.get("text") or ""), int(obs.get("n_images") or 0)
    if isinstance(obs, str):
        return obs, 0
    import json

    return json.dumps(obs, ensure_ascii=False, default=str), 0


def _num(v: Any, kind: type = float) -> Any:
    try:
        return kind(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def step_views(trajectory: Any) -> list[StepView]:
    """The timeline cards of a core `Trajectory`: who spoke, calls, observations, badges."""
    views = []
    for s in trajectory.steps:
        span = dict(s.span or {})
        role = _role(s)
        badges = [text for key, text in FLAG_BADGES.items() if span.get(key)]
        if s.parse_error and "parse error" not in badges:
            badges.insert(0, "parse error")
        v = StepView(
            idx=int(s.idx),
            role=role,
            title="",
            badges=badges,
            latency_ms=_num(span.get("latency_ms")),
            prompt_tokens=_num(span.get("prompt_tokens"), int),
            completion_tokens=_num(span.get("completion_tokens"), int),
            turn=_num(span.get("turn"), int),
            parse_error=s.parse_error,
        )
        if role == "user":
            k = span.get("user_turn")  # a conversation's turns are numbered from 1 on the page
            v.title, v.text = (f"User, turn {int(k) + 1}" if isinstance(k, int) else "User"), s.content or ""
        elif role == "actor":
            v.title = f"Model, turn {v.turn}" if v.turn else "Model"
            v.text = s.content or ""
            for call in s.tool_calls or []:
                if isinstance(call, dict):
                    v.calls.append((str(call.get("name") or "?"), call.get("args", call.get("arguments"))))
        else:
            name = s.content or ""
            v.title = f"Tool {name}" if name else "Feedback to the model"
            v.observation, v.n_images = _observation_text(s.observation)
        views.append(v)
    return views


def waterfall_rows(trajectory: Any) -> list[dict]:
    """One row per timed step, laid end to end: the latency waterfall of the conversation.

    Each row has `step` (index), `label`, `kind` ("model"/"tool"), `start_ms`, `end_ms`,
    `latency_ms` and the step's token counts; untimed steps (the user turn) are skipped.
    """
    rows = []
    t = 0.0
    for v in step_views(trajectory):
        if v.latency_ms is None:
            continue
        kind = "model" if v.role == "actor" else "tool"
        if v.role == "actor":
            name = (
                f"model → {v.calls[0][0]}" if v.calls else ("model (parse error)" if v.parse_error else "model answers")
            )
        else:
            name = v.title.replace("Tool ", "", 1)
        rows.append(
            {
                "step": v.idx,
                "label": f"{v.idx} {name}"[:40],
                "kind": kind,
                "start_ms": round(t, 3),
                "end_ms": round(t + v.latency_ms, 3),
                "latency_ms": v.latency_ms,
                "prompt_tokens": v.prompt_tokens or 0,
                "completion_tokens": v.completion_tokens or 0,
            }
        )
        t += v.latency_ms
    return rows


def token_rows(trajectory: Any) -> list[dict]:
    """Prompt and completion tokens per model turn, long form for a stacked bar chart."""
    out = []
    for v in step_views(trajectory):
        if v.role != "actor":
            continue
        for kind, n in (("prompt", v.prompt_tokens), ("completion", v.completion_tokens)):
            if n is not None:
                out.append({"step": v.idx, "turn": v.turn or v.idx, "kind": kind, "tokens": n})
    return out


def actor_steps(trajectory: Any) -> list[int]:
    """Indices of the model's steps (the candidates for "first wrong step")."""
    return [int(s.idx) for s in trajectory.steps if _role(s) == "actor"]
