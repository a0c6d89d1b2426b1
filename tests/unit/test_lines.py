"""One way to put a message on one line (`evalrx.core.one_line`, `first_line`), for errors, notes and logs."""

from __future__ import annotations

from evalrx.core import first_line, one_line


def test_one_line_keeps_each_lines_words_and_marks_where_lines_broke():
    text = "pyarrow.lib.ArrowInvalid:  JSON parse error\n\n   Column(/x) changed   from number to string\r\n"
    assert one_line(text) == "pyarrow.lib.ArrowInvalid: JSON parse error; Column(/x) changed from number to string"


def test_one_line_makes_control_characters_inert_and_cuts_at_the_limit():
    assert one_line("ok\x1b[31mred\x00") == "ok?[31mred?"
    assert one_line("abcdefghij", 8) == "abcde..." and len(one_line("x" * 500, 300)) == 300
    assert one_line("short", 8) == "short" and one_line("") == ""


def test_first_line_is_the_first_line_with_words_or_the_errors_type():
    assert first_line("\n  could not connect to server: refused\nIs the server running?") == (
        "could not connect to server: refused"
    )
    assert first_line(ValueError("")) == "ValueError" and first_line("") == ""
    assert first_line(OSError("disk full\ndetail")) == "disk full"
