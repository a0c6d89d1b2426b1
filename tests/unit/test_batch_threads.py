"""The analyzers' large products run on the cores other processes leave free, and decoding keeps its count.

`settle_cpu_threads` leaves a small model's decoding on one thread where one token's forward is too short
to share; `batch_threads` gives the analyzers' teacher-forced passes and logit lens the free cores for their
duration. A count the user set is never changed, and one model loaded after another in the same process
starts from torch's own default, not from the first model's choice.
"""

from __future__ import annotations

import types

import pytest
import torch

import evalrx
from evalrx.analyzers import LogitLensAnalyzer, analyze
from evalrx.models import Agent, batch_threads
from evalrx.models import runtime_tuning as rt
from evalrx.suites import load_cases
from evalrx.tools import get_tools


@pytest.fixture()
def one_thread():
    """torch on one thread, as a settled decoder leaves it; the count before comes back after the test."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _handle(how: str, default: int = 2) -> object:
    return types.SimpleNamespace(cpu_threads={"threads": 1, "how": how, "default": default})


def test_free_cores_are_used_and_the_decoding_count_comes_back(monkeypatch, one_thread):
    monkeypatch.setattr(rt, "_usable_cpus", lambda: 4)
    monkeypatch.setattr(rt, "other_busy_cores", lambda: 0.0)
    with batch_threads(_handle("timed", default=3)) as n:
        assert n == 3 and torch.get_num_threads() == 3  # at most torch's default, even with a 4th core free
    assert torch.get_num_threads() == 1
    monkeypatch.setattr(rt, "other_busy_cores", lambda: 2.2)  # two cores busy elsewhere: two left
    with batch_threads(_handle("timed", default=4)) as n:
        assert n == 2 and torch.get_num_threads() == 2
    assert torch.get_num_threads() == 1


def test_a_busy_machine_or_a_count_the_user_set_is_left_alone(monkeypatch, one_thread):
    monkeypatch.setattr(rt, "_usable_cpus", lambda: 2)
    monkeypatch.setattr(rt, "other_busy_cores", lambda: 1.0)
    with batch_threads(_handle("timed")) as n:
        assert n == 1 and torch.get_num_threads() == 1
    monkeypatch.setattr(rt, "other_busy_cores", lambda: 0.0)
    for how in ("asked", "OMP_NUM_THREADS"):
        with batch_threads(_handle(how)) as n:
            assert n == 1 and torch.get_num_threads() == 1
    with batch_threads(object()) as n:  # a wrapped model: no settled count, nothing to widen
        assert n == 1 and torch.get_num_threads() == 1


def test_other_busy_cores_reads_other_processes_not_this_one():
    """This process spinning on one core for 0.6 s is not "another process's load": the reading while it spins
    stays near the reading while it sleeps (other processes may be busy in both; counting this one adds ~1)."""
    import time

    def window(spin: bool) -> float:
        rt.other_busy_cores()  # a sample to measure from
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.6:
            if not spin:
                time.sleep(0.05)
        others = rt.other_busy_cores()
        assert others is not None and others >= 0.0
        return others

    idle, spinning, idle_after = window(False), window(True), window(False)
    assert spinning < max(idle, idle_after) + 0.6, (idle, spinning, idle_after)


def test_a_second_model_starts_from_torchs_default(monkeypatch, one_thread):
    monkeypatch.setitem(rt._TORCH_DEFAULT, "threads", 2)
    monkeypatch.delenv(rt.THREADS_ENV, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    tiny = torch.nn.Linear(2, 2)  # under AUTO_THREADS_MIN_PARAMS: the default applies
    info = rt.settle_cpu_threads(tiny, evalrx.RuntimeConfig())
    assert info["how"] == "default" and info["default"] == 2 and torch.get_num_threads() == 2


def test_the_analyzers_run_their_arithmetic_on_the_free_cores(monkeypatch):
    """The lens of a real agent run on the demo model reads its passes under the widened count, and the
    numbers equal those computed on one thread (within 1e-5)."""
    import evalrx.internals.passes.lens as compute  # the pass's shared lens (`SharedLens`) runs lens_stats there

    monkeypatch.setattr(rt, "_usable_cpus", lambda: 2)
    monkeypatch.setattr(rt, "other_busy_cores", lambda: 0.0)
    before = torch.get_num_threads()
    handle = evalrx.load("evalrx-tiny")  # a small model: its load leaves torch's default count
    case = load_cases("demo/lookup_easy")[0]
    tools = get_tools(["calculator", "lookup"], case=case)
    traj = Agent(handle, tools).run(case)
    schemas = [t.to_openai() for t in tools]
    seen: list = []
    stats = compute.lens_stats

    def counting(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return stats(*args, **kwargs)

    monkeypatch.setattr(compute, "lens_stats", counting)
    torch.set_num_threads(1)  # as `settle_cpu_threads` leaves a decoder it settled on one thread
    try:
        handle.cpu_threads = {"threads": 1, "how": "timed", "default": 2}
        wide = analyze(handle, traj, [LogitLensAnalyzer()], tools=schemas, captures=None)["logit_lens"]
        assert seen and set(seen) == {2} and torch.get_num_threads() == 1
        handle.cpu_threads = {"threads": 1, "how": "asked", "default": 2}
        seen.clear()
        narrow = analyze(handle, traj, [LogitLensAnalyzer()], tools=schemas, captures=None)["logit_lens"]
        assert seen and set(seen) == {1}
    finally:
        torch.set_num_threads(before)
    assert (wide.topk_ids == narrow.topk_ids).all()
    assert abs(wide.topk_logprobs - narrow.topk_logprobs).max() < 1e-5
    assert (wide.target_rank == narrow.target_rank).all()
