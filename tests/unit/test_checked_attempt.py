"""The readers that take an attempt (or epoch) from the file check it one way (`records.checked_attempt`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalrx.interop.evalrx_jsonl import record_of_row
from evalrx.interop.inspect_log import from_inspect_sample
from evalrx.interop.openai_chat import from_openai_row
from evalrx.interop.records import checked_attempt

SEED_ROW = Path(__file__).resolve().parents[1] / "fixtures" / "fuzz" / "seeds" / "run.jsonl"
MESSAGES = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]


@pytest.mark.parametrize("value", [0, -3, True, "2", 2.0, None, [1]])
def test_an_attempt_that_is_not_a_whole_number_from_one_is_refused(value):
    with pytest.raises(ValueError, match=r"^`epoch` must be a whole number from 1, not "):
        checked_attempt(value, "`epoch`")


def test_a_whole_number_from_one_is_the_attempt():
    assert [checked_attempt(n) for n in (1, 7, 2**31)] == [1, 7, 2**31]  # the store's bound is the bridge's


def test_each_reader_names_its_own_field():
    row = json.loads(SEED_ROW.read_text().splitlines()[0])
    with pytest.raises(ValueError, match=r"^`attempt` must be .* not 0$"):
        record_of_row(dict(row, attempt=0))
    with pytest.raises(ValueError, match=r"^`attempt` / `epoch` must be .* not '2'$"):
        from_openai_row({"messages": MESSAGES, "epoch": "2"}, 1)
    with pytest.raises(ValueError, match=r"^`epoch` must be .* not True$"):
        from_inspect_sample({"id": "a", "epoch": True, "messages": MESSAGES})
    case, traj = from_inspect_sample({"id": "a", "epoch": 3, "messages": MESSAGES})
    assert traj.attempt == 3 and case.id == "a"
