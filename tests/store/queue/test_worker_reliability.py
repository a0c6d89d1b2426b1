"""SIGKILL the worker at random points of a 100-case run on a real local model (10 kills); restart; check the store."""

from __future__ import annotations

import random
import time

import pytest
from workerhelpers import integrity_report, start_worker

import evalrx.store as S
from evalrx.config import ModelConfig, RunConfig
from evalrx.runner import enqueue_run

N_CASES, N_KILLS = 100, 10
PG_KILLS = 5


@pytest.fixture(scope="module")
def model_config():
    """The bundled demo model, as the issue asks: real tool calls, real steps to lose."""
    return ModelConfig("evalrx-tiny"), {"max_new_tokens": 64}


def _progress(store, run_id) -> int:
    return S.get_run(run_id, store=store).n_done


@pytest.mark.slow
def test_sigkill_at_random_points_loses_and_duplicates_nothing(sqlite_url, model_config, tmp_path):
    from evalrx.suites import load_cases

    store = S.connect(sqlite_url)
    model, runtime = model_config
    cases = load_cases("demo")[:N_CASES]
    assert len(cases) == N_CASES
    run_id = enqueue_run(
        RunConfig(model=model, tools=["calculator", "lookup"], max_turns=3), cases, runtime=runtime, store=store
    )
    rng = random.Random(20240601)
    log = tmp_path / "worker.log"
    kills = []
    for _ in range(N_KILLS):
        proc = start_worker(sqlite_url, "--poll", "0.05", "--heartbeat", "0.3", log=log, plugin=None)
        try:
            before = _progress(store, run_id)
            target = before + rng.randint(1, 6)
            deadline = time.monotonic() + 90
            while _progress(store, run_id) < target and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.2))  # land anywhere: mid-generation, mid-write, between cases
            assert proc.poll() is None, log.read_text()[-3000:]
        finally:
            proc.kill()  # SIGKILL: no cleanup, no release of the job
            proc.wait()
        kills.append(_progress(store, run_id))
    assert kills[-1] < N_CASES  # every kill hit a run in progress
    final = start_worker(sqlite_url, "--once", "--poll", "0.05", "--heartbeat", "0.3", log=log, plugin=None)
    assert final.wait(timeout=180) == 0, log.read_text()[-3000:]

    info = S.get_run(run_id, store=store)
    assert info.status == "done" and info.n_done == N_CASES
    assert info.n_error == 0  # no kill cost a case: each was run again, none given up on
    assert info.job_claims == N_KILLS + 1  # each restart resumed the same job
    assert "database is locked" not in log.read_text()
    rows = S.list_trajectories(run_id=run_id, store=store, limit=1000).rows
    assert sorted(r.sample_id for r in rows) == sorted(c.id for c in cases)  # every case exactly once
    report = integrity_report(store)
    assert report == dict.fromkeys(report, 0), report
    for row in rows[:10]:  # stored steps rebuild the trajectory they were written from
        traj = S.get_trajectory(row.id, store=store).trajectory
        assert [s.idx for s in traj.steps] == list(range(row.n_steps)) and traj.steps[0].role.value == "user"
    print(f"kills after {kills} cases done; model {model.name} {model.checkpoint or '(bundled weights)'}")


@pytest.mark.slow
def test_pg_sigkill_with_a_scripted_model(pg_url, tmp_path):
    """The kill-and-restart check on PostgreSQL (which rolls back a dead connection's open
    transaction and releases its row locks), with a torch-free model to keep it quick."""
    import scripted_backend  # noqa: F401
    from workerhelpers import cases, scripted_config

    url = pg_url
    store = S.connect(url)
    run_id = enqueue_run(scripted_config(), cases(40), store=store, runtime={"extra": {"delay": 0.03}})
    rng = random.Random(7)
    log = tmp_path / "worker.log"
    for _ in range(PG_KILLS):
        proc = start_worker(url, "--poll", "0.05", "--heartbeat", "0.2", log=log)
        target = _progress(store, run_id) + rng.randint(1, 5)
        deadline = time.monotonic() + 60
        while _progress(store, run_id) < target and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.1))
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.kill()
        proc.wait()
    final = start_worker(url, "--once", "--poll", "0.05", log=log)
    assert final.wait(timeout=120) == 0, log.read_text()[-3000:]
    info = S.get_run(run_id, store=store)
    assert (info.status, info.n_done, info.n_pass, info.job_claims) == ("done", 40, 40, PG_KILLS + 1)
    report = integrity_report(store)
    assert report == dict.fromkeys(report, 0), report
    assert S.count_trajectories(run_id=run_id, store=store) == 40


def _kill_while(proc, log, ready, *, within_s: float = 90.0) -> None:
    """SIGKILL `proc` as soon as `ready()` holds (it must hold while the worker still runs)."""
    try:
        deadline = time.monotonic() + within_s
        while not ready():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.02)
    finally:
        proc.kill()  # SIGKILL: no cleanup, no release of the job
        proc.wait()


@pytest.mark.slow
def test_a_judge_job_killed_mid_work_is_requeued_and_judges_each_trajectory_once(store_url, tmp_path):
    """SIGKILL a worker two trajectories into a judge job: the next worker requeues the job (its worker is dead)
    and finishes it; each trajectory has one verdict, those judged before the kill come from the cache."""
    from loopback import ScriptedChatServer
    from test_judge_queue import VALID, answer, failed_run, judged

    from evalrx.runner import JudgeConfig, queue_judge

    n = 5
    run_id, tids = failed_run(store_url, n)
    log = tmp_path / "worker.log"
    with ScriptedChatServer([(200, answer(VALID), {}, 0.3)] * (n + 2)) as server:
        judge_id = queue_judge(JudgeConfig("gpt-4o-mini", base_url=server.url), tids, run_id=run_id, store=store_url)
        proc = start_worker(store_url, "--poll", "0.05", "--heartbeat", "0.3", log=log, plugin=None)
        _kill_while(proc, log, lambda: S.get_judge_job(judge_id, store=store_url).progress_done >= 2)
        killed = S.get_judge_job(judge_id, store=store_url)
        assert killed.status == "running" and 2 <= killed.progress_done < n  # it died mid-work
        final = start_worker(store_url, "--once", "--poll", "0.05", "--heartbeat", "0.3", log=log, plugin=None)
        assert final.wait(timeout=120) == 0, log.read_text()[-3000:]
    job = S.get_judge_job(judge_id, store=store_url)
    assert (job.status, job.progress_done, job.n_verdicts, job.error) == ("done", n, n, None)
    assert job.n_cached >= killed.progress_done  # nothing judged before the kill was asked again
    assert len(server.requests) <= n + 1  # at most the one in flight at the kill asked twice
    assert S.get_job(job.job_id, store=store_url).claims == 2  # requeued once, resumed by the next worker
    assert [len(judged(store_url, tid)) for tid in tids] == [1] * n  # each verdict stored once


@pytest.mark.slow
def test_an_analysis_request_killed_mid_work_is_requeued_and_stored_once(store_url, tmp_path):
    """SIGKILL a worker while it runs an analysis request (loading the model or analysing): the next worker
    requeues it and stores its results once."""
    from test_diagnosis_store import misread, store_run

    store = S.connect(store_url)
    _, tids = store_run(store, [misread()])
    (tid,) = tids.values()
    req = S.request_analysis(tid, ["tool_decision"], model="evalrx-tiny", store=store)
    log = tmp_path / "worker.log"
    proc = start_worker(store_url, "--poll", "0.05", "--heartbeat", "0.3", log=log, plugin=None)
    _kill_while(proc, log, lambda: S.get_request(req, store=store)["status"] == "running")
    assert S.get_request(req, store=store)["status"] == "running"  # it died mid-work
    final = start_worker(store_url, "--once", "--poll", "0.05", "--heartbeat", "0.3", log=log, plugin=None)
    assert final.wait(timeout=180) == 0, log.read_text()[-3000:]
    done = S.get_request(req, store=store)
    assert (done["status"], done["error"]) == ("done", None), log.read_text()[-3000:]
    assert S.get_job(done["job_id"], store=store).claims == 2
    assert [a["analyzer"] for a in S.load_analyses(tid, store=store)] == ["tool_decision"]  # stored once
