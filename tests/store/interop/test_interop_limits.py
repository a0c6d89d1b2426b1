"""Import safety: one record's size, JSON nesting, encodings, re-imports; always one line, never a partial run."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

import evalrx.interop as X
import evalrx.store as S
from evalrx.runner.commands import import_main


def _row(i: int) -> dict:
    return {
        "sample_id": f"r{i}",
        "goal": f"question {i}",
        "outcome": "pass",
        "steps": [
            {"idx": 0, "role": "user", "content": f"question {i}"},
            {"idx": 1, "role": "actor", "content": f"answer {i}"},
        ],
    }


def _jsonl(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _counts(url):
    with S.connect(url).read() as s:
        return {
            t: s.execute(text(f"SELECT count(*) FROM {t}")).scalar()
            for t in ("runs", "run_cases", "cases", "trajectories", "steps")
        }


def _deep_json(depth: int) -> str:
    """`{"n": {"n": ... "bottom" ...}}`, `depth` objects deep, written as text (json.dumps would recurse)."""
    return '{"n": ' * depth + '"bottom"' + "}" * depth


def _one_line_failure(capsys, argv) -> str:
    assert import_main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_bad_record_anywhere_writes_nothing(store_url, tmp_path):
    rows = [_row(i) for i in range(10)]
    rows[4]["steps"][1]["idx"] = 7  # record 5 of 10
    f = tmp_path / "ten.jsonl"
    f.write_text(_jsonl(rows))
    X.import_file(_write(tmp_path / "ok.jsonl", _jsonl([_row(99)])), store=store_url)  # something already there
    before = _counts(store_url)
    with pytest.raises(X.ImportFormatError, match=r"ten.jsonl: line 5: step 1 has idx 7"):
        X.import_file(f, store=store_url)
    assert _counts(store_url) == before  # rows 1-4 were written in the same transaction, and rolled back


def _write(path, content):
    path.write_text(content) if isinstance(content, str) else path.write_bytes(content)
    return path


def test_record_over_the_size_limit(sqlite_url, tmp_path, capsys):
    big = _row(1)
    big["meta"] = {"blob": "z" * 200_000}
    f = _write(tmp_path / "big.jsonl", _jsonl([_row(0), big, _row(2)]))
    err = _one_line_failure(capsys, [str(f), "--max-record-mb", "0.1", "--url", sqlite_url])
    assert (
        f"{f}: line 2: the line (at least) is 0.1 MB, over the 0.1 MB limit on one record; raise it with "
        "--max-record-mb 1" in err
    )
    assert S.list_runs(store=sqlite_url) == []
    assert import_main([str(f), "--max-record-mb", "1", "--url", sqlite_url]) == 0
    # an Inspect .json log is read sample by sample: its sample is the record
    log = {"eval": {"task": "t", "model": "m"}, "samples": [{"id": 1, "input": "x" * 150_000, "messages": []}]}
    doc = _write(tmp_path / "log.json", json.dumps(log, indent=1))
    with pytest.raises(X.RecordTooLargeError, match=r"log.json: sample 0: the sample is 0.1 MB"):
        X.import_file(doc, store=sqlite_url, limits=X.ImportLimits(max_record_bytes=100_000))
    # any other whole-file document is one record
    atif = {
        "schema_version": "ATIF-v1.4",
        "session_id": "s",
        "agent": {"name": "a"},
        "steps": [],
        "x": ["y" * 99] * 1500,
    }
    doc = _write(tmp_path / "atif.json", json.dumps(atif, indent=1))  # short lines: one document over many
    with pytest.raises(X.RecordTooLargeError, match=r"atif.json: line 1: the file \(one JSON document\) is 0.2 MB"):
        X.import_file(doc, store=sqlite_url, limits=X.ImportLimits(max_record_bytes=100_000))


def test_default_size_limit_is_64_mb():
    assert X.ImportLimits().max_record_bytes == 64 * 2**20 and X.ImportLimits().max_depth == 200
    with pytest.raises(ValueError):
        X.ImportLimits(max_depth=0)


@pytest.mark.parametrize("where", ["jsonl", "document", "atif"])
def test_json_nested_too_deep_is_one_line(sqlite_url, tmp_path, capsys, where):
    if where == "jsonl":  # deep enough for a RecursionError in Python's parser
        line = json.dumps(_row(0))[:-1] + ', "meta": ' + _deep_json(5000) + "}"
        f = _write(tmp_path / "deep.jsonl", json.dumps(_row(1)) + "\n" + line + "\n")
        expect = "deep.jsonl: line 2: JSON nested 5001 levels deep, over the limit of 200"
    elif where == "document":
        f = _write(
            tmp_path / "deep.json",
            '{\n "eval": {"task": "t"},\n "samples": [{"id": 1, "input": "q", "metadata": ' + _deep_json(300) + "}]\n}",
        )
        expect = "deep.json: sample 0: JSON nested 301 levels deep, over the limit of 200"  # a sample is a record
    else:
        doc = {
            "schema_version": "ATIF-v1.4",
            "session_id": "s",
            "agent": {"name": "a", "version": "1"},
            "steps": [{"step_id": 1, "source": "user", "message": "hi"}],
        }
        f = _write(tmp_path / "deep.atif.jsonl", json.dumps(doc)[:-1] + ', "extra": ' + _deep_json(250) + "}\n")
        expect = "deep.atif.jsonl: line 1: JSON nested 251 levels deep, over the limit of 200"
    err = _one_line_failure(capsys, [str(f), "--url", sqlite_url])
    assert expect in err and "raise the limit with --max-depth" in err
    assert S.list_runs(store=sqlite_url) == []
    if where != "jsonl":  # within a raised limit it reads
        assert import_main([str(f), "--max-depth", "400", "--url", sqlite_url]) == 0


def test_brackets_inside_strings_are_not_nesting(sqlite_url, tmp_path):
    row = _row(1)
    row["steps"][1]["content"] = "[" * 1000 + '\\"{' * 500
    f = _write(tmp_path / "brackets.jsonl", _jsonl([row]))
    assert X.import_file(f, store=sqlite_url).n_trajectories == 1


@pytest.mark.parametrize(
    "encode, expect",
    [
        (
            lambda t: t.encode("utf-16"),
            "line 1: the file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8",
        ),
        (
            lambda t: t.encode("utf-16-le"),
            "line 1: NUL byte at column 2: the file looks like UTF-16 or UTF-32 without a byte-order mark",
        ),
        (
            lambda t: t.replace("answer 2", "réponse 2").encode("latin-1"),
            "line 3: byte 0xe9 at column 166 is not UTF-8 (the text looks like Latin-1 / Windows-1252); convert the file to "
            "UTF-8",
        ),
    ],
)
def test_wrong_encodings_name_the_line_and_what_was_found(sqlite_url, tmp_path, capsys, encode, expect):
    f = _write(tmp_path / "enc.jsonl", encode(_jsonl([_row(1), _row(0), _row(2)])))
    err = _one_line_failure(capsys, [str(f), "--url", sqlite_url])
    assert f"{f}: {expect}" in err
    assert S.list_runs(store=sqlite_url) == []


def test_utf8_byte_order_mark_is_fine(sqlite_url, tmp_path):
    f = _write(tmp_path / "bom.jsonl", b"\xef\xbb\xbf" + _jsonl([_row(1), _row(2)]).encode())
    assert X.import_file(f, store=sqlite_url).n_trajectories == 2


def test_reimport_of_the_same_bytes_is_refused(sqlite_url, tmp_path, capsys):
    f = _write(tmp_path / "rows.jsonl", _jsonl([_row(1), _row(2)]))
    assert import_main([str(f), "--url", sqlite_url]) == 0
    assert capsys.readouterr().out.strip() == "imported 2 trajectories (evalrx) as run(s) 1"
    before = _counts(sqlite_url)
    assert import_main([str(f), "--name", "other name", "--url", sqlite_url]) == 0
    assert (
        capsys.readouterr().out.strip() == f"{f}: already imported as run 1; nothing written (--again imports it again)"
    )
    assert _counts(sqlite_url) == before
    assert import_main([str(f), "--again", "--url", sqlite_url]) == 0
    assert "as run(s) 2" in capsys.readouterr().out
    f.write_text(_jsonl([_row(1), _row(3)]))  # other bytes under the same name: a new file
    assert X.import_file(f, store=sqlite_url).run_ids == [3]
    with S.connect(sqlite_url).read() as s:
        hashes = s.execute(text("SELECT source_sha256 FROM runs ORDER BY id")).scalars().all()
    assert hashes[0] == hashes[1] != hashes[2] and all(len(h) == 64 for h in hashes)
    # a file that made several runs (an export of two runs) is refused with all of them
    both = _write(tmp_path / "two.jsonl", _jsonl([dict(_row(1), run={"name": "a"}), dict(_row(2), run={"name": "b"})]))
    assert X.import_file(both, store=sqlite_url).run_ids == [4, 5]
    assert import_main([str(both), "--url", sqlite_url]) == 0
    assert "already imported as runs 4, 5" in capsys.readouterr().out


def test_content_not_the_name_says_the_format(sqlite_url, tmp_path, capsys):
    rows = _write(tmp_path / "looks_like.json", _jsonl([_row(1)]))  # JSONL named .json
    assert import_main([str(rows), "--url", sqlite_url]) == 0
    assert "(evalrx)" in capsys.readouterr().out
    log = {
        "eval": {"task": "t", "model": "m"},
        "samples": [
            {
                "id": 1,
                "input": "q",
                "target": "a",
                "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                "scores": {"s": {"value": "C"}},
            }
        ],
    }
    named_jsonl = _write(tmp_path / "log.jsonl", json.dumps(log, indent=2))  # an Inspect log named .jsonl
    assert import_main([str(named_jsonl), "--url", sqlite_url]) == 0
    assert "(inspect)" in capsys.readouterr().out
    junk = _write(tmp_path / "junk.json", json.dumps({"hello": [1, 2]}, indent=2))
    err = _one_line_failure(capsys, [str(junk), "--url", sqlite_url])
    assert "junk.json: line 1: not a format evalrx reads" in err
    broken = _write(tmp_path / "broken.jsonl", '{"sample_id": "a", "steps": [\n' + json.dumps(_row(2)) + "\n")
    err = _one_line_failure(capsys, [str(broken), "--url", sqlite_url])
    assert "broken.jsonl: line 1: not valid JSON" in err
    err = _one_line_failure(capsys, [str(tmp_path / "missing.jsonl"), "--url", sqlite_url])
    assert "missing.jsonl: no such file" in err
