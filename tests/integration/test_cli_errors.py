"""Bad input on the command line gives one clear line on stderr and exit status 2, never a traceback."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evalrx", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": "sk-SECRET-123"},
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is


def assert_one_clear_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-1500:])
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("evalrx: error:")]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_unknown_spec_lists_known_specs(tmp_path):
    out = run_cli(
        "run", "--spec", "qwen9-mega", "--suite", "demo", "--out", str(tmp_path / "o.jsonl"), tmp_path=tmp_path
    )
    assert_one_clear_line(out, "qwen9-mega", "Known specs", "qwen2.5-7b-instruct")


def test_unknown_tool_lists_known_tools(tmp_path):
    out = run_cli(
        "run",
        "--spec",
        "evalrx-tiny",
        "--suite",
        "demo",
        "--tools",
        "calculator,teleport",
        "--out",
        str(tmp_path / "o.jsonl"),
        tmp_path=tmp_path,
    )
    assert_one_clear_line(out, "teleport", "calculator", "lookup")


def test_a_hub_model_without_its_weights_is_one_line_before_a_local_run_and_a_warning_on_a_queued_one(tmp_path):
    out = run_cli(
        "run",
        "--spec",
        "qwen2.5-0.5b-instruct",
        "--suite",
        "demo",
        "--out",
        str(tmp_path / "o.jsonl"),
        tmp_path=tmp_path,
    )
    assert_one_clear_line(out, "Qwen/Qwen2.5-0.5B-Instruct", "--checkpoint DIR")
    assert not (tmp_path / "o.jsonl").exists()
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    assert run_cli("db", "upgrade", "--url", url, tmp_path=tmp_path).returncode == 0
    queued = run_cli("run", "--spec", "qwen2.5-0.5b-instruct", "--suite", "demo", "--url", url, tmp_path=tmp_path)
    assert queued.returncode == 0 and "queued run 1" in queued.stdout  # a worker elsewhere may hold the weights
    assert "evalrx: warning:" in queued.stderr and "--checkpoint DIR" in queued.stderr


def test_missing_checkpoint_path_says_which_path(tmp_path):
    missing = tmp_path / "no-such-model"
    out = run_cli(
        "run",
        "--spec",
        "qwen2.5-0.5b-instruct",
        "--checkpoint",
        str(missing),
        "--suite",
        "demo",
        "--out",
        str(tmp_path / "o.jsonl"),
        tmp_path=tmp_path,
    )
    assert_one_clear_line(out, str(missing))


def test_unreachable_api_url_names_the_url_and_hides_the_key(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    out = run_cli(
        "run",
        "--spec",
        "gpt-4o-mini",
        "--backend",
        "api",
        "--base-url",
        url,
        "--suite",
        "demo",
        "--out",
        str(tmp_path / "o.jsonl"),
        tmp_path=tmp_path,
    )
    line = assert_one_clear_line(out, "127.0.0.1")
    assert "sk-SECRET-123" not in out.stderr + out.stdout
    assert not (tmp_path / "o.jsonl").exists() or (tmp_path / "o.jsonl").read_text() == ""
    assert "OPENAI_BASE_URL" in line or "server" in line


def test_malformed_case_file_names_file_and_line(tmp_path):
    bad = tmp_path / "cases.jsonl"
    bad.write_text('{"id": "a", "prompt": "What is 2+2?", "expected": "4"}\n{"id": "b", "prompt": \n')
    out = run_cli(
        "run",
        "--spec",
        "qwen2.5-0.5b-instruct",
        "--cases",
        str(bad),
        "--out",
        str(tmp_path / "o.jsonl"),
        tmp_path=tmp_path,
    )
    assert_one_clear_line(out, "cases.jsonl:2", "bad JSON")


@pytest.mark.parametrize("cmd", [["run"], ["frobnicate"]])
def test_usage_errors_are_argparse_messages(cmd, tmp_path):
    out = run_cli(*cmd, tmp_path=tmp_path)
    assert out.returncode == 2 and "usage:" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "flag, value, needle",
    [
        ("--timeout", "0", "must be seconds > 0 and <= 3600"),
        ("--timeout", "3601", "must be seconds > 0 and <= 3600"),
        ("--timeout", "soon", "must be seconds > 0 and <= 3600"),
        ("--retries", "11", "must be a whole number from 0 to 10"),
        ("--retries", "-1", "must be a whole number from 0 to 10"),
        ("--retries", "1.5", "must be a whole number from 0 to 10"),
    ],
)
def test_call_budget_out_of_range_is_one_argparse_line(flag, value, needle, capsys):
    from evalrx.cli import main

    with pytest.raises(SystemExit) as info:
        main(["run", "--spec", "gpt-4o-mini", "--backend", "api", "--suite", "demo", flag, value])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert f"argument {flag}: {needle}" in line and repr(value) in line


def test_call_budget_flags_refused_for_a_local_backend(capsys):
    from evalrx.cli import main

    with pytest.raises(SystemExit) as info:
        main(["run", "--spec", "evalrx-tiny", "--suite", "demo", "--timeout", "5"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--timeout and --retries apply to the api backend only" in err


def test_a_misspelled_run_status_is_one_argparse_line_naming_the_statuses(capsys):
    from evalrx.cli import main

    with pytest.raises(SystemExit) as info:
        main(["runs", "--status", "don"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert "argument --status: invalid choice: 'don'" in line and "'done'" in line and "'cancelled'" in line


def test_concurrency_refused_for_a_local_backend_that_runs_one_case_at_a_time(capsys):
    from evalrx.cli import main

    with pytest.raises(SystemExit) as info:
        main(["run", "--spec", "evalrx-tiny", "--suite", "demo", "--concurrency", "4", "--out", "x.jsonl"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert "--concurrency applies to the api backend only" in line and "drop --concurrency" in line


def test_call_budget_flags_reach_the_queued_run_config(tmp_path, capsys):
    import evalrx.store as S
    from evalrx.cli import main

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    try:
        assert (
            main(
                [
                    "run",
                    "--spec",
                    "gpt-4o-mini",
                    "--backend",
                    "api",
                    "--suite",
                    "demo",
                    "--limit",
                    "1",
                    "--url",
                    url,
                    "--timeout",
                    "7.5",
                    "--retries",
                    "0",
                ]
            )
            == 0
        )
        (run,) = S.list_runs(store=url)
        assert run.config["runtime"] == {"timeout": 7.5, "max_retries": 0}
    finally:
        S.forget(url)


def test_repeats_with_a_temperature_queue_on_a_local_model(tmp_path, capsys):
    """docs/cli.md's own example: sampling is not an API call budget, so a local backend takes it."""
    import evalrx.store as S
    from evalrx.cli import main

    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    S.upgrade(url)
    try:
        argv = ["run", "--spec", "evalrx-tiny", "--suite", "demo", "--limit", "1", "--url", url]
        assert main([*argv, "--repeats", "5", "--temperature", "0.8", "--seed", "0"]) == 0
        (run,) = S.list_runs(store=url)
        assert run.config["repeats"] == 5 and run.config["runtime"] == {"temperature": 0.8}
    finally:
        S.forget(url)


def _one_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Any command's one line: exit 2, no traceback, every needle in the last line of stderr."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-1500:])
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    for needle in needles:
        assert needle in err.splitlines()[-1], err
    return err


def test_an_api_only_spec_on_a_local_backend_is_refused_not_sent_to_openai(tmp_path):
    cases = tmp_path / "c.jsonl"
    cases.write_text('{"prompt": "2+2?", "expected": 4}\n')
    out = run_cli(
        "run",
        "--spec",
        "gpt-4o-mini",
        "--backend",
        "hf_local",
        "--cases",
        str(cases),
        "--out",
        str(tmp_path / "o.jsonl"),
        tmp_path=tmp_path,
    )
    _one_line(out, "gpt-4o-mini is API-only", "--backend api")


@pytest.mark.parametrize(
    "args, needles",
    [
        (["run", "--spec", "tiny", "--suite", "demo", "--max-turns", "0"], ["--max-turns", "from 1 to 100"]),
        (["run", "--spec", "tiny", "--suite", "demo", "--limit", "-1"], ["--limit", "whole number"]),
        (["run", "--spec", "tiny", "--suite", "demo", "--concurrency", "0"], ["--concurrency", "from 1 to 64"]),
    ],
)
def test_numeric_options_are_range_checked(tmp_path, args, needles):
    _one_line(run_cli(*args, tmp_path=tmp_path), *needles)


def test_paths_that_are_directories_or_not_files_get_one_line(tmp_path):
    store = f"sqlite:///{tmp_path / 's.sqlite'}"
    assert run_cli("db", "upgrade", "--url", store, tmp_path=tmp_path).returncode == 0
    _one_line(
        run_cli("run", "--spec", "tiny", "--suite", "demo", "--out", str(tmp_path), tmp_path=tmp_path),
        "is a directory",
        "run.jsonl",
    )
    _one_line(
        run_cli(
            "run", "--spec", "tiny", "--suite", str(tmp_path), "--out", str(tmp_path / "o.jsonl"), tmp_path=tmp_path
        ),
        "is a directory, not a case file",
        "evalrx suites",
    )
    listed = run_cli("suites", tmp_path=tmp_path)
    assert listed.returncode == 0 and "demo/arithmetic_easy" in listed.stdout
    ok = tmp_path / "ok.jsonl"
    ok.write_text('{"sample_id": "a", "goal": "g", "steps": [{"idx": 0, "role": "user", "content": "g"}]}\n')
    assert run_cli("import", str(ok), "--url", store, tmp_path=tmp_path).returncode == 0
    _one_line(run_cli("export", "1", str(tmp_path), "--url", store, tmp_path=tmp_path), "is a directory")
    assert not list(tmp_path.glob("*.part"))


def test_bad_store_url_and_malformed_imports_get_one_line(tmp_path):
    _one_line(
        run_cli("runs", "--url", "foo://user:hunter2@host/db", tmp_path=tmp_path), "is not a store URL", "sqlite:///"
    )
    assert "hunter2" not in run_cli("runs", "--url", "foo://user:hunter2@host/db", tmp_path=tmp_path).stderr
    store = f"sqlite:///{tmp_path / 's.sqlite'}"
    assert run_cli("db", "upgrade", "--url", store, tmp_path=tmp_path).returncode == 0
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"sample_id": "a", "steps": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    _one_line(run_cli("import", str(deep), "--url", store, tmp_path=tmp_path), "line 1", "levels deep, over the limit")
    dup = tmp_path / "dup.jsonl"
    dup.write_text(
        '{"sample_id": "a", "goal": "g", "steps": [{"idx": 0, "role": "user", "content": "g"}, '
        '{"idx": 0, "role": "actor", "content": "h"}]}\n'
    )
    _one_line(run_cli("import", str(dup), "--url", store, tmp_path=tmp_path), "step 1 has idx 0")


def test_a_database_server_that_is_not_there_is_one_line_hiding_the_password(tmp_path):
    url = f"postgresql://evalrx:hunter2@127.0.0.1:{closed_port()}/evalrx"
    for args in (
        ["runs"],
        ["worker", "--once"],
        ["import", str(ROOT / "tests" / "fixtures" / "fuzz" / "seeds" / "run.jsonl")],
    ):
        proc = run_cli(*args, "--url", url, tmp_path=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-1500:]
        (line,) = proc.stderr.strip().splitlines()
        assert "cannot be opened (connection failed" in line and "start its database server" in line, line
        assert "hunter2" not in line


@pytest.mark.parametrize(
    "args",
    [
        ("run", "--spec", "gpt-4o", "--suite", "demo", "--backend", "api", "--api-key-env"),
        (
            "diagnose",
            "1",
            "--judge",
            "gpt-4o",
            "--backend",
            "api",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--api-key-env",
        ),
    ],
)
def test_a_key_pasted_where_its_variable_name_goes_is_refused_without_echoing_it(tmp_path, args):
    proc = run_cli(*args, "sk-proj-PASTED-9f8e7d", tmp_path=tmp_path)
    assert proc.returncode == 2
    assert "takes the NAME of an environment variable" in proc.stderr
    assert "PASTED" not in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
