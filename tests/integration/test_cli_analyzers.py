"""`evalrx run --analyzers`: the white-box analyzers from the command line, to a file or queued for a worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import evalrx.store as S

ROOT = Path(__file__).resolve().parents[2]
FOUR = "logit_lens,tool_decision,attention,token_uncertainty"


def cli(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evalrx", *args],
        cwd=ROOT,
        env=env or dict(os.environ, HF_HUB_OFFLINE="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_run_to_a_file_carries_each_records_analyses(tmp_path):
    out = tmp_path / "runs.jsonl"
    done = cli(
        "run", "--spec", "evalrx-tiny", "--suite", "demo", "--limit", "2", "--analyzers", FOUR, "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        names = [a["analyzer"] for a in row["analyses"]]
        assert sorted(set(names)) == sorted(FOUR.split(",")), names
        lens = next(a for a in row["analyses"] if a["analyzer"] == "logit_lens")
        assert "error" not in lens["meta"]
        entropy = lens["arrays"]["entropy"]
        assert entropy["shape"] and len(entropy["data"]) == entropy["shape"][0]


def test_an_unknown_analyzer_is_one_line_naming_the_known_ones(tmp_path):
    done = cli("run", "--spec", "evalrx-tiny", "--suite", "demo", "--analyzers", "logit_lens,lense", "--out", "x.jsonl")
    assert done.returncode == 2
    assert "lense: not an analyzer; known: attention, logit_lens" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_queued_run_keeps_its_analyzers_for_the_worker(tmp_path):
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    env = dict(os.environ, EVALRX_DATABASE_URL=url, HF_HUB_OFFLINE="1")
    assert cli("db", "upgrade", env=env).returncode == 0
    done = cli("run", "--spec", "evalrx-tiny", "--suite", "demo", "--limit", "1", "--analyzers", "logit_lens", env=env)
    assert done.returncode == 0, done.stderr
    (run,) = S.list_runs(store=url)
    assert run.config["analyzers"] == ["logit_lens"]
    S.forget(url)


def test_answer_points_is_a_setting_of_the_lens_and_a_wrong_one_is_one_line(tmp_path):
    from evalrx.runner.argtypes import analyzer_names

    assert analyzer_names("logit_lens:answer_points=all") == [{"name": "logit_lens", "answer_points": "all"}]
    done = cli(
        "run", "--spec", "evalrx-tiny", "--suite", "demo", "--limit", "1",
        "--analyzers", "logit_lens:answer_points=some", "--out", str(tmp_path / "x.jsonl"),
    )  # fmt: skip
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == "evalrx: error: answer_points must be one of values, all, got 'some'"
    assert "Traceback" not in done.stderr
