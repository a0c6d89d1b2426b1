"""Files as the Import page takes them: an upload keeps its own name (the run's name, the name errors give), an
export zipped with its pictures and a Parquet export read back, and each bad one is one line naming the file."""

from __future__ import annotations

import json
import random
import sys
import zipfile
from pathlib import Path

import pytest
from storehelpers import fill_run, make_case, make_trajectory

import evalrx.interop as X
import evalrx.store as S

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "app"))

from components import importer  # noqa: E402


def _rows_file(path: Path, n: int = 3) -> Path:
    """Rows as `evalrx run --out` writes them: no run name, so the run is named after the file."""
    rng = random.Random(0)
    with path.open("w") as fh:
        for i in range(n):
            c = make_case(i)
            fh.write(json.dumps({"case_id": c.id, "meta": c.meta, **make_trajectory(c, rng).to_dict()}) + "\n")
    return path


def test_an_upload_keeps_its_name_for_the_run_and_for_its_errors(sqlite_url, tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    data = _rows_file(tmp_path / "x.jsonl").read_bytes()
    saved = importer.save_upload("C:\\Users\\ana\\Week 3 chats.jsonl", data)
    assert saved.name == "Week 3 chats.jsonl" and saved.read_bytes() == data
    assert importer.save_upload("Week 3 chats.jsonl", data) == saved  # the same bytes and name: saved once
    job = importer.start("k", saved, 3, S.connect(sqlite_url))
    job.thread.join(30)
    assert job.error is None and S.get_run(job.result.run_ids[0], store=sqlite_url).name == "Week 3 chats"

    bad = importer.save_upload("notes.json", b'{"steps": [], "sample_id": "a"}\n{"steps": 3, "sample_id": "b"}\n')
    with pytest.raises(X.ImportFormatError) as err:
        X.preview_file(bad, store=sqlite_url)
    assert importer.shown_error(err.value, bad) == "notes.json: line 2: `steps` must be a list"
    job = importer.start("k2", bad, 1, S.connect(sqlite_url))
    job.thread.join(30)
    assert job.error == "notes.json: line 2: `steps` must be a list"
    assert importer.upload_name("../../.bashrc") == "bashrc" and importer.upload_name("\x00") == "upload"


def test_an_export_zipped_with_its_pictures_names_the_zip_and_the_place_of_a_bad_record(sqlite_url, tmp_path):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
    good = _rows_file(tmp_path / "run.jsonl").read_text().splitlines()
    packed = tmp_path / "run.jsonl.zip"
    with zipfile.ZipFile(packed, "w") as zf:
        zf.writestr("run.jsonl", "\n".join([good[0], '{"steps": "none", "sample_id": "b"}']) + "\n")
        zf.writestr("images/a.png", png)
    with pytest.raises(X.ImportFormatError, match=r"run\.jsonl\.zip: run\.jsonl, line 2: `steps` must be a list$"):
        X.import_file(packed, store=sqlite_url)
    assert S.list_runs(store=sqlite_url) == []
    with zipfile.ZipFile(packed, "w") as zf:  # a picture's name that climbs out of the folder: not an export
        zf.writestr("run.jsonl", "\n".join(good) + "\n")
        zf.writestr("images/../../a.png", png)
    with pytest.raises(X.ImportFormatError, match="nor an export zipped with its pictures"):
        X.import_file(packed, store=sqlite_url)
    with zipfile.ZipFile(packed, "w") as zf:
        zf.writestr("run.jsonl", "\n".join(good) + "\n")
    res = X.import_file(packed, store=sqlite_url)
    assert (res.n_trajectories, S.get_run(res.run_ids[0], store=sqlite_url).name) == (3, "run")


def test_a_parquet_export_reads_back_and_a_foreign_or_damaged_one_is_one_line(sqlite_url, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    store = S.connect(sqlite_url)
    run_id, _, _ = fill_run(store, 3, name="parquet run")
    out = tmp_path / "run.parquet"
    X.export_run(run_id, out, store=store)
    older = tmp_path / "older.parquet"  # written before the rest of each row had a column
    pq.write_table(pq.read_table(out).drop_columns(["rest_json"]), older)
    res = X.import_file(older, store=sqlite_url)
    assert (res.format, res.n_trajectories, S.get_run(res.run_ids[0], store=sqlite_url).name) == (
        "parquet",
        3,
        "parquet run",
    )
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), foreign)
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(out.read_bytes()[:200] + out.read_bytes()[-8:])
    for path, problem in (
        (foreign, "foreign.parquet: file: a Parquet file, but not an evalrx export (it has no case_id or steps_json"),
        (damaged, "damaged.parquet: file: not a readable Parquet file ("),
    ):
        with pytest.raises(X.ImportFormatError) as err:
            X.import_file(path, store=sqlite_url)
        assert problem in str(err.value) and "\n" not in str(err.value), err.value
    assert len(S.list_runs(store=sqlite_url)) == 2
