"""Imports write trajectories in batches (a few statements for many): what is stored, in which order, and
which record an error names, are as when each was written alone."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

import evalrx.interop as X
import evalrx.store as S
from evalrx.store import ImportedRun


def _row(i: int, case: int) -> dict:
    return {
        "sample_id": f"case{case}",
        "attempt": 1 + i // 7,
        "goal": f"question {case}",
        "outcome": "pass" if i % 3 else "fail",
        "steps": [
            {"idx": 0, "role": "user", "content": f"question {case}"},
            {"idx": 1, "role": "actor", "content": f"answer {i}", "tool_calls": [{"name": "calc", "args": {"x": i}}]},
            {"idx": 2, "role": "tool", "content": f"{i}", "tool_name": "calc"},
            {"idx": 3, "role": "actor", "content": f"final {i}"},
        ],
    }


def test_several_batches_store_every_record_in_order(store_url, tmp_path, monkeypatch):
    monkeypatch.setattr(ImportedRun, "BATCH", 16)  # 100 records: six full batches and a partial one
    rows = [_row(i, i % 7) for i in range(100)]  # 7 cases, attempts 1..15
    f = tmp_path / "many.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = X.import_file(f, store=store_url)
    assert result.n_trajectories == 100
    (run,) = S.list_runs(store=store_url)
    assert (run.n_cases, run.n_pass, run.n_fail) == (100, 66, 34)
    listed = S.list_trajectories(run_id=run.id, sort="id", descending=False, limit=200, store=store_url).rows
    assert len(listed) == 100
    for row, src in zip(listed, rows):  # ids in the file's order, each with its own steps and tools
        traj = S.get_trajectory(row.id, store=store_url).trajectory
        assert (traj.sample_id, traj.attempt) == (src["sample_id"], src["attempt"])
        assert [s.content for s in traj.steps] == [s["content"] for s in src["steps"]]
    with S.connect(store_url).read() as s:
        assert s.execute(text("SELECT count(*) FROM cases")).scalar() == 7  # one row per case's content
        assert s.execute(text("SELECT count(*) FROM trajectory_tools")).scalar() == 100
        positions = s.execute(text("SELECT DISTINCT position FROM run_cases ORDER BY position")).scalars().all()
    assert positions == list(range(7))  # a case keeps one place whatever its attempts


def test_a_bad_label_in_a_batch_names_its_own_line(sqlite_url, tmp_path, monkeypatch):
    monkeypatch.setattr(ImportedRun, "BATCH", 16)
    rows = [_row(i, i) for i in range(40)]
    rows[30]["labels"] = [{"outcome": "wizard"}]
    f = tmp_path / "labelled.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(X.ImportFormatError, match=r"labelled\.jsonl: line 31: "):
        X.import_file(f, store=sqlite_url)
    assert S.list_runs(store=sqlite_url) == []
