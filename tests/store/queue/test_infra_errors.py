"""A model server that fails is not a model failure: an API run against a loopback server that
answers HTTP 500 ends with `error` trajectories diagnosed `infra_error`, none in the failures
the label queue offers, and the run itself `failed`."""

from __future__ import annotations

import pytest
from loopback import ChatServer, failing_500

import evalrx.store as S
from evalrx.config import ModelConfig, RunConfig
from evalrx.runner import Worker, enqueue_run
from evalrx.suites import load_cases


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-evalrx-test-not-a-real-key")


def test_an_api_run_against_a_failing_server_is_infra_errors_not_failures(store_url, api_key):
    store = S.connect(store_url)
    cases = load_cases("demo/arithmetic_easy")[:3]
    with failing_500() as server:
        cfg = RunConfig(
            model=ModelConfig("gpt-4o-mini", backend="api"),
            tools=["calculator"],
            max_turns=2,
            base_url=server.url,
            concurrency=1,
        )
        run_id = enqueue_run(cfg, cases, runtime={"max_retries": 0, "timeout": 5.0}, store=store)
        Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    assert len(server.hits) >= 3  # every case reached the server
    info = S.get_run(run_id, store=store)
    assert (info.status, info.n_done, info.n_error, info.n_fail, info.n_pass) == ("failed", 3, 3, 0, 0)
    rows = S.list_trajectories(run_id=run_id, store=store).rows
    assert {(r.outcome, r.diagnosis_kind) for r in rows} == {("error", "infra_error")}
    assert all(r.latency_ms > 0 for r in rows)  # the failed call's real time, not 0
    top = S.get_diagnoses(rows[0].id, store=store)[0]
    assert "500" in top.evidence["text"] or "upstream exploded" in top.evidence["text"]
    # The label queue's failure set (graded fail, unlabelled) holds none of them.
    assert S.count_trajectories(run_id=run_id, outcome="fail", label="none", store=store) == 0
    stats = S.run_stats(run_id, store=store)
    assert stats.success_rate is None and stats.outcomes == {"error": 3}


def test_retry_runs_the_errored_cases_again_and_keeps_their_errors(sqlite_url, api_key):
    from evalrx.runner import retry_run

    store = S.connect(sqlite_url)
    cases = load_cases("demo/arithmetic_easy")[:2]
    with failing_500() as down:
        cfg = RunConfig(
            model=ModelConfig("gpt-4o-mini", backend="api"),
            tools=["calculator"],
            max_turns=2,
            base_url=down.url,
            concurrency=1,
        )
        run_id = enqueue_run(cfg, cases, runtime={"max_retries": 0, "timeout": 5.0}, store=store)
        Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    assert S.get_run(run_id, store=store).n_error == 2
    # The server is back (same run, same URL is not needed: the run's config points at a new one here).
    with ChatServer() as up:
        with store.write() as s:
            from evalrx.store import schema as t

            run = s.get(t.Run, run_id)
            run.config = dict(run.config, base_url=up.url)
        retry_run(run_id, store=store)
        Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    info = S.get_run(run_id, store=store)
    assert (info.status, info.n_done, info.n_error) == ("done", 2, 0)
    assert {r.outcome for r in S.list_trajectories(run_id=run_id, store=store).rows} <= {"pass", "fail"}
    with store.read() as s:
        (retried,) = s.get(t.Run, run_id).meta["retried"]
    assert set(retried["errors"]) == {c.id for c in cases} and all("500" in e for e in retried["errors"].values())
