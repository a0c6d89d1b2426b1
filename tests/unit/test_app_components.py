"""The app's pure-Python pieces: escaping, collapsing, filters, taxonomy, chart rows, worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "app"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import evalrx.store as S  # noqa: E402
from components.filters import carry, describe, neighbours, sort_args, store_filters  # noqa: E402
from components.safe import collapse, md_escape  # noqa: E402
from components.taxonomy import DEFAULT_TAXONOMY, MAX_MODES, clean_modes, load_taxonomy, save_taxonomy  # noqa: E402
from components.viewmodel import actor_steps, step_views, token_rows, waterfall_rows  # noqa: E402
from evalrx.core import Step, StepRole, Trajectory  # noqa: E402


def test_md_escape_leaves_no_markup():
    hostile = "<img src=x onerror=alert(1)> [a](javascript:x) :red[r] **b** $x$ `c`\nnext"
    out = md_escape(hostile)
    assert "\n" not in out
    for i, ch in enumerate(out):  # every punctuation character is preceded by a backslash
        if ch in "<>[]():*$`":
            assert out[i - 1] == "\\", (i, out)
    assert out.replace("\\", "") == hostile.replace("\n", " ")


def test_collapse_cuts_long_text_only():
    assert collapse("short") == ("short", False)
    head, cut = collapse("x" * 5000)
    assert cut and len(head) == 1500
    head, cut = collapse("\n".join(str(i) for i in range(100)))
    assert cut and head.count("\n") == 24


def test_filters_round_trip_through_the_url():
    params = {"run": "3", "outcome": "fail", "label": "unlabelled", "mode": "wrong_tool", "term": "max_turns",
              "tool": "lookup", "heur": "repeated_call", "margin": "0.5", "q": "timeout", "sort": "latency",
              "asc": True, "page": "4", "id": "9"}
    assert store_filters(params) == {"run_id": 3, "outcome": "fail", "label": "none", "failure_mode": "wrong_tool",
                                     "terminated": "max_turns", "tool": "lookup", "heuristic": "repeated_call",
                                     "max_margin": 0.5, "text": "timeout"}
    assert sort_args(params) == ("latency_ms", False)
    kept = carry(params)
    assert "page" not in kept and "id" not in kept and kept["asc"] == "true"
    assert store_filters(kept) == store_filters(params) and sort_args(kept) == sort_args(params)
    assert sort_args({}) == ("id", True) and store_filters({"outcome": "bogus", "run": "x"}) == {}
    assert "graded fail" in describe(params) and "sorted by latency ↑" in describe(params)


def test_neighbours_match_the_list_order(tmp_path):
    from appdata import fill_run

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    fill_run(url, 30, seed=2)
    store = S.connect(url)
    for params in ({"sort": "latency"}, {"sort": "steps", "asc": "true"}, {"outcome": "fail"}, {}):
        sort, desc = sort_args(params)
        rows = S.list_trajectories(sort=sort, descending=desc, limit=100, store=store, **store_filters(params)).rows
        for i, row in enumerate(rows):
            prev_id, next_id = neighbours(row, params, store=store)
            assert prev_id == (rows[i - 1].id if i else None)
            assert next_id == (rows[i + 1].id if i + 1 < len(rows) else None)
    S.forget(url)


def test_taxonomy_defaults_validation_and_save(tmp_path, monkeypatch):
    monkeypatch.delenv("EVALRX_TAXONOMY_FILE", raising=False)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert load_taxonomy(url) == DEFAULT_TAXONOMY and len(DEFAULT_TAXONOMY) <= MAX_MODES
    saved = save_taxonomy(url, [{"name": "Tool Timeout", "description": "slow"}, {"name": ""}, ("other", None)])
    assert saved == [("tool_timeout", "slow"), ("other", "")]
    assert load_taxonomy(url) == saved and (tmp_path / "db.sqlite.taxonomy.json").exists()
    with pytest.raises(ValueError, match="twice"):
        clean_modes([("a", ""), ("a", "")])
    with pytest.raises(ValueError, match="not a valid"):
        clean_modes([("<b>x</b>", "")])
    with pytest.raises(ValueError, match="at most"):
        clean_modes([(f"m{i}", "") for i in range(MAX_MODES + 1)])


def _traj() -> Trajectory:
    return Trajectory(sample_id="s", goal="g", steps=[
        Step(0, StepRole.USER, "g"),
        Step(1, StepRole.ACTOR, "<tool_call>..", tool_calls=[{"name": "calculator", "args": {"expression": "1+1"}}],
             span={"latency_ms": 100.0, "prompt_tokens": 50, "completion_tokens": 10, "turn": 1}),
        Step(2, StepRole.TOOL, "calculator", observation={"text": "2", "n_images": 1},
             span={"latency_ms": 0.5, "repeat_blocked": True}),
        Step(3, StepRole.ACTOR, "bad", parse_error="Expecting value", span={"latency_ms": 40.0, "turn": 2}),
        Step(4, StepRole.TOOL, "", observation="fix your call", span={"parse_error": True}),
        Step(5, StepRole.ACTOR, "2", span={"latency_ms": 20.0, "turn": 3, "forced_final": True,
                                            "prompt_tokens": 90, "completion_tokens": 1}),
    ])


def test_step_views_carry_calls_observations_and_badges():
    views = step_views(_traj())
    assert [v.role for v in views] == ["user", "actor", "tool", "actor", "tool", "actor"]
    assert views[1].calls == [("calculator", {"expression": "1+1"})] and views[1].title == "Model, turn 1"
    assert (views[2].observation, views[2].n_images, views[2].badges) == ("2", 1, ["repeat blocked"])
    assert views[3].badges == ["parse error"] and views[3].parse_error == "Expecting value"
    assert views[4].title == "Feedback to the model" and views[4].badges == ["parse error"]
    assert views[5].badges == ["forced final answer"]
    assert actor_steps(_traj()) == [1, 3, 5]


def test_waterfall_lays_steps_end_to_end():
    rows = waterfall_rows(_traj())
    assert [r["step"] for r in rows] == [1, 2, 3, 5]  # the user turn and the untimed feedback are not timed
    assert [(r["start_ms"], r["end_ms"]) for r in rows] == [(0.0, 100.0), (100.0, 100.5), (100.5, 140.5),
                                                            (140.5, 160.5)]
    assert [r["kind"] for r in rows] == ["model", "tool", "model", "model"]
    assert rows[0]["label"] == "1 model → calculator" and rows[2]["label"] == "3 model (parse error)"
    assert token_rows(_traj()) == [
        {"step": 1, "turn": 1, "kind": "prompt", "tokens": 50}, {"step": 1, "turn": 1, "kind": "completion", "tokens": 10},
        {"step": 5, "turn": 3, "kind": "prompt", "tokens": 90}, {"step": 5, "turn": 3, "kind": "completion", "tokens": 1},
    ]


def test_worker_status_when_turned_off(tmp_path, monkeypatch):
    from components.worker import ensure_local_worker

    url = f"sqlite:///{tmp_path / 'w.sqlite'}"
    S.upgrade(url)
    monkeypatch.setenv("EVALRX_NO_LOCAL_WORKER", "1")
    status = ensure_local_worker(S.connect(url))
    assert status.state == "disabled" and status.workers == [] and status.pid is None
    S.forget(url)


_ENSURE = """
import sys, time
sys.path.insert(0, {app!r})
import evalrx.store as S
from components.worker import ensure_local_worker
time.sleep(max(0.0, {start} - time.time()))  # all callers at once
st = ensure_local_worker(S.connect({url!r}))
print("STATE", st.state, st.pid)
"""


def test_concurrent_app_processes_start_one_worker(tmp_path, monkeypatch):
    """Four app processes check at the same moment: exactly one starts a worker, which then heartbeats."""
    url = f"sqlite:///{tmp_path / 'w.sqlite'}"
    S.upgrade(url)
    monkeypatch.delenv("EVALRX_NO_LOCAL_WORKER", raising=False)
    start = time.time() + 3.0
    code = _ENSURE.format(app=str(ROOT / "app"), url=url, start=start)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
             for _ in range(4)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    states = [line.split()[1:] for o in outs for line in o.splitlines() if line.startswith("STATE")]
    started = [int(pid) for state, pid in states if state == "started"]
    try:
        assert len(states) == 4 and len(started) == 1, outs
        assert sorted(s for s, _ in states) == ["alive", "alive", "alive", "started"]
        deadline = time.time() + 90
        while time.time() < deadline:  # the worker replaces the pre-registered row's heartbeat with its own
            alive = S.alive_workers(store=url)
            if any(w["pid"] == started[0] and w["status"] in ("idle", "busy") for w in alive):
                break
            time.sleep(0.5)
        assert [w["pid"] for w in S.alive_workers(store=url)] == started
    finally:
        for pid in started:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        S.forget(url)
