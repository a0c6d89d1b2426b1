"""The suite fails when a process it started outlives it (tests/conftest.py), and ends that process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalrx.runner import parent_watch

TESTS = Path(__file__).resolve().parents[1]

_LEAKS = """
import subprocess, sys

def test_leaves_a_detached_process_and_a_child_without_the_marker():
    detached = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(121)"], env={})
    open("leaked.pid", "w").write(f"{detached.pid} {child.pid}")
"""

_STOPS_IN_A_FIXTURE = """
import subprocess, sys
import pytest

@pytest.fixture(scope="session")
def server():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    yield p
    p.terminate()
    p.wait()

def test_uses_a_session_server(server):
    assert server.poll() is None

def test_ends_the_run_early(server):  # so the server is torn down in pytest_sessionfinish, not after this test
    pytest.exit("ending the run early", returncode=0)
"""


def _pytest_with_the_check(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    """Run `source` as a test file under tests/conftest.py's hooks (loaded as a plugin)."""
    (tmp_path / "test_inner.py").write_text(source)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "test_inner.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the check reads /proc")
def test_a_process_left_running_fails_the_run_and_is_ended(tmp_path):
    run = _pytest_with_the_check(tmp_path, _LEAKS)
    detached, child = map(int, (tmp_path / "leaked.pid").read_text().split())
    assert run.returncode == 1, run.stdout[-3000:]
    assert "1 passed" in run.stdout and "processes left running" in run.stdout
    assert f"pid {detached}: " in run.stdout and "time.sleep(120)" in run.stdout
    assert f"pid {child}: " in run.stdout and "time.sleep(121)" in run.stdout
    for pid in (detached, child):  # ended: gone, or a zombie until init reaps it
        assert not parent_watch.pid_alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the check reads /proc")
def test_a_session_fixture_that_stops_its_process_passes(tmp_path):
    """Session fixtures are torn down before the check runs, so their servers are not reported,
    also when the run ends early (then pytest tears them down in `pytest_sessionfinish`)."""
    run = _pytest_with_the_check(tmp_path, _STOPS_IN_A_FIXTURE)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "processes left running" not in run.stdout
