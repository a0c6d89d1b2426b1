"""Rendering one trajectory: its case, the step timeline, and the timing charts."""

from __future__ import annotations

from typing import Any, Optional

import streamlit as st

from components.safe import MAX_CHARS, counted, md_escape, short, show_json, show_pre, show_text
from components.team import agent_badge, edge_style, who_acted
from components.tool_effects import render_tool_effects
from components.viewmodel import (
    agent_colours,
    grade_text,
    step_views,
    token_rows,
    turn_checks,
    value_text,
    waterfall_rows,
)

_ROLE_ICON = {"user": ":material/person:", "actor": ":material/smart_toy:", "tool": ":material/build:"}
_BADGE_COLOR = {
    "parse error": "red",
    "tool error": "red",
    "repeat blocked": "orange",
    "forced final answer": "violet",
    "calls ignored": "orange",
}


def _picture(store: Any, sha: str, caption: str) -> None:
    from evalrx.store import get_blob

    blob = get_blob(sha, store=store)
    if blob is None:
        st.caption(f"picture {sha[:12]} is missing from the store")
        return
    data, mime = blob
    if mime.startswith("image/"):
        st.image(data, caption=caption, width=320)
    else:
        st.caption(f"attachment {sha[:12]} ({mime}, {len(data):,} bytes) is not a picture")


def system_prompt(detail: Any, *, store: Any) -> Optional[str]:
    """The system prompt the model saw: the run's, then the case's own (imports and BFCL entries keep it in
    the case meta), as the agent loop joins them."""
    from evalrx.models import case_system
    from evalrx.store import get_run

    run = get_run(detail.row.run_id, store=store)
    own = (run.config or {}).get("system") if run is not None else None
    return case_system(own if isinstance(own, str) else None, (detail.case or {}).get("meta"))


def render_system_prompt(detail: Any, *, store: Any) -> None:
    """The system prompt, collapsed (a policy can run to pages), as text: never Markdown or HTML."""
    text = system_prompt(detail, store=store)
    if text is None:
        return
    with st.expander(f"System prompt ({len(text):,} characters)", icon=":material/policy:"):
        if len(text) > MAX_CHARS:
            st.caption(f"First {MAX_CHARS:,} characters shown; export the run for the full text.")
        show_pre(text[:MAX_CHARS])


def render_case(detail: Any, *, store: Any, blind: bool = False) -> None:
    """The system prompt (collapsed), the goal, the expected and the final answer, and the case's picture if any."""
    row, case = detail.row, detail.case or {}
    render_system_prompt(detail, store=store)
    st.markdown("**Goal**")
    show_text(row.goal or case.get("prompt"))
    if case.get("image_sha256"):
        _picture(store, case["image_sha256"], "the case's picture")
    left, right = st.columns(2)
    turns = turn_checks(detail.trajectory, case)
    with left:
        st.markdown("**Expected**")
        exp = case.get("expected", detail.trajectory.ground_truth)
        if turns and exp is None:  # a conversation: each user turn says what its answer should be
            render_turn_checks(turns, blind=blind)
        elif isinstance(exp, (dict, list)):
            show_json(exp)
        else:
            show_text(None if exp is None else str(exp), empty="(no expected answer)")
        if case.get("grader") and not blind:
            st.caption("grader: " + md_escape(case["grader"]))
    with right:
        st.markdown("**Final answer**")
        show_text(row.final_answer, empty="(no final answer)")
        reason = (detail.trajectory.metrics or {}).get("grade_reason")
        if reason and not blind:
            st.markdown("**Why the grade failed**")
            show_text(reason)
            diff = (detail.trajectory.metrics or {}).get("grade_diff")
            if diff:  # a conversation graded by state: what the agent's calls left vs the ground truth's
                st.caption("State after that turn, where it differs (agent vs ground truth)")
                show_json(diff)
    render_offered_tools(detail.trajectory.offered_tools)
    render_tool_effects(detail, store=store)
    refs = (case.get("meta") or {}).get("reference_calls")
    if isinstance(refs, list) and not blind:
        st.markdown("**Reference calls**" + ("" if refs else " (none: the case needs no tool)"))
        if refs:
            show_json(refs)


def _grade_badge(grade: str) -> str:
    return f":{_GRADE_COLOR.get(grade, 'gray')}-badge[turn graded {md_escape(grade)}]"


def render_turn_checks(turns: dict, *, blind: bool = False) -> None:
    """One line per user turn that says what its answer should be: the turn, its expected answer, its grade."""
    for k, check in sorted(turns.items()):
        grade = "" if blind else " · " + _grade_badge(check.outcome.value)
        st.markdown(f"turn {k + 1}: {md_escape(short(value_text(check.expected), 120))}{grade}")


def _tool_source(spec: dict) -> str:
    """Where an offered tool came from, in a few words ("MCP server time", "Python pkg.mod:fn", "the case")."""
    source, origin = spec.get("source") or "builtin", spec.get("origin") or ""
    if source == "mcp":
        return f"MCP server {origin}" if origin else "an MCP server"
    if source == "python":
        return f"Python {origin}" if origin else "a Python function"
    return "the case's own document" if source == "case" else "built-in"


def render_offered_tools(offered: list) -> None:
    """The tools the trajectory was offered: name, where it came from, hints, and its schema, collapsed."""
    if not offered:
        return
    with st.expander(f"Tools offered ({len(offered)})", icon=":material/build:"):
        for spec in offered:
            hints = ", ".join(f"{k}={v}" for k, v in sorted((spec.get("annotations") or {}).items()))
            st.markdown(
                f"**{md_escape(spec.get('name') or '?')}** · {md_escape(_tool_source(spec))}"
                + (f" · {md_escape(hints)}" if hints else "")
            )
            if spec.get("description"):
                show_text(spec["description"])
            show_json(spec.get("parameters") or {})


def _count(n: Optional[int]) -> str:
    return "-" if n is None else f"{n:,}"


def _header(v: Any, first_wrong: Optional[int], colours: Optional[dict] = None) -> str:
    if v.agent and v.role == "actor":  # a team's step: the agent (and whom it spoke to) in its colour
        parts = [f"{_ROLE_ICON['actor']} **{v.idx} ·** {who_acted(v, colours or {})}"]
    else:
        parts = [f"{_ROLE_ICON.get(v.role, '')} **{v.idx} · {md_escape(v.title)}**"]
        if v.agent:  # a tool step a team's agent took
            parts.append(agent_badge(v.agent, colours or {}))
    if v.latency_ms is not None:
        parts.append(f"{v.latency_ms:,.1f} ms")
    if v.prompt_tokens is not None or v.completion_tokens is not None:
        parts.append(f"{_count(v.prompt_tokens)} → {_count(v.completion_tokens)} tokens")
    badges = [f":{_BADGE_COLOR.get(b, 'gray')}-badge[{b}]" for b in v.badges]
    if v.turn_grade:  # a conversation's user turn: how its answer was graded
        badges.append(_grade_badge(v.turn_grade))
    if first_wrong is not None and v.idx == first_wrong:
        badges.insert(0, ":red-badge[:material/flag: first wrong step]")
    return " · ".join(parts) + ("  " + " ".join(badges) if badges else "")


def render_timeline(
    detail: Any,
    *,
    store: Any,
    pictures: Optional[dict] = None,
    first_wrong: Optional[int] = None,
    show_user: bool = True,
) -> None:
    """Every step as a card: who, timing, tokens, text, tool calls and arguments,
    observations (with pictures), parse errors and loop-policy badges."""
    pictures = pictures or {}
    offered = {spec.get("name"): spec for spec in detail.trajectory.offered_tools or []}
    views = step_views(detail.trajectory, detail.case)
    colours = agent_colours(detail.trajectory)  # empty for one agent: its steps look as they always did
    if colours:
        st.html(edge_style(views, colours))
    for v in views:
        if v.role == "user" and not show_user:
            continue
        with st.container(border=True, key=f"step-{v.idx}"):
            st.markdown(_header(v, first_wrong, colours))
            if v.role == "tool":
                spec = offered.get(v.title[len("Tool ") :]) if v.title.startswith("Tool ") else None
                if spec is not None and spec.get("source") == "mcp":
                    st.caption(f"answered by {md_escape(_tool_source(spec))}")  # a server names itself
                show_text(v.observation, empty="(no output)")
            elif v.role == "actor" or v.text:
                show_text(v.text, empty="(empty turn)")
            if v.expected is not None:
                st.markdown(f"**Expected answer:** {md_escape(short(v.expected, 200))}")
            for name, args in v.calls:
                st.markdown(f"↳ calls **{md_escape(name)}** with")
                show_json(args if args is not None else {})
                spec = offered.get(name)
                if spec is not None:  # the schema the call was made against, and who answered it
                    label = f"schema of {md_escape(name)} · {md_escape(_tool_source(spec))}"  # names are untrusted
                    with st.expander(label, icon=":material/schema:"):
                        show_json(spec.get("parameters") or {})
                elif offered:
                    st.caption(f"{md_escape(name)} was not among the tools offered")
            if v.parse_error:
                st.markdown(":red[**Parse error**]")
                show_text(v.parse_error)
            shas = pictures.get(v.idx, [])
            for i, sha in enumerate(shas):
                _picture(store, sha, f"picture {i + 1} {'returned' if v.role == 'tool' else 'shown'} at step {v.idx}")
            if v.n_pictures and not shas:
                st.caption(f"the tool returned {counted(v.n_pictures, 'picture')}; none were stored")


def render_charts(detail: Any) -> None:
    """The latency waterfall and the tokens-per-turn chart, side by side."""
    from components.svg_charts import tokens_svg, waterfall_svg

    rows = waterfall_rows(detail.trajectory)
    if not rows:
        st.caption("No step timings recorded for this trajectory.")
        return
    left, right = st.columns([3, 2])
    with left:
        st.image(waterfall_svg(rows), alt="latency waterfall")
    toks = token_rows(detail.trajectory)
    if toks:
        with right:
            st.image(tokens_svg(toks), alt="tokens per model turn")


_GRADE_COLOR = {"pass": "green", "fail": "red"}


def facts_line(row: Any, label: Any = None, *, blind: bool = False) -> str:
    """One Markdown line of badges: grade, label, how it ended, size, time, tokens (escaped)."""
    bits = []
    if not blind:
        bits.append(f":{_GRADE_COLOR.get(row.outcome, 'gray')}-badge[graded {md_escape(grade_text(row))}]")
    if label is not None:
        text = md_escape(label.outcome or "cleared") + (
            f" · {md_escape(label.failure_kind)}" if label.failure_kind else ""
        )
        if getattr(label, "agent", None):  # a team's label names the agent the person blames
            text += f" · blames {md_escape(label.agent)}"
        bits.append(f":{_GRADE_COLOR.get(label.outcome, 'gray')}-badge[:material/label: {text}]")
    else:
        bits.append(":gray-badge[not labelled]")
    bits.append(f":blue-badge[ended by {md_escape(row.terminated or '?')}]")
    bits.append(
        f"{counted(row.n_steps, 'step')} · {counted(row.n_tool_calls, 'tool call')}"
        + (f" · **{row.n_parse_errors} parse error{'s' * (row.n_parse_errors != 1)}**" if row.n_parse_errors else "")
    )
    # The store keeps 0 where nothing was measured (an imported run without timings): "-", not "0 ms".
    bits.append(f"{row.latency_ms:,.0f} ms" if row.latency_ms else "- ms")
    known = row.prompt_tokens or row.completion_tokens
    bits.append(f"{row.prompt_tokens or 0:,} + {row.completion_tokens or 0:,} tokens" if known else "- tokens")
    return " · ".join(bits)
