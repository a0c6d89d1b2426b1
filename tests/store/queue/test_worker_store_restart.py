"""A worker outlives its PostgreSQL server restarting: it waits the outage out and serves the next run."""

from __future__ import annotations

import threading
import time

import scripted_backend  # noqa: F401  (registers the `scripted` backend and specs)
from pgserver import PostgresServer
from workerhelpers import cases, integrity_report, scripted_config

import evalrx.store as S
from evalrx.runner import Worker, enqueue_run


def _wait_done(run_id: int, store, deadline_s: float) -> str:
    end = time.monotonic() + deadline_s
    status = ""
    while time.monotonic() < end:
        try:
            status = S.get_run(run_id, store=store).status
        except Exception as exc:  # the server may still be coming back
            if not S.unreachable(exc):
                raise
        if status == "done":
            return status
        time.sleep(0.2)
    return status


def test_a_worker_waits_out_a_postgres_restart_and_serves_the_next_run():
    server = PostgresServer().start()  # its own server: a restart must not touch the session's
    try:
        url = server.create_database()
        S.upgrade(url)
        store = S.connect(url)
        worker = Worker(store, poll_s=0.1, heartbeat_s=0.5, stale_after_s=5.0)
        errors: list = []

        def serve() -> None:
            try:
                worker.run()
            except BaseException as exc:  # what a worker process would die of
                errors.append(exc)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        first = enqueue_run(scripted_config(), cases(3), name="before", store=store)
        assert _wait_done(first, store, 60) == "done"

        server.restart()  # every connection drops while the worker polls
        time.sleep(1.0)
        second = enqueue_run(scripted_config(), cases(3, start=3), name="after", store=store)
        assert _wait_done(second, store, 60) == "done", errors
        assert errors == [] and thread.is_alive()
        assert integrity_report(store) == dict.fromkeys(integrity_report(store), 0)
        worker.stop()
        thread.join(30)
        assert not thread.is_alive()
        S.forget(url)
    finally:
        server.stop()


def test_unreachable_tells_an_outage_from_a_bad_query(tmp_path):
    from sqlalchemy import text

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    store = S.connect(url)
    try:
        with store.read() as session:
            session.execute(text("SELECT * FROM no_such_table"))
    except Exception as exc:
        assert not S.unreachable(exc)  # a bad query is not waited out
    else:
        raise AssertionError("the query should have failed")
    S.forget(url)


def test_a_job_lost_to_an_outage_is_requeued_but_its_live_worker_stays_alive(sqlite_url):
    from datetime import timedelta

    from sqlalchemy import update

    from evalrx.store import schema as t

    store = S.connect(sqlite_url)
    run_id = enqueue_run(scripted_config(), cases(1), name="lost", store=store)
    S.register_worker(store, "w-live")
    job = S.claim_job(store, "w-live", S.JobKind.RUN)
    assert job is not None
    with store.write() as s:  # the job's heartbeat went stale while the store was away
        s.execute(update(t.Job).where(t.Job.id == job.id).values(heartbeat_at=t.utcnow() - timedelta(seconds=120)))
    S.heartbeat(store, "w-live")  # the worker itself is heartbeating again
    assert S.requeue_stale(store, stale_after_s=60) == [job.id]
    assert S.get_run(run_id, store=store).status == "queued"
    assert [w["id"] for w in S.alive_workers(store=store)] == ["w-live"]
