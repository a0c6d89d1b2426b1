"""Hardening against real worker processes and real loopback servers: a key reaches only its own
run's server, a worker's own key only allowed hosts, a case that kills its worker ends as an error
while the run goes on, an oversized prompt is refused before any model call, and worker options
are range-checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import scripted_backend  # noqa: F401  (registers the scripted spec in this process too)
from loopback import ChatServer
from storehelpers import make_case
from workerhelpers import REPO, scripted_config, start_worker

import evalrx.store as S
from evalrx.config import ModelConfig, RunConfig
from evalrx.runner import enqueue_run, start_keyed_worker

KEY_A, KEY_B, ENV_KEY = "sk-run-a-0123456789", "sk-run-b-9876543210", "sk-worker-env-5555"


def _api_run(store, url: str, *, key_bound: bool = False, n: int = 2, name: str = "api") -> int:
    cfg = RunConfig(
        model=ModelConfig("gpt-4o-mini", backend="api"), tools=["calculator"], max_turns=2, base_url=url, concurrency=1
    )
    return enqueue_run(
        cfg,
        [make_case(i) for i in range(n)],
        name=name,
        key_bound=key_bound,
        runtime={"max_retries": 0, "timeout": 10.0},
        store=store,
    )


def _wait_done(store, run_id: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while S.get_run(run_id, store=store).status not in ("done", "failed", "cancelled"):
        assert time.monotonic() < deadline, S.get_run(run_id, store=store)
        time.sleep(0.1)


def _reap(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        assert time.monotonic() < deadline, f"worker {pid} did not exit"
        time.sleep(0.05)


def test_each_run_key_reaches_only_its_own_server(sqlite_url, tmp_path, monkeypatch):
    store = S.connect(sqlite_url)
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)  # a worker's own key must not go to these runs either
    with ChatServer() as a, ChatServer() as b:
        run_a = _api_run(store, a.url, key_bound=True, name="a")
        run_b = _api_run(store, b.url, key_bound=True, name="b")
        # A worker that holds no run's key never claims a run whose key was bound to it.
        other = start_worker(sqlite_url, "--once", "--poll", "0.05", plugin=None)
        assert other.wait(timeout=60) == 0
        assert {S.get_run(r, store=store).status for r in (run_a, run_b)} == {"queued"}
        pids = [
            start_keyed_worker(sqlite_url, run_a, KEY_A, log_path=str(tmp_path / "a.log")),
            start_keyed_worker(sqlite_url, run_b, KEY_B, log_path=str(tmp_path / "b.log")),
        ]
        for run_id in (run_a, run_b):
            _wait_done(store, run_id)
        for pid in pids:
            _reap(pid)
    assert a.seen and set(a.seen) == {f"Bearer {KEY_A}"}
    assert b.seen and set(b.seen) == {f"Bearer {KEY_B}"}
    assert all((S.get_run(r, store=store).n_done, S.get_run(r, store=store).n_error) == (2, 0) for r in (run_a, run_b))
    S.forget(sqlite_url)
    raw = open(sqlite_url[len("sqlite:///") :], "rb").read()
    logs = (tmp_path / "a.log").read_bytes() + (tmp_path / "b.log").read_bytes()
    for key in (KEY_A, KEY_B, ENV_KEY):
        assert key.encode() not in raw and key.encode() not in logs


def test_a_workers_own_key_goes_only_to_allowed_hosts(sqlite_url, monkeypatch):
    store = S.connect(sqlite_url)
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    monkeypatch.delenv("EVALRX_KEY_HOSTS", raising=False)
    with ChatServer("127.0.0.2") as elsewhere:  # loopback, but not a host the operator allowed
        run = _api_run(store, elsewhere.url, n=1)
        assert start_worker(sqlite_url, "--once", "--poll", "0.05", plugin=None).wait(timeout=60) == 0
        assert elsewhere.seen and f"Bearer {ENV_KEY}" not in elsewhere.seen
        assert S.get_run(run, store=store).status == "done"
        monkeypatch.setenv("EVALRX_KEY_HOSTS", "127.0.0.2")
        _api_run(store, elsewhere.url, n=1, name="allowed")
        assert start_worker(sqlite_url, "--once", "--poll", "0.05", plugin=None).wait(timeout=60) == 0
        assert elsewhere.seen[-1] == f"Bearer {ENV_KEY}"


def test_the_cli_binds_a_key_to_its_run_through_the_environment(sqlite_url, tmp_path):
    S.connect(sqlite_url)
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"id": "c1", "prompt": "What is 1 * 7?", "expected": 7}) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env.update(MY_RUN_KEY=KEY_A, EVALRX_DATABASE_URL=sqlite_url)
    with ChatServer() as server:
        cmd = [
            sys.executable,
            "-m",
            "evalrx",
            "run",
            "--spec",
            "gpt-4o-mini",
            "--backend",
            "api",
            "--base-url",
            server.url,
            "--api-key-env",
            "MY_RUN_KEY",
            "--cases",
            str(cases),
            "--tools",
            "calculator",
            "--wait",
            "--no-progress",
            "--retries",
            "0",
        ]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=str(REPO))
        assert out.returncode == 0, out.stderr[-2000:]
        assert KEY_A not in " ".join(cmd)  # the key itself never is an argument
    assert server.seen == [f"Bearer {KEY_A}"]
    assert "1 passed" in out.stdout


def test_without_wait_the_keyed_worker_finishes_the_run_after_the_cli_exits(sqlite_url, tmp_path):
    from evalrx.runner.parent_watch import pid_alive

    store = S.connect(sqlite_url)
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"id": "c1", "prompt": "What is 1 * 7?", "expected": 7}) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env.update(MY_RUN_KEY=KEY_B, EVALRX_DATABASE_URL=sqlite_url)
    with ChatServer() as server:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "evalrx",
                "run",
                "--spec",
                "gpt-4o-mini",
                "--base-url",
                server.url,
                "--api-key-env",
                "MY_RUN_KEY",
                "--cases",
                str(cases),
                "--tools",
                "calculator",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=str(REPO),
        )
        assert out.returncode == 0, out.stderr[-2000:]
        pid = int(out.stdout.split("worker ")[1].split()[0])
        run_id = S.list_runs(store=store)[0].id
        _wait_done(store, run_id)
        deadline = time.monotonic() + 30
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(pid)
    assert server.seen == [f"Bearer {KEY_B}"] and S.get_run(run_id, store=store).n_pass == 1


def test_a_case_that_kills_its_worker_ends_as_an_error_and_the_run_goes_on(sqlite_url, tmp_path):
    store = S.connect(sqlite_url)
    run_id = enqueue_run(
        scripted_config(), [make_case(i) for i in range(5)], store=store, runtime={"extra": {"die_on": 2}}
    )
    log = tmp_path / "worker.log"
    codes = []
    for _ in range(6):  # each death leaves the job to the next worker, as a supervisor restarts it
        code = start_worker(
            sqlite_url, "--once", "--poll", "0.05", "--heartbeat", "0.3", "--max-case-attempts", "3", log=log
        ).wait(timeout=60)
        codes.append(code)
        if S.get_run(run_id, store=store).status == "done":
            break
    assert codes == [70, 70, 70, 0]  # died three times on case 2, then recorded it and finished
    info = S.get_run(run_id, store=store)
    assert (info.status, info.n_done, info.n_pass, info.n_error) == ("done", 5, 4, 1)
    (row,) = S.list_trajectories(run_id=run_id, outcome="error", store=store).rows
    assert row.sample_id == "q0002" and row.diagnosis_kind == "infra_error"
    detail = S.get_trajectory(row.id, store=store)
    assert "worker died 3 times on this case" in detail.trajectory.metrics["error"]


def test_a_prompt_over_the_limit_is_an_error_before_any_model_call(sqlite_url):
    store = S.connect(sqlite_url)
    big = make_case(1)
    big.inputs.prompt = "Question 1: what is 1 * 7? " + "x" * 5000
    with ChatServer() as server:
        cfg = RunConfig(model=ModelConfig("gpt-4o-mini", backend="api"), tools=["calculator"], base_url=server.url)
        run_id = enqueue_run(cfg, [big, make_case(2)], store=store, runtime={"max_retries": 0})
        assert (
            start_worker(sqlite_url, "--once", "--poll", "0.05", "--max-prompt-bytes", "1000", plugin=None).wait(
                timeout=60
            )
            == 0
        )
    assert len(server.seen) == 1  # only the small case reached the model
    rows = {r.sample_id: r for r in S.list_trajectories(run_id=run_id, store=store).rows}
    assert rows["q0001"].outcome == "error" and rows["q0002"].outcome == "fail"  # the small one was answered (wrongly)
    detail = S.get_trajectory(rows["q0001"].id, store=store)
    assert "over the limit of 1,000" in detail.trajectory.metrics["error"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--heartbeat", "0"], "--heartbeat: must be between 0.01 and 86400 seconds"),
        (["--poll", "-1"], "--poll: must be between 0.01 and 86400 seconds"),
        (["--heartbeat", "5", "--stale-after", "6"], "--stale-after (6 s) must exceed twice --heartbeat"),
        (["--max-jobs", "0"], "--max-jobs: must be at least 1"),
        (["--run", "x"], "--run: 'x' is not a whole number"),
    ],
)
def test_worker_options_are_checked_with_one_line(sqlite_url, args, message):
    out = subprocess.run(
        [sys.executable, "-m", "evalrx.runner", "--url", sqlite_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
    )
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_an_oversized_output_or_observation_is_stored_cut_with_its_real_size(sqlite_url):
    from evalrx.core import Step, StepRole, Trajectory
    from evalrx.store import convert
    from evalrx.store.runs import create_run, save_trajectory

    store = S.connect(sqlite_url)
    huge = "y" * (convert.STORED_TEXT_LIMIT + 1000)
    traj = Trajectory(
        sample_id="q0001",
        goal="g",
        steps=[
            Step(0, StepRole.USER, "g"),
            Step(1, StepRole.ACTOR, huge, tool_calls=[{"name": "calculator", "args": {"expression": "1"}}]),
            Step(2, StepRole.TOOL, "calculator", observation={"text": huge}),
            Step(3, StepRole.ACTOR, "done"),
        ],
        final_answer="done",
        metrics={"terminated": "final"},
    )
    with store.write() as s:
        run_id = create_run(s, cases=[make_case(1)])
        from sqlalchemy import select

        from evalrx.store import schema as t

        case_row_id = s.execute(select(t.RunCase.case_row_id).where(t.RunCase.run_id == run_id)).scalar_one()
        tid = save_trajectory(s, run_id, case_row_id, traj)
    steps = S.get_trajectory(tid, store=store).trajectory.steps
    for got, field in ((steps[1].content, "content"), (steps[2].observation.value["text"], "observation")):
        assert len(got) < len(huge) and got.endswith(f"[… truncated by evalrx: {len(huge):,} characters in all]")
        span = steps[1 if field == "content" else 2].span
        assert span["truncated"] == {field: len(huge)}


def test_a_prompt_longer_than_a_local_models_context_is_refused_before_generating():
    import evalrx
    from evalrx.runner.prompt_guard import PromptTooLarge, check_prompt

    handle = evalrx.load("evalrx-tiny")
    context = handle.model.config.max_position_embeddings
    case = make_case(1)
    check_prompt(handle, case, max_bytes=1_000_000)  # a normal prompt passes
    case.inputs.prompt = "What is 1 * 7? " * context  # under the byte limit, over the context
    with pytest.raises(PromptTooLarge, match=rf"tokens; the model's context is {context:,}"):
        check_prompt(handle, case, max_bytes=1_000_000)
