"""'Diagnose with a judge' (on a run, on the filtered Trajectories list and on one trajectory), and a judge job's
live progress and refusals (each with what the judge wrote, shown inert).

The form names a judge (spec, backend, base URL, the NAME of the key's environment variable) and its budget (the
answer's tokens, the steps and characters a step the prompt shows: `evalrx diagnose --judge`'s), shows what judging
the list may cost (`evalrx.runner.estimate_judge`) and queues a judge job only after a confirm; a worker runs it.
Naming a server and a variable for the worker to send is naming what the worker runs: served beyond this
machine, the form is off unless the operator allows commands (`components.access.commands_allowed`).
"""

from __future__ import annotations

from typing import Any, Optional

import streamlit as st

from components.access import ENV_COMMANDS, commands_allowed
from components.labelling import flash
from components.live_job import live_job
from components.safe import counted, md_escape, short, show_pre
from evalrx.diagnosis import JUDGE_STRATEGIES
from evalrx.runner import JUDGE_BUDGET, JudgeConfig, estimate_judge, judge_list_targets, queue_judge, run_concurrency
from evalrx.store import ACTIVE_STATUSES, JobStatus, cancel_judge_job, list_judge_jobs

BACKENDS = ("api", "hf_local")
POLL_S = 2.0  # a trajectory's judge job in progress is polled this often


STRATEGY_TITLES = {
    "all_at_once": "All at once (one call)",
    "step_by_step": "Step by step",
    "binary_search": "Binary search",
}


# The budget's fields (`JUDGE_BUDGET`'s ranges, `evalrx diagnose --judge`'s flags): empty keeps the judge's default.
BUDGET = {
    "max_new_tokens": ("Answer tokens at most", "the judge's answer is cut here"),
    "max_steps": ("Steps shown at most", "a longer log keeps its first and last steps"),
    "max_step_chars": ("Characters a step at most", "a longer step keeps its start and end"),
}


def _pending(key: str) -> str:
    return f"{key}-pending"


def _forget(key: str) -> None:
    """A changed field makes the shown estimate stale: it must be asked for again before queueing."""
    st.session_state.pop(_pending(key), None)


def _queue(key: str, store: Any, run_id: Optional[int], scope: str) -> None:
    pending = st.session_state.pop(_pending(key), None)
    if not pending:
        return
    config = JudgeConfig.from_dict(pending["config"])
    try:
        job = queue_judge(config, pending["ids"], run_id=run_id, scope=scope, store=store)
    except ValueError as exc:
        st.session_state[f"{key}-error"] = str(exc)
        return
    flash(
        f"Queued judge job {job}: {counted(len(pending['ids']), 'trajectory', 'trajectories')} with {config.spec}; its progress is on Runs."
    )


def judge_action(
    key: str,
    *,
    store: Any,
    scope: str,
    run_id: Optional[int] = None,
    filters: Optional[dict] = None,
    trajectory_ids: Optional["list[int]"] = None,
):
    """The form: a run's trajectories (`run_id`), a filtered list's (`filters`, `list_trajectories` filters) or
    the given ones (`trajectory_ids`: judged whatever their grade, never an errored one)."""
    allowed = commands_allowed()
    if not allowed:
        st.caption(f"Off: the app is served beyond this machine; the operator can set {ENV_COMMANDS}=1.")
    off: "dict[str, Any]" = {"disabled": not allowed, "on_change": _forget, "args": (key,)}
    a, b = st.columns(2)
    spec = a.text_input("Judge model spec", key=f"{key}-spec", placeholder="gpt-4o-mini", **off)
    backend = b.selectbox("Backend", BACKENDS, index=None, key=f"{key}-backend", placeholder="from the spec", **off)
    c, d = st.columns(2)
    base_url = c.text_input("Base URL (api)", key=f"{key}-base-url", placeholder="http://127.0.0.1:8000/v1", **off)
    key_env = d.text_input(
        "Key's environment variable (api)",
        key=f"{key}-key-env",
        placeholder="OPENAI_API_KEY",
        help="The NAME of a variable in the worker's environment, never the key: the worker reads it there and "
        "sends it only to hosts its EVALRX_KEY_HOSTS allows.",
        **off,
    )
    strategy = st.selectbox(
        "How the judge reads each log",
        JUDGE_STRATEGIES,
        key=f"{key}-strategy",
        format_func=STRATEGY_TITLES.get,
        help="The Who&When paper's three ways: the whole log in one call; step by step until it names the decisive "
        "mistake (up to a call a step); or halving the log (about log2 of its steps, then the verdict).",
        **off,
    )
    budget = {
        name: col.number_input(
            label,
            min_value=JUDGE_BUDGET[name][0],
            max_value=JUDGE_BUDGET[name][1],
            value=None,
            step=1,
            placeholder=f"{JUDGE_BUDGET[name][2]:,} (default)",
            help=help_,
            key=f"{key}-{name}",
            **off,
        )
        for col, (name, (label, help_)) in zip(st.columns(len(BUDGET)), BUDGET.items())
    }
    one = trajectory_ids is not None  # the given trajectories: no passing ones to add, no calls to spread
    e, f, g = st.columns(3, vertical_alignment="bottom")
    passing = one or e.toggle("Include passing trajectories", key=f"{key}-passing", help="to count false alarms", **off)
    findings = f.toggle("Show the other sources' findings", key=f"{key}-findings", **off)
    concurrency = 1
    if not one:
        concurrency = g.number_input(
            "Calls at once (api)",
            min_value=1,
            max_value=64,
            value=run_concurrency(run_id, store=store),
            key=f"{key}-concurrency",
            **off,
        )
    if st.button("Estimate the cost", key=f"{key}-estimate", icon=":material/calculate:", disabled=not allowed):
        try:
            config = JudgeConfig(
                spec,
                backend=backend,
                base_url=base_url or None,
                api_key_env=key_env or None,
                with_findings=findings,
                concurrency=int(concurrency),
                strategy=strategy,
                **{name: int(v) for name, v in budget.items() if v is not None},
            ).checked()
            if one:
                ids = judge_list_targets(
                    run_id=run_id, trajectory_ids=trajectory_ids, include_passing=True, store=store
                )
            else:
                ids = judge_list_targets(run_id=run_id, filters=filters, include_passing=passing, store=store)
            if not ids:
                raise ValueError(
                    "nothing to judge here"
                    + (
                        ": an errored trajectory (the server or harness failed, not the agent)"
                        if one
                        else ""
                        if passing
                        else ": no failed trajectory (include passing ones?)"
                    )
                )
            estimate = estimate_judge(config, ids, store=store)
        except ValueError as exc:
            _forget(key)
            st.error(md_escape(exc))
        else:
            st.session_state[_pending(key)] = {"config": config.to_dict(), "ids": ids, "line": estimate.line()}
    error = st.session_state.pop(f"{key}-error", None)
    if error:
        st.error(md_escape(error))
    pending = st.session_state.get(_pending(key))
    if pending:
        line = pending["line"]
        st.info(md_escape(line[:1].upper() + line[1:]), icon=":material/token:")
        st.button(
            f"Queue the judge for {counted(len(pending['ids']), 'trajectory', 'trajectories')}",
            key=f"{key}-confirm",
            type="primary",
            icon=":material/gavel:",
            on_click=_queue,
            args=(key, store, run_id, scope),
        )


def _cancel(job_id: int, store: Any) -> None:
    status = cancel_judge_job(job_id, store=store)
    flash(
        f"Judge job {job_id}: "
        + ("cancelled" if status == JobStatus.CANCELLED else "cancel requested, stops after the current trajectory")
    )


def judge_progress_text(job: Any) -> str:
    """Plain text under a judge job's progress bar."""
    bits = [
        f"{job.progress_done}/{job.progress_total} trajectories",
        f"{job.n_verdicts} verdicts",
        f"{job.n_refused} refused",
    ]
    if job.n_failed:
        bits.append(f"{job.n_failed} failed calls")
    if job.n_cached:
        bits.append(f"{job.n_cached} from the cache")
    if job.status == JobStatus.QUEUED:
        bits.append("waiting for a worker")
    if job.cancel_requested and job.status in ACTIVE_STATUSES:
        bits.append("cancel requested: stops after the current trajectory")
    return " · ".join(bits)


def judge_job_live(job: Any, store: Any) -> None:
    """A running or queued judge job: what it is, its progress and its cancel button."""
    heading = (
        f"**Judge job {job.id}** · {md_escape(job.spec)} on {md_escape(job.backend)} · "
        f"{md_escape(job.scope)} · `{job.status}`"
    )
    keys = (f"judge-live-{job.id}", f"cancel-judge-{job.id}")
    live_job(keys, heading, _cancel, (job.id, store), job, judge_progress_text(job))


def judge_job_rows(jobs: list) -> "list[dict]":
    """A run's judge jobs as table rows (plain values; the table shows them as text)."""
    return [
        {
            "job": j.id,
            "judge": f"{j.spec} on {j.backend}",
            "status": j.status,
            "done": f"{j.progress_done}/{j.progress_total}",
            "verdicts": j.n_verdicts,
            "refused": j.n_refused,
            "failed calls": j.n_failed,
            "cached": j.n_cached,
            "error": j.error,
        }
        for j in jobs
    ]


def run_judge_panel(run_id: int, store: Any) -> None:
    """A run's "Diagnose with a judge": the form, then its judge jobs with their refusals and failed calls."""
    st.caption("A model reads each failed trajectory and names the kind and the first wrong step; a worker runs it.")
    judge_action(f"judge-run-{run_id}", store=store, run_id=run_id, scope=f"run {run_id}")
    judged = list_judge_jobs(run_id=run_id, store=store)
    if not judged:
        return
    st.dataframe(judge_job_rows(judged), hide_index=True, width="stretch", placeholder="-")
    notes = [n for j in judged for n in j.note_details]
    if notes:
        st.markdown("**Refused answers and failed calls** (newest job first)")
        render_notes(notes)


def render_notes(notes: list) -> None:
    """Refusals and failed calls (`JudgeNote`s): the lines inert, and each refusal's answer, what the judge wrote,
    inert in an expander named by its line."""
    plain = [n.line for n in notes if not n.answer]
    if plain:
        show_pre("\n".join(plain))
    for n in notes:
        if n.answer:
            with st.expander(md_escape(short(n.line, 150)), icon=":material/chat_error:"):
                show_pre(n.line)
                st.caption("What the judge wrote:")
                show_pre(n.answer)


def _trajectory_outcome(job: Any, notes: list) -> str:
    """A judge job's word on one trajectory (plain text)."""
    if job.active:
        return judge_progress_text(job)
    if notes:
        return "refused" if "refused:" in notes[0].line else "failed"
    if job.status == JobStatus.DONE:
        return "judged: its verdict is the judge's candidate in the diagnosis"
    return job.status + (f": {job.error}" if job.error else "")


def trajectory_judge_panel(trajectory_id: int, run_id: int, store: Any) -> None:
    """A trajectory's "Ask a judge": the form for this one trajectory (queued like a run's), then the judge jobs
    that read it, what each made of it and a refusal's answer; polled while one is in progress."""
    st.caption("A model reads this trajectory and names the kind and the first wrong step; a worker runs it.")
    judge_action(
        f"judge-traj-{trajectory_id}",
        store=store,
        run_id=run_id,
        scope=f"trajectory {trajectory_id}",
        trajectory_ids=[trajectory_id],
    )

    def jobs() -> list:
        return [j for j in list_judge_jobs(run_id=run_id, store=store) if trajectory_id in j.trajectory_ids]

    active = {j.id for j in jobs() if j.active}

    def show() -> None:
        mine = jobs()
        if {j.id for j in mine if j.active} != active:
            st.rerun()  # a job finished: the whole page, so that the diagnosis shows its verdict
        for j in mine:
            notes = [n for n in j.note_details if n.trajectory_id == trajectory_id]
            st.markdown(
                f"**Judge job {j.id}** · {md_escape(j.spec)} on {md_escape(j.backend)} · "
                + md_escape(_trajectory_outcome(j, notes))
            )
            render_notes(notes)

    st.fragment(show, run_every=POLL_S if active else None)()
