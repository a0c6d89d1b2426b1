"""The job queue and the worker, in process, on SQLite and PostgreSQL (scripted, torch-free model)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import pytest
import scripted_backend  # noqa: F401  (registers the `scripted` backend and specs)
from sqlalchemy import select, text, update
from workerhelpers import cases, integrity_report, scripted_config

import evalrx.store as S
from evalrx.config import ModelConfig, RunConfig
from evalrx.runner import AnalysisRecord, Worker, cancel_run, enqueue_run, register_hook, retry_run, worker_main
from evalrx.runner.handlers import cases as handler_mod
from evalrx.store import schema as t


def _worker(store, **kw):
    kw.setdefault("exit_when_idle", True)
    kw.setdefault("heartbeat_s", 0.2)
    return Worker(store, **kw)


@pytest.fixture
def calls(monkeypatch):
    """Handles the worker loads, to look at what the model was asked."""
    loaded = []
    real = handler_mod.load_handle

    def spy(cfg, run_key=None):
        h = real(cfg, run_key)
        loaded.append(h)
        return h

    monkeypatch.setattr(handler_mod, "load_handle", spy)
    return loaded


def test_a_run_goes_from_queue_to_graded_trajectories(store_url, calls):
    store = S.connect(store_url)
    run_id = enqueue_run(scripted_config(), cases(6), name="six", store=store)
    info = S.get_run(run_id, store=store)
    assert info.status == "queued" and info.job_status == "queued" and info.n_cases == 6
    assert _worker(store).run() == 1
    info = S.get_run(run_id, store=store)
    assert (info.status, info.job_status, info.n_done, info.n_pass, info.n_fail) == ("done", "done", 6, 6, 0)
    assert info.finished_at >= info.started_at
    job = S.jobs_of_run(run_id, store=store)[0]
    assert job.progress_done == job.progress_total == 6 and job.claims == 1
    assert len(calls) == 1  # the model is loaded once per job
    rows = S.list_trajectories(run_id=run_id, store=store, descending=False).rows
    detail = S.get_trajectory(rows[2].id, store=store)
    assert [s.role.value for s in detail.trajectory.steps] == ["user", "actor", "tool", "actor"]
    assert detail.trajectory.final_answer == "The answer is 14." and rows[2].outcome == "pass"
    assert detail.diagnoses == [] and rows[2].diagnosis_kind is None  # a pass has no diagnosis
    assert integrity_report(store) == dict.fromkeys(integrity_report(store), 0)
    assert S.alive_workers(store=store) == []  # a stopped worker is not alive


def test_the_model_load_time_is_recorded_on_the_run_not_in_a_step(sqlite_url, calls):
    from evalrx.config import ModelConfig, RunConfig

    store = S.connect(sqlite_url)
    run_id = enqueue_run(
        RunConfig(model=ModelConfig("evalrx-tiny"), tools=["calculator"], max_turns=1),
        cases(1),
        runtime={"max_new_tokens": 8},
        store=store,
    )
    assert _worker(store).run() == 1
    with store.read() as s:
        meta = s.get(t.Run, run_id).meta
    assert meta["model_load_ms"] == calls[0].load_ms > 0
    row = S.list_trajectories(run_id=run_id, store=store).rows[0]
    assert "model_load_ms" not in S.get_trajectory(row.id, store=store).trajectory.metrics


def test_claims_are_in_order_and_exclusive(store_url):
    store = S.connect(store_url)
    a = enqueue_run(scripted_config(), cases(1), store=store)
    b = enqueue_run(scripted_config(), cases(1), store=store)
    for w in ("w1", "w2"):
        S.register_worker(store, w)
    first = S.claim_job(store, "w1")
    second = S.claim_job(store, "w2")
    assert (first.run_id, second.run_id) == (a, b)
    assert S.claim_job(store, "w1") is None
    assert first.status == "running" and first.worker_id == "w1" and first.claims == 1
    assert S.get_run(a, store=store).status == "running"
    assert S.heartbeat(store, "w1", first.id) is True
    assert S.heartbeat(store, "w2", first.id) is False  # not its job


def test_claim_filters_by_backend(store_url):
    store = S.connect(store_url)
    enqueue_run(scripted_config(), cases(1), store=store)
    assert S.claim_job(store, "w", backends=["api"]) is None
    assert S.claim_job(store, "w", backends=["scripted"]) is not None


def test_resume_runs_only_the_missing_cases(store_url, calls):
    store = S.connect(store_url)
    run_id = enqueue_run(scripted_config(), cases(5), store=store)
    job = S.claim_job(store, "first")
    w = _worker(store, worker_id="first")
    w.current_job = job.id
    cfg, todo, _ = handler_mod.CaseHandler(w).load_job(job)
    for case_row_id, _, case in todo[:2]:  # two cases finished before a crash
        handler_mod.CaseHandler(w).record(
            job,
            None,
            cfg,
            [],
            case_row_id,
            case,
            handler_mod.CaseHandler(w).run_case(handler_mod.load_handle(cfg), cfg, case),
        )
    with store.write() as s:  # the worker dies: its job goes stale
        s.execute(update(t.Job).values(heartbeat_at=t.utcnow() - timedelta(hours=1)))
    assert S.requeue_stale(store, stale_after_s=60) == [job.id]
    calls.clear()
    _worker(store, worker_id="second").run()
    (handle,) = calls
    assert handle._n == 3  # the scripted model started only the three missing cases
    info = S.get_run(run_id, store=store)
    assert info.status == "done" and info.n_done == 5 and info.job_claims == 2
    assert integrity_report(store)["duplicate_cases"] == 0


def test_a_run_config_given_as_its_dict_is_queued_and_a_wrong_type_is_one_line(store_url):
    store = S.connect(store_url)
    run_id = enqueue_run(scripted_config().to_dict(), cases(2), store=store)  # as earlier releases took it
    assert _worker(store).run() == 1 and S.get_run(run_id, store=store).n_done == 2
    with pytest.raises(TypeError, match="enqueue_run takes a RunConfig \\(or its dict\\), not str"):
        enqueue_run("evalrx-tiny", cases(1), store=store)  # type: ignore[arg-type]


def test_cancel_a_queued_run(store_url):
    store = S.connect(store_url)
    run_id = enqueue_run(scripted_config(), cases(3), store=store)
    assert cancel_run(run_id, store=store) == "cancelled"
    assert _worker(store).run() == 0
    info = S.get_run(run_id, store=store)
    assert info.status == "cancelled" and info.n_done == 0


def test_cancel_stops_a_running_job_between_cases(store_url):
    store = S.connect(store_url)
    seen = []
    run_ids = []

    def cancel_after_two(ctx):
        assert [e.name for e in ctx.run.analyzers] == [
            "cancel_after_two"
        ]  # the run's RunConfig, as the worker holds it
        assert ctx.run_config is ctx.run  # the name hooks of earlier releases read
        seen.append(ctx.case.id)
        if len(seen) == 2:
            cancel_run(run_ids[0], store=store)
        return []

    register_hook("cancel_after_two", cancel_after_two, replace=True)
    cfg = scripted_config(analyzers=["cancel_after_two"])
    run_ids.append(enqueue_run(cfg, cases(8), store=store))  # the hook's run
    run_id = run_ids[0]
    _worker(store).run()
    info = S.get_run(run_id, store=store)
    assert info.status == "cancelled" and info.job_status == "cancelled" and info.n_done == 2
    # a cancelled run can be retried: only the six missing cases run
    retry_run(run_id, store=store)
    with store.write() as s:
        run = s.get(t.Run, run_id)
        run.config = {k: v for k, v in run.config.items() if k != "analyzers"}
    _worker(store).run()
    info = S.get_run(run_id, store=store)
    assert info.status == "done" and info.n_done == 8
    with pytest.raises(ValueError, match="no run"):
        retry_run(999, store=store)


def test_stale_and_dead_workers_jobs_are_requeued(store_url):
    store = S.connect(store_url)
    a = enqueue_run(scripted_config(), cases(1), store=store)
    b = enqueue_run(scripted_config(), cases(1), store=store)
    c = enqueue_run(scripted_config(), cases(1), store=store)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a process id that no longer runs
    S.register_worker(store, "alive")
    S.register_worker(store, "dead", pid=dead.pid)
    S.register_worker(store, "stale")
    ja, jb, jc = (S.claim_job(store, w) for w in ("alive", "dead", "stale"))
    with store.write() as s:
        s.execute(update(t.Job).where(t.Job.id == jc.id).values(heartbeat_at=t.utcnow() - timedelta(minutes=5)))
    assert sorted(S.requeue_stale(store, stale_after_s=60)) == sorted([jb.id, jc.id])
    assert S.get_run(a, store=store).job_status == "running"
    for run in (b, c):
        info = S.get_run(run, store=store)
        assert (
            info.job_status == "queued"
            and info.status == "queued"
            and "requeued" in S.jobs_of_run(run, store=store)[0].error
        )
    # a job that keeps killing its workers before storing any case is given up after max_attempts
    with store.write() as s:
        s.execute(
            update(t.Job)
            .where(t.Job.id == jb.id)
            .values(
                status="running",
                worker_id="dead",
                attempts=3,
                idle_claims=3,
                heartbeat_at=t.utcnow() - timedelta(hours=1),
            )
        )
    S.requeue_stale(store, stale_after_s=60, max_attempts=3)
    info = S.get_run(b, store=store)
    assert info.status == "failed" and "giving up" in info.error


def test_a_worker_that_lost_its_job_writes_nothing(store_url):
    store = S.connect(store_url)
    enqueue_run(scripted_config(), cases(2), store=store)
    job = S.claim_job(store, "old")
    w = _worker(store, worker_id="old")
    cfg, todo, _ = handler_mod.CaseHandler(w).load_job(job)
    with store.write() as s:  # requeued and taken by another worker meanwhile
        s.execute(update(t.Job).values(status="running", worker_id="new"))
    case_row_id, _, case = todo[0]
    result = handler_mod.CaseHandler(w).run_case(handler_mod.load_handle(cfg), cfg, case)
    with pytest.raises(S.LeaseLost):
        handler_mod.CaseHandler(w).record(job, None, cfg, [], case_row_id, case, result)
    assert S.count_trajectories(store=store) == 0


def test_api_runs_use_a_bounded_pool(store_url, calls):
    store = S.connect(store_url)
    run_id = enqueue_run(
        scripted_config(api=True, concurrency=3), cases(9), store=store, runtime={"extra": {"delay": 0.1}}
    )
    _worker(store).run()
    (handle,) = calls
    assert handle.max_in_flight == 3
    info = S.get_run(run_id, store=store)
    assert info.n_done == 9 and info.n_pass == 9
    tid = S.list_trajectories(run_id=run_id, store=store).rows[0].id
    steps = S.get_trajectory(tid, store=store).trajectory.steps
    assert steps[1].tool_calls[0].name == "calculator" and steps[1].tool_calls[0].id.startswith("call_")


def test_local_runs_run_one_case_at_a_time(store_url, calls):
    store = S.connect(store_url)
    enqueue_run(scripted_config(concurrency=4), cases(4), store=store, runtime={"extra": {"delay": 0.02}})
    _worker(store).run()
    assert calls[0].max_in_flight == 1


def test_a_failing_case_is_recorded_and_the_job_goes_on(store_url):
    store = S.connect(store_url)
    run_id = enqueue_run(scripted_config(), cases(6), store=store, runtime={"extra": {"fail_every": 3}})
    _worker(store).run()
    info = S.get_run(run_id, store=store)
    # An errored case is counted apart from failures: the harness failed, not the model.
    assert info.status == "done" and info.n_done == 6 and info.n_error == 2 and info.n_fail == 0
    (row,) = S.list_trajectories(run_id=run_id, terminated="error", store=store, limit=1).rows
    assert (row.outcome, row.diagnosis_kind) == ("error", "infra_error")
    detail = S.get_trajectory(row.id, store=store)
    assert "scripted failure" in detail.trajectory.metrics["error"]
    assert "scripted failure" in detail.diagnoses[0].evidence["text"]


def test_a_run_whose_every_case_errored_ends_failed(store_url):
    store = S.connect(store_url)
    run_id = enqueue_run(scripted_config(), cases(3), store=store, runtime={"extra": {"fail_every": 1}})
    _worker(store).run()
    info = S.get_run(run_id, store=store)
    assert (info.status, info.n_done, info.n_error, info.n_fail) == ("failed", 3, 3, 0)
    assert "all 3 cases errored" in info.error
    assert S.run_stats(run_id, store=store).success_rate is None  # nothing was graded


def test_analysis_hooks_store_arrays_and_failures_do_not_fail_the_case(store_url):
    import numpy as np

    store = S.connect(store_url)

    def lengths(ctx):
        yield AnalysisRecord(
            "lengths",
            arrays={"n": np.array([len(s.content) for s in ctx.trajectory.steps], dtype=np.int16)},
            step_idx=0,
        )

    def broken(ctx):
        raise RuntimeError("analysis exploded")

    register_hook("lengths", lengths, replace=True)
    register_hook("broken", broken, replace=True)
    run_id = enqueue_run(scripted_config(analyzers=["lengths", "broken"]), cases(2), store=store)
    _worker(store).run()
    assert S.get_run(run_id, store=store).n_done == 2
    tid = S.list_trajectories(run_id=run_id, store=store).rows[0].id
    got = {a["analyzer"]: a for a in S.load_analyses(tid, store=store)}
    assert got["lengths"]["arrays"]["n"].dtype == np.int16 and got["lengths"]["step_idx"] == 0
    assert "analysis exploded" in got["broken"]["meta"]["error"]


def test_enqueue_refuses_bad_configs(store_url):
    store = S.connect(store_url)
    with pytest.raises(ValueError, match="Unknown tool"):
        enqueue_run(
            scripted_config().__class__(model=scripted_config().model, tools=["teleport"]), cases(1), store=store
        )
    with pytest.raises(ValueError, match="Unknown model"):
        enqueue_run(RunConfig(model=ModelConfig("no-such-model")), cases(1), store=store)
    with pytest.raises(ValueError, match="Unknown analyzer 'nope'"):
        enqueue_run(scripted_config(analyzers=["nope"]), cases(1), store=store)
    with pytest.raises(ValueError, match="no cases"):
        enqueue_run(scripted_config(), None, store=store)
    assert S.list_runs(store=store) == []


def test_a_job_whose_setup_fails_is_marked_failed(store_url):
    store = S.connect(store_url)
    run_id = enqueue_run(scripted_config(), cases(2), store=store)
    with store.write() as s:  # the tool disappeared between enqueue and run
        run = s.get(t.Run, run_id)
        run.config = {**run.config, "tools": ["teleport"]}
    _worker(store).run()
    info = S.get_run(run_id, store=store)
    assert info.status == "failed" and "teleport" in info.error


def test_enqueue_loads_a_suite(store_url):
    from evalrx.config import ModelConfig, RunConfig

    store = S.connect(store_url)
    run_id = enqueue_run(
        RunConfig(
            model=ModelConfig("scripted", backend="scripted"), suite="demo/arithmetic_easy", tools=["calculator"]
        ),
        store=store,
    )
    info = S.get_run(run_id, store=store)
    assert info.n_cases > 5 and info.name == "scripted on demo/arithmetic_easy"


def test_worker_refuses_an_old_schema(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    assert worker_main(["--url", url, "--once"]) == 2
    assert "evalrx db upgrade" in capsys.readouterr().err


def test_ensure_worker_starts_one_worker(sqlite_url, monkeypatch):
    from evalrx.runner import ensure_worker

    monkeypatch.setenv("EVALRX_NO_LOCAL_WORKER", "1")
    assert ensure_worker(store=sqlite_url) is None
    monkeypatch.delenv("EVALRX_NO_LOCAL_WORKER")
    pid = ensure_worker(store=sqlite_url)
    try:
        assert pid and ensure_worker(store=sqlite_url) is None  # a rerun does not start a second
        assert [w["pid"] for w in S.alive_workers(store=sqlite_url)] == [pid]
    finally:
        os.kill(pid, 15)
        os.waitpid(pid, 0)


def test_a_heartbeat_for_a_job_that_just_finished_does_not_lose_the_next(store_url):
    """The heartbeat thread reads the current job, the job ends and the next one starts: no false alarm."""
    store = S.connect(store_url)
    enqueue_run(scripted_config(), cases(1), store=store)
    enqueue_run(scripted_config(), cases(1), store=store)
    w = _worker(store, worker_id="w")
    S.register_worker(store, "w")
    first = S.claim_job(store, "w")
    S.finish_job(store, first.id, "w", "done")
    second = S.claim_job(store, "w")
    w.current_job = second.id
    w._beat(first.id)  # read before the first job finished
    assert not w.lost()
    w._beat(second.id)
    assert not w.lost()
    with store.write() as s:  # now the second job really is taken away
        s.execute(update(t.Job).where(t.Job.id == second.id).values(worker_id="other"))
    w._beat(second.id)
    assert w.lost()


def test_tool_images_are_stored_once_per_content_with_their_step(store_url):
    """Images a tool returns (the agent keeps only their count) are stored by hash and linked to the step."""
    from evalrx.core import Tool, ToolResult
    from evalrx.tools import TOOLS, register_tool

    png = b"\x89PNG\r\n\x1a\n" + bytes(range(100))

    def factory(case):
        def calculator(expression: str) -> ToolResult:
            return ToolResult(text="21", images=[png, png[:-1]])

        return Tool(
            "calculator",
            "returns images",
            {"type": "object", "properties": {"expression": {"type": "string"}}},
            fn=calculator,
        )

    original = TOOLS["calculator"]
    register_tool("calculator", factory, replace=True)
    try:
        store = S.connect(store_url)
        run_id = enqueue_run(scripted_config(), cases(2), store=store)
        _worker(store).run()
    finally:
        register_tool("calculator", original, replace=True)
    with store.read() as s:
        media = s.execute(
            text(
                "SELECT st.idx, m.position, m.blob_sha256 FROM step_media m JOIN steps st "
                "ON st.id = m.step_id ORDER BY st.trajectory_id, m.position"
            )
        ).all()
        assert s.execute(text("SELECT count(*) FROM blobs")).scalar() == 2
    assert [(idx, pos) for idx, pos, _ in media] == [(2, 0), (2, 1)] * 2
    assert S.get_blob(media[0][2], store=store) == (png, "image/png")
    assert S.get_run(run_id, store=store).n_done == 2


def test_repeats_run_every_case_k_times_and_resume_per_attempt(store_url, calls):
    from dataclasses import replace

    store = S.connect(store_url)
    run_id = enqueue_run(replace(scripted_config(), repeats=3), cases(4), store=store)
    assert S.get_run(run_id, store=store).n_cases == 12
    job = S.claim_job(store, "first")
    w = _worker(store, worker_id="first")
    w.current_job = job.id
    cfg, todo, _ = handler_mod.CaseHandler(w).load_job(job)
    assert [a for _, a, _ in todo] == [1] * 4 + [2] * 4 + [3] * 4  # every first attempt, then every second...
    for case_row_id, attempt, case in todo[:5]:  # five attempts finished before a crash
        handler_mod.CaseHandler(w).record(
            job,
            None,
            cfg,
            [],
            case_row_id,
            case,
            handler_mod.CaseHandler(w).run_case(handler_mod.load_handle(cfg), cfg, case, attempt),
        )
    with store.write() as s:
        s.execute(update(t.Job).values(heartbeat_at=t.utcnow() - timedelta(hours=1)))
    assert S.requeue_stale(store, stale_after_s=60) == [job.id]
    calls.clear()
    _worker(store, worker_id="second").run()
    (handle,) = calls
    assert handle._n == 7  # only the seven missing attempts ran
    info = S.get_run(run_id, store=store)
    assert info.status == "done" and info.n_done == 12
    per_case = S.attempts_of(run_id, store=store)
    assert len(per_case) == 4 and all(sorted(a for a, *_ in v) == [1, 2, 3] for v in per_case.values())


def test_the_crash_guard_counts_starts_per_attempt(store_url, calls):
    from dataclasses import replace

    store = S.connect(store_url)
    run_id = enqueue_run(replace(scripted_config(), repeats=2), cases(2), store=store)
    # Attempt 2 of the first case already killed its worker three times; attempt 1 never started.
    with store.write() as s:
        first_case = s.execute(
            select(t.RunCase.case_row_id).where(
                t.RunCase.run_id == run_id, t.RunCase.position == 0, t.RunCase.attempt == 1
            )
        ).scalar_one()
        s.execute(
            update(t.RunCase)
            .where(t.RunCase.run_id == run_id, t.RunCase.case_row_id == first_case, t.RunCase.attempt == 2)
            .values(starts=3)
        )
    _worker(store, max_case_attempts=3).run()
    got = {
        (r.case_row_id, r.attempt): r.outcome for r in S.list_trajectories(run_id=run_id, store=store, limit=10).rows
    }
    assert len(got) == 4 and got[first_case, 2] == "error"  # only that attempt is given up on
    assert got[first_case, 1] != "error" and calls[0]._n == 3  # the other three attempts ran
