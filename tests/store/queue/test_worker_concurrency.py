"""Three worker processes drain one queue (SQLite and PostgreSQL) while a reader runs the pages' queries."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
import scripted_backend  # noqa: F401
from workerhelpers import HERE, REPO, cases, integrity_report, scripted_config, start_worker

import evalrx.store as S
from evalrx.runner import enqueue_run

N_JOBS, N_CASES, N_WORKERS = 6, 10, 3


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_three_workers_drain_a_queue_without_double_claims(backend, request, tmp_path):
    if backend == "sqlite":
        url = request.getfixturevalue("sqlite_url")
    else:
        url = request.getfixturevalue("pg_url")
    store = S.connect(url)
    run_ids = [
        enqueue_run(
            scripted_config(),
            cases(N_CASES, start=j * 100),
            name=f"job{j}",
            store=store,
            runtime={"extra": {"delay": 0.01}},
        )
        for j in range(N_JOBS)
    ]
    reader_out = tmp_path / "reader.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]))
    reader = subprocess.Popen([sys.executable, str(HERE / "page_reader.py"), url, "60", str(reader_out)], env=env)
    logs = [tmp_path / f"w{i}.log" for i in range(N_WORKERS)]
    workers = [start_worker(url, "--once", "--poll", "0.05", "--heartbeat", "0.3", log=log) for log in logs]
    t0 = time.monotonic()
    for w in workers:
        assert w.wait(timeout=120) == 0
    drain_s = time.monotonic() - t0
    (tmp_path / "reader.json.stop").touch()
    assert reader.wait(timeout=60) == 0

    text = "\n".join(log.read_text() for log in logs)
    assert "database is locked" not in text and "Traceback" not in text, text[-3000:]
    claimed = re.findall(r": job (\d+) \(run \d+\)", text)
    assert sorted(map(int, claimed)) == sorted(j.id for r in run_ids for j in S.jobs_of_run(r, store=store))
    assert len(set(claimed)) == len(claimed) == N_JOBS  # every job claimed exactly once
    assert len({m for m in re.findall(r"worker (\S+): job", text)}) >= 2  # the work was shared
    for run_id in run_ids:
        info = S.get_run(run_id, store=store)
        assert (info.status, info.n_done, info.n_pass, info.job_claims) == ("done", N_CASES, N_CASES, 1)
    report = integrity_report(store)
    assert report == dict.fromkeys(report, 0)
    assert S.count_trajectories(store=store) == N_JOBS * N_CASES

    stats = json.loads(reader_out.read_text())
    assert stats["errors"] == [] and stats["rounds"] > 5
    assert stats["slowest_ms"] < 1000, stats
    print(f"{backend}: drained {N_JOBS * N_CASES} cases in {drain_s:.1f} s; reader {stats}")
