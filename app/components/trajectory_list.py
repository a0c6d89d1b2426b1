"""The Trajectories list: one line per trajectory whose id is a link to its page.

Built from Streamlit's own elements rather than `st.dataframe`: a page link opens the trajectory
in the browser without rerunning the list first (a table's row selection reruns the whole list
script, then switches page), a middle click opens it in a new tab, and no Arrow table is built, so
pandas and pyarrow stay out of the server. Every cell is escaped Markdown.
"""

from __future__ import annotations

from typing import Any, Mapping

import streamlit as st

from components.safe import md_escape, short
from components.viewmodel import grade_text
from evalrx.core import Termination

# Column widths in pixels; the goal takes what is left.
WIDTHS = {"id": 64, "grade": 96, "why": 210, "numbers": 230}
_GRADE = {"pass": "green", "fail": "red"}


def page_count(total: int, per: int) -> int:
    """Pages of `per` rows that `total` rows fill: at least one (an empty list is one empty page)."""
    return max(1, -(-total // per))


def _why(r: Any) -> str:
    """The diagnosis (in a team, with the agent it blames) and the person's label, as badges (escaped)."""
    bits = []
    if r.diagnosis_kind:
        bits.append(f":orange-badge[{md_escape(r.diagnosis_kind)}]")
    if getattr(r, "diagnosis_agent", None):
        bits.append(f":violet-badge[:material/smart_toy: blames {md_escape(r.diagnosis_agent)}]")
    if r.label:
        kind = f" · {md_escape(r.label_kind)}" if r.label_kind else ""
        bits.append(f":{_GRADE.get(r.label, 'gray')}-badge[:material/label: {md_escape(r.label)}{kind}]")
    if r.terminated and r.terminated != Termination.FINAL.value:  # say only an unusual end
        bits.append(f":gray-badge[{md_escape(r.terminated)}]")
    return " ".join(bits) or ":gray[-]"


def _numbers(r: Any) -> str:
    parts = [f"{r.n_steps} steps", f"{r.n_tool_calls} calls"]
    if r.n_parse_errors:
        parts.append(f"**{r.n_parse_errors} parse err.**")
    parts.append(f"{r.latency_ms:,.0f} ms" if r.latency_ms else "- ms")
    tokens = (r.prompt_tokens or 0) + (r.completion_tokens or 0)
    parts.append(f"{tokens:,} tok" if tokens else "- tok")
    return " · ".join(parts)


def _case(r: Any) -> str:
    """Case and run on one line, goal and answer on the next (escaped)."""
    text = f"**{md_escape(short(r.sample_id, 40))}** :gray[· run {r.run_id}]  \n{md_escape(short(r.goal, 120))}"
    if r.final_answer is not None:
        text += f" :gray[→ {md_escape(short(r.final_answer, 60))}]"
    return text


def render_list(rows: list, keep: Mapping[str, str]) -> None:
    """One line per trajectory of `rows` (store rows); `keep` is the filter its page walks with J/K."""
    with st.container(horizontal=True, wrap=False, gap="small", key="list-head"):
        st.markdown("**id**", width=WIDTHS["id"])
        st.markdown("**case** · run · goal → answer", width="stretch")
        st.markdown("**grade**", width=WIDTHS["grade"])
        st.markdown("**diagnosed · labelled**", width=WIDTHS["why"])
        st.markdown("**steps · calls · time · tokens**", width=WIDTHS["numbers"])
    for r in rows:
        with st.container(horizontal=True, wrap=False, gap="small", vertical_alignment="center", key=f"row-{r.id}"):
            st.page_link(
                "views/trajectory.py",
                label=str(r.id),
                query_params={"id": str(r.id), **keep},
                width=WIDTHS["id"],
            )
            st.markdown(_case(r), width="stretch")
            st.markdown(f":{_GRADE.get(r.outcome, 'gray')}-badge[{md_escape(grade_text(r))}]", width=WIDTHS["grade"])
            st.markdown(_why(r), width=WIDTHS["why"])
            st.markdown(_numbers(r), width=WIDTHS["numbers"])
