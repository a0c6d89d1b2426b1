"""Repeated attempts on the bundled demo model: sampled attempts differ, and the same seed reproduces them."""

from __future__ import annotations

import evalrx.store as S
from evalrx.config import ModelConfig, RunConfig
from evalrx.runner import Worker, enqueue_run
from evalrx.suites import load_cases


def _answers(store, run_id):
    out = {}
    for row in S.list_trajectories(run_id=run_id, store=store, limit=100).rows:
        traj = S.get_trajectory(row.id, store=store).trajectory
        out[traj.sample_id, traj.attempt] = [s.content for s in traj.steps]
    return out


def test_sampled_attempts_are_seeded_per_attempt(sqlite_url):
    store = S.connect(sqlite_url)
    cases = load_cases("demo")[:3]

    def run(seed):
        cfg = RunConfig(
            model=ModelConfig("evalrx-tiny"), tools=["calculator", "lookup"], max_turns=2, repeats=3, seed=seed
        )
        rid = enqueue_run(cfg, cases, runtime={"temperature": 1.5, "max_new_tokens": 48}, store=store)
        Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
        assert S.get_run(rid, store=store).n_done == 9
        return _answers(store, rid)

    first, again, other = run(7), run(7), run(8)
    assert sorted(first) == sorted((c.id, a) for c in cases for a in (1, 2, 3))
    assert first == again  # the same seed reproduces every attempt
    assert first != other  # another seed samples otherwise
    # Attempts of one case are sampled apart (seeded per attempt, not once per run).
    assert any(len({str(first[c.id, a]) for a in (1, 2, 3)}) > 1 for c in cases)
