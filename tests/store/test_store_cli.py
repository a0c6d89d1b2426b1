"""`evalrx db`, `runs`, `import`, `export` through `evalrx.cli.main`."""

from __future__ import annotations

import json

from storehelpers import fill_run

import evalrx.store as S
from evalrx.cli import main


def test_db_upgrade_and_current(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    assert main(["db", "current", "--url", url]) == 1
    assert "schema none" in capsys.readouterr().out
    assert main(["db", "upgrade", "--url", url]) == 0
    assert f"upgraded from empty to schema {S.SCHEMA_VERSION}" in capsys.readouterr().out
    assert main(["db", "upgrade", "--url", url]) == 0
    assert "already at schema" in capsys.readouterr().out
    assert main(["db", "current", "--url", url]) == 0


def test_commands_on_an_empty_store_name_the_upgrade_command(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'new.sqlite'}"
    for argv in (["runs"], ["import", str(tmp_path / "x.jsonl")], ["export", "1", str(tmp_path / "o.jsonl")]):
        assert main([*argv, "--url", url]) == 2
        assert "evalrx db upgrade" in capsys.readouterr().err


def test_import_runs_export(sqlite_url, tmp_path, capsys):
    store = S.connect(sqlite_url)
    run_id, _, trajs = fill_run(store, 4, name="cli run")
    out = tmp_path / "out.jsonl"
    assert main(["export", str(run_id), str(out), "--url", sqlite_url]) == 0
    assert f"wrote 4 trajectories of run {run_id}" in capsys.readouterr().out
    assert main(["import", str(out), "--name", "again", "--url", sqlite_url]) == 0
    assert "imported 4 trajectories (evalrx) as run(s) 2" in capsys.readouterr().out
    assert main(["runs", "--url", sqlite_url]) == 0
    listing = capsys.readouterr().out
    assert "again" in listing and "cli run" in listing and "4/4" in listing
    assert main(["runs", "show", "2", "--url", sqlite_url]) == 0
    assert "success" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"sample_id": "a", "steps": "nope"}) + "\n")
    assert main(["import", str(bad), "--url", sqlite_url]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl: line 1: `steps` must be a list" in err and "Traceback" not in err
    assert main(["runs", "show", "99", "--url", sqlite_url]) == 2
    assert "no run with id 99" in capsys.readouterr().err


def test_runs_cancel(sqlite_url, capsys):
    import scripted_backend  # noqa: F401
    from workerhelpers import cases, scripted_config

    from evalrx.runner import enqueue_run

    run_id = enqueue_run(scripted_config(), cases(2), store=sqlite_url)
    assert main(["runs", "cancel", str(run_id), "--url", sqlite_url]) == 0
    assert f"run {run_id}: cancelled" in capsys.readouterr().out
    assert main(["runs", "retry", str(run_id), "--url", sqlite_url]) == 0
    assert S.get_run(run_id, store=sqlite_url).status == "queued"
