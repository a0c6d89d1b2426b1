"""Pure-Python view models of a trajectory: step cards and chart rows (no Streamlit)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from evalrx.core import picture_count

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
    n_pictures: int = 0
    parse_error: Optional[str] = None
    badges: list = field(default_factory=list)
    latency_ms: Optional[float] = None
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    turn: Optional[int] = None
    agent: Optional[str] = None  # in a team: who took the step
    addressee: Optional[str] = None  # whom it spoke to, where the log says
    aside: Optional[str] = None  # what kind of message the log calls it ("thought", "final answer")
    expected: Optional[str] = None  # a user turn's expected answer, as text (None: the turn says none)
    turn_grade: Optional[str] = None  # that turn's answer graded on its own: "pass" / "fail"


def _num(v: Any, kind: type = float) -> Any:
    try:
        return kind(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def turn_checks(trajectory: Any, case: Optional[dict]) -> dict:
    """A conversation's user turns that say what their answer should be, by 0-based turn: `TurnGrade`s (the
    expected answer, the answer, its grade); {} for any other case. `case` is the stored case dict."""
    if not case:
        return {}
    from evalrx.core import FailureCase
    from evalrx.grade import turn_grades

    return {g.turn: g for g in turn_grades(trajectory, FailureCase.from_dict(case))}


def grade_text(row: Any) -> str:
    """A trajectory row's grade in words; a conversation that failed says at which user turn ("fail (turn 2)")."""
    turn = getattr(row, "grade_turn", None)
    return f"{row.outcome} (turn {turn + 1})" if row.outcome == "fail" and turn is not None else str(row.outcome)


def value_text(value: Any) -> str:
    """An expected value as one line of text: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    import json

    return json.dumps(value, ensure_ascii=False, default=str)


def step_views(trajectory: Any, case: Optional[dict] = None) -> list[StepView]:
    """The timeline cards of a core `Trajectory`: who spoke, calls, observations, badges; with its stored `case`,
    each user turn of a conversation also carries its expected answer and its grade."""
    checks = turn_checks(trajectory, case)
    n_user = 0
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
            agent=getattr(s, "agent", None),
            addressee=getattr(s, "addressee", None),
            aside=span.get("aside") if isinstance(span.get("aside"), str) else None,
        )
        if role == "user":
            k = span.get("user_turn")  # a conversation's turns are numbered from 1 on the page
            v.title, v.text = (f"User, turn {int(k) + 1}" if isinstance(k, int) else "User"), s.content or ""
            check = checks.get(k if isinstance(k, int) else n_user)
            if check is not None:
                v.expected, v.turn_grade = value_text(check.expected), check.outcome.value
            n_user += 1
        elif role == "actor":
            if v.agent is not None:  # a team's step: the agent, and whom it spoke to
                v.title = v.agent + (f" -> {v.addressee}" if v.addressee else "")
            else:
                v.title = f"Model, turn {v.turn}" if v.turn else "Model"
            v.text = s.content or ""
            # An older import kept a wire call's "arguments" as written: show them where "args" is empty.
            v.calls += [(call.name or "?", call.args or call.extra.get("arguments", {})) for call in s.tool_calls]
        else:
            name = s.content or ""
            v.title = f"Tool {name}" if name else "Feedback to the model"
            v.observation = None if s.observation is None else s.observation.text
            v.n_pictures = picture_count(s.observation)
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
            who = v.agent or "model"  # in a team, the agent that took the step
            if v.calls:
                name = f"{who} → {v.calls[0][0]}"
            elif v.parse_error:
                name = f"{who} (parse error)"
            else:
                name = v.agent or "model answers"
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


# The badge colours a team's agents take, in the order they appear (red stays the errors' colour), and the
# hue of each for the edge of the agent's step cards (Streamlit's light palette).
AGENT_COLOURS = ("blue", "green", "violet", "orange", "yellow", "gray")
COLOUR_HEX = {
    "blue": "#1c83e1",
    "green": "#21c354",
    "violet": "#803df5",
    "orange": "#ff8700",
    "yellow": "#ffbd45",
    "gray": "#a3a8b8",
}


def team_names(trajectory: Any) -> list[str]:
    """A team's agents by name: the trajectory's (`Trajectory.agents`), then any addressee that never spoke;
    empty for a single-agent trajectory."""
    names = dict.fromkeys(getattr(trajectory, "agents", None) or [])
    for s in trajectory.steps:
        if getattr(s, "addressee", None):
            names.setdefault(s.addressee, None)
    return list(names)


def agent_colours(trajectory: Any) -> dict[str, str]:
    """Each agent's colour: the same name, the same colour, wherever it shows in this trajectory."""
    return {name: AGENT_COLOURS[i % len(AGENT_COLOURS)] for i, name in enumerate(team_names(trajectory))}


def roster_rows(trajectory: Any) -> list[dict]:
    """The team as the roster shows it: each agent once (`name`), with the `system_prompt` and `description`
    the log gave it (None where it gave none), roster first, then agents only the steps name."""
    given = {m["name"]: m for m in getattr(trajectory, "roster", None) or [] if isinstance(m, dict) and m.get("name")}
    return [
        {
            "name": name,
            "system_prompt": given.get(name, {}).get("system_prompt"),
            "description": given.get(name, {}).get("description"),
        }
        for name in team_names(trajectory)
    ]


def agent_table(shares: list) -> list[dict]:
    """The per-agent table of a team's trajectory from the store's `AgentShare`s: steps, their share of the
    steps the team's agents took (a person's turns aside) and their summed latency ("-" where nothing was timed)."""
    total = sum(a.n_steps for a in shares)
    return [
        {
            "agent": a.agent,
            "steps": a.n_steps,
            "share of the team's steps": f"{100 * a.n_steps / total:.0f}%" if total else "-",
            "latency": f"{a.latency_ms:,.1f} ms" if a.latency_ms else "-",
        }
        for a in shares
    ]
