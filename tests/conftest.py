"""Shared pytest fixtures.

`tests/` is not a package: this file puts the `tests/` directory on `sys.path` so any
test can `from tiny_models import make_tiny_model, tiny_tokenizer, save_tiny_checkpoint`.
It also fails the run when a process the tests started outlives them (see the end of the file).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny random Qwen2 checkpoint (safetensors + tiny tokenizer with chat template)."""
    from tiny_models import save_tiny_checkpoint

    return save_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny-qwen2", arch="qwen2")


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny random LLaVA checkpoint (CLIP vision tower, Qwen2 language tower, processor)."""
    from tiny_models import save_tiny_vlm_checkpoint

    return save_tiny_vlm_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny-llava")


# ---------------------------------------------------------------- processes left behind
#
# Every process the suite starts inherits this marker, also the detached ones (workers in
# their own session, PostgreSQL's postmaster), so the check at the end finds them all by
# their environment (and by descent, one started with a scrubbed environment). It runs
# after every fixture is torn down: after the last test's teardown, or, when the run stops
# early, by `_pytest.runner.pytest_sessionfinish`, an ordinary hook that pluggy calls before
# any `trylast` one. So what it finds was left running by a test or a fixture.

SESSION_MARKER = "EVALRX_TEST_SESSION"
SELF_EXIT_S = 5.0  # a process just told to stop (a worker finishing its case) may take this long
_LEFT_BEHIND = pytest.StashKey[list]()


def pytest_configure(config: pytest.Config) -> None:
    import uuid

    os.environ[SESSION_MARKER] = uuid.uuid4().hex


def _proc_info(pid: str) -> "tuple[int, str, bytes] | None":
    """(parent pid, command line, environment) of a running process; None for a zombie or one gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state, ppid = fh.read().rsplit(b")", 1)[1].split()[:2]
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read()
    except (OSError, ValueError):  # exited meanwhile, or not ours to read
        return None
    return None if state == b"Z" or not cmd else (int(ppid), cmd, env)


def processes_of_this_run(marker: str) -> dict[int, str]:
    """Running processes this test run started: pid -> command line.

    Those whose environment holds `SESSION_MARKER=marker` (detached ones included), and
    the descendants of this process (one started with a scrubbed environment).
    """
    needle = f"{SESSION_MARKER}={marker}".encode()
    me = os.getpid()
    infos = {}
    for entry in os.listdir("/proc"):
        info = _proc_info(entry) if entry.isdigit() and int(entry) != me else None
        if info:
            infos[int(entry)] = info
    found = {pid for pid, (_, _, env) in infos.items() if needle in env.split(b"\0")}
    children: dict = {}
    for pid, (ppid, _, _) in infos.items():
        children.setdefault(ppid, []).append(pid)
    todo = list(children.get(me, []))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return {pid: infos[pid][1] for pid in sorted(found)}


def _end(pids: "list[int]", sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_gone(marker: str, pids: "list[int]", within_s: float) -> list:
    deadline = time.monotonic() + within_s
    while True:
        alive = [pid for pid in pids if pid in processes_of_this_run(marker)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run when a process it started is still running; end those processes first."""
    marker = os.environ.get(SESSION_MARKER)
    if not marker or not sys.platform.startswith("linux"):
        return
    found = processes_of_this_run(marker)
    if not found:
        return
    alive = _wait_gone(marker, list(found), SELF_EXIT_S)
    if not alive:
        return
    _end(alive, signal.SIGTERM)
    _end(_wait_gone(marker, alive, 3.0), signal.SIGKILL)
    session.config.stash[_LEFT_BEHIND] = [(pid, found[pid]) for pid in alive]
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    left = config.stash.get(_LEFT_BEHIND, [])
    if not left:
        return
    terminalreporter.section("processes left running", sep="=", red=True, bold=True)
    terminalreporter.line(
        f"{len(left)} process(es) started by this test run were still running at its end "
        "(now killed); the run fails until the test or fixture that started them stops them:",
        red=True,
    )
    for pid, cmd in left:
        terminalreporter.line(f"  pid {pid}: {cmd[:300]}")
