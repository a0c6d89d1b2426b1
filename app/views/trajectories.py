"""Trajectories: filter, search, sort and page through every trajectory; open one."""

import streamlit as st
from components.data import store
from components.filters import (
    FILTER_KEYS,
    LABEL_CHOICES,
    OUTCOMES,
    SORT_CHOICES,
    TERMINATIONS,
    as_context,
    describe,
    sort_args,
    store_filters,
    url_int,
)
from components.run_picker import pick_run
from components.safe import counted, md_escape
from components.trajectory_list import page_count, render_list

from evalrx.store import (
    blamed_agents,
    label_kinds,
    list_kinds,
    list_trajectories,
    matching_ids,
    run_agents,
)

S = store()
# Rows a page (the user's pick, in the URL): each row is a few elements the browser draws, so a page
# stays at a few hundred.
PAGE_SIZES = ("25", "50", "100", "200")


@st.cache_data(ttl=5, show_spinner=False)
def _choices(url: str):
    from evalrx.tools import TOOLS

    kinds = {k.key: k.definition for k in list_kinds(store=S)}
    modes = list(kinds) + [m for m in label_kinds(store=S) if m not in kinds]
    return modes, sorted(TOOLS), kinds


@st.cache_data(ttl=5, show_spinner=False)
def _agents(url: str, run: str) -> list:
    """The agents that took part in the chosen run (every run's when none is chosen): none without a team."""
    return [a.agent for a in run_agents(url_int(run), store=S)]


@st.cache_data(ttl=5, show_spinner=False)
def _blamed(url: str, run: str) -> list:
    """The agents the chosen run's diagnoses blame (every run's when none is chosen), most blamed first."""
    return blamed_agents(url_int(run), store=S)


def _set(key: str) -> bool:
    """Whether the URL or the page already holds a value for this filter (its widget stays while it does)."""
    return bool(st.session_state.get(key) or st.query_params.get(key))


def _first_page() -> None:
    st.session_state["page"] = 1  # a new filter starts at its first page


modes, tools, kinds = _choices(S.url)
BOUND = dict(bind="query-params", on_change=_first_page)  # the filter lives in the URL: shareable, survives reload

st.title("Trajectories")
with st.container(border=True):
    a, b, c, d = st.columns(4)
    pick_run(a, "all runs", _first_page)
    b.selectbox("Grade", list(OUTCOMES), index=None, key="outcome", placeholder="any", **BOUND)
    c.selectbox("Label", list(LABEL_CHOICES), index=None, key="label", placeholder="any", **BOUND)
    d.selectbox(
        "Diagnosed as",
        list(kinds),
        index=None,
        key="kind",
        placeholder="any",
        accept_new_options=True,
        help="the failure kind of the trajectory's diagnosis (why it failed)",
        **BOUND,
    )
    agents = _agents(S.url, str(st.session_state.get("run") or ""))  # none: no team in the chosen run(s)
    # "blamed" (the agent a team's diagnosis blames) sorts only a team's runs
    sorts = [
        w
        for w in SORT_CHOICES
        if w != "blamed" or agents or "blamed" in (st.query_params.get("sort"), st.session_state.get("sort"))
    ]
    e, f, g, h, i, j = st.columns([1, 1, 2, 1, 1, 1], vertical_alignment="bottom")
    e.selectbox(
        "Ended by", list(TERMINATIONS), index=None, key="term", placeholder="any", accept_new_options=True, **BOUND
    )
    f.selectbox("Used tool", tools, index=None, key="tool", placeholder="any", accept_new_options=True, **BOUND)
    g.text_input(
        "Search",
        key="q",
        type="search",
        placeholder="text in prompts, answers, model turns, calls, observations",
        **BOUND,
    )
    h.selectbox("Sort by", sorts, key="sort", **BOUND)
    i.toggle("Ascending", key="asc", **BOUND)
    if "page-last" in st.session_state:  # a page past the end was asked for: its last page (set before the widget)
        st.session_state["page"] = st.session_state.pop("page-last")
    page_no = int(j.number_input("Page", min_value=1, step=1, key="page", bind="query-params") or 1)
    k, m, n, o, p, q = st.columns(6, vertical_alignment="bottom")
    k.selectbox(
        "Labelled as",
        modes,
        index=None,
        key="mode",
        placeholder="any",
        accept_new_options=True,
        help="the failure kind a reviewer's label gave",
        **BOUND,
    )
    m.number_input(
        "Tool margin below",
        min_value=0.0,
        step=0.5,
        value=None,
        key="margin",
        placeholder="any",
        help="smallest tool-decision margin (nats) of the chosen tool, from the tool_decision analysis",
        **BOUND,
    )
    n.toggle(
        "Sources disagree",
        key="disagree",
        help="the diagnosis sources' best candidates (reference, rules, white-box, judge) differ in kind or step",
        **BOUND,
    )
    per = int(o.selectbox("Rows a page", PAGE_SIZES, index=1, key="per", **BOUND) or PAGE_SIZES[1])
    if agents or _set("agent"):  # a team's runs (or a set filter)
        p.selectbox(
            "Agent",
            agents,
            index=None,
            key="agent",
            placeholder="any",
            accept_new_options=True,
            help="a team's agent that took a step in the trajectory",
            **BOUND,
        )
    if agents or _set("blamed"):
        q.selectbox(
            "Blamed agent",
            _blamed(S.url, str(st.session_state.get("run") or "")),
            index=None,
            key="blamed",
            placeholder="any",
            accept_new_options=True,
            help="the team's agent the trajectory's diagnosis blames (why it failed)",
            **BOUND,
        )

params = {k: st.session_state.get(k) for k in FILTER_KEYS}
filters = store_filters(params)
sort, desc = sort_args(params)
result = list_trajectories(
    sort=sort, descending=desc, limit=per, offset=(page_no - 1) * per, with_total=True, store=S, **filters
)
total = result.total or 0
n_pages = page_count(total, per)
if page_no > n_pages:  # an old link or a narrower filter: never "page 99 of 2"
    st.session_state["page-last"] = n_pages
    st.rerun()
st.markdown(
    f"**{counted(total, 'trajectory', 'trajectories')}** · page {page_no:,} of {n_pages:,} · {md_escape(describe(params))}"
)

keep = as_context(params)  # prev/next on the Trajectory page walk this filter
if not result.rows:
    st.info("No trajectory matches this filter." if total == 0 else "This page is past the end of the list.")
    st.stop()
render_list(result.rows, keep)
st.caption("Click an id to open its trajectory (J/K there walk this list); a middle click opens a new tab.")
# Imported after the rows are on screen: the export formats and the judge's runner are slow to import cold.
from components.export_panel import export_controls  # noqa: E402
from components.judge_form import judge_action  # noqa: E402

with st.expander("Export this list", icon=":material/download:"):
    export_controls("export-list", "trajectories", trajectory_ids=lambda: matching_ids(store=S, **filters), store=S)
with st.expander("Diagnose with a judge", icon=":material/gavel:"):
    st.caption("A model reads the failed trajectories of this list; a worker runs it, its progress is on Runs.")
    judge_action("judge-list", store=S, filters=filters, run_id=filters.get("run_id"), scope=describe(params))
