"""A store that cannot be written makes an import, a run, a labels import, a worker and a label from the app say
so in one line (exit 2 on the command line, no traceback) and leaves every table's rows as they were.

How the store is made unwritable: tests run as root in CI, where chmod 0444 does not stop a write, and a
size-limited filesystem needs a mount the machine may refuse. So SQLite is opened read-only through its URI
form (`sqlite:///file:PATH?mode=ro&uri=true`, which the store's URL handling passes to sqlite3 as it is) and
PostgreSQL's database gets `default_transaction_read_only = on` (every write is refused, SQLSTATE 25006).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, inspect, select, table
from storehelpers import fill_run

import evalrx.store as S

REPO = Path(__file__).resolve().parents[2]
SPANS = REPO / "tests" / "fixtures" / "interop" / "autogen_team.spans.jsonl"


def row_counts(url: str) -> dict:
    """Rows in every table of the store."""
    store = S.connect(url)
    with store.engine.connect() as conn:
        names = inspect(conn).get_table_names()
        return {n: conn.execute(select(func.count()).select_from(table(n))).scalar_one() for n in names}


@pytest.fixture
def unwritable(store_url):
    """(read-only URL of a store holding one run of three trajectories, that run's id, its first case id)."""
    store = S.connect(store_url)
    run_id, cases, _ = fill_run(store, 3)
    S.forget(store_url)
    if store_url.startswith("sqlite"):
        ro_url = f"sqlite:///file:{store_url.removeprefix('sqlite:///')}?mode=ro&uri=true"
    else:
        import psycopg
        from sqlalchemy.engine import make_url

        u = make_url(store_url)
        with psycopg.connect(f"host={u.host} port={u.port} user={u.username} dbname=postgres", autocommit=True) as c:
            c.execute(f'ALTER DATABASE "{u.database}" SET default_transaction_read_only = on')
        ro_url = store_url
    yield ro_url, run_id, cases[0].id
    S.forget(ro_url)
    if not store_url.startswith("sqlite"):  # let the fixture drop it
        with psycopg.connect(f"host={u.host} port={u.port} user={u.username} dbname=postgres", autocommit=True) as c:
            c.execute(f'ALTER DATABASE "{u.database}" SET default_transaction_read_only = off')


def evalrx(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "evalrx", *args], capture_output=True, text=True, timeout=180, env=env, cwd=REPO
    )


def assert_one_line_refusal(out: subprocess.CompletedProcess) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "cannot be written" in lines[0] and "nothing was changed" in lines[0], lines[0]


def test_import_run_and_labels_import_refuse_in_one_line_and_change_nothing(unwritable, tmp_path):
    url, _, case_id = unwritable
    before = row_counts(url)
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"case_id": case_id, "kind": "wrong_tool", "annotator": "ro"}) + "\n")
    for args in (
        ["import", str(SPANS), "--url", url],
        ["run", "--spec", "evalrx-tiny", "--suite", "demo/arithmetic_easy", "--limit", "2", "--url", url],
        ["labels", "import", str(labels), "--url", url],
        ["worker", "--once", "--url", url],
    ):
        assert_one_line_refusal(evalrx(*args))
    assert row_counts(url) == before
    assert not (REPO / "file:").exists()  # the URI form is opened as given, never made into a folder


def test_a_label_set_from_the_app_is_refused_in_one_line(unwritable):
    url, _, _ = unwritable
    tid = S.list_trajectories(store=url).rows[0].id
    before = row_counts(url)
    with pytest.raises(S.StoreUnwritable, match=r"cannot be written .*nothing was changed") as err:
        S.set_label(tid, "fail", failure_kind="wrong_tool", annotator="ro", store=url)
    assert "\n" not in str(err.value)
    assert row_counts(url) == before
