"""The Import page in a real Chromium: drop a real Inspect `.eval` log (written by inspect_ai), see what
it holds, import it with the progress bar, open one of its failures, and export the run as ATIF; an upload
keeps its own name, and a labels file goes onto the run it labels."""

from __future__ import annotations

import hashlib
import json
import random
import re
import zipfile
from pathlib import Path

import pytest
from appdata import make_case, make_trajectory
from apphelpers import goto, main_text, open_listed, poll, settle
from inspect_logs import inspect_env, write_eval_log

import evalrx.store as S

pytestmark = [
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def eval_log(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect-browser")
    with inspect_env(root):
        return write_eval_log(root / "logs")


def test_import_an_eval_log_open_a_failure_and_export_the_run_as_atif(app_server, app_env, eval_log, page, tmp_path):
    goto(page, f"{app_server.url}/import")
    page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(str(eval_log))
    page.locator("[data-testid='stMetric']", has_text="Format").wait_for(timeout=30_000)
    settle(page)
    text = main_text(page)
    assert "inspect-eval" in text and "mockllm/model" in text
    assert page.locator("[data-testid='stMetric']", has_text="Trajectories").inner_text().split()[-1] == "4"
    assert page.locator("[data-testid='stMetric']", has_text="Attempts").inner_text().split()[-1] == "2"

    page.get_by_role("button", name="Import", exact=True).click()
    done = page.get_by_text(re.compile(r"Imported 4 trajectories \(inspect-eval\) into run \d+"))
    done.wait_for(timeout=30_000)
    run_id = re.search(r"into run (\d+)", done.inner_text()).group(1)
    assert "Imported 4 of 4 trajectories (" in main_text(page) and " a second)" in main_text(page)

    # One of its failures: the sample whose tool raised an error.
    goto(page, f"{app_server.url}/trajectories?run={run_id}&outcome=fail")
    assert "2 trajectories" in main_text(page)
    open_listed(page)
    page.wait_for_url(re.compile(r"/trajectory\?id=\d+"))
    # the tool's error, shown on its step (the page may still be drawing the steps when it goes quiet)
    page.get_by_text("no such key: missing").first.wait_for(timeout=30_000)
    # Its target is an expected answer, not reference calls: the card says so, not "no reference".
    why = page.locator(".st-key-why-it-failed").inner_text()
    assert "expected answer grades the run but names no step" in why and "(no reference)" not in why

    goto(page, f"{app_server.url}/?run={run_id}")
    page.get_by_text("Export this run").click()
    settle(page)
    page.get_by_test_id("stRadio").get_by_text("ATIF", exact=True).click()
    settle(page)
    assert page.get_by_role("radio", name="ATIF", exact=True).is_checked()
    page.get_by_role("button", name="Prepare").click()
    # the log's first sample shows a picture: the export is the ATIF file and the picture beside it, zipped
    button = page.get_by_role("button", name=re.compile(r"Download run\d+\.atif\.jsonl\.zip \(4 rows\)"))
    poll(lambda: button.count() == 1, what="the download button")
    with page.expect_download() as dl:
        button.click()
    out = tmp_path / "run.atif.jsonl.zip"
    dl.value.save_as(str(out))
    with zipfile.ZipFile(out) as zf:
        names = sorted(zf.namelist())
        (doc_name,) = [n for n in names if n.endswith(".atif.jsonl")]
        docs = [json.loads(line) for line in zf.read(doc_name).decode().splitlines()]
        pictures = {n: zf.read(n) for n in names if n.startswith("images/")}
    assert len(docs) == 4 and all(d["schema_version"].startswith("ATIF") for d in docs)
    assert sorted(d["extra"]["evalrx"]["attempt"] for d in docs) == [1, 1, 2, 2]
    # both attempts of that sample name the one picture file, by its hash, and its bytes are in the zip
    (name,) = pictures
    assert hashlib.sha256(pictures[name]).hexdigest() == Path(name).stem
    assert sum(name in json.dumps(d) for d in docs) == 2

    # the zip just downloaded imports back, pictures and all
    goto(page, f"{app_server.url}/import")
    page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(str(out))
    page.locator("[data-testid='stMetric']", has_text="Format").wait_for(timeout=30_000)
    page.get_by_role("button", name="Import", exact=True).click()
    back = page.get_by_text(re.compile(r"Imported 4 trajectories \(atif\) into run \d+"))
    back.wait_for(timeout=30_000)
    again = re.search(r"into run (\d+)", back.inner_text()).group(1)

    def pictures_of(run: str) -> list:
        url = app_env["EVALRX_DATABASE_URL"]
        shown = [S.shown_pictures(r.id, store=url) for r in S.list_trajectories(run_id=int(run), store=url).rows]
        return sorted(hashlib.sha256(p).hexdigest() for pics in shown for some in pics.values() for p in some)

    assert Path(name).stem in pictures_of(again) and pictures_of(again) == pictures_of(run_id)


def test_an_upload_keeps_its_name_and_a_labels_file_goes_onto_the_run_it_labels(app_server, app_env, page, tmp_path):
    rng = random.Random(5)
    chats = tmp_path / "walkthrough chats.jsonl"  # rows as `evalrx run --out` writes them: no run name in them
    chats.write_text(
        "".join(
            json.dumps({"case_id": c.id, "meta": c.meta, **make_trajectory(c, rng).to_dict()}) + "\n"
            for c in (make_case(i, prefix="wk") for i in range(2))
        )
    )
    upload = page.locator("[data-testid='stFileUploaderDropzoneInput']")
    goto(page, f"{app_server.url}/import")
    upload.set_input_files(str(chats))
    page.get_by_role("button", name="Import", exact=True).click()
    done = page.get_by_text(re.compile(r"Imported 2 trajectories \(evalrx\) into run \d+"))
    done.wait_for(timeout=30_000)
    run_id = int(re.search(r"into run (\d+)", done.inner_text()).group(1))
    assert S.get_run(run_id, store=app_env["EVALRX_DATABASE_URL"]).name == "walkthrough chats"

    page.get_by_role("button", name="Import another file").click()
    broken = tmp_path / "broken notes.json"
    broken.write_text('{"steps": [], "sample_id": "a"}\n{"steps": 3, "sample_id": "b"}\n')
    upload.set_input_files(str(broken))
    page.get_by_text("broken notes.json: line 2: `steps` must be a list").wait_for(timeout=30_000)
    assert "evalrx-uploads" not in main_text(page)

    labels = tmp_path / "walkthrough.labels.csv"
    labels.write_text(
        "case_id,outcome,failure_kind,note\nwk00000,fail,wrong_tool,picked the wrong tool\nwk00001,pass,,\n"
    )
    upload.set_input_files(str(labels))
    page.get_by_text(f"These labels are for run {run_id}: walkthrough chats (2 of 2 labels).").wait_for(timeout=30_000)
    assert page.locator("[data-testid='stMetric']", has_text="Format").inner_text().endswith("labels CSV")
    page.get_by_role("button", name="Import labels").click()
    page.get_by_text(
        f"Stored 2 labels and 0 step labels (labels CSV) on run {run_id}: walkthrough chats (2 of 2 labels)."
    ).wait_for(timeout=30_000)
    url = app_env["EVALRX_DATABASE_URL"]
    got = {
        r.sample_id: [(lab.outcome, lab.failure_kind) for lab in S.current_labels(r.id, store=url)]
        for r in S.list_trajectories(run_id=run_id, store=url).rows
    }
    assert got == {"wk00000": [("fail", "wrong_tool")], "wk00001": [("pass", None)]}
