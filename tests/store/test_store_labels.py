"""Labels keep their history; tags; validation."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from storehelpers import fill_run

import evalrx.store as S
from evalrx.core import Label


@pytest.fixture
def one(store_url):
    store = S.connect(store_url)
    run_id, _, trajs = fill_run(store, 2, seed=4)
    rows = S.list_trajectories(run_id=run_id, store=store, sort="id", descending=False).rows
    return store, rows[0].id, trajs[0]


def test_an_edit_keeps_the_previous_value(one):
    store, tid, _ = one
    first = S.set_label(tid, "fail", failure_kind="wrong_tool", note="called lookup", annotator="ana", store=store)
    second = S.set_label(tid, Label.PASS, annotator="ben", store=store)
    hist = S.label_history(tid, store=store)
    assert [h.id for h in hist] == [first.id, second.id]
    assert hist[0].is_current is False and hist[0].superseded_by == second.id
    assert hist[0].outcome == "fail" and hist[0].failure_kind == "wrong_tool" and hist[0].note == "called lookup"
    assert hist[1].is_current and hist[1].annotator == "ben" and hist[1].created_at >= hist[0].created_at
    row = S.list_trajectories(store=store, label="pass").rows
    assert [r.id for r in row] == [tid] and row[0].label_kind is None


def test_step_labels_are_separate_slots(one):
    store, tid, traj = one
    S.set_label(tid, "fail", first_wrong_step=1, store=store)
    S.set_label(tid, "fail", step_idx=1, note="wrong tool here", store=store)
    S.set_label(tid, "pass", step_idx=1, store=store)
    S.set_label(tid, "fail", step_idx=0, store=store)
    cur = S.current_labels(tid, store=store)
    assert [(c.step_idx, c.outcome) for c in cur] == [(None, "fail"), (0, "fail"), (1, "pass")]
    assert len(S.label_history(tid, step_idx=1, store=store)) == 2
    assert len(S.label_history(tid, step_idx=None, store=store)) == 1
    assert S.list_trajectories(store=store, label="fail").rows[0].id == tid  # trajectory-level label only


def test_the_database_allows_one_current_label_per_slot(one):
    store, tid, _ = one
    S.set_label(tid, "fail", store=store)
    with pytest.raises(IntegrityError):
        with store.write() as s:
            s.execute(
                text(
                    "INSERT INTO labels (trajectory_id, step_idx, outcome, created_at, is_current) "
                    "VALUES (:t, NULL, 'pass', '2024-01-01 00:00:00', :c)"
                ),
                {"t": tid, "c": True},
            )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"outcome": "maybe"}, "outcome must be one of"),
        ({"outcome": "fail", "first_wrong_step": 99}, "first_wrong_step=99"),
        ({"outcome": "fail", "step_idx": -1}, "step_idx=-1"),
    ],
)
def test_bad_labels_are_refused(one, kwargs, match):
    store, tid, _ = one
    with pytest.raises(ValueError, match=match):
        S.set_label(tid, store=store, **kwargs)
    assert S.label_history(tid, store=store) == []


def test_label_on_a_missing_trajectory(store_url):
    with pytest.raises(ValueError, match="no trajectory"):
        S.set_label(12345, "pass", store=store_url)


def test_clearing_a_label_keeps_history_and_unlabels(one):
    store, tid, _ = one
    S.set_label(tid, "fail", store=store)
    S.set_label(tid, None, note="not sure any more", store=store)
    assert S.count_trajectories(store=store, label="none") == 2
    assert [h.outcome for h in S.label_history(tid, store=store)] == ["fail", None]


def test_tags_and_label_kinds(one):
    store, tid, _ = one
    S.add_tag(tid, "regression", store=store)
    S.add_tag(tid, "regression", store=store)  # idempotent
    S.add_tag(tid, "flaky", store=store)
    assert S.tags_of(tid, store=store) == ["flaky", "regression"]
    assert S.remove_tag(tid, "flaky", store=store) is True
    assert S.remove_tag(tid, "flaky", store=store) is False
    assert S.all_tags(store=store) == ["flaky", "regression"]
    S.set_label(tid, "fail", failure_kind="loop", store=store)
    assert S.label_kinds(store=store) == ["loop"]
    with pytest.raises(ValueError):
        S.add_tag(tid, "   ", store=store)
