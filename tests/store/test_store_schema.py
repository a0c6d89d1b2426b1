"""Schema, migrations, engine settings and the schema-version check."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from sqlalchemy import text

import evalrx.store as S
from evalrx.store import schema


def test_migration_head_is_the_code_schema_version():
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from evalrx.store.engine import MIGRATIONS_DIR

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    assert ScriptDirectory.from_config(cfg).get_current_head() == schema.SCHEMA_VERSION


def test_migrated_schema_matches_the_models(store_url):
    """Alembic's autogenerate finds nothing to change after `upgrade`: migrations and models agree."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    store = S.connect(store_url)
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "include_object": schema.include_object})
        diff = compare_metadata(ctx, schema.metadata)
    assert diff == []


def test_empty_store_refuses_with_the_upgrade_command(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    with pytest.raises(S.SchemaError, match="evalrx db upgrade"):
        S.connect(url)
    assert S.upgrade(url) == schema.SCHEMA_VERSION
    S.connect(url)  # now accepted
    assert S.upgrade(url) == schema.SCHEMA_VERSION  # a second upgrade is a no-op


def test_older_schema_refuses_with_the_upgrade_command(sqlite_url):
    store = S.connect(sqlite_url)
    with store.write() as s:
        s.execute(text("UPDATE alembic_version SET version_num = '0000'"))
    S.forget(sqlite_url)  # a new process: the schema is checked afresh
    with pytest.raises(S.SchemaError, match=r"older .*evalrx db upgrade"):
        S.connect(sqlite_url)


def test_newer_schema_asks_to_upgrade_evalrx(sqlite_url):
    store = S.connect(sqlite_url)
    with store.write() as s:
        s.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    S.forget(sqlite_url)
    with pytest.raises(S.SchemaError, match="newer"):
        S.connect(sqlite_url)


def test_default_url_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("EVALRX_DATABASE_URL", "postgresql://u@h:5/x")
    assert S.default_url() == "postgresql://u@h:5/x"
    monkeypatch.delenv("EVALRX_DATABASE_URL")
    assert S.default_url().startswith("sqlite:///") and S.default_url().endswith("db/evalrx.sqlite")


def test_sqlite_pragmas(sqlite_url):
    store = S.connect(sqlite_url)
    with store.read() as s:
        assert s.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert s.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert s.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
        assert s.execute(text("PRAGMA busy_timeout")).scalar() >= 5000


def test_write_transaction_takes_the_write_lock_at_begin(sqlite_url, tmp_path):
    """`Store.write()` holds SQLite's write lock before its first statement (BEGIN IMMEDIATE)."""
    store = S.connect(sqlite_url)
    path = sqlite_url[len("sqlite:///") :]
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    with store.write() as s:
        s.execute(text("SELECT 1"))  # a read only: a deferred BEGIN would hold no write lock yet
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
    other.execute("BEGIN IMMEDIATE")  # released at commit
    other.execute("ROLLBACK")
    with store.read() as s:  # a read transaction does not block writers
        s.execute(text("SELECT count(*) FROM runs")).scalar()
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    other.close()


def test_read_transaction_is_a_consistent_snapshot(sqlite_url):
    store = S.connect(sqlite_url)
    with store.read() as s:
        before = s.execute(text("SELECT count(*) FROM runs")).scalar()

        def writer():
            with store.write() as w:
                w.execute(
                    text(
                        "INSERT INTO runs (name, status, source, config, meta, n_cases, n_done, n_pass, "
                        "n_fail, n_error, created_at) VALUES ('x','queued','queue','{}','{}',0,0,0,0,0,"
                        "'2020-01-01 00:00:00')"
                    )
                )

        th = threading.Thread(target=writer)
        th.start()
        th.join()
        assert s.execute(text("SELECT count(*) FROM runs")).scalar() == before
    with store.read() as s:
        assert s.execute(text("SELECT count(*) FROM runs")).scalar() == before + 1


def test_foreign_keys_cascade_on_run_delete(store_url):
    from storehelpers import fill_run

    store = S.connect(store_url)
    run_id, _, _ = fill_run(store, 3)
    tid = S.list_trajectories(run_id=run_id, store=store).rows[0].id
    S.set_label(tid, "fail", store=store)
    assert S.delete_run(run_id, store=store)
    with store.read() as s:
        for table in ("trajectories", "steps", "labels", "trajectory_tools", "run_cases"):
            assert s.execute(text(f"SELECT count(*) FROM {table}")).scalar() == 0, table
        assert s.execute(text("SELECT count(*) FROM cases")).scalar() == 3  # cases outlive runs


def test_upgrade_from_0001_keeps_the_data(store_url):
    """0002 moves search text out of `trajectories` (a table copy on SQLite): no row is lost or cascaded."""
    from evalrx.store.engine import downgrade

    S.forget(store_url)
    assert downgrade(store_url, "0005") == "0005"  # 0006 changes keys: Alembic's own downgrade undoes it
    S.forget(store_url)
    store = S.connect(store_url, check=False)
    with store.write() as s:  # back to an empty 0001 store (the fixture upgraded to head)
        for table in (
            "trajectory_fts",
            "trajectory_texts",
            "analysis_requests",
            "trajectory_scores",  # 0002, 0003
            "diagnoses",
            "failure_kinds",
        ):  # 0004
            s.execute(text(f"DROP TABLE IF EXISTS {table}"))
        s.execute(text("DROP INDEX IF EXISTS ix_trajectories_run_id_failure_kind"))
        s.execute(text("ALTER TABLE trajectories DROP COLUMN failure_kind"))
        for table, column in (("runs", "key_bound"), ("run_cases", "attempts"), ("jobs", "idle_claims")):  # 0005
            s.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))
        s.execute(text("ALTER TABLE trajectories ADD COLUMN search_text TEXT NOT NULL DEFAULT ''"))
        s.execute(text("UPDATE alembic_version SET version_num = '0001'"))
    with store.write() as s:
        s.execute(
            text(
                "INSERT INTO runs (id, name, status, source, config, meta, n_cases, n_done, n_pass, n_fail, "
                "n_error, created_at) VALUES (1, 'r', 'done', 'import', '{}', '{}', 1, 1, 0, 0, 0, "
                "'2024-01-01 00:00:00')"
            )
        )
        s.execute(text("INSERT INTO cases (id, digest, case_key, prompt, meta) VALUES (1, 'd', 'c1', 'p', '{}')"))
        s.execute(text("INSERT INTO run_cases (run_id, case_id, position) VALUES (1, 1, 0)"))
        s.execute(
            text(
                "INSERT INTO trajectories (id, run_id, case_id, sample_id, goal, outcome, terminated, metrics, "
                "n_steps, n_turns, n_tool_calls, n_parse_errors, latency_ms, tool_latency_ms, prompt_tokens, "
                "completion_tokens, search_text, created_at) VALUES (1, 1, 1, 'c1', 'Find the river', "
                "'pass', 'final', '{}', 2, 1, 0, 0, 1.0, 0.0, 1, 1, 'find the river\nthe nile', "
                "'2024-01-01 00:00:00')"
            )
        )
        for i in range(2):
            s.execute(
                text(
                    "INSERT INTO steps (trajectory_id, idx, role, content, tool_calls, span) "
                    "VALUES (1, :i, 'user', 'x', '[]', '{}')"
                ),
                {"i": i},
            )
        # Labels of the old taxonomy: a key that has a current name, and one that has none.
        s.execute(
            text(
                "INSERT INTO labels (trajectory_id, outcome, failure_mode, created_at, is_current) "
                "VALUES (1, 'fail', 'hallucinated', '2023-01-01 00:00:00', :c)"
            ),
            {"c": False},
        )
        s.execute(
            text(
                "INSERT INTO labels (trajectory_id, outcome, failure_mode, created_at, is_current) "
                "VALUES (1, 'fail', 'looping', '2024-01-01 00:00:00', :c)"
            ),
            {"c": True},
        )
        s.execute(text("UPDATE trajectories SET label = 'fail', failure_mode = 'looping' WHERE id = 1"))
    assert S.upgrade(store_url) == schema.SCHEMA_VERSION
    S.forget(store_url)
    store = S.connect(store_url)
    with store.read() as s:
        assert s.execute(text("SELECT count(*) FROM steps")).scalar() == 2
        assert s.execute(text("SELECT count(*) FROM labels")).scalar() == 2
        modes = s.execute(text("SELECT failure_kind FROM labels ORDER BY created_at")).scalars().all()
        assert modes == ["hallucinated", "repeated_calls"]  # old key mapped; one with no new name kept
        assert s.execute(text("SELECT search_text FROM trajectory_texts")).scalar() == "find the river\nthe nile"
    assert [r.id for r in S.list_trajectories(store=store, text="THE NILE").rows] == [1]
    assert S.get_trajectory(1, store=store).trajectory.goal == "Find the river"
    assert S.list_trajectories(store=store, label_kind="repeated_calls").rows[0].id == 1
    kinds = {k.key: k for k in S.list_kinds(store=store)}
    from evalrx.core.failures import FAILURE_KINDS

    assert [k.key for k in S.list_kinds(store=store) if k.builtin] == list(FAILURE_KINDS)
    assert kinds["hallucinated"].builtin is False  # the old taxonomy's own key became a custom kind
    assert sorted(k.hotkey for k in kinds.values() if k.hotkey) == list("123456789")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_at_0006(request, tmp_path):
    """A store built up to revision 0006 only (before labels and diagnoses shared `failure_kind`)."""
    if request.param == "sqlite":
        url, server = f"sqlite:///{tmp_path / 'at-0006.sqlite'}", None
    else:
        server = request.getfixturevalue("pg_server")
        url = server.create_database()
    assert S.upgrade(url, "0006") == "0006"
    yield url
    S.forget(url)
    if server is not None:
        server.drop_database(url)


def test_upgrade_from_0006_renames_the_kinds_and_keeps_the_labels(store_at_0006):
    """0007 renames `labels.failure_mode`, the two kinds kept on `trajectories` and `cases.case_key`, 0008 the
    integer case key of `run_cases` and `trajectories`: no value is lost."""
    url = store_at_0006
    store = S.connect(url, check=False)
    with store.write() as s:  # written the old way, with the old column names
        s.execute(
            text(
                "INSERT INTO runs (id, name, status, source, config, meta, n_cases, n_done, n_pass, n_fail, "
                "n_error, key_bound, created_at) VALUES (1, 'r', 'done', 'import', '{}', '{}', 1, 1, 0, 1, 0, "
                ":f, '2024-01-01 00:00:00')"
            ),
            {"f": False},
        )
        s.execute(text("INSERT INTO cases (id, digest, case_key, prompt, meta) VALUES (1, 'd', 'c1', 'p', '{}')"))
        s.execute(text("INSERT INTO run_cases (run_id, case_id, position) VALUES (1, 1, 0)"))
        s.execute(
            text(
                "INSERT INTO trajectories (id, run_id, case_id, sample_id, goal, outcome, terminated, metrics, "
                "n_steps, n_turns, n_tool_calls, n_parse_errors, latency_ms, tool_latency_ms, prompt_tokens, "
                "completion_tokens, label, failure_mode, failure_kind, created_at) VALUES (1, 1, 1, 'c1', "
                "'Find the river', 'fail', 'final', '{}', 2, 1, 0, 0, 1.0, 0.0, 1, 1, 'fail', 'wrong_tool', "
                "'bad_arguments', '2024-01-01 00:00:00')"
            )
        )
        for i in range(2):
            s.execute(
                text(
                    "INSERT INTO steps (trajectory_id, idx, role, content, tool_calls, span) "
                    "VALUES (1, :i, 'user', 'x', '[]', '{}')"
                ),
                {"i": i},
            )
        s.execute(
            text(
                "INSERT INTO labels (trajectory_id, outcome, failure_mode, first_wrong_step, annotator, created_at, "
                "is_current) VALUES (1, 'fail', 'wrong_tool', 1, 'ana', '2024-01-01 00:00:00', :c)"
            ),
            {"c": True},
        )
    S.forget(url)
    assert S.upgrade(url) == schema.SCHEMA_VERSION
    store = S.connect(url)
    with store.read() as s:
        assert s.execute(text("SELECT failure_kind, annotator FROM labels")).one() == ("wrong_tool", "ana")
        assert s.execute(text("SELECT label_kind, diagnosis_kind FROM trajectories")).one() == (
            "wrong_tool",
            "bad_arguments",
        )
        assert s.execute(text("SELECT sample_id FROM cases")).scalar() == "c1"
    (label,) = S.label_history(1, store=store)
    assert (label.outcome, label.failure_kind, label.first_wrong_step, label.annotator) == (
        "fail",
        "wrong_tool",
        1,
        "ana",
    )
    (row,) = S.list_trajectories(store=store, label_kind="wrong_tool", diagnosis_kind="bad_arguments").rows
    assert (row.id, row.case_row_id, row.sample_id, row.label_kind, row.diagnosis_kind) == (
        1,
        1,
        "c1",
        "wrong_tool",
        "bad_arguments",
    )
    assert S.get_trajectory(1, store=store).case["id"] == "c1"
    assert S.run_stats(1, store=store).label_kinds == {"wrong_tool": 1}
    # The one-current-label-per-trajectory index survived the table copy: a new label supersedes the old one.
    S.set_label(1, "fail", failure_kind="bad_arguments", annotator="ben", store=store)
    assert [(x.failure_kind, x.is_current) for x in S.label_history(1, store=store)] == [
        ("wrong_tool", False),
        ("bad_arguments", True),
    ]
    with store.read() as s:
        from sqlalchemy import inspect

        indexes = {ix["name"] for ix in inspect(s.connection()).get_indexes("trajectories")}
        assert (
            "ix_trajectories_run_id_diagnosis_kind" in indexes and "ix_trajectories_run_id_failure_kind" not in indexes
        )
        assert "ix_cases_sample_id" in {ix["name"] for ix in inspect(s.connection()).get_indexes("cases")}
        # 0008: the integer key of a case has its own name on both tables, its links kept.
        assert s.execute(text("SELECT case_row_id FROM run_cases")).scalar() == 1
        assert s.execute(text("SELECT case_row_id FROM trajectories")).scalar() == 1
        assert "ix_trajectories_case_row_id" in indexes


def test_upgrade_to_0010_seeds_the_real_data_kinds_and_keeps_a_custom_one_of_the_same_key(tmp_path):
    """0010 adds the kinds real data sets label as built-in kinds; a store whose users already made `user_error`
    keeps its hotkey and the labels that use it."""
    url = f"sqlite:///{tmp_path / 'at-0009.sqlite'}"
    assert S.upgrade(url, "0009") == "0009"
    with S.connect(url, check=False).write() as s:
        s.execute(
            text(
                "INSERT INTO failure_kinds (key, definition, hotkey, builtin, position, created_at) "
                "VALUES ('user_error', 'mine', NULL, :f, 99, '2024-01-01 00:00:00')"
            ),
            {"f": False},
        )
        s.execute(text("UPDATE failure_kinds SET hotkey = NULL WHERE hotkey = '9'"))
        s.execute(text("UPDATE failure_kinds SET hotkey = '9' WHERE key = 'user_error'"))
    S.forget(url)
    assert S.upgrade(url) == schema.SCHEMA_VERSION
    from evalrx.core.failures import DEFINITIONS, FAILURE_KINDS

    kinds = S.list_kinds(store=url)
    assert [k.key for k in kinds if k.builtin] == list(FAILURE_KINDS)
    by_key = {k.key: k for k in kinds}
    assert by_key["user_error"].hotkey == "9" and by_key["user_error"].definition == DEFINITIONS["user_error"]
    assert by_key["policy_violation"].definition == DEFINITIONS["policy_violation"]
    S.forget(url)


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_upgrade_to_0016_moves_judge_jobs_and_analysis_requests_onto_the_one_queue(dialect, tmp_path, request):
    """0016 gives each judge job and analysis request a jobs row with its queue state; the pages read the same."""
    if dialect == "sqlite":
        url, server = f"sqlite:///{tmp_path / 'at-0015.sqlite'}", None
    else:
        server = request.getfixturevalue("pg_server")
        url = server.create_database()
    try:
        assert S.upgrade(url, "0015") == "0015"
        with S.connect(url, check=False).write() as s:
            s.execute(
                text(
                    "INSERT INTO runs (id, name, status, source, config, meta, n_cases, n_done, n_pass, n_fail, "
                    "n_error, key_bound, created_at) VALUES (1, 'r', 'done', 'queue', '{}', '{}', 1, 1, 0, 1, 0, "
                    ":f, '2024-01-01 00:00:00')"
                ),
                {"f": False},
            )
            s.execute(
                text(
                    "INSERT INTO jobs (run_id, status, worker_id, attempts, idle_claims, progress_done, "
                    "progress_total, cancel_requested, created_at) VALUES (1, 'done', 'w0', 1, 0, 1, 1, :f, "
                    "'2024-01-01 00:00:00')"
                ),
                {"f": False},
            )
            # Cases, run cases and trajectories are as they are today: written as the models write them.
            s.add(schema.Case(id=1, digest="d", sample_id="c1"))
            s.flush()
            s.add(schema.RunCase(run_id=1, case_row_id=1, position=0))
            s.add(schema.Trajectory(id=1, run_id=1, case_row_id=1, sample_id="c1", outcome="fail"))
            s.flush()
            s.execute(
                text(
                    "INSERT INTO judge_jobs (id, run_id, scope, trajectory_ids, spec, backend, with_findings, "
                    "concurrency, options, status, worker_id, progress_done, progress_total, n_verdicts, n_refused, "
                    "n_failed, n_cached, notes, cancel_requested, error, created_at, started_at, finished_at) VALUES "
                    "(7, 1, 'run 1', '[1]', 'gpt-4o-mini', 'api', :f, 1, '{}', 'running', 'w1', 1, 3, 1, 0, 0, 0, "
                    "'[]', :t, NULL, '2024-01-02 00:00:00', '2024-01-02 00:01:00', NULL)"
                ),
                {"f": False, "t": True},
            )
            s.execute(
                text(
                    "INSERT INTO analysis_requests (id, trajectory_id, analyzers, model, status, worker_id, error, "
                    "created_at, started_at, finished_at) VALUES (4, 1, '[\"attention\"]', NULL, 'failed', 'w2', "
                    "'boom', '2024-01-03 00:00:00', '2024-01-03 00:01:00', '2024-01-03 00:02:00')"
                )
            )
        S.forget(url)
        assert S.upgrade(url) == schema.SCHEMA_VERSION
        job = S.get_judge_job(7, store=url)
        assert (job.status, job.worker_id, job.progress_done, job.progress_total, job.cancel_requested) == (
            "running",
            "w1",
            1,
            3,
            True,
        )
        assert job.started_at is not None and job.started_at.minute == 1 and job.n_verdicts == 1
        req = S.get_request(4, store=url)
        assert (req["status"], req["worker_id"], req["error"], req["trajectory_id"]) == ("failed", "w2", "boom", 1)
        assert req["finished_at"].minute == 2
        kinds = {S.get_job(i, store=url).kind for i in (job.job_id, req["job_id"])}
        assert kinds == {"judge", "analysis"}
        (own,) = S.jobs_of_run(1, store=url)
        assert own.kind == "run" and S.get_run(1, store=url).job_id == own.id  # the run's own job stays its latest
    finally:
        S.forget(url)
        if server is not None:
            server.drop_database(url)
