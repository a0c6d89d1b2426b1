"""tau-bench results as tau-bench and AgentRx write them: the real AgentRx retail files, imported through the
public path, and the human labels imported onto them by message index."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

import evalrx.store as S
from evalrx.core import FailureCase
from evalrx.diagnosis import reference_of
from evalrx.interop import import_file, import_labels

DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "agentrx_tau_retail"


def test_the_failed_agentrx_runs_import_as_conversations_with_their_gold_actions(sqlite_url):
    result = import_file(DATA / "tau_dataset_failed.json", store=sqlite_url)
    assert (result.format, result.n_trajectories) == ("tau_bench", 29)
    rows = S.list_trajectories(run_id=result.run_ids[0], limit=100, store=sqlite_url).rows
    # The agent's goodbye before the customer leaves is a final answer; a transfer to a person ends a run too.
    assert collections.Counter(r.terminated for r in rows) == {"final": 24, "handoff": 4, "incomplete": 1}
    assert {r.outcome for r in rows} == {"fail"}
    assert "no_final_answer" not in {r.diagnosis_kind for r in rows if r.terminated != "incomplete"}
    raw = {str(r["task_id"]): r for r in json.loads((DATA / "tau_dataset_failed.json").read_text())}
    detail = S.get_trajectory(next(r.id for r in rows if r.sample_id == "2"), store=sqlite_url)
    source = raw["2"]
    # Every message but the system one is a step, and each keeps its message index.
    assert [s.span["message"] for s in detail.trajectory.steps] == [int(m["index"]) for m in source["traj"][1:]]
    refs = detail.case["meta"]["reference_calls"]
    assert [r["name"] for r in refs] == [a["name"] for a in source["info"]["task"]["actions"]]
    assert detail.case["meta"]["system"].startswith("# Retail agent policy")
    calls = [c for s in detail.trajectory.steps for c in s.tool_calls]
    assert calls and all(isinstance(c.to_dict()["args"], dict) for c in calls)  # the repr'd call lists were read back
    # Every case keeps its gold actions as the reference the diagnosis compares with; where the run made the same
    # state-changing calls, the reference finds no divergence and the rules say why (not "no reference").
    for r in rows:
        assert reference_of(FailureCase.from_dict(S.get_trajectory(r.id, store=sqlite_url).case)) == "calls"
    assert {S.get_diagnoses(r.id, store=sqlite_url)[0].source for r in rows} == {"reference", "heuristic"}


def test_the_passing_runs_are_graded_pass_and_agentrx_labels_land_on_their_message(sqlite_url):
    full = import_file(DATA / "tau_dataset_full.json", store=sqlite_url)
    rows = S.list_trajectories(run_id=full.run_ids[0], limit=1000, store=sqlite_url).rows
    assert collections.Counter(r.outcome for r in rows) == {"pass": 73, "fail": 27}
    failed = import_file(DATA / "tau_dataset_failed.json", store=sqlite_url).run_ids[0]
    labels = import_labels(DATA / "tau_ground_truth.json", run_id=failed, store=sqlite_url)
    assert labels.n_labels == 29 and not labels.unmatched
    truth = {str(t["trajectory_id"]): t for t in json.loads((DATA / "tau_ground_truth.json").read_text())}
    for row in S.list_trajectories(run_id=failed, limit=100, store=sqlite_url).rows[:5]:
        t = truth[row.sample_id]
        root = next(f for f in t["failures"] if f["failure_id"] == t["root_cause"]["failure_id"])
        (label,) = [x for x in S.current_labels(row.id, store=sqlite_url) if x.step_idx is None]
        steps = S.get_trajectory(row.id, store=sqlite_url).trajectory.steps
        assert steps[label.first_wrong_step].span["message"] == int(root["step_number"])


@pytest.mark.parametrize(
    "bad, says",
    [
        ([{"task_id": 1, "reward": 0, "traj": ["not a message"]}], "message 1 of `traj` is not an object"),
        (
            [{"task_id": 1, "reward": 0, "traj": [{"role": "assistant", "tool_calls": "[oops"}]}],
            "`tool_calls` is neither a list nor a readable repr of one",
        ),
    ],
)
def test_a_broken_run_is_one_line_naming_it(sqlite_url, tmp_path, bad, says):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(Exception) as exc:
        import_file(path, store=sqlite_url)
    assert says in str(exc.value) and "\n" not in str(exc.value)
    assert S.list_runs(store=sqlite_url) == []
