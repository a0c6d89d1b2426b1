"""The pages' queries on SQLite and PostgreSQL: filters, pagination, aggregates, detail."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from storehelpers import fill_run, make_case, make_trajectory

import evalrx.store as S
from evalrx.core import Label, Observation, Step, StepRole, Trajectory
from evalrx.store import runs
from evalrx.store.analyses import save_analyses
from evalrx.store.queries import pending_cases


@pytest.fixture
def filled(store_url):
    store = S.connect(store_url)
    run_id, cases, trajs = fill_run(store, 60, seed=1)
    other, _, _ = fill_run(store, 15, seed=2, name="other")
    return store, run_id, cases, trajs, other


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def filled_ro(request, tmp_path_factory):
    """A filled store shared by read-only tests (built once per backend)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('ro') / 'store.sqlite'}"
    else:
        url = request.getfixturevalue("pg_server").create_database()
    S.upgrade(url)
    store = S.connect(url)
    run_id, cases, trajs = fill_run(store, 60, seed=1)
    yield store, run_id, cases, trajs
    S.forget(url)


def _all_pages(store, **kw):
    ids, cursor = [], None
    while True:
        page = S.list_trajectories(store=store, limit=7, after=cursor, **kw)
        ids += [r.id for r in page.rows]
        cursor = page.next_cursor
        if cursor is None:
            return ids


@pytest.mark.parametrize("sort", ["id", "latency_ms", "n_steps", "completion_tokens", "created_at"])
@pytest.mark.parametrize("descending", [True, False])
def test_keyset_pages_visit_every_row_once_in_order(filled_ro, sort, descending):
    store, run_id, _, _ = filled_ro
    ids = _all_pages(store, run_id=run_id, sort=sort, descending=descending)
    rows = S.list_trajectories(store=store, run_id=run_id, limit=1000).rows
    assert len(ids) == len(set(ids)) == len(rows) == 60
    key = {r.id: (getattr(r, sort), r.id) for r in rows}
    assert ids == sorted(key, key=key.get, reverse=descending)


def test_offset_pages_and_total(filled_ro):
    store, run_id, *_ = filled_ro
    first = S.list_trajectories(store=store, run_id=run_id, limit=25, with_total=True)
    second = S.list_trajectories(store=store, run_id=run_id, limit=25, offset=25)
    assert first.total == 60
    assert len(first.rows) == 25 and len(second.rows) == 25
    assert not {r.id for r in first.rows} & {r.id for r in second.rows}


def test_filters_match_a_python_reference(filled):
    store, run_id, cases, trajs, other = filled
    by_sample = {t.sample_id: t for t in trajs}

    def ids(**kw):
        return {r.sample_id for r in S.list_trajectories(store=store, run_id=run_id, limit=1000, **kw).rows}

    assert ids(outcome="pass") == {t.sample_id for t in trajs if t.outcome is Label.PASS}
    assert ids(terminated=["error", "max_turns"]) == {
        t.sample_id for t in trajs if t.terminated in ("error", "max_turns")
    }
    assert ids(tool="lookup") == {
        t.sample_id for t in trajs if any(c.name == "lookup" for s in t.steps for c in s.tool_calls)
    }
    assert ids(has_parse_error=True) == {t.sample_id for t in trajs if t.metrics["n_parse_errors"]}
    assert ids(text="QUESTION 10007:") == {cases[7].id}  # case-insensitive
    assert ids(text="result 2 of lookup") == {  # observations are searchable
        t.sample_id
        for t in trajs
        if any(s.observation == Observation({"text": "result 2 of lookup", "n_images": 0}) for s in t.steps)
    }
    # LIKE wildcards in the search text are literal characters
    assert ids(text="%") == set() and ids(text="image%zoom") == set() and ids(text="image_zoom")
    assert len(by_sample) == 60
    # run filter: both runs together, and counts agree with the list
    both = S.count_trajectories(store=store, run_id=[run_id, other])
    assert both == 75
    assert S.count_trajectories(store=store, run_id=run_id, outcome="fail") == len(
        [t for t in trajs if t.outcome is Label.FAIL]
    )


def test_label_and_tag_filters(filled):
    store, run_id, _, trajs, _ = filled
    rows = S.list_trajectories(store=store, run_id=run_id, limit=1000).rows
    S.set_label(rows[0].id, "fail", failure_kind="wrong_tool", store=store)
    S.set_label(rows[1].id, "pass", store=store)
    S.add_tag(rows[1].id, "look again", store=store)

    def ids(**kw):
        return {r.id for r in S.list_trajectories(store=store, run_id=run_id, limit=1000, **kw).rows}

    assert ids(label="fail") == {rows[0].id}
    assert ids(label="any") == {rows[0].id, rows[1].id}
    assert len(ids(label="none")) == 58
    assert ids(label_kind="wrong_tool") == {rows[0].id}
    assert ids(tag="look again") == {rows[1].id}
    assert ids(tag="no such tag") == set()


def test_run_stats_match_numpy(filled_ro):
    store, run_id, _, trajs = filled_ro
    st = S.run_stats(run_id, store=store)
    lat = np.array([t.metrics["total_latency_ms"] for t in trajs])
    assert st.n == 60
    assert st.latency_p50_ms == pytest.approx(np.percentile(lat, 50))
    assert st.latency_p95_ms == pytest.approx(np.percentile(lat, 95))
    assert st.outcomes == {k: v for k, v in {o.value: sum(t.outcome is o for t in trajs) for o in Label}.items() if v}
    n_pass = sum(t.outcome is Label.PASS for t in trajs)
    assert st.success_rate == pytest.approx(n_pass / 60)
    assert st.prompt_tokens == sum(t.metrics["total_prompt_tokens"] for t in trajs)
    assert st.completion_tokens == sum(t.metrics["total_completion_tokens"] for t in trajs)
    assert st.mean_steps == pytest.approx(np.mean([len(t.steps) for t in trajs]))
    assert sum(st.terminated.values()) == 60
    assert st.tool_calls.get("calculator", 0) == sum(
        any(c.name == "calculator" for s in t.steps for c in s.tool_calls) for t in trajs
    )
    assert st.labels == {"none": 60}


def test_run_stats_of_an_empty_run(store_url):
    store = S.connect(store_url)
    with store.write() as s:
        run_id = runs.create_run(s, name="empty", cases=[make_case(1)])
    st = S.run_stats(run_id, store=store)
    assert st.n == 0 and st.latency_p50_ms is None and st.success_rate is None


def test_get_trajectory_rebuilds_the_stored_trajectory_exactly(filled_ro):
    store, run_id, cases, trajs = filled_ro
    for traj in trajs[:10]:
        tid = S.find_trajectory(run_id, traj.sample_id, store=store)
        detail = S.get_trajectory(tid, store=store)
        assert detail.trajectory.to_dict() == traj.to_dict()
        assert detail.case["id"] == traj.sample_id and detail.case["expected"] == traj.ground_truth
        assert len(detail.step_ids) == len(traj.steps)
    assert S.get_trajectory(10**9, store=store) is None


def test_nul_characters_are_stored_as_replacement_characters(store_url):
    """PostgreSQL rejects NUL in text; both backends store U+FFFD instead, identically."""
    store = S.connect(store_url)
    case = make_case(1)
    traj = Trajectory(
        sample_id=case.id,
        goal="g",
        steps=[Step(0, StepRole.USER, "g"), Step(1, StepRole.ACTOR, "bad\x00byte", span={"x": "a\x00"})],
        final_answer="a\x00b",
    )
    with store.write() as s:
        run_id = runs.create_run(s, cases=[case])
        tid = runs.save_trajectory(s, run_id, pending_cases(s, run_id)[0][1], traj)
    got = S.get_trajectory(tid, store=store).trajectory
    assert got.steps[1].content == "bad\ufffdbyte" and got.steps[1].span == {"x": "a\ufffd"}
    assert got.final_answer == "a\ufffdb"


def test_a_conversation_lists_the_user_turn_that_failed_its_grade(store_url):
    store = S.connect(store_url)
    cases = [make_case(1), make_case(2)]
    with store.write() as s:
        run_id = runs.create_run(s, cases=cases)
        ids = [
            runs.save_trajectory(
                s, run_id, row_id, Trajectory(sample_id=c.id, goal="g", outcome=Label.FAIL, metrics=metrics)
            )
            for (_, row_id, _), c, metrics in zip(pending_cases(s, run_id), cases, [{"grade_turn": 1}, {}])
        ]
    rows = {r.id: r for r in S.list_trajectories(run_id=run_id, store=store).rows}
    assert (rows[ids[0]].grade_turn, rows[ids[1]].grade_turn) == (1, None)
    assert S.get_trajectory(ids[0], store=store).row == rows[ids[0]]  # the page's row and the list's agree


def test_a_case_is_never_stored_twice_in_a_run(store_url):
    store = S.connect(store_url)
    case = make_case(3)
    traj = make_trajectory(case, random.Random(0))
    with store.write() as s:
        run_id = runs.create_run(s, cases=[case])
        case_row_id = pending_cases(s, run_id)[0][1]
        runs.save_trajectory(s, run_id, case_row_id, traj)
    with pytest.raises(IntegrityError):
        with store.write() as s:
            runs.save_trajectory(s, run_id, case_row_id, traj)
    with store.read() as s:  # the failed transaction left no partial rows
        assert s.execute(text("SELECT count(*) FROM trajectories")).scalar() == 1
        assert s.execute(text("SELECT count(*) FROM steps")).scalar() == len(traj.steps)


def test_identical_cases_and_images_are_stored_once(store_url):
    store = S.connect(store_url)
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
    with store.write() as s:
        runs.create_run(s, cases=[make_case(1, image=png), make_case(2, image=png)])
        runs.create_run(s, cases=[make_case(1, image=png)])
    with store.read() as s:
        assert s.execute(text("SELECT count(*) FROM blobs")).scalar() == 1
        assert s.execute(text("SELECT count(*) FROM cases")).scalar() == 2
    blob = S.get_blob(runs.convert.sha256(png), store=store)
    assert blob == (png, "image/png")


def test_run_config_never_stores_a_key(store_url):
    from evalrx.config import ModelConfig, RunConfig

    store = S.connect(store_url)
    cfg = RunConfig(model=ModelConfig(name="gpt-4o-mini", backend="api"), tools=["calculator"])
    raw = runs.config_dict(cfg)
    raw["model"]["api_key"] = "sk-secret"
    with store.write() as s:
        run_id = runs.create_run(s, config=raw, cases=[make_case(1)])
    info = S.get_run(run_id, store=store)
    assert "sk-secret" not in repr(info.config)
    assert info.spec_key == "gpt-4o-mini" and info.backend == "api" and info.config["tools"] == ["calculator"]


def test_analyses_store_compact_arrays(store_url):
    store = S.connect(store_url)
    run_id, _, _ = fill_run(store, 1)
    tid = S.list_trajectories(run_id=run_id, store=store).rows[0].id
    topk = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    lp = np.linspace(-5, 0, 24, dtype=np.float16).reshape(2, 3, 4)
    with store.write() as s:
        record = SimpleNamespace(
            analyzer="logit_lens", arrays={"topk_ids": topk, "topk_logprobs": lp}, step_idx=1, meta={"layers": [0, 1]}
        )
        save_analyses(s, tid, [record], index=False)  # raw arrays: not a result to read numbers from
    (got,) = S.load_analyses(tid, "logit_lens", store=store)
    assert got["step_idx"] == 1 and got["meta"] == {"layers": [0, 1]}
    assert got["arrays"]["topk_ids"].dtype == np.int32 and np.array_equal(got["arrays"]["topk_ids"], topk)
    assert got["arrays"]["topk_logprobs"].dtype == np.float16 and np.array_equal(got["arrays"]["topk_logprobs"], lp)
    with store.read() as s:  # raw bytes, not a JSON list of numbers
        size = s.execute(text("SELECT length(data) FROM analysis_arrays WHERE name = 'topk_logprobs'")).scalar()
    assert size == lp.nbytes == 48
    assert S.get_trajectory(tid, store=store).analyses[0][0] == "logit_lens"


def test_list_runs_shows_job_progress(store_url):
    store = S.connect(store_url)
    with store.write() as s:
        run_id = runs.create_run(s, name="queued one", cases=[make_case(i) for i in range(4)])
        job_id = S.enqueue_job(s, S.JobKind.RUN, run_id=run_id)
    (info,) = S.list_runs(store=store)
    assert info.name == "queued one" and info.status == "queued" and info.job_id == job_id
    assert info.job_status == "queued" and info.n_cases == 4 and info.progress == 0.0
    assert S.list_runs(status="done", store=store) == []


@pytest.mark.parametrize("probe", [1000, 3])
def test_text_search_index_agrees_with_a_substring_scan(filled, probe, monkeypatch):
    """Rare and common terms, through the SQLite trigram index or LIKE, find exactly the substring matches."""
    from evalrx.store import convert, queries

    monkeypatch.setattr(queries, "FTS_PROBE", probe)  # 3: common terms take the LIKE branch
    store, run_id, cases, trajs, other = filled
    texts = {r.id: None for r in S.list_trajectories(store=store, limit=1000).rows}
    with store.read() as s:
        for tid, st in s.execute(text("SELECT trajectory_id, search_text FROM trajectory_texts")).all():
            texts[tid] = st
    for needle in (
        "question 10007:",
        "Result 2 OF",
        "image_zoom",
        "answer is 7",
        "the answer",
        '"x": 2',
        "no such text at all",
        "q1",
        "%",
    ):
        want = {tid for tid, st in texts.items() if needle.lower() in st}
        got = {r.id for r in S.list_trajectories(store=store, text=needle, limit=1000).rows}
        assert got == want, needle
        assert S.count_trajectories(store=store, text=needle) == len(want)
    assert convert.search_text(trajs[0]) == texts[S.find_trajectory(run_id, trajs[0].sample_id, store=store)]


def test_text_index_follows_deletes(sqlite_url):
    store = S.connect(sqlite_url)
    a, ca, _ = fill_run(store, 5, seed=5)
    fill_run(store, 5, seed=6)
    assert S.count_trajectories(store=store, text=ca[0].inputs.prompt) == 1
    S.delete_run(a, store=store)
    with store.write() as s:
        s.execute(text("INSERT INTO trajectory_fts(trajectory_fts) VALUES ('integrity-check')"))
        assert (
            s.execute(
                text("SELECT count(*) FROM trajectory_fts WHERE trajectory_fts MATCH :p"), {"p": '"question"'}
            ).scalar()
            == 5
        )
    assert S.count_trajectories(store=store, text=ca[0].inputs.prompt) == 0


def test_dashboard_queries_latency_sample_and_labels_per_annotator(filled):
    store, run_id, _, trajs, other = filled
    sample = S.step_latency_sample(store=store, run_ids=[run_id])
    timed = [s for t in trajs for s in t.steps if s.span.get("latency_ms") is not None]
    assert len(sample) == len(timed)  # every timed step of the run, none of the other run
    assert {r["role"] for r in sample} <= {"actor", "tool"}
    assert sorted(r["latency_ms"] for r in sample) == pytest.approx(sorted(s.span["latency_ms"] for s in timed))
    assert len(S.step_latency_sample(store=store, limit=30)) <= 30

    rows = S.list_trajectories(run_id=run_id, store=store).rows
    S.set_label(rows[0].id, "fail", failure_kind="wrong_tool", annotator="ana", store=store)
    S.set_label(rows[1].id, "pass", annotator="ana", store=store)
    S.set_label(rows[1].id, "fail", annotator="bo", store=store)  # an edit: bo's label is now current
    counts = {
        (r["annotator"], r["outcome"]): r["n"] for r in S.label_counts_by_annotator(store=store, run_ids=[run_id])
    }
    assert counts == {("ana", "fail"): 1, ("bo", "fail"): 1}
    assert S.label_counts_by_annotator(store=store, run_ids=[other]) == []
