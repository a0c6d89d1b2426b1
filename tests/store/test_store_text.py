"""Text no database can keep (a NUL, a lone surrogate: valid in JSON and in Python, refused by UTF-8 and by
PostgreSQL) is stored as U+FFFD wherever it arrives: an imported id, a label's note, a run's name."""

from __future__ import annotations

from storehelpers import fill_run

import evalrx.store as S
from evalrx.store.engine import storable_parameters

UNSTORABLE = "a\x00b\ud800c\udfff"
STORED = "a\ufffdb\ufffdc\ufffd"


def test_a_note_and_a_run_name_with_unstorable_text_are_stored_with_replacement_characters(store_url):
    store = S.connect(store_url)
    run_id, _, trajs = fill_run(store, 1)
    tid = S.list_trajectories(store=store_url).rows[0].id
    S.set_label(tid, "fail", note=UNSTORABLE, annotator=UNSTORABLE, store=store_url)
    S.rename_run(run_id, UNSTORABLE, store=store_url)
    (label,) = S.get_trajectory(tid, store=store_url).labels
    assert (label.note, label.annotator) == (STORED, STORED)
    assert S.get_run(run_id, store=store_url).name == STORED


def test_parameters_are_rebuilt_only_when_a_text_needs_it():
    clean = ("plain", 1, None, "ünïcode", b"\x00bytes")
    assert storable_parameters(clean, False) is clean
    assert storable_parameters([clean, clean], True)[1] is clean
    assert storable_parameters({"a": UNSTORABLE, "b": 2}, False) == {"a": STORED, "b": 2}
    assert storable_parameters([("x", UNSTORABLE)], True) == [("x", STORED)]
    assert storable_parameters(("x", 1, UNSTORABLE), True) == ("x", 1, STORED)  # a batch's flat tuple
    assert storable_parameters((["a"], UNSTORABLE), True) == (["a"], STORED)  # its first value a list
    assert storable_parameters({"p0": UNSTORABLE}, True) == {"p0": STORED}  # psycopg's batch dict
