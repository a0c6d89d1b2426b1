"""A team of agents on the Trajectory page: who took each step (a colour and a name), handoffs, the roster
and each agent's share of the steps. Nothing here shows for a single-agent trajectory.

Agents' names, system prompts and descriptions come from the log: names are `md_escape`d into badges,
prompts shown as escaped text (`show_text`), and the per-agent table is `html_table`'s escaped cells.
"""

from __future__ import annotations

from typing import Any, Mapping

import streamlit as st

from components.safe import html_table, md_escape, show_text
from components.viewmodel import COLOUR_HEX, agent_colours, agent_table, roster_rows, team_names

HANDOFF = md_escape("->")  # "Orchestrator -> WebSurfer", the arrow shown as written


def agent_badge(name: str, colours: Mapping[str, str]) -> str:
    """An agent's name as a badge of its colour (escaped Markdown)."""
    return f":{colours.get(name, 'gray')}-badge[:material/smart_toy: {md_escape(name)}]"


def who_acted(v: Any, colours: Mapping[str, str]) -> str:
    """Who took a step and whom it spoke to: `Orchestrator -> WebSurfer`, each in its colour, and the log's
    aside ("thought") in grey; empty for a step no agent took."""
    if not v.agent:
        return ""
    text = agent_badge(v.agent, colours)
    if v.addressee:
        text += f" {HANDOFF} " + agent_badge(v.addressee, colours)
    if v.aside:
        text += f" :gray[({md_escape(v.aside)})]"
    return text


def edge_style(views: list, colours: Mapping[str, str]) -> str:
    """A style sheet giving each agent's step cards a left edge of its colour (fixed colours and step numbers
    only: no text from the log)."""
    rules = [
        f".st-key-step-{int(v.idx)}{{border-left:4px solid {COLOUR_HEX[colours[v.agent]]} !important}}"
        for v in views
        if v.agent in colours and colours[v.agent] in COLOUR_HEX
    ]
    return f"<style>{''.join(rules)}</style>" if rules else ""


def render_team(detail: Any, *, store: Any) -> None:
    """The team at the top of a team's trajectory: its agents in their colours, each one's steps and latency,
    and the roster (system prompts, descriptions) one click away. Nothing for a single agent."""
    from evalrx.store import trajectory_agents

    traj = detail.trajectory
    names = team_names(traj)
    if not names:
        return
    colours = agent_colours(traj)
    shares = trajectory_agents(detail.row.id, store=store)
    with st.container(border=True, key="team"):
        st.markdown(
            f"**Team of {len(names)} agent{'s' * (len(names) != 1)}** · "
            + " ".join(agent_badge(n, colours) for n in names)
        )
        if shares:
            st.html(html_table(agent_table(shares)))
        silent = [n for n in names if n not in {a.agent for a in shares}]
        if silent:
            st.caption("On the team but took no step: " + ", ".join(md_escape(n) for n in silent))
        with st.expander(f"Roster: what each agent was told ({len(names)})", icon=":material/groups:"):
            for member in roster_rows(traj):
                st.markdown(agent_badge(member["name"], colours))
                if member["description"]:
                    st.caption("Description")
                    show_text(member["description"])
                if member["system_prompt"]:
                    st.caption("System prompt")
                    show_text(member["system_prompt"])
                if not member["description"] and not member["system_prompt"]:
                    st.caption("The log gives no system prompt or description for this agent.")
