"""`evalrx run` without --out queues a run in the store; a worker drains it; --wait follows it."""

import os
import subprocess
import sys
from pathlib import Path

import evalrx.store as S

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evalrx", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_run_queues_and_wait_follows_a_worker_to_the_end(tmp_path, tiny_qwen_dir):
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    env = dict(os.environ, EVALRX_DATABASE_URL=url, HF_HUB_OFFLINE="1")
    assert cli("db", "upgrade", env=env).returncode == 0
    worker = subprocess.Popen([sys.executable, "-m", "evalrx", "worker", "-q", "--poll", "0.2"], cwd=ROOT, env=env)
    try:
        q = cli(
            "run",
            "--spec",
            "qwen2.5-0.5b-instruct",
            "--checkpoint",
            str(tiny_qwen_dir),
            "--suite",
            "demo",
            "--limit",
            "2",
            "--max-turns",
            "1",
            "--wait",
            "--no-progress",
            env=env,
        )
    finally:
        worker.terminate()
        worker.wait(30)
    assert q.returncode == 0, q.stderr[-2000:]
    assert "queued run 1" in q.stdout and "run 1 done" in q.stdout
    run = S.get_run(1, store=url)
    assert (run.n_cases, run.n_done, run.status) == (2, 2, "done")
    assert len(S.list_trajectories(run_id=1, store=url).rows) == 2
    assert "done" in cli("runs", env=env).stdout
