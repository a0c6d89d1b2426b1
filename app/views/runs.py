"""Runs: every run with status, live progress, cancel, and its figures: an overview, reliability over
repeated attempts, what predicts failure, and annotator agreement (tabs, `?view=` in the URL)."""

import streamlit as st
from components.data import store
from components.export_panel import export_controls
from components.judge_form import judge_job_live, run_judge_panel
from components.labelling import flash
from components.live_job import live_job
from components.runlevel_panels import render_agreement, render_predictors, render_reliability
from components.runs_view import baseline_run, is_active, measured, progress_text, run_row
from components.safe import md_escape, show_pre

from evalrx.store import JobStatus, list_judge_jobs, list_runs, request_cancel, run_stats

S = store()
POLL_S = 1.5
TABLE_RUNS = 100  # the table's run count; stats are computed for these only


@st.cache_data(show_spinner=False, max_entries=2000, ttl=600)
def _stats(run_id: int, n_done: int, status: str, store_url: str):
    """RunStats, cached until the run's progress or status changes."""
    return run_stats(run_id, store=S)


def _cancel(run_id: int) -> None:
    status = request_cancel(run_id, store=S)
    flash(
        f"Run {run_id}: "
        + ("cancelled" if status == JobStatus.CANCELLED else "cancel requested, stops after the current case")
    )


st.title("Runs")
first = list_runs(limit=TABLE_RUNS, store=S)
if not first:
    st.info("No runs yet. Start one on the New run page; it runs in the background worker.")
    st.page_link("views/new_run.py", label="New run", icon=":material/add_circle:")
    st.stop()


def watched(runs: list, judging: list) -> set:
    """What the live section polls for: the runs and judge jobs in progress."""
    return {("run", r.id) for r in runs if is_active(r)} | {("judge", j.id) for j in judging}


active_at_load = watched(first, list_judge_jobs(active=True, store=S))


@st.fragment(run_every=POLL_S if active_at_load else None)
def live() -> None:
    runs = list_runs(limit=TABLE_RUNS, store=S)
    active = [r for r in runs if is_active(r)]
    judging = list_judge_jobs(active=True, store=S)
    if watched(active, judging) != active_at_load:
        st.rerun()  # a run or judge job started or finished: rerun the page so polling turns on or off
    if active or judging:
        st.subheader("In progress")
    for j in judging:
        judge_job_live(j, S)
    for r in active:
        heading = (
            f"**Run {r.id} · {md_escape(r.name or '')}** · {md_escape(r.spec_key or '')} on "
            f"{md_escape(r.backend or '')} · `{r.status}`"
        )
        live_job((f"live-{r.id}", f"cancel-{r.id}"), heading, _cancel, (r.id,), r, progress_text(r))

    rows = [run_row(r, _stats(r.id, r.n_done, r.status, S.url)) for r in runs]
    st.subheader(f"All runs ({len(runs)})")
    event = st.dataframe(
        rows,
        hide_index=True,
        width="stretch",
        key="runs-table",
        on_select="rerun",
        selection_mode="single-row",
        placeholder="-",  # an ungraded run's success rate, a run without timings: "-", not "None"
        column_config={
            "progress": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0, format="percent"),
            "success": st.column_config.NumberColumn("success %", format="%.1f"),
        },
    )
    picked = event.selection.rows if event and event.selection else []
    wanted = st.query_params.get("run")
    if picked:
        selected = runs[picked[0]]
    else:
        selected = next((r for r in runs if str(r.id) == wanted), runs[0])
    details(selected, runs)


def details(r, runs: list) -> None:
    st.subheader(f"Run {r.id}: {md_escape(r.name or '')}")
    stats = _stats(r.id, r.n_done, r.status, S.url)
    c = st.columns(6)
    c[0].metric("status", r.status)
    c[1].metric("cases", f"{r.n_done}/{r.n_cases}")
    c[2].metric("success", "—" if stats.success_rate is None else f"{100 * stats.success_rate:.1f}%")
    p50, p95, tokens = (
        measured(stats.latency_p50_ms),
        measured(stats.latency_p95_ms),
        measured(stats.prompt_tokens + stats.completion_tokens),
    )
    c[3].metric("latency p50", "—" if p50 is None else f"{p50:,.0f} ms")
    c[4].metric("latency p95", "—" if p95 is None else f"{p95:,.0f} ms")
    c[5].metric(
        "tokens",
        "—" if tokens is None else f"{tokens:,}",
        help=f"prompt {stats.prompt_tokens:,}, completion {stats.completion_tokens:,}" if tokens else "not recorded",
    )
    links = st.columns(5)
    links[0].page_link(
        "views/trajectories.py", label="All trajectories", icon=":material/list:", query_params={"run": str(r.id)}
    )
    links[1].page_link(
        "views/trajectories.py",
        label="Failures",
        icon=":material/error:",
        query_params={"run": str(r.id), "outcome": "fail"},
    )
    links[2].page_link(
        "views/label.py", label="Label this run", icon=":material/label:", query_params={"run": str(r.id)}
    )
    links[3].page_link(
        "views/dashboard.py", label="Dashboard", icon=":material/monitoring:", query_params={"run": str(r.id)}
    )
    older = baseline_run(r, runs)  # the run of its suite before it, the natural baseline
    if older is not None:
        links[4].page_link(
            "views/compare.py",
            label=f"Compare with run {older}",
            icon=":material/compare_arrows:",
            query_params={"a": str(older), "b": str(r.id)},
        )
    with st.expander("Export this run", icon=":material/download:"):
        export_controls(f"export-run-{r.id}", f"run{r.id}", run_id=r.id, store=S)
    with st.expander("Diagnose with a judge", icon=":material/gavel:"):
        run_judge_panel(r.id, S)
    tabs = st.tabs(["Overview", "Reliability", "Predictors", "Agreement"], key="view", bind="query-params")
    with tabs[0]:
        if tabs[0].open is not False:
            overview(r, stats)
    with tabs[1]:
        if tabs[1].open:
            render_reliability(r.id, url=S.url)
    with tabs[2]:
        if tabs[2].open:
            st.markdown("**What predicts failure** in this run: each stored signal, strongest first.")
            render_predictors([r.id], url=S.url, link_run=r.id, stamp=(r.n_done, r.status))
    with tabs[3]:
        if tabs[3].open:
            render_agreement(r.id, url=S.url)


def overview(r, stats) -> None:
    left, mid, right = st.columns(3)
    with left:
        st.markdown("**Ended by**")
        st.dataframe(
            [{"terminated": k or "(unknown)", "n": v} for k, v in sorted(stats.terminated.items())],
            hide_index=True,
            width="stretch",
        )
    with mid:
        st.markdown("**Grades and labels**")
        rows = [{"kind": "grade", "value": k, "n": v} for k, v in sorted(stats.outcomes.items())]
        rows += [{"kind": "label", "value": k, "n": v} for k, v in sorted(stats.labels.items()) if k != "none"]
        rows += [{"kind": "diagnosed", "value": k, "n": v} for k, v in stats.diagnosis_kinds.items()]
        rows += [{"kind": "labelled", "value": k, "n": v} for k, v in sorted(stats.label_kinds.items())]
        st.dataframe(rows, hide_index=True, width="stretch")
    with right:
        st.markdown("**Tool calls**")
        st.dataframe(
            [{"tool": k, "trajectories": v} for k, v in sorted(stats.tool_calls.items())],
            hide_index=True,
            width="stretch",
        )
        st.caption(f"{stats.n_parse_errors} parse errors · mean {stats.mean_steps or 0:.1f} steps")
    if r.error:
        st.markdown(":red[**Error**]")
        show_pre(r.error)
    with st.expander("Configuration"):
        st.json(r.config, expanded=False)


live()
