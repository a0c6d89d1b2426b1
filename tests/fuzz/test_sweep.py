"""The field sweep (`sweep.py`, `make fuzz-sweep`): every field of a seed, each awkward value and edit, imported
as the Import page does; a seed's full sweep here, the whole set by `make fuzz-sweep`."""

from __future__ import annotations

import sweep
import test_fuzz_imports


def test_every_field_of_the_openai_chat_seed_imports_or_says_what_is_wrong_in_one_line():
    expected = sum(1 for _ in sweep.variants("openai_chat.jsonl"))
    result = sweep.sweep(["openai_chat.jsonl"], log=lambda line: None)
    assert result["crashers"] == {}
    assert result["imports"] == expected > 200  # every field of the seed, each value and edit


def test_a_reader_that_raises_is_reported_once_per_kind_and_its_file_kept(monkeypatch, tmp_path):
    """A variant that fails otherwise than with one line is a crasher: named by its exception and evalrx line,
    reported once however many variants hit it, and its file written for a fixture."""
    real = test_fuzz_imports.import_like_the_page

    def fragile(path, url):
        if b"\\u0000" in path.read_bytes():  # a NUL escape: what a real crasher of the store looked like
            raise RuntimeError("the reader choked")
        real(path, url)

    monkeypatch.setattr(test_fuzz_imports, "import_like_the_page", fragile)
    result = sweep.sweep(["trail.labels.json"], limit=40, out=tmp_path, log=lambda line: None)
    assert result["imports"] == 40
    assert [kind.split(" at ")[0] for kind in result["crashers"]] == ["RuntimeError"]
    ((seed, what, message),) = result["crashers"].values()
    assert seed == "trail.labels.json" and "\\x00" in what and message == "the reader choked"
    kept = list(tmp_path.iterdir())
    assert len(kept) == 1 and b"\\u0000" in kept[0].read_bytes()
