"""A judge's work handed to the workers (`evalrx diagnose RUN --judge SPEC --queue`, the app's "Diagnose with a
judge"), against a real loopback server with scripted answers: a worker process claims the job, stores each
verdict, counts refusals and failed calls with their one-line reasons on the job, reaches progress total, stops
between trajectories when cancelled; the key is read from the worker's own environment and never reaches the
store; API judges run the job's concurrency in threads."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from loopback import ScriptedChatServer, completion
from test_diagnosis_store import misread, passing, store_run
from workerhelpers import start_worker

import evalrx.store as S
from evalrx.cli import main
from evalrx.runner import JudgeConfig, Worker, estimate_judge, queue_judge
from evalrx.store import schema as t

KEY = "sk-queued-judge-0123456789-secret"
VALID = {
    "kind": "misread_observation",
    "first_wrong_step": 3,
    "evidence": "7951 + 821",
    "explanation": "The height 7915 was copied as 7951.",
    "confidence": 0.8,
}
NO_STEP = {**VALID, "first_wrong_step": 42}
DOWN = (500, {"error": {"message": "upstream exploded", "type": "server_error"}})


@pytest.fixture(autouse=True)
def _no_ambient_openai(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("EVALRX_KEY_HOSTS", raising=False)


def answer(obj) -> dict:
    return completion(json.dumps(obj))


def failed_run(url: str, n: int, *, concurrency: int = 1) -> "tuple[int, list[int]]":
    """A run of `n` failed trajectories (the misread one under other case ids) and a passing one."""
    case, traj = misread()
    items = [
        (dataclasses.replace(case, id=f"two_step-{i:03d}"), dataclasses.replace(traj, sample_id=f"two_step-{i:03d}"))
        for i in range(n)
    ] + [passing()]
    run_id, tids = store_run(S.connect(url), items)
    with S.connect(url).write() as s:
        run = s.get(t.Run, run_id)
        run.config = {**run.config, "concurrency": concurrency}
    return run_id, [tids[f"two_step-{i:03d}"] for i in range(n)]


def queue_cli(url: str, run_id: int, server: ScriptedChatServer, *extra: str) -> int:
    return main(
        ["diagnose", str(run_id), "--judge", "gpt-4o-mini", "--base-url", server.url, "--url", url, "--queue"]
        + list(extra)
    )


def judged(url: str, tid: int) -> list:
    return [d for d in S.get_diagnoses(tid, store=url) if d.source == "judge"]


def store_bytes(url: str) -> bytes:
    S.forget(url)
    db = Path(url.removeprefix("sqlite:///"))
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


# ---------------------------------------------------------------- a worker process runs it


def test_a_queued_judge_job_runs_in_a_worker_process_and_the_key_stays_out_of_the_store(
    sqlite_url, monkeypatch, capsys
):
    run_id, tids = failed_run(sqlite_url, 3)
    monkeypatch.setenv("JUDGE_KEY", KEY)  # the CLI's environment and the worker's (started from this one)
    script = [answer(VALID), answer(NO_STEP), answer(NO_STEP), DOWN]
    with ScriptedChatServer(script) as server:
        assert queue_cli(sqlite_url, run_id, server, "--api-key-env", "JUDGE_KEY", "--retries", "0") == 0
        out = capsys.readouterr().out
        (job,) = S.list_judge_jobs(run_id=run_id, store=sqlite_url)
        assert f"queued judge job {job.id}: 3 trajectories with gpt-4o-mini (api, {server.url})" in out
        assert "its key from $JUDGE_KEY in the worker's environment" in out and KEY not in out
        assert server.requests == []  # nothing asked before a worker claims it
        assert (job.status, job.progress_done, job.progress_total, job.trajectory_ids) == ("queued", 0, 3, tids)
        assert (job.spec, job.backend, job.base_url, job.api_key_env, job.concurrency) == (
            "gpt-4o-mini",
            "api",
            server.url,
            "JUDGE_KEY",
            1,  # the run's own concurrency
        )
        assert job.options == {"max_retries": 0}
        assert start_worker(sqlite_url, "--once", "--poll", "0.05", plugin=None).wait(timeout=120) == 0
    job = S.get_judge_job(job.id, store=sqlite_url)
    assert (job.status, job.progress_done, job.progress_total, job.error) == ("done", 3, 3, None)
    assert (job.n_verdicts, job.n_refused, job.n_failed, job.n_cached) == (1, 1, 1, 0)
    assert len(job.notes) == 2 and all("\n" not in n for n in job.notes)
    assert job.notes[0].startswith(f"trajectory {tids[1]} (two_step-001): refused: step 42 is not a step")
    assert job.notes[1].startswith(f"trajectory {tids[2]} (two_step-002): failed: the judge's call failed")
    # A refusal keeps what the judge wrote (its last answer), for the pages to show; a failed call wrote nothing.
    refused, failed = job.note_details
    assert (refused.trajectory_id, json.loads(refused.answer)) == (tids[1], NO_STEP)
    assert (failed.trajectory_id, failed.answer) == (tids[2], "")
    assert [r["headers"].get("authorization") for r in server.requests] == [f"Bearer {KEY}"] * 4
    assert [(d.kind, d.first_wrong_step) for d in judged(sqlite_url, tids[0])] == [("misread_observation", 3)]
    assert judged(sqlite_url, tids[1]) == judged(sqlite_url, tids[2]) == []
    assert KEY.encode() not in store_bytes(sqlite_url)


def test_cancel_stops_a_running_judge_job_between_trajectories(sqlite_url):
    run_id, tids = failed_run(sqlite_url, 6)
    slow = [(200, answer(VALID), {}, 0.5)] * 6
    with ScriptedChatServer(slow) as server:
        job_id = queue_judge(JudgeConfig("gpt-4o-mini", base_url=server.url), tids, run_id=run_id, store=sqlite_url)
        worker = start_worker(sqlite_url, "--once", "--poll", "0.05", plugin=None)
        try:
            deadline = time.monotonic() + 90
            while S.get_judge_job(job_id, store=sqlite_url).progress_done < 2:
                assert time.monotonic() < deadline and worker.poll() is None
                time.sleep(0.05)
            assert S.cancel_judge_job(job_id, store=sqlite_url) == "running"
            assert worker.wait(timeout=60) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
    job = S.get_judge_job(job_id, store=sqlite_url)
    assert job.status == "cancelled" and job.cancel_requested
    assert 2 <= job.progress_done < 6 and job.n_verdicts == job.progress_done
    assert len(server.requests) == job.progress_done  # nothing asked after the cancel
    assert sum(bool(judged(sqlite_url, tid)) for tid in tids) == job.progress_done


def test_a_queued_job_cancelled_before_a_worker_claims_it_never_runs(sqlite_url):
    run_id, tids = failed_run(sqlite_url, 2)
    with ScriptedChatServer([]) as server:
        job_id = queue_judge(JudgeConfig("gpt-4o-mini", base_url=server.url), tids, run_id=run_id, store=sqlite_url)
        assert S.cancel_judge_job(job_id, store=sqlite_url) == "cancelled"
        Worker(S.connect(sqlite_url), exit_when_idle=True, heartbeat_s=0.2).run()
    assert server.requests == [] and S.get_judge_job(job_id, store=sqlite_url).status == "cancelled"


# ---------------------------------------------------------------- in process: threads, keys, the cache


def test_an_api_judge_runs_the_jobs_concurrency_in_threads(store_url):
    run_id, tids = failed_run(store_url, 3, concurrency=3)
    with ScriptedChatServer([(200, answer(VALID), {}, 1.0)] * 3) as server:
        job_id = queue_judge(
            JudgeConfig("gpt-4o-mini", base_url=server.url, concurrency=3), tids, run_id=run_id, store=store_url
        )
        started = time.monotonic()
        Worker(S.connect(store_url), exit_when_idle=True, heartbeat_s=0.2).run()
        took = time.monotonic() - started
    assert took < 2.5  # three one-second answers at once, not one after another
    job = S.get_judge_job(job_id, store=store_url)
    assert (job.status, job.progress_done, job.n_verdicts) == ("done", 3, 3)
    assert all(judged(store_url, tid) for tid in tids)


def test_a_second_job_reads_the_cache(sqlite_url):
    run_id, tids = failed_run(sqlite_url, 2)
    with ScriptedChatServer([answer(VALID)] * 2) as server:
        config = JudgeConfig("gpt-4o-mini", base_url=server.url)
        first = queue_judge(config, tids, run_id=run_id, store=sqlite_url)
        Worker(S.connect(sqlite_url), exit_when_idle=True, heartbeat_s=0.2).run()
        second = queue_judge(config, tids, run_id=run_id, store=sqlite_url)
        Worker(S.connect(sqlite_url), exit_when_idle=True, heartbeat_s=0.2).run()
    assert len(server.requests) == 2
    assert S.get_judge_job(first, store=sqlite_url).n_cached == 0
    job = S.get_judge_job(second, store=sqlite_url)
    assert (job.status, job.n_verdicts, job.n_cached) == ("done", 2, 2)


def test_a_key_variable_unset_on_the_worker_fails_the_job_in_one_line(sqlite_url, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    run_id, tids = failed_run(sqlite_url, 1)
    with ScriptedChatServer([]) as server:
        config = JudgeConfig("gpt-4o-mini", base_url=server.url, api_key_env="NO_SUCH_KEY")
        job_id = queue_judge(config, tids, run_id=run_id, store=sqlite_url)
        Worker(S.connect(sqlite_url), exit_when_idle=True, heartbeat_s=0.2).run()
    job = S.get_judge_job(job_id, store=sqlite_url)
    assert job.status == "failed" and server.requests == []
    assert job.error == "this worker has no $NO_SUCH_KEY in its environment: start the worker with it set"


def test_a_key_goes_only_to_hosts_the_worker_allows(sqlite_url, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", KEY)
    monkeypatch.setenv("EVALRX_KEY_HOSTS", "api.example.org")  # not this loopback server
    run_id, tids = failed_run(sqlite_url, 1)
    with ScriptedChatServer([answer(VALID)]) as server:
        config = JudgeConfig("gpt-4o-mini", base_url=server.url, api_key_env="JUDGE_KEY")
        job_id = queue_judge(config, tids, run_id=run_id, store=sqlite_url)
        Worker(S.connect(sqlite_url), exit_when_idle=True, heartbeat_s=0.2).run()
    job = S.get_judge_job(job_id, store=sqlite_url)
    assert server.requests == [] and job.status == "failed"
    assert (
        job.error == "this worker does not send keys to 127.0.0.1: add the host to EVALRX_KEY_HOSTS in its environment"
    )
    assert KEY.encode() not in store_bytes(sqlite_url)


# ---------------------------------------------------------------- what is refused before anything is queued


@pytest.mark.parametrize(
    "extra, line",
    [
        (
            ["--api-key-env", KEY],
            "takes the NAME of an environment variable (letters, digits and _), not a key",
        ),
        (["--concurrency", "3"], "--concurrency applies with --queue only"),
    ],
    ids=["a-key-as-its-variable", "concurrency-without-queue"],
)
def test_bad_queue_input_is_one_line_and_queues_nothing(sqlite_url, capsys, extra, line):
    run_id, _ = failed_run(sqlite_url, 1)
    with ScriptedChatServer([]) as server:
        args = ["diagnose", str(run_id), "--judge", "gpt-4o-mini", "--base-url", server.url, "--url", sqlite_url]
        args += (["--queue"] if "--concurrency" not in extra else []) + extra
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert line in err and "Traceback" not in err and KEY not in err
    assert S.list_judge_jobs(store=sqlite_url) == []


def test_a_base_url_with_credentials_is_refused():
    with pytest.raises(ValueError, match="the base URL carries credentials"):
        JudgeConfig("gpt-4o-mini", base_url="http://user:pw@127.0.0.1:9/v1").checked()
    with pytest.raises(ValueError, match="the base URL carries credentials"):
        JudgeConfig("gpt-4o-mini", base_url="http://127.0.0.1:9/v1?api_key=sk-x").checked()
    with pytest.raises(ValueError, match="for the api backend only"):
        JudgeConfig("evalrx-tiny", backend="hf_local", api_key_env="JUDGE_KEY").checked()


def test_the_estimate_counts_prompt_characters_the_answer_limit_and_the_cache(sqlite_url):
    from evalrx.diagnosis.judge import MAX_ANSWER_TOKENS, build_prompt
    from evalrx.runner.diagnose import stored_case

    run_id, tids = failed_run(sqlite_url, 2)
    with ScriptedChatServer([answer(VALID)]) as server:
        config = JudgeConfig("gpt-4o-mini", base_url=server.url).checked()
        before = estimate_judge(config, tids, store=sqlite_url)
        kinds = [(k.key, k.definition) for k in S.list_kinds(store=sqlite_url)]
        chars = 0
        for tid in tids:
            detail = S.get_trajectory(tid, store=sqlite_url)
            chars += sum(len(m["content"]) for m in build_prompt(detail.trajectory, stored_case(detail.case), kinds))
        assert (before.trajectories, before.cached, before.sampled) == (2, 0, 2)
        assert before.prompt_tokens == round(chars / 4) and before.answer_tokens == 2 * MAX_ANSWER_TOKENS
        assert f"about {before.tokens:,} tokens for 2 trajectories" in before.line()
        queue_judge(config, tids[:1], run_id=run_id, store=sqlite_url)
        Worker(S.connect(sqlite_url), exit_when_idle=True, heartbeat_s=0.2).run()
        after = estimate_judge(config, tids, store=sqlite_url)
    assert after.cached == 1 and after.answer_tokens == MAX_ANSWER_TOKENS
    assert "1 already judged by this judge (free, from the cache)" in after.line()


def test_a_queued_job_keeps_the_answer_limit_and_prompt_size_for_the_worker(sqlite_url):
    run_id, tids = failed_run(sqlite_url, 1)
    with ScriptedChatServer([answer(VALID)]) as server:
        config = JudgeConfig("gpt-4o-mini", base_url=server.url, max_new_tokens=40, max_steps=2, max_step_chars=60)
        estimate = estimate_judge(config.checked(), tids, store=sqlite_url)
        job_id = queue_judge(config, tids, run_id=run_id, store=sqlite_url)
        Worker(S.connect(sqlite_url), exit_when_idle=True, heartbeat_s=0.2).run()
    assert estimate.max_answer_tokens == 40 and estimate.answer_tokens == 40
    assert S.get_judge_job(job_id, store=sqlite_url).options == {
        "max_new_tokens": 40,
        "max_steps": 2,
        "max_step_chars": 60,
    }
    body = server.requests[0]["body"]
    assert body["max_tokens"] == 40 and "left out" in body["messages"][-1]["content"]
    with pytest.raises(ValueError, match="max_steps must be a whole number from 2 to 10000, not 1"):
        JudgeConfig("gpt-4o-mini", base_url=server.url, max_steps=1).checked()
