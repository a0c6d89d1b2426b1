"""Secrets never reach the store: a queued run keeps only allowed config keys, URLs lose their
credentials, and an export of the run carries none of them."""

from __future__ import annotations

import dataclasses
import json

import pytest

import evalrx.interop as X
import evalrx.store as S
from evalrx.config import RUNTIME_SETTINGS, ModelConfig, RunConfig, RuntimeConfig
from evalrx.runner import enqueue_run
from evalrx.store.runs import clean_url, queued_config
from evalrx.suites import load_cases

SECRET = "sk-evalrx-LEAK-CHECK-0123456789"


def test_the_stored_runtime_is_runtime_config_less_the_key():
    assert RUNTIME_SETTINGS == {f.name for f in dataclasses.fields(RuntimeConfig)} - {"api_key"}
    assert RuntimeConfig(api_key=SECRET, max_new_tokens=8).to_dict() == {"max_new_tokens": 8}
    run = RunConfig(model=ModelConfig("gpt-4o-mini", backend="api"), runtime=RuntimeConfig(api_key=SECRET))
    assert SECRET not in json.dumps(run.to_dict())


def test_the_run_config_allow_list_is_the_run_configs_fields_none_of_them_secret():
    from evalrx.config import MODEL_CONFIG_FIELDS, RUN_CONFIG_FIELDS
    from evalrx.store.runs import is_secret_name

    assert RUN_CONFIG_FIELDS == {f.name for f in dataclasses.fields(RunConfig)} | {"version"}
    assert MODEL_CONFIG_FIELDS == {f.name for f in dataclasses.fields(ModelConfig)}
    assert not [k for k in RUN_CONFIG_FIELDS | MODEL_CONFIG_FIELDS | RUNTIME_SETTINGS if is_secret_name(k)]


@pytest.mark.parametrize(
    "url, clean",
    [
        (f"http://user:{SECRET}@127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        (f"https://host/v1?api-key={SECRET}&region=eu", "https://host/v1?region=eu"),
        (f"https://host/v1?access_token={SECRET}&sig={SECRET}", "https://host/v1"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ],
)
def test_urls_lose_userinfo_and_credential_parameters(url, clean):
    assert clean_url(url) == clean


def test_a_queued_run_stores_no_key_header_or_token(store_url, tmp_path):
    store = S.connect(store_url)
    cfg = RunConfig(
        model=ModelConfig("gpt-4o-mini", backend="api"),
        tools=["calculator"],
        base_url=f"http://user:{SECRET}@127.0.0.1:9/v1?api-key={SECRET}",
    )
    run_id = enqueue_run(
        cfg,
        load_cases("demo/arithmetic_easy")[:1],
        store=store,
        runtime={
            "max_new_tokens": 32,
            "api_key": SECRET,
            "extra": {"hf_token": SECRET, "Authorization": f"Bearer {SECRET}", "n": 1},
        },
    )
    info = S.get_run(run_id, store=store)
    assert SECRET not in json.dumps(info.config)
    assert info.config["base_url"] == "http://127.0.0.1:9/v1"
    assert info.config["runtime"] == {"max_new_tokens": 32, "extra": {"n": 1}}
    out = tmp_path / "run.jsonl"
    X.export_run(run_id, out, store=store)
    assert SECRET not in out.read_text()


def test_a_runtime_setting_that_is_not_stored_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown runtime setting\(s\) \['headers'\]; known: .*max_new_tokens"):
        queued_config(RunConfig(model=ModelConfig("evalrx-tiny")), {"headers": {"Authorization": SECRET}})


def test_an_imported_run_config_loses_secret_looking_keys_and_url_credentials(store_url, tmp_path):
    row = {
        "sample_id": "s1",
        "goal": "2+2?",
        "steps": [{"idx": 0, "role": "user", "content": "2+2?"}],
        "final_answer": "4",
        "outcome": "pass",
        "run": {
            "name": "r",
            "config": {
                "base_url": f"http://u:{SECRET}@h/v1",
                "hf_token": SECRET,
                "headers": {"Authorization": SECRET},
                "max_new_tokens": 8,
            },
        },
    }
    f = tmp_path / "in.jsonl"
    f.write_text(json.dumps(row) + "\n")
    res = X.import_file(f, store=store_url)
    info = S.get_run(res.run_ids[0], store=store_url)
    assert SECRET not in json.dumps(info.config)
    assert info.config == {"base_url": "http://h/v1", "max_new_tokens": 8}


def test_an_mcp_servers_headers_and_env_keep_variable_names_and_lose_literal_secrets():
    from evalrx.store.runs import queued_config

    cfg = queued_config(
        {
            "model": {"name": "evalrx-tiny"},
            "mcp_servers": [
                {
                    "name": "docs",
                    "url": "http://h/mcp",
                    "headers": {"Authorization": "Bearer ${DOCS_TOKEN}", "X-Team": "a"},
                },
                {"name": "git", "command": "git-mcp", "env": {"GITHUB_TOKEN": "${env:GH}", "HF_TOKEN": "hf_literal"}},
            ],
        }
    )
    docs, git = cfg["mcp_servers"]
    assert docs["headers"] == {"Authorization": "Bearer ${DOCS_TOKEN}", "X-Team": "a"}
    assert git["env"] == {"GITHUB_TOKEN": "${env:GH}"}  # the literal token is dropped, the reference kept
    assert "hf_literal" not in json.dumps(cfg)


def _store_text(url: str) -> str:
    """Every value of every row of every table of the store, as text."""
    from sqlalchemy import inspect, select, table

    store = S.connect(url)
    out = []
    with store.engine.connect() as conn:
        for name in inspect(conn).get_table_names():
            for row in conn.execute(select("*").select_from(table(name))):
                for v in row:
                    out.append(v.decode("utf-8", "replace") if isinstance(v, (bytes, memoryview)) else str(v))
    return "\n".join(out)


def test_a_run_made_with_a_key_leaves_it_in_no_output_store_export_or_log(store_url, tmp_path):
    """Two runs with a key: one by `evalrx run --api-key-env` against a server that answers, one by the app's
    New run path (a keyed worker writing its log file) against a server that quotes the key it refuses.
    The key is in none of: the CLI's and the worker's output, the worker's log, the store, the exports."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from loopback import ChatServer

    from evalrx.runner.keyed_worker import start_keyed_worker
    from evalrx.store import FINAL_STATUSES

    repo = Path(__file__).resolve().parents[2]
    key = "sk-evalrx-" + os.urandom(12).hex()
    env = dict(os.environ, PYTHONPATH=str(repo), EVALRX_TEST_LEAK_KEY=key)

    def evalrx(*args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "evalrx", *args], capture_output=True, text=True, env=env, timeout=180, cwd=repo
        )
        return f"{out.returncode}\n{out.stdout}\n{out.stderr}"

    refusing = {"error": {"message": "Incorrect API key provided: {auth}", "type": "invalid_request_error"}}
    log = tmp_path / "api-worker.log"
    with ChatServer() as answering, ChatServer(status=400, body=refusing, echo_auth=True) as quoting:
        common = ["--spec", "gpt-4o-mini", "--backend", "api", "--suite", "demo/arithmetic_easy", "--limit", "2"]
        cli = evalrx(
            "run", *common, "--base-url", answering.url, "--api-key-env", "EVALRX_TEST_LEAK_KEY", "--wait",
            "--no-progress", "--url", store_url,
        )  # fmt: skip
        cfg = RunConfig(model=ModelConfig("gpt-4o-mini", backend="api"), tools=["calculator"], base_url=quoting.url)
        refused = enqueue_run(cfg, load_cases("demo/arithmetic_easy")[:2], key_bound=True, store=store_url)
        pid = start_keyed_worker(store_url, refused, key, log_path=str(log))  # what New run does
        deadline = time.monotonic() + 120
        while S.get_run(refused, store=store_url).status not in FINAL_STATUSES:
            assert time.monotonic() < deadline, "the keyed worker did not finish its run"
            time.sleep(0.2)
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            assert time.monotonic() < deadline, "the keyed worker did not exit"
            time.sleep(0.1)
        assert answering.seen and all(a == f"Bearer {key}" for a in answering.seen), "the key was not used"
        assert quoting.seen and all(a == f"Bearer {key}" for a in quoting.seen), "the key was not used"
    runs = {r.id: r for r in S.list_runs(store=store_url)}
    assert len(runs) == 2 and runs[refused].n_error == 2, runs  # the refusals are stored, as errors
    outputs = [cli, log.read_text()]
    for run_id in runs:
        for fmt in ("jsonl", "atif", "otel"):
            out = tmp_path / f"run{run_id}.{fmt}"
            outputs.append(evalrx("export", str(run_id), str(out), "--format", fmt, "--url", store_url))
            outputs.append(out.read_text())
        outputs.append(evalrx("runs", "show", str(run_id), "--url", store_url))
    stored = _store_text(store_url)
    assert "Incorrect API key provided" in stored, "the refusal was not stored: nothing was checked"
    for where, text in [("the store", stored), *((f"output {i}", t) for i, t in enumerate(outputs))]:
        assert key[10:] not in text, f"the key leaked into {where}: {text[:3000]}"
