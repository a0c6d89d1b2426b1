"""The Import page in a real Chromium: drop a real Inspect `.eval` log (written by inspect_ai), see what
it holds, import it with the progress bar, open one of its failures, and export the run as ATIF."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path

import pytest
from apphelpers import goto, main_text, open_listed, poll, settle
from inspect_logs import inspect_env, write_eval_log

pytestmark = [
    pytest.mark.browser,
    pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def eval_log(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect-browser")
    with inspect_env(root):
        return write_eval_log(root / "logs")


def test_import_an_eval_log_open_a_failure_and_export_the_run_as_atif(app_server, eval_log, page, tmp_path):
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
