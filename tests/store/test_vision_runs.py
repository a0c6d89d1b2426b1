"""A run of the demo VLM through the real worker keeps the pictures it saw, and its export carries them:
the case picture and the zoomed one by hash with their bytes, back into another store unchanged."""

from __future__ import annotations

import base64
import hashlib
import json

import evalrx.interop as X
import evalrx.store as S
from evalrx.config import ModelConfig, RunConfig
from evalrx.demo.vision_data import VISION_TOOLS
from evalrx.runner import Worker, enqueue_run
from evalrx.suites import load_cases


def test_a_vlm_run_exports_its_pictures_and_imports_them_back(sqlite_url, store_url, tmp_path):
    store = S.connect(sqlite_url)
    cases = load_cases("demo/vision_zoom")[:2]
    cfg = RunConfig(model=ModelConfig("evalrx-tiny-vl"), tools=list(VISION_TOOLS), max_turns=4)
    rid = enqueue_run(cfg, cases, runtime={"max_new_tokens": 64}, store=store)
    Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    rows = S.list_trajectories(run_id=rid, store=store).rows
    media = {r.sample_id: S.step_media(r.id, store=store) for r in rows}
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
        assert S.step_media(r.id, store=store_url) == media[r.sample_id]
    second = tmp_path / "second.jsonl"
    X.export_run(imported, second, store=store_url)
    assert second.read_bytes() == first.read_bytes()

    # Replayed on the demo VLM, an imported trajectory's analyses see the same two pictures the run showed.
    import evalrx.store.analyses as A

    tid = S.list_trajectories(run_id=imported, store=store_url).rows[0].id
    shown = S.shown_pictures(tid, store=store_url)
    (zoom_step,) = S.step_media(tid, store=store_url)
    assert sorted(shown) == [0, zoom_step] and all(p[:8] == b"\x89PNG\r\n\x1a\n" for (p,) in shown.values())
    req = A.request_analysis(tid, ["attention"], model="evalrx-tiny-vl", store=store_url)
    Worker(S.connect(store_url), exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    assert A.get_request(req, store=store_url)["status"] == "done"
    (att,) = S.load_analyses(tid, "attention", store=store_url)
    assert [img["step"] for img in att["meta"]["images"]] == [0, zoom_step]
    assert att["arrays"]["patches"].shape[-1] == 128
