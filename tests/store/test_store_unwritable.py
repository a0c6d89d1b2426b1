"""A store that cannot be written makes an import, a run, a labels import, a worker and a label from the app say
so in one line (exit 2 on the command line, no traceback) and leaves every table's rows as they were.

How the store is made unwritable: a full disk, a SQLite store on a small tmpfs whose free space is then taken
(where the machine allows the mount; CI runs as root). Besides, since chmod 0444 does not stop root, SQLite is
opened read-only through its URI form (`sqlite:///file:PATH?mode=ro&uri=true`, which the store's URL handling
passes to sqlite3 as it is) and PostgreSQL's database gets `default_transaction_read_only = on` (every write is
refused, SQLSTATE 25006).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Iterator

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


def refused_in_one_line_changing_nothing(url: str, case_id: str, tmp_path: Path) -> None:
    """An import, a run, a labels import, a worker and a label set from the app: each refused in one line."""
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
    tid = S.list_trajectories(store=url).rows[0].id
    with pytest.raises(S.StoreUnwritable, match=r"cannot be written .*nothing was changed") as err:
        S.set_label(tid, "fail", failure_kind="wrong_tool", annotator="ro", store=url)
    assert "\n" not in str(err.value)
    assert row_counts(url) == before


def test_a_read_only_store_refuses_commands_and_labels_in_one_line_and_changes_nothing(unwritable, tmp_path):
    url, _, case_id = unwritable
    refused_in_one_line_changing_nothing(url, case_id, tmp_path)
    assert not (REPO / "file:").exists()  # the URI form is opened as given, never made into a folder


@contextmanager
def store_on_a_full_disk(tmp_path: Path, *, in_use: bool) -> Iterator[tuple]:
    """(URL of a SQLite store holding one run, on a small tmpfs whose every free byte is then taken, its first case
    id). `in_use`: a connection stays open as the disk fills, keeping the -wal and -shm files that a first
    connection must create (a full disk refuses them even to a reader). Skipped where the machine refuses the
    mount (the read-only tests above still run there)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], capture_output=True)
    except FileNotFoundError:
        pytest.skip("this machine has no mount command")
    if mounted.returncode != 0:
        pytest.skip(f"this machine refuses a tmpfs mount: {mounted.stderr.decode().strip()}")
    url = f"sqlite:///{disk / 'store.sqlite'}"
    try:
        S.upgrade(url)
        _, cases, _ = fill_run(S.connect(url), 3)
        S.forget(url)
        with closing(sqlite3.connect(disk / "store.sqlite")) as holder:
            holder.execute("SELECT COUNT(*) FROM runs").fetchone()
            if not in_use:
                holder.close()
            with open(disk / "filler", "wb") as f:  # every free block taken, as a full disk leaves it
                try:
                    while True:
                        f.write(b"\0" * (64 << 10))
                        f.flush()
                except OSError:
                    pass
            yield url, cases[0].id
    finally:
        S.forget(url)
        unmounted = subprocess.run(["umount", "-l", str(disk)], capture_output=True)
        assert unmounted.returncode == 0, f"the test's tmpfs at {disk} is still mounted: {unmounted.stderr!r}"


def test_a_full_disk_makes_commands_and_a_label_say_so_in_one_line(tmp_path):
    with store_on_a_full_disk(tmp_path, in_use=True) as (url, case_id):
        refused_in_one_line_changing_nothing(url, case_id, tmp_path)


def test_a_store_first_opened_on_a_full_disk_is_one_line(tmp_path):
    with store_on_a_full_disk(tmp_path, in_use=False) as (url, _):
        assert not Path(url.removeprefix("sqlite:///") + "-shm").exists()  # a first connection must make it
        for args in (["runs", "--url", url], ["worker", "--once", "--url", url]):
            out = evalrx(*args)
            assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
            (line,) = out.stderr.strip().splitlines()
            assert "cannot be opened (disk I/O error)" in line and "free disk space" in line, line
