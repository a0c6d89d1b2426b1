"""Run-level figures read from a real store: attempts and pass@k, two runs compared, predictors, agreement."""

from __future__ import annotations

import json
import random

import pytest
from sqlalchemy import text
from storehelpers import make_case, make_trajectory

import evalrx.interop as X
import evalrx.store as S
from evalrx import reports
from evalrx.core import Label
from evalrx.runner.commands import compare_main, runs_main
from evalrx.store import runs
from evalrx.store.queries import pending_cases


def _run(store, cases, outcomes, *, repeats=1, name="r"):
    """A run whose (case index, attempt) gets outcomes[i][attempt - 1]."""
    rng = random.Random(0)
    with store.write() as s:
        run_id = runs.create_run(s, name=name, cases=cases, repeats=repeats)
        for pos, cid, attempt in pending_cases(s, run_id):
            traj = make_trajectory(cases[pos], rng)
            traj.attempt, traj.outcome = attempt, Label(outcomes[pos][attempt - 1])
            runs.save_trajectory(s, run_id, cid, traj)
    return run_id


def test_repeats_make_attempts_and_pass_at_k_is_exact(sqlite_url, capsys):
    store = S.connect(sqlite_url)
    cases = [make_case(i) for i in range(3)]
    # c = 4, 2, 0 passes out of n = 4 attempts.
    rid = _run(store, cases, [["pass"] * 4, ["pass", "fail", "pass", "fail"], ["fail"] * 4], repeats=4)
    assert S.get_run(rid, store=store).n_cases == 12
    assert [a for a, *_ in S.attempts_of(rid, store=store)["q0001"]] == [1, 2, 3, 4]
    rel = reports.run_reliability(rid, store=store)
    # pass@1 = (1 + 0.5 + 0) / 3; pass@2 for c=2,n=4: 1 - C(2,2)/C(4,2) = 5/6; pass^2: (1 + 1/6 + 0) / 3.
    assert rel.pass_at_k[1] == pytest.approx(0.5)
    assert rel.pass_at_k[2] == pytest.approx((1 + 5 / 6) / 3)
    assert rel.pass_hat_k[2] == pytest.approx((1 + 1 / 6) / 3)
    assert rel.pass_at_k[4] == pytest.approx(2 / 3) and rel.pass_hat_k[4] == pytest.approx(1 / 3)
    assert rel.flaky_cases == ["q0001"]
    assert runs_main(["show", str(rid), "--json", "--url", sqlite_url]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["flaky_cases"] == ["q0001"] and out["pass_at_k"]["2"] == pytest.approx((1 + 5 / 6) / 3)
    assert set(out["pass_hat_k"]) == {"1", "2", "3", "4"} and "agreement" in out
    assert runs_main(["show", str(rid), "--url", sqlite_url]) == 0
    text = capsys.readouterr().out
    assert "pass@k" in text and "flaky cases 1: q0001" in text


def test_an_attempt_is_stored_once(sqlite_url):
    from sqlalchemy.exc import IntegrityError

    store = S.connect(sqlite_url)
    case = make_case(1)
    rid = _run(store, [case], [["pass", "fail"]], repeats=2)
    traj = make_trajectory(case, random.Random(1))
    traj.attempt = 2
    with store.read() as s:
        case_row_id = s.execute(text("SELECT id FROM cases")).scalar()
    with pytest.raises(IntegrityError):
        with store.write() as s:
            runs.save_trajectory(s, rid, case_row_id, traj)
    traj.attempt = 3  # a third attempt is a new row
    with store.write() as s:
        runs.save_trajectory(s, rid, case_row_id, traj)
    assert [a for a, *_ in S.attempts_of(rid, store=store)["q0001"]] == [1, 2, 3]


def test_compare_two_runs_counts_mcnemar_and_mismatched_cases(sqlite_url, capsys):
    store = S.connect(sqlite_url)
    cases = [make_case(i) for i in range(12)]
    # Cases 0-9 in both: 3 both pass, 0 both fail, 1 regression (case 3), 6 fixes (4-9).
    a = ["pass"] * 4 + ["fail"] * 6 + ["pass"]
    b = ["pass"] * 3 + ["fail"] + ["pass"] * 6
    ra = _run(store, cases[:10] + [cases[10]], [[o] for o in a], name="A")
    rb = _run(store, cases[:10] + [cases[11]], [[o] for o in b + ["fail"]], name="B")
    c = reports.compare_runs(ra, rb, store=store)
    assert (c["n_paired"], c["only_a"], c["only_b"]) == (10, 1, 1)
    assert (c["both_pass"], c["both_fail"], c["regressions"], c["fixes"]) == (3, 0, 1, 6)
    assert c["mcnemar_p"] == pytest.approx(2 * 8 / 128)  # two-sided binomial, 1 of 7 discordant, p = 0.5
    assert c["diff"] == pytest.approx(0.5) and c["diff_ci_low"] <= 0.5 <= c["diff_ci_high"]
    assert {x["case_id"] for x in c["cases"]} == {f"q{i:04d}" for i in range(10)}
    assert compare_main([str(ra), str(rb), "--json", "--url", sqlite_url]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in (
        "n_paired",
        "both_pass",
        "both_fail",
        "regressions",
        "fixes",
        "mcnemar_p",
        "diff",
        "diff_ci_low",
        "diff_ci_high",
        "cases",
    ):
        assert key in out
    assert out["regressions"] == 1 and out["fixes"] == 6
    assert compare_main([str(ra), str(rb), "--url", sqlite_url]) == 0
    assert "1 only in A, 1 only in B" in capsys.readouterr().out


def test_compare_with_repeats_pairs_success_rates(sqlite_url):
    store = S.connect(sqlite_url)
    cases = [make_case(i) for i in range(2)]
    ra = _run(store, cases, [["pass", "pass"], ["fail", "fail"]], repeats=2)
    rb = _run(store, cases, [["pass", "fail"], ["pass", "pass"]], repeats=2)
    c = reports.compare_runs(ra, rb, store=store)
    assert c["mixed"] == 1 and c["fixes"] == 1 and c["diff"] == pytest.approx((-0.5 + 1.0) / 2)


def test_predictors_rank_a_signal_that_separates(sqlite_url):
    store = S.connect(sqlite_url)
    cases = [make_case(i) for i in range(20)]
    rng = random.Random(0)
    with store.write() as s:
        rid = runs.create_run(s, cases=cases)
        for pos, cid, _ in pending_cases(s, rid):
            traj = make_trajectory(cases[pos], rng, n_turns=1 + pos % 4)
            traj.metrics.pop("n_turns")
            traj.outcome = Label.FAIL if pos % 4 == 3 else Label.PASS  # only four-turn runs fail
            runs.save_trajectory(s, rid, cid, traj)
    table = reports.predictor_table([rid], store=store)
    turns = next(r for r in table if r["signal"] == "turns")
    # Above the median (3 or 4 turns) half fail; at or below it none do.
    assert turns["auroc"] == pytest.approx(1.0) and turns["fail_rate_high"] == 0.5 and turns["fail_rate_low"] == 0.0
    assert table[0]["strength"] >= table[-1]["strength"]


def test_predictors_warn_on_a_small_class_and_never_offer_a_diagnosed_kind(sqlite_url):
    """1 pass in 20: an AUROC of 1.00 says nothing, and a diagnosed kind only exists on failures (circular)."""
    from evalrx.core import Diagnosis

    store = S.connect(sqlite_url)
    cases = [make_case(i) for i in range(20)]
    rng = random.Random(0)
    with store.write() as s:
        rid = runs.create_run(s, cases=cases)
        for pos, cid, _ in pending_cases(s, rid):
            traj = make_trajectory(cases[pos], rng, n_turns=1 if pos == 0 else 2)
            traj.metrics.pop("n_turns")
            traj.outcome = Label.PASS if pos == 0 else Label.FAIL
            diagnosed = [Diagnosis(kind="bad_arguments", first_wrong_step=1, source="reference")] if pos else []
            runs.save_trajectory(s, rid, cid, traj, diagnoses=diagnosed)
    rows = S.predictor_rows([rid], store=store)
    assert len(rows) == 20 and not [k for r in rows for k in r if k.startswith("kind=")]
    table = reports.predictor_table([rid], store=store)
    assert not [r for r in table if r["signal"].startswith("kind=")]
    turns = next(r for r in table if r["signal"] == "turns")
    assert turns["auroc"] == pytest.approx(1.0) and turns["n_minority"] == 1
    assert "1 passed" in turns["warning"] and str(reports.MIN_CLASS) in turns["warning"]


def test_predictors_do_not_warn_when_both_classes_are_large(sqlite_url):
    store = S.connect(sqlite_url)
    cases = [make_case(i) for i in range(24)]
    rid = _run(store, cases, [["pass"] if i % 2 else ["fail"] for i in range(24)])
    table = reports.predictor_table([rid], store=store)
    assert table and all(r["n_minority"] == 12 and r["warning"] is None for r in table)


def test_agreement_between_annotators_and_with_the_diagnosis(sqlite_url, capsys):
    store = S.connect(sqlite_url)
    cases = [make_case(i) for i in range(6)]
    rid = _run(store, cases, [["fail"]] * 6)
    tids = [r.id for r in S.list_trajectories(run_id=rid, store=store, limit=10).rows]
    # Outcome: ann agrees with bob on 4 of 6 (fail/fail x4, fail/pass x2) -> table [[4,2],[0,0]]: kappa 0.
    for i, tid in enumerate(sorted(tids)):
        S.set_label(tid, "fail", failure_kind="bad_arguments", first_wrong_step=1, annotator="ann", store=store)
        S.set_label(
            tid,
            "fail" if i < 4 else "pass",
            failure_kind="bad_arguments" if i < 3 else "wrong_tool",
            first_wrong_step=1 if i < 2 else 2,
            annotator="bob",
            store=store,
        )
    agree = reports.label_agreement(run_id=rid, store=store)
    assert agree["annotators"] == ["ann", "bob"]
    (pair,) = agree["outcome"]["pairs"]
    assert pair["n"] == 6 and pair["kappa"] == pytest.approx(0.0)
    (steps,) = agree["steps"]
    assert steps["exact"] == pytest.approx(2 / 6) and steps["within_one"] == pytest.approx(1.0)
    assert len(S.disagreements(rid, store=store)) == 3  # cases 3, 4, 5 differ on kind or outcome
    queue = S.second_opinion_queue(rid, "cy", fraction=0.5, store=store)
    assert len(queue) == 3 and set(queue) <= set(tids)
    assert S.second_opinion_queue(rid, "ann", fraction=0.5, store=store) == []  # ann labelled them all
    assert runs_main(["show", str(rid), "--json", "--url", sqlite_url]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["agreement"]["outcome"]["pairs"][0]["kappa"] == pytest.approx(0.0)


def test_compare_two_imported_runs(sqlite_url, tmp_path, capsys):
    def write(name, outcomes):
        f = tmp_path / name
        f.write_text(
            "\n".join(
                json.dumps(
                    {
                        "id": f"c{i}",
                        "outcome": o,
                        "messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}],
                    }
                )
                for i, o in enumerate(outcomes)
            )
            + "\n"
        )
        return X.import_file(f, store=sqlite_url).run_ids[0]

    # 12 cases: c0-c4 pass in both, c5 regresses, c6-c10 are fixed, c11 fails in both.
    a = write("a.jsonl", ["pass"] * 6 + ["fail"] * 6)
    b = write("b.jsonl", ["pass"] * 5 + ["fail"] + ["pass"] * 5 + ["fail"])
    c = reports.compare_runs(a, b, store=sqlite_url)
    assert (c["n_paired"], c["both_pass"], c["both_fail"], c["regressions"], c["fixes"]) == (12, 5, 1, 1, 5)
    assert c["mcnemar_p"] == pytest.approx(2 * 7 / 64)  # 1 of 6 discordant: 2 * P(X <= 1), X ~ Bin(6, 0.5)
    assert compare_main([str(a), str(b), "--json", "--url", sqlite_url]) == 0
    assert json.loads(capsys.readouterr().out)["mcnemar_p"] == pytest.approx(0.21875)


def test_each_diagnosis_source_is_a_rater_and_its_agreement_with_people_is_measured(sqlite_url, tmp_path):
    """The top diagnosis and each source's best candidate are scored against people on the Agreement tab;
    `source_agreement` pools them per source for the Why-it-failed card."""
    import json as _json

    from evalrx.interop import import_file
    from evalrx.reports import label_agreement, source_agreement

    def call(i, name, **args):
        return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": _json.dumps(args)}}

    rows = []
    for n in range(3):
        rows.append(
            {
                "id": f"case-{n}",
                "outcome": 0,
                "metadata": {"reference_calls": [{"name": "renew_loan", "arguments": {"loan_id": "L-1", "weeks": 2}}]},
                "messages": [
                    {"role": "user", "content": "Renew loan L-1 for two weeks."},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [call(1, "renew_loan", loan_id="L-1", weeks=3)],
                    },
                    {"role": "tool", "tool_call_id": "c1", "name": "renew_loan", "content": "Error: at most 2"},
                    {"role": "assistant", "content": "Sorry, I could not renew it."},
                    {"role": "user", "content": "Renew it for 2 weeks then."},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [call(2, "renew_loan", loan_id="L-1", weeks=5)],
                    },
                    {"role": "tool", "tool_call_id": "c2", "name": "renew_loan", "content": '{"ok": true}'},
                    {"role": "assistant", "content": "Done."},
                ],
            }
        )
    path = tmp_path / "loans.jsonl"
    path.write_text("\n".join(_json.dumps(r) for r in rows) + "\n")
    run_id = import_file(path, store=sqlite_url).run_ids[0]
    ids = [r.id for r in S.list_trajectories(run_id=run_id, store=sqlite_url).rows]
    sources = {d.source for d in S.get_diagnoses(ids[0], store=sqlite_url)}
    assert {"reference", "heuristic"} <= sources
    for tid in ids:  # the person agrees with the reference: the second call, at step 5
        S.set_label(tid, "fail", failure_kind="bad_arguments", first_wrong_step=5, annotator="ana", store=sqlite_url)
    rows = {r["diagnosis"]: r for r in label_agreement(run_id=run_id, store=sqlite_url)["auto"]}
    assert {"top", "reference", "heuristic"} <= set(rows) and all(r["annotator"] == "ana" for r in rows.values())
    per_source = source_agreement([run_id], store=sqlite_url)
    assert per_source["reference"] == {"n": 3, "kind_agreement": 1.0, "step_exact": 1.0}
    assert per_source["heuristic"]["n"] == 3 and per_source["heuristic"]["step_exact"] == 0.0  # it blames step 1
