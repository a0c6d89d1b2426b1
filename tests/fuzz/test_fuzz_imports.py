"""Every import format, as `evalrx import` and the Import page read a file: records, or one line naming the
file and what is wrong, with the store's rows as they were. Inputs are real files, mutated (mutate.py)."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mutate import SEEDS, mutated_file, one_line, ran

import evalrx.store as S
from evalrx.interop import (
    ImportFormatError,
    import_file,
    import_labels,
    labels_format,
    preview_file,
    preview_labels,
)

TRAJECTORY_SEEDS = [
    "inspect.eval",
    "inspect.json",
    "run.jsonl",
    "run.atif.jsonl",
    "run.otlp.jsonl",
    "run.parquet",
    "run.atif.jsonl.zip",
    "autogen.spans.jsonl",
    "openai_chat.jsonl",
    "tau_bench.json",
    "whowhen.json",
]
LABEL_SEEDS = ["labels.csv", "labels.jsonl", "agentrx.labels.json", "trail.labels.json"]


@pytest.fixture(scope="session")
def pristine(tmp_path_factory) -> Path:
    """A SQLite store holding the Inspect seed's run, so labels files find their cases."""
    return pristine_store(tmp_path_factory.mktemp("fuzz-store") / "pristine.sqlite")


def pristine_store(path: Path) -> Path:
    """A SQLite store at `path` holding the Inspect seed's run (what every example starts from)."""
    url = f"sqlite:///{path}"
    S.upgrade(url)
    import_file(SEEDS / "inspect.eval", store=url)
    S.forget(url)
    return path


def row_counts(db: Path) -> dict:
    with closing(sqlite3.connect(db)) as con:  # closed, not only committed: the next example replaces the file
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables}


def import_like_the_page(path: Path, url: str) -> None:
    """What the Import page does with a dropped file (labels told first), then what `evalrx import` does."""
    if labels_format(path) is not None:
        preview_labels(path, store=url)
        import_labels(path, store=url)
        return
    preview_file(path, store=url)
    import_file(path, store=url, again=True)


def fresh_store(pristine: Path) -> str:
    """The work store (one path, so one engine and its compiled SQL for every example) reset to `pristine`."""
    db = pristine.with_name("work.sqlite")
    url = f"sqlite:///{db}"
    S.connect(url, check=False).dispose()  # no pooled connection may hold the file it replaces
    for old in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        old.unlink(missing_ok=True)  # a new file: a connection a failed import left open keeps the old one
    shutil.copyfile(pristine, db)
    return url


def check_import(name: str, raw: bytes, pristine: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="evalrx-fuzz-") as tmp:
        path = Path(tmp) / name  # the seed's name: suffixes are part of what a reader may look at
        path.write_bytes(raw)
        url = fresh_store(pristine)
        db = pristine.with_name("work.sqlite")
        before = row_counts(db)
        try:
            import_like_the_page(path, url)
        except ImportFormatError as exc:
            assert one_line(exc), repr(str(exc))
            assert str(exc).startswith(str(path)), f"the message does not name the file: {exc}"
            assert row_counts(db) == before, "a failed import changed the store"


@pytest.mark.parametrize("seed", TRAJECTORY_SEEDS + LABEL_SEEDS)
@given(data=st.data())
def test_a_mutated_file_imports_or_says_what_is_wrong_in_one_line(seed, pristine, data):
    ran(f"import {seed}")
    check_import(seed, data.draw(mutated_file(seed)), pristine)


@given(raw=st.binary(max_size=512), name=st.sampled_from(["x.jsonl", "x.json", "x.eval", "x.csv", "x.zip", "x"]))
def test_random_bytes_import_or_say_what_is_wrong_in_one_line(raw, name, pristine):
    ran("import random bytes")
    check_import(name, raw, pristine)
