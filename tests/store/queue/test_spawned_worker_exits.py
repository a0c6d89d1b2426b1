"""A spawned worker (`ensure_worker`, `python -m evalrx.runner`) never outlives what it serves:
the process that started it, or its SQLite store file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

import evalrx.store as S
from evalrx.runner import parent_watch
from evalrx.store import schema as t

REPO = Path(__file__).resolve().parents[3]

# A parent that starts a worker, waits until the worker has registered itself (its watch
# is running by then), prints the worker's pid and exits.
_PARENT = """
import subprocess, sys, time
from sqlalchemy import select
import evalrx.store as S
from evalrx.runner import ensure_worker
from evalrx.store import schema as t

store = S.connect({url!r})
if {how!r} == "ensure_worker":
    pid = ensure_worker(store=store)
else:  # the way the app's launch.start_api_worker starts an API worker: no --parent-pid
    pid = subprocess.Popen([sys.executable, "-m", "evalrx.runner", "--url", {url!r}, "--heartbeat", "0.3"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True).pid
deadline = time.time() + 60
while time.time() < deadline:
    with store.read() as s:
        row = s.execute(select(t.Worker.started_at, t.Worker.heartbeat_at).where(t.Worker.pid == pid)).first()
    if row is not None and row.heartbeat_at > row.started_at:
        break
    time.sleep(0.2)
print(pid, flush=True)
"""


def _wait_registered(url: str, pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with S.connect(url).read() as s:
            row = s.execute(select(t.Worker.started_at, t.Worker.heartbeat_at).where(t.Worker.pid == pid)).one()
        if row.heartbeat_at > row.started_at:
            return
        time.sleep(0.2)
    raise TimeoutError(f"worker {pid} did not register within {timeout} s")


def _gone_within(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while parent_watch.pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("how", ["ensure_worker", "python -m evalrx.runner"])
def test_a_spawned_worker_stops_when_the_process_that_started_it_exits(sqlite_url, monkeypatch, how):
    monkeypatch.delenv("EVALRX_NO_LOCAL_WORKER", raising=False)
    parent = subprocess.run(
        [sys.executable, "-c", _PARENT.format(url=sqlite_url, how=how)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert parent.returncode == 0, parent.stderr[-2000:]
    pid = int(parent.stdout.split()[-1])
    try:
        assert _gone_within(pid, 15), f"worker {pid} still runs after its parent exited"
        with S.connect(sqlite_url).read() as s:  # a clean stop (SIGTERM), not a kill: it signed off
            assert s.execute(select(t.Worker.status).where(t.Worker.pid == pid)).scalar_one() == "stopped"
    finally:
        _kill(pid)


def test_a_spawned_worker_stops_when_its_store_file_is_deleted(tmp_path, monkeypatch):
    from evalrx.runner import ensure_worker

    monkeypatch.delenv("EVALRX_NO_LOCAL_WORKER", raising=False)
    db = tmp_path / "doomed.sqlite"
    url = f"sqlite:///{db}"
    S.upgrade(url)
    pid = ensure_worker(store=url)
    try:
        _wait_registered(url, pid)
        S.forget(url)
        for path in tmp_path.glob("doomed.sqlite*"):  # the file and its WAL and shared-memory files
            path.unlink()
        deadline = time.monotonic() + 15
        done, status = 0, 0
        while not done and time.monotonic() < deadline:  # our child: reap it to see it end
            done, status = os.waitpid(pid, os.WNOHANG)
            time.sleep(0.2)
        assert done == pid, f"worker {pid} still runs after its store file was deleted"
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        _kill(pid)
        S.forget(url)


def test_the_watch_follows_a_given_pid_and_the_store_file(tmp_path):
    stopped: list = []
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        parent_watch.watch(
            parent_pid=other.pid, started_under=os.getppid(), poll_s=0.05, stop=lambda why, _grace: stopped.append(why)
        )
        time.sleep(0.3)
        assert stopped == []  # alive: nothing happens
        other.kill()
        other.wait()
        deadline = time.monotonic() + 5
        while not stopped and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stopped == [f"process {other.pid} that started this worker has exited"]
    finally:
        other.kill()
        other.wait()

    db = tmp_path / "s.sqlite"
    db.write_bytes(b"")
    stopped.clear()
    parent_watch.watch(
        parent_pid=0,
        started_under=os.getppid(),
        store_path=S.sqlite_file(f"sqlite:///{db}"),
        poll_s=0.05,
        stop=lambda why, _grace: stopped.append(why),
    )
    time.sleep(0.3)
    assert stopped == []
    (tmp_path / "new.sqlite").write_bytes(b"")
    os.replace(tmp_path / "new.sqlite", db)  # another file at the same path is not the store the worker opened
    deadline = time.monotonic() + 5
    while not stopped and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stopped == [f"store file {db} was replaced"]


def test_nothing_to_watch_on_postgresql_without_a_parent():
    assert S.sqlite_file("postgresql+psycopg://u@127.0.0.1:5432/db") is None
    assert S.sqlite_file("sqlite:///:memory:") is None
    assert parent_watch.watch(parent_pid=0, started_under=os.getppid(), store_path=None) is None
