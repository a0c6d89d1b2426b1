"""Inspect AI `.eval` logs (zips) written by inspect_ai itself, imported one sample at a time.

Two real logs are written per module: one with Inspect's default Zstandard entries, one with
the Deflate entries older Inspect versions wrote (Inspect's recorder, its compression switched).
Both run two epochs of two samples: one looks a key up (a long result, stored by Inspect as an
attachment) with an input image (an attachment in the messages) and logprobs on its answer, the
other's tool raises `ToolError`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from inspect_logs import LONG, PNG, inspect_env, write_eval_log
from sqlalchemy import text

import evalrx.interop as X
import evalrx.store as S
from evalrx.core.case import FailureCase, StepRole
from evalrx.diagnosis import reference_of
from evalrx.runner.commands import import_main

pytestmark = pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "interop"


@pytest.fixture(scope="module")
def eval_logs(tmp_path_factory):
    """{"zstd": path, "deflate": path}: the same eval logged by inspect_ai with each compression."""
    from inspect_ai._util import zipfile as inspect_zipfile

    root = tmp_path_factory.mktemp("inspect")
    with inspect_env(root) as mp:
        logs = {"zstd": write_eval_log(root / "zstd")}
        # older Inspect wrote Deflate entries: the same recorder, its compression switched
        mp.setitem(inspect_zipfile.zipfile_compress_kwargs, "compression", zipfile.ZIP_DEFLATED)
        mp.setitem(inspect_zipfile.zipfile_compress_kwargs, "compresslevel", 5)
        logs["deflate"] = write_eval_log(root / "deflate")
    return logs


def _counts(url):
    with S.connect(url).read() as s:
        return {
            t: s.execute(text(f"SELECT count(*) FROM {t}")).scalar()
            for t in ("runs", "run_cases", "cases", "trajectories", "steps")
        }


@pytest.mark.parametrize("compression, method", [("zstd", 93), ("deflate", zipfile.ZIP_DEFLATED)])
def test_real_eval_log_imports_with_attempts_tool_errors_attachments(eval_logs, sqlite_url, compression, method):
    log = eval_logs[compression]
    with zipfile.ZipFile(log) as zf:
        samples = [i for i in zf.infolist() if i.filename.startswith("samples/")]
        assert {i.compress_type for i in samples} == {method}  # the log really is that compression
        assert "header.json" in zf.namelist()
    raw = _raw_samples(log)  # what Inspect wrote, read with its own reader
    assert any("attachment://" in json.dumps(s["messages"]) for s in raw.values())  # the image
    assert any("attachment://" in json.dumps(s["events"]) for s in raw.values())  # the long tool result

    res = X.import_file(log, store=sqlite_url)
    assert (res.format, res.n_trajectories, len(res.run_ids), res.notes) == ("inspect-eval", 4, 1, [])
    info = S.get_run(res.run_ids[0], store=sqlite_url)
    assert info.name == "lookup_task (mockllm/model)" and info.n_cases == 4 and info.n_pass == 2 and info.n_fail == 2
    # The sample id is the case's; the epoch is the attempt (keyed "id#epoch" here only to read them).
    rows = {
        f"{r.sample_id}#{r.attempt}": r
        for r in S.list_trajectories(run_id=info.id, store=sqlite_url, descending=False).rows
    }
    assert set(rows) == {"look#1", "look#2", "missing#1", "missing#2"}
    details = {sid: S.get_trajectory(r.id, store=sqlite_url) for sid, r in rows.items()}
    # epochs are attempts of one case: two cases, each with attempts 1 and 2
    assert {sid: (d.trajectory.attempt, d.case["id"]) for sid, d in details.items()} == {
        "look#1": (1, "look"),
        "look#2": (2, "look"),
        "missing#1": (1, "missing"),
        "missing#2": (2, "missing"),
    }
    with S.connect(sqlite_url).read() as s:
        assert s.execute(text("SELECT count(DISTINCT case_row_id) FROM trajectories")).scalar() == 2
        assert sorted(s.execute(text("SELECT position, attempt FROM run_cases")).all()) == [
            (0, 1),
            (0, 2),
            (1, 1),
            (1, 2),
        ]

    look = details["look#1"]
    t = look.trajectory
    assert [s.role for s in t.steps] == [StepRole.USER, StepRole.ACTOR, StepRole.TOOL, StepRole.ACTOR]
    assert t.steps[2].observation.value == LONG and t.final_answer == "The answer is 42." and t.outcome.value == "pass"
    assert S.get_blob(look.case["image_sha256"], store=sqlite_url)[0] == PNG  # the image attachment, resolved
    stored = json.dumps([s.to_dict() for s in t.steps]) + json.dumps(look.case)
    assert "attachment://" not in stored
    for step in (t.steps[1], t.steps[3]):  # model events: timing and tokens on the turn they produced
        assert step.span["prompt_tokens"] == 20 and step.span["completion_tokens"] == 8
        assert step.span["latency_ms"] >= 0 and step.span["started_at"].startswith("20")
    assert t.steps[3].span["logprobs"] == [
        {
            "token": "The",
            "logprob": -0.25,
            "top_logprobs": [{"token": "The", "logprob": -0.25}, {"token": "A", "logprob": -1.5}],
        },
        {"token": " answer", "logprob": -0.5},
    ]
    assert t.steps[2].span["latency_ms"] > 0 and not t.steps[2].span.get("tool_error")
    assert t.metrics["grade"] == {"source": "inspect", "scorer": "includes", "value": "C"}

    missing = details["missing#2"].trajectory
    tool_step = missing.steps[2]
    assert tool_step.span["tool_error"] is True and tool_step.observation.value == "no such key: missing"
    assert missing.outcome.value == "fail" and missing.metrics["grade"]["value"] == "I"
    assert rows["missing#2"].diagnosis_kind  # diagnosed on import, like every import
    # Its target is the case's expected answer, the reference it has: that grades the run but names no step
    # (no reference calls), so the model-free rules say why (the card's source line says so, not "no reference").
    assert details["missing#2"].case["expected"] == "7"
    assert reference_of(FailureCase.from_dict(details["missing#2"].case)) == "answer"
    assert S.get_diagnoses(rows["missing#2"].id, store=sqlite_url)[0].source == "heuristic"


def _raw_samples(log: Path) -> dict:
    from inspect_ai.log import read_eval_log

    full = read_eval_log(str(log), resolve_attachments=False)
    return {f"{s.id}#{s.epoch}": json.loads(s.model_dump_json()) for s in full.samples}


def test_zstd_and_deflate_logs_import_the_same(eval_logs, sqlite_url):
    """Apart from ids and times the two logs hold the same eval, so the imports match."""
    out = {}
    for name, log in eval_logs.items():
        res = X.import_file(log, store=sqlite_url)
        rows = S.list_trajectories(run_id=res.run_ids[0], store=sqlite_url, descending=False).rows
        out[name] = [
            (r.sample_id, r.outcome, r.n_steps, r.n_tool_calls, r.prompt_tokens, r.diagnosis_kind) for r in rows
        ]
    assert out["zstd"] == out["deflate"] and len(out["zstd"]) == 4


def test_reimport_is_refused_and_again_imports(eval_logs, sqlite_url, capsys):
    log = str(eval_logs["zstd"])
    assert import_main([log, "--url", sqlite_url]) == 0
    assert capsys.readouterr().out.strip() == "imported 4 trajectories (inspect-eval) as run(s) 1"
    before = _counts(sqlite_url)
    assert import_main([log, "--url", sqlite_url]) == 0
    assert (
        capsys.readouterr().out.strip() == f"{log}: already imported as run 1; nothing written (--again "
        "imports it again)"
    )
    assert _counts(sqlite_url) == before
    res = X.import_file(log, store=sqlite_url)
    assert res.already_imported and res.run_ids == [1] and res.n_trajectories == 0
    assert import_main([log, "--again", "--url", sqlite_url]) == 0
    assert "imported 4 trajectories (inspect-eval) as run(s) 2" in capsys.readouterr().out
    assert _counts(sqlite_url)["trajectories"] == 8
    # the hash is of the bytes: a copy under another name is the same file
    copy = Path(log).with_name("copy.eval")
    copy.write_bytes(Path(log).read_bytes())
    assert X.import_file(copy, store=sqlite_url).run_ids == [1, 2]


def test_unfinished_log_imports_its_samples_and_says_so(tmp_path, sqlite_url, capsys):
    """A log whose eval process died: start.json and two samples, no header.json."""
    env = dict(
        os.environ,
        XDG_DATA_HOME=str(tmp_path / "xdg-data"),
        XDG_CACHE_HOME=str(tmp_path / "xdg-cache"),
        INSPECT_DISPLAY="none",
    )
    done = subprocess.run(
        [sys.executable, str(FIXTURES / "crashing_eval.py"), str(tmp_path / "logs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr[-2000:]
    (log,) = (tmp_path / "logs").glob("*.eval")
    with zipfile.ZipFile(log) as zf:
        names = zf.namelist()
    assert "header.json" not in names and "_journal/start.json" in names

    assert import_main([str(log), "--url", sqlite_url]) == 0
    out, err = capsys.readouterr()
    assert "imported 2 trajectories (inspect-eval) as run(s) 1" in out
    assert f"note: {log.name} is an unfinished Inspect log (no header.json" in err and "2 sample(s)" in err
    info = S.get_run(1, store=sqlite_url)
    assert info.name == "crash_task (mockllm/model)" and info.n_done == 2
    with S.connect(sqlite_url).read() as s:
        meta = s.execute(text("SELECT meta FROM runs WHERE id = 1")).scalar()
    meta = json.loads(meta) if isinstance(meta, str) else meta
    assert meta["incomplete"] is True and meta["inspect_status"] == "started" and meta["format"] == "inspect-eval"


def _synthetic_eval(path: Path, samples: list, *, header: bool = True) -> Path:
    """A Deflate `.eval` zip in Inspect's layout (stdlib zipfile writes it)."""
    spec = {
        "version": 2,
        "eval": {"task": "synthetic", "model": "mockllm/model", "dataset": {"sample_ids": [s["id"] for s in samples]}},
    }
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("_journal/start.json", json.dumps(spec))
        for s in samples:
            zf.writestr(f"samples/{s['id']}_epoch_{s.get('epoch', 1)}.json", json.dumps(s))
        if header:
            zf.writestr("header.json", json.dumps({**spec, "status": "success"}))
    return path


def _sample(i: int) -> dict:
    return {
        "id": f"s{i}",
        "epoch": 1,
        "input": f"What is {i} + {i}?",
        "target": str(2 * i),
        "messages": [
            {"id": f"u{i}", "role": "user", "content": f"What is {i} + {i}?"},
            {"id": f"a{i}", "role": "assistant", "content": f"It is {2 * i}."},
        ],
        "scores": {"match": {"value": "C"}},
    }


def test_a_bad_sample_anywhere_writes_nothing(tmp_path, sqlite_url):
    samples = [_sample(i) for i in range(10)]
    samples[4]["messages"][1]["role"] = "wizard"  # sample 5 of 10
    log = _synthetic_eval(tmp_path / "bad.eval", samples)
    before = _counts(sqlite_url)
    with pytest.raises(X.ImportFormatError) as err:
        X.import_file(log, store=sqlite_url)
    assert (
        str(err.value) == f"{log}: samples/s4_epoch_1.json: message 1 has role 'wizard'; expected one of "
        "system, developer, user, assistant, tool"
    )
    assert _counts(sqlite_url) == before  # the four good samples before it are not kept either
    samples[4]["messages"][1]["role"] = "assistant"
    _synthetic_eval(log, samples)
    assert X.import_file(log, store=sqlite_url).n_trajectories == 10
    rows = S.list_trajectories(store=sqlite_url, descending=False).rows
    assert [r.sample_id for r in rows] == [f"s{i}" for i in range(10)]  # the dataset's order


def test_damaged_and_foreign_zips_are_one_line_errors(tmp_path, sqlite_url, eval_logs, capsys):
    damaged = tmp_path / "damaged.eval"
    data = bytearray(eval_logs["zstd"].read_bytes())
    with zipfile.ZipFile(eval_logs["zstd"]) as zf:
        info = next(i for i in zf.infolist() if i.filename.startswith("samples/"))
    data[info.header_offset + 30 + len(info.filename.encode()) + 40] ^= 0xFF  # a byte inside the sample's data
    damaged.write_bytes(bytes(data))
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("readme.txt", "hello")
    truncated = tmp_path / "truncated.eval"
    truncated.write_bytes(eval_logs["zstd"].read_bytes()[:2000])
    for path, problem in (
        (damaged, f"{info.filename}: the entr"),
        (other, "zip: a zip file, but not an Inspect .eval log"),
        (truncated, "zip: not a readable zip"),
    ):
        assert import_main([str(path), "--url", sqlite_url]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and problem in err and "Traceback" not in err, err
    assert S.list_runs(store=sqlite_url) == []


def test_entries_read_one_at_a_time_within_the_size_limit(tmp_path, sqlite_url):
    """A sample bigger than --max-record-mb is refused by its stated size before it is decompressed."""
    samples = [_sample(i) for i in range(3)]
    samples[1]["metadata"] = {"blob": "y" * 300_000}
    log = _synthetic_eval(tmp_path / "big.eval", samples)
    with pytest.raises(
        X.RecordTooLargeError,
        match=r"samples/s1_epoch_1.json: the log entry is 0.3 MB, over the "
        r"0.2 MB limit on one record; raise it with --max-record-mb 1",
    ):
        X.import_file(log, store=sqlite_url, limits=X.ImportLimits(max_record_bytes=200_000))
    assert S.list_runs(store=sqlite_url) == []
    assert X.import_file(log, store=sqlite_url, limits=X.ImportLimits(max_record_bytes=400_000)).n_trajectories == 3


def test_preview_says_what_a_log_holds_without_writing_and_import_reports_progress(eval_logs, sqlite_url):
    before = _counts(sqlite_url)
    pre = X.preview_file(eval_logs["zstd"], n_first=3, store=sqlite_url)
    assert (pre.format, pre.n_trajectories, pre.n_cases, pre.max_attempt) == ("inspect-eval", 4, 2, 2)
    assert pre.models == ["mockllm/model"] and len(pre.first) == 3 and pre.already_imported_as == []
    assert _counts(sqlite_url) == before  # a preview writes nothing
    seen = []
    res = X.import_file(eval_logs["zstd"], store=sqlite_url, on_progress=seen.append)
    assert seen == [1, 2, 3, 4]
    assert X.preview_file(eval_logs["zstd"], store=sqlite_url).already_imported_as == res.run_ids
