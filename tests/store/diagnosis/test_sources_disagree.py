"""The Trajectories list's "sources disagree" filter on SQLite and PostgreSQL: each source's best candidate
(its first-ranked row in `diagnoses`) is compared with the others' by kind and first wrong step."""

from __future__ import annotations

from storehelpers import fill_run

import evalrx.store as S
from evalrx.core.failures import Diagnosis


def _d(kind, step, source) -> Diagnosis:
    return Diagnosis(kind, step, {"text": "x"}, 0.5, source)


# Each trajectory's candidates, best first, and whether its sources disagree.
CANDIDATES = [
    ([_d("misread_observation", 3, "reference"), _d("misread_observation", 3, "heuristic")], False),
    ([_d("misread_observation", 3, "reference"), _d("bad_arguments", 3, "heuristic")], True),  # kind
    ([_d("misread_observation", 3, "reference"), _d("misread_observation", 4, "judge")], True),  # step
    # A source's second candidate is not its proposal: only the first-ranked one of each source counts.
    (
        [
            _d("misread_observation", 3, "reference"),
            _d("bad_arguments", 2, "reference"),
            _d("misread_observation", 3, "heuristic"),
        ],
        False,
    ),
    (
        [
            _d("misread_observation", 3, "reference"),
            _d("bad_arguments", 5, "heuristic"),
            _d("misread_observation", 3, "heuristic"),
        ],
        True,
    ),
    ([_d("bad_arguments", 1, "heuristic"), _d(None, None, "judge")], True),  # "nothing went wrong" differs
    ([_d("bad_arguments", 1, "heuristic"), _d("wrong_tool", 2, "heuristic")], False),  # one source only
    ([], False),  # not diagnosed
]


def _store(url):
    store = S.connect(url)
    run_id, _, _ = fill_run(store, len(CANDIDATES) + 2, seed=4)
    ids = [r.id for r in S.list_trajectories(run_id=run_id, descending=False, store=store).rows]
    with store.write() as s:
        for tid, (candidates, _) in zip(ids, CANDIDATES):
            S.save_diagnoses(s, tid, candidates)
    other, _, _ = fill_run(store, 2, seed=5, name="other")
    other_ids = [r.id for r in S.list_trajectories(run_id=other, store=store).rows]
    with store.write() as s:
        S.save_diagnoses(s, other_ids[0], CANDIDATES[1][0])
    return store, run_id, ids, other_ids[0]


def test_sources_disagree_keeps_trajectories_whose_sources_best_candidates_differ(store_url):
    store, run_id, ids, other_tid = _store(store_url)
    want = [tid for tid, (_, differ) in zip(ids, CANDIDATES) if differ]
    got = [r.id for r in S.list_trajectories(run_id=run_id, sources_disagree=True, descending=False, store=store).rows]
    assert got == want
    assert S.count_trajectories(run_id=run_id, sources_disagree=True, store=store) == len(want) == 4
    agree = S.list_trajectories(run_id=run_id, sources_disagree=False, limit=100, store=store).rows
    assert sorted(r.id for r in agree) == sorted(set(ids) - set(want))
    assert {r.id for r in S.list_trajectories(sources_disagree=True, store=store).rows} == {*want, other_tid}
    assert S.matching_ids(sources_disagree=True, run_id=run_id, store=store) == want  # oldest first


def test_sources_disagree_pages_by_keyset(store_url):
    store, run_id, ids, other_tid = _store(store_url)
    want = [tid for tid, (_, differ) in zip(ids, CANDIDATES) if differ] + [other_tid]
    for sort in ("id", "latency_ms"):
        seen, cursor = [], None
        while True:
            page = S.list_trajectories(sources_disagree=True, sort=sort, limit=2, after=cursor, store=store)
            seen += [r.id for r in page.rows]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert sorted(seen) == sorted(want) and len(seen) == len(set(seen))
