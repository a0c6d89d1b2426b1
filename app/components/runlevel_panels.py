"""Run-level panels: reliability over repeated attempts, what predicts failure, annotator agreement.

Each panel reads the store through `evalrx.store`'s front door and draws the rows `runlevel_view`
builds; the Runs page shows them as tabs of a run, the Compare page reuses the predictors.
"""

from __future__ import annotations

from typing import Sequence

import streamlit as st

from components.charts import case_rate_strip, confusion_chart, pass_k_chart
from components.runlevel_view import (
    auto_rows,
    case_rate_rows,
    confusion_rows,
    flaky_rows,
    pair_rows,
    pass_k_rows,
    predictor_rows,
)
from components.safe import md_escape

LINK = st.column_config.LinkColumn("open", display_text="open", width="small")
EMPTY = "—"  # a cell with no value (no interval yet, no warning): not the word "None"


@st.cache_data(ttl=600, show_spinner="Ranking the signals…", max_entries=200)
def _predictors(run_ids: tuple, url: str, stamp: tuple) -> list:
    """`predictor_table` (bootstrap intervals), cached until the runs' progress (`stamp`) changes."""
    from evalrx.reports import predictor_table

    return predictor_table(list(run_ids), store=url)


def render_reliability(run_id: int, *, url: str) -> None:
    """Success rate per case (a sorted strip), the pass@k / pass^k curve and the flaky cases."""
    from evalrx.reports import run_reliability
    from evalrx.store import attempts_of

    rel = run_reliability(run_id, store=url)
    if not rel.case_rates:
        st.caption("No graded attempt in this run yet.")
        return
    attempts = attempts_of(run_id, store=url)
    n_att = sum(len(v) for v in attempts.values())
    c = st.columns(4)
    c[0].metric("cases", f"{len(rel.case_rates):,}")
    c[1].metric("graded attempts", f"{n_att:,}")
    c[2].metric("pass@1", f"{100 * rel.pass_at_k[1]:.1f}%" if 1 in rel.pass_at_k else "—")
    c[3].metric("flaky cases", f"{len(rel.flaky_cases):,}", help="some attempts pass, some fail")
    left, right = st.columns([3, 2])
    with left:
        st.altair_chart(case_rate_strip(case_rate_rows(rel)), width="stretch", key=f"rel-strip-{run_id}")
    with right:
        if rel.k_max >= 2:
            st.altair_chart(pass_k_chart(pass_k_rows(rel)), width="stretch", key=f"rel-passk-{run_id}")
        else:
            st.caption("One attempt per case: pass@k needs repeats (the New run page's repeats).")
    if rel.flaky_cases:
        st.markdown(
            f"**Flaky cases ({len(rel.flaky_cases)})**: open one to set a passing and a failing attempt side by side."
        )
        st.dataframe(
            flaky_rows(rel, attempts, run_id),
            hide_index=True,
            placeholder=EMPTY,
            width="stretch",
            key=f"flaky-{run_id}",
            column_config={"open": LINK},
        )
    elif rel.k_max >= 2:
        st.caption("No flaky case: every case passed all its attempts or failed all of them.")


def render_predictors(run_ids: Sequence[int], *, url: str, link_run: int, stamp: tuple = ()) -> None:
    """Each stored signal's AUROC for failure, strongest first, each row opening the list it points at."""
    table = _predictors(tuple(run_ids), url, stamp)
    rows = predictor_rows(table, link_run)
    if not rows or all(r["AUROC"] is None for r in rows):
        st.caption("Nothing to rank yet: it needs both passing and failing graded trajectories.")
        return
    small = [p for p in table if p.get("warning")]
    if small:
        from evalrx.reports import MIN_CLASS

        widest = max(small, key=lambda p: p["n"])
        n, n_failed = widest["n"], widest["n_failed"]
        st.warning(
            f"{n - n_failed} passed and {n_failed} failed of {n} graded trajectories: fewer than {MIN_CLASS} "
            "in a class, so an AUROC and its interval say little here (see each row's warning).",
            icon=":material/warning:",
        )
    st.dataframe(
        rows,
        hide_index=True,
        placeholder=EMPTY,
        width="stretch",
        key="predictors-" + "-".join(map(str, run_ids)),
        column_config={"list": st.column_config.LinkColumn("list", display_text="list", width="small")},
    )
    st.caption(
        "AUROC: the chance a failed trajectory's value is above a passed one's (0.5: no signal), with a "
        "bootstrap 95% interval. Fail % high / low: the failure rate above / at or below the median "
        f"(split). Links list run {link_run}'s trajectories by that signal where the list can filter on it."
    )


def render_agreement(run_id: int, *, url: str) -> None:
    """Cohen's kappa per annotator pair, step agreement, the diagnosis against each annotator (in a team, on
    the agent blamed and the step too), and where to give a second opinion or adjudicate."""
    from evalrx.reports import label_agreement
    from evalrx.store import disagreements

    agree = label_agreement(run_id=run_id, store=url)
    n_open = len(disagreements(run_id, store=url))
    links = st.columns(3)
    links[0].page_link(
        "views/label.py",
        label="Second opinion (blind)",
        icon=":material/visibility_off:",
        query_params={"run": str(run_id), "second": "true"},
    )
    links[1].page_link(
        "views/adjudicate.py",
        label=f"Adjudicate ({n_open} open)",
        icon=":material/gavel:",
        query_params={"run": str(run_id)},
    )
    humans = agree["annotators"]
    if not humans:
        st.caption("No labels on this run yet.")
        return
    st.markdown(
        f"**{agree['n_items']:,}** labelled trajectories · annotators: " + ", ".join(md_escape(a) for a in humans)
    )
    pairs = pair_rows(agree)
    if pairs:
        st.markdown("**Annotator pairs** (Cohen's κ on the trajectories both labelled)")
        st.dataframe(pairs, hide_index=True, placeholder=EMPTY, width="stretch", key=f"agree-pairs-{run_id}")
    else:
        st.caption("One annotator so far: a second opinion gives the first pair.")
    for field in ("outcome", "kind"):
        fl = agree[field]["fleiss"]
        if fl and fl["kappa"] is not None:
            st.caption(f"Fleiss' κ on {field}: {fl['kappa']:.3f} ({fl['n']} items, {fl['raters']} raters each)")
    auto = auto_rows(agree)
    if auto:
        st.markdown("**The diagnosis against each annotator** (trajectories they labelled failed)")
        st.dataframe(auto, hide_index=True, placeholder=EMPTY, width="stretch", key=f"agree-auto-{run_id}")
        if agree.get("teams"):
            st.caption(
                "A team's run: *same agent* counts the labels naming the agent a person blames where the diagnosis "
                "blames that agent too, *same step* those where it names the person's first wrong step "
                "(Wilson 95% intervals)."
            )
        with_cm = [r for r in agree["auto"] if r["confusion"]]
        if with_cm:
            who = st.selectbox("Confusion matrix of", [r["annotator"] for r in with_cm], key=f"cm-who-{run_id}")
            cm = next(r["confusion"] for r in with_cm if r["annotator"] == who)
            st.altair_chart(
                confusion_chart(confusion_rows(cm), f"Failure kind: {who} (rows) vs the diagnosis"),
                width="stretch",
                key=f"cm-{run_id}",
            )
