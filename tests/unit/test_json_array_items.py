"""`array_items`: each item of a top-level array, as bytes, whatever the chunk boundaries cut through
(strings with brackets, escaped quotes, backslash runs, the key itself), equal to what `json.loads` reads."""

from __future__ import annotations

import json
import random

import pytest

import evalrx.interop.json_array_items as J
from evalrx.interop import ImportFormatError, ImportLimits, RecordTooLargeError
from evalrx.interop.limits import json_depth

TRICKY = ['a "quoted" [bracket', "back\\slash\\", "\\\\", "}{][", 'end \\"', "ünï", ""]


def _doc(rng: random.Random, n: int) -> dict:
    def item(i: int) -> dict:
        return {
            "id": i,
            "text": rng.choice(TRICKY) * rng.randint(0, 3),
            "nested": [{"k": [rng.choice(TRICKY), {"deep": [i, None, True]}]} for _ in range(rng.randint(0, 3))],
        }

    return {
        "version": 2,
        "eval": {"task": "t", "odd": "samples [not this]"},
        "samples": [item(i) for i in range(n)],
        "reductions": [{"after": "]"}],
    }


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
def test_items_match_json_loads_at_any_chunk_size(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(J, "CHUNK", chunk)
    rng = random.Random(chunk)
    for trial in range(3):
        doc = _doc(rng, rng.randint(0, 12))
        path = tmp_path / f"d{trial}.json"
        path.write_text(json.dumps(doc, indent=rng.choice([None, 1, 2]), ensure_ascii=rng.random() < 0.5))
        items = list(J.array_items(path, "samples", ImportLimits()))
        assert [json.loads(b) for b, _ in items] == doc["samples"]
        # the depth the scan reports is the one `json_depth` counts on the item's own bytes
        assert [d for _, d in items] == [json_depth(b, 0) for b, _ in items]


def test_limits_and_broken_arrays_are_one_line(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"eval": {}, "samples": [{"a": "x" * 500}, {"b": 1}]}))
    with pytest.raises(RecordTooLargeError, match="sample 0: the sample .*is 0.0 MB, over the 0.0 MB limit"):
        list(J.array_items(path, "samples", ImportLimits(max_record_bytes=100), what="sample"))
    path.write_text('{"eval": {}, "samples": [{"a": 1}, 7]}')
    with pytest.raises(ImportFormatError, match="sample 1: not a JSON object"):
        list(J.array_items(path, "samples", ImportLimits(), what="sample"))
    path.write_text('{"eval": {},\n "samples": [}')
    with pytest.raises(ImportFormatError, match=r"d.json: line 2: not valid JSON \('}' where '\]' closes\)"):
        list(J.array_items(path, "samples", ImportLimits(), what="sample"))
    path.write_text('{"eval": {}, "other": []}')
    with pytest.raises(ImportFormatError, match="no top-level `samples` array"):
        list(J.array_items(path, "samples", ImportLimits()))
