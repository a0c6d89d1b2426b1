"""What each tool of a trajectory does (reads or changes state), as the diagnosis sees it, and a person's mark.

The diagnosis matches reference calls by what changes state; where no tool document says, it guesses
from the name's verb. A mark here (`evalrx.store.mark_tool`) is the user's word, kept for every run.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from components.safe import md_escape
from evalrx.core import READ, WRITE, tool_documents, tool_effect
from evalrx.store import mark_tool, tool_marks

_CHOICES = ("as the tool says", READ, WRITE)
_SHOWN = {READ: "reads only", WRITE: "changes state", None: "unknown"}


def tool_names(detail: Any) -> "list[str]":
    """The tools a trajectory was offered or called, in the order first seen."""
    names = [d.get("name") for d in detail.trajectory.offered_tools or [] if isinstance(d, dict)]
    for step in detail.trajectory.steps:
        names += [c.name for c in step.tool_calls]
    return list(dict.fromkeys(n for n in names if isinstance(n, str) and n))


def render_tool_effects(detail: Any, *, store: Any) -> None:
    """One line per tool: what it does, why the diagnosis thinks so, and a mark to correct it."""
    names = tool_names(detail)
    if not names:
        return
    docs = tool_documents(detail.trajectory.offered_tools)
    marks = tool_marks(store=store)
    with st.expander(f"What the tools do ({len(names)})", icon=":material/edit_note:"):
        st.caption("The diagnosis compares state-changing calls with the reference; mark a tool where it guesses.")
        for name in names:
            effect = tool_effect(name, docs.get(name), marks.get(name))
            left, right = st.columns([3, 1])
            left.markdown(f"**{md_escape(name)}** · {_SHOWN[effect.effect]} · {md_escape(effect.why)}")
            current = marks.get(name, _CHOICES[0])
            picked = right.selectbox(
                f"Mark {name}",
                _CHOICES,
                index=_CHOICES.index(current),
                key=f"tool-mark-{detail.row.id}-{name}",
                label_visibility="collapsed",
            )
            if picked != current:
                mark_tool(name, None if picked == _CHOICES[0] else picked, store=store)
                st.toast(f"{name}: marked {picked}. 'Diagnose again' applies it to this trajectory.")
                st.rerun()
