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
