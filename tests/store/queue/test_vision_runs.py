"""A run of the demo VLM through the real worker keeps the pictures it saw, and its export carries them:
the case picture and the zoomed one by hash with their bytes, back into another store unchanged; and every
export the app offers for it (JSONL, Parquet, ATIF zipped with its pictures, OTLP, the labels CSV) imports back
through the Import page's own steps."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import pytest

import evalrx.interop as X
import evalrx.store as S
from evalrx.config import ModelConfig, RunConfig
from evalrx.demo.vision_data import VISION_TOOLS
from evalrx.runner import Worker, enqueue_run
from evalrx.suites import load_cases

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "app"))

from components import importer  # noqa: E402
from components.export_panel import FORMATS, write_export  # noqa: E402


@pytest.fixture(scope="module")
def vlm_run(tmp_path_factory):
    """Two zoom cases run by the demo VLM (one store for the module: the run is the slow part); a JSONL export
    written before the labels, then a whole-trajectory label and a step label. Returns (url, run, bare export)."""
    tmp = tmp_path_factory.mktemp("vlm")
    url = f"sqlite:///{tmp / 'vlm.sqlite'}"
    S.upgrade(url)
    store = S.connect(url)
    cases = load_cases("demo/vision_zoom")[:2]
    cfg = RunConfig(model=ModelConfig("evalrx-tiny-vl"), tools=list(VISION_TOOLS), max_turns=4)
    rid = enqueue_run(cfg, cases, runtime={"max_new_tokens": 64}, store=store)
    Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    bare = tmp / "bare.jsonl"
    X.export_run(rid, bare, store=store)
    first, second = S.list_trajectories(run_id=rid, store=store, descending=False).rows
    S.set_label(
        first.id, "fail", failure_kind="wrong_tool", first_wrong_step=1, note="zoomed", annotator="ana", store=store
    )
    S.set_label(second.id, "fail", step_idx=1, note="this step", annotator="ana", store=store)
    yield url, rid, bare
    S.forget(url)


def test_a_vlm_run_exports_its_pictures_and_imports_them_back(vlm_run, store_url, tmp_path):
    url, rid, _ = vlm_run
    store = S.connect(url)
    rows = S.list_trajectories(run_id=rid, store=store).rows
    media = {r.sample_id: S.step_pictures(r.id, store=store) for r in rows}
    assert all(media.values()), "the model zoomed on every case, and the worker kept each zoomed picture"

    first = tmp_path / "first.jsonl"
    assert X.export_run(rid, first, store=store) == 2
    for line in first.read_text().splitlines():
        row = json.loads(line)
        shown = {s["idx"]: [p["sha256"] for p in s["images"]] for s in row["steps"] if "images" in s}
        assert shown == media[row["sample_id"]]
        for s in row["steps"]:
            for p in s.get("images", []):
                assert hashlib.sha256(base64.b64decode(p["base64"])).hexdigest() == p["sha256"]
                assert p["mime"] == "image/png"
        assert row["case"]["image"]["mime"] == "image/png"

    result = X.import_file(first, store=store_url)
    (imported,) = result.run_ids
    for r in S.list_trajectories(run_id=imported, store=store_url).rows:
        assert S.step_pictures(r.id, store=store_url) == media[r.sample_id]
    second = tmp_path / "second.jsonl"
    X.export_run(imported, second, store=store_url)
    assert second.read_bytes() == first.read_bytes()

    # Replayed on the demo VLM, an imported trajectory's analyses see the same two pictures the run showed.
    import evalrx.store.analyses as A

    tid = S.list_trajectories(run_id=imported, store=store_url).rows[0].id
    shown = S.shown_pictures(tid, store=store_url)
    (zoom_step,) = S.step_pictures(tid, store=store_url)
    assert sorted(shown) == [0, zoom_step] and all(p[:8] == b"\x89PNG\r\n\x1a\n" for (p,) in shown.values())
    req = A.request_analysis(tid, ["attention"], model="evalrx-tiny-vl", store=store_url)
    Worker(S.connect(store_url), exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    assert A.get_request(req, store=store_url)["status"] == "done"
    (att,) = S.load_analyses(tid, "attention", store=store_url)
    assert [img["step"] for img in att["meta"]["images"]] == [0, zoom_step]
    assert att["arrays"]["patches"].shape[-1] == 128


def _rows(run_id: int, store: str) -> list:
    out = Path(tempfile.mkdtemp(prefix="rows-")) / "rows.jsonl"
    X.export_run(run_id, out, store=store)
    return [json.loads(line) for line in out.read_text().splitlines()]


def _label_rows(run_id: int, store: str) -> list:
    """The run's labels CSV as written, less its store ids (another store numbers them anew)."""
    out = Path(tempfile.mkdtemp(prefix="labels-")) / "labels.csv"
    X.export_labels_csv(out, run_id=run_id, store=store)
    return [{k: v for k, v in r.items() if k not in ("trajectory_id", "run_id")} for r in csv.DictReader(out.open())]


def _through_the_import_page(path: Path, store: str) -> list:
    """What the Import page does with a dropped file: keep it under its name, tell labels from trajectories,
    preview it, then import it in the background job; returns the new runs."""
    saved = importer.save_upload(path.name, path.read_bytes())
    assert saved.name == path.name and X.labels_format(saved) is None
    pre = X.preview_file(saved, store=store)
    job = importer.start("roundtrip", saved, pre.n_trajectories, S.connect(store))
    job.thread.join(60)
    assert job.finished and job.error is None, job.error
    importer.forget("roundtrip")
    return job.result.run_ids


@pytest.mark.parametrize("label", list(FORMATS))
def test_every_export_the_app_offers_imports_back_through_the_import_page(vlm_run, label, tmp_path, monkeypatch):
    url, rid, bare = vlm_run
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the upload folder of this test
    (tmp_path / "out").mkdir()
    path, n = write_export(label, tmp_path / "out", f"run{rid}", run_id=rid, store=S.connect(url))
    again = f"sqlite:///{tmp_path / 'again.sqlite'}"
    S.upgrade(again)
    try:
        if label == "Labels (CSV)":  # onto the same run imported without its labels
            (run,) = _through_the_import_page(bare, again)
            saved = importer.save_upload(path.name, path.read_bytes())
            assert X.labels_format(saved) == "csv"
            pre = X.preview_labels(saved, store=again)
            assert (pre.n_labels, pre.runs) == (n, [(run, n)]) and n == 2
            res = X.import_labels(saved, run_id=pre.runs[0][0], store=again)
            assert (res.n_labels, res.n_step_labels, res.unmatched) == (1, 1, [])
            assert _label_rows(run, again) == _label_rows(rid, url)
            return
        (run,) = _through_the_import_page(path, again)
        before, after = _rows(rid, url), _rows(run, again)
        if label == "OpenTelemetry (OTLP JSON)":  # spans without their content (the export's default): the shape
            assert S.get_run(run, store=again).name == f"run{rid}"  # the file's name, less its suffixes
            shape = [
                [(r["sample_id"], r["attempt"], r["outcome"]) + tuple(s["role"] for s in r["steps"])] for r in before
            ]
            assert [
                [(r["sample_id"], r["attempt"], r["outcome"]) + tuple(s["role"] for s in r["steps"])] for r in after
            ] == shape
        else:  # the whole run: steps, both pictures of each case, labels, diagnoses, the run's name and config
            if label == "ATIF":
                assert path.name == f"run{rid}.atif.jsonl.zip"  # the document and its pictures, zipped
            assert after == before
            assert all(s.get("images") for r in after for s in r["steps"] if s["role"] == "tool")
    finally:
        S.forget(again)
