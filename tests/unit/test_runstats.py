"""evalrx.runstats: pass@k, paired comparison, alignment, predictors and agreement, against hand-worked values."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evalrx.runstats import (
    agreement,
    align,
    cohen_kappa,
    compare_outcomes,
    fleiss_kappa,
    kind_confusion,
    normalize_args,
    pass_at_k,
    pass_hat_k,
    predictors,
    reliability,
    step_agreement,
)

T, F = True, False


# ---------------------------------------------------------------- pass@k

# 3 cases x 4 attempts with c = 4, 2, 0 passes.
RUN = {"a": [T, T, T, T], "b": [T, F, T, F], "c": [F, F, F, F]}


def test_pass_at_k_and_pass_hat_k_single_case():
    # C(4,2) = 6. pass@2 with c=2: 1 - C(2,2)/6 = 5/6; pass^2: C(2,2)/6 = 1/6.
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)
    # Only 2 failures, so any 3 attempts include a pass: 1 - C(2,3)/C(4,3) = 1 - 0/4 = 1.
    assert pass_at_k(4, 2, 3) == 1.0
    assert pass_hat_k(4, 2, 3) == 0.0  # C(2,3) = 0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)  # k=1 is c/n
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)  # k > n
    with pytest.raises(ValueError):
        pass_hat_k(3, 4, 1)  # c > n


def test_reliability_on_hand_built_run():
    kinds = {"b": ["ignored-because-passed", "wrong_tool", None, "bad_args"], "c": ["x"] * 4}
    rel = reliability(RUN, kinds)
    assert rel.k_max == 4
    # pass@1 = mean(c/n) = (1 + 0.5 + 0)/3 = 1/2
    # pass@2 = (1 + 5/6 + 0)/3 = 11/18; pass@3 = pass@4 = (1 + 1 + 0)/3 = 2/3
    assert rel.pass_at_k == pytest.approx({1: 0.5, 2: 11 / 18, 3: 2 / 3, 4: 2 / 3})
    # pass^1 = 1/2; pass^2 = (1 + 1/6 + 0)/3 = 7/18; pass^3 = pass^4 = (1 + 0 + 0)/3 = 1/3
    assert rel.pass_hat_k == pytest.approx({1: 0.5, 2: 7 / 18, 3: 1 / 3, 4: 1 / 3})
    assert rel.flaky_cases == ["b"]
    # Only the failing attempts' kinds (attempts 1 and 3), only for flaky cases ("c" never passes).
    assert rel.flaky_kinds == {"b": ["wrong_tool", "bad_args"]}
    assert [(r.sample_id, r.passes, r.rate) for r in rel.case_rates] == [("c", 0, 0.0), ("b", 2, 0.5), ("a", 4, 1.0)]


def test_reliability_excludes_cases_shorter_than_k():
    attempts = {"a": [T, F, T], "b": [F]}
    assert reliability(attempts).pass_at_k == pytest.approx({1: (2 / 3 + 0) / 2})  # default k_max = min n = 1
    rel = reliability(attempts, k_max=3)
    # k=1 averages both; k>=2 only "a" (n=3, c=2): pass@2 = 1 - C(1,2)/C(3,2) = 1, pass^2 = C(2,2)/3 = 1/3.
    assert rel.pass_at_k == pytest.approx({1: 1 / 3, 2: 1.0, 3: 1.0})
    assert rel.pass_hat_k == pytest.approx({1: 1 / 3, 2: 1 / 3, 3: 0.0})


def test_reliability_to_dict_is_json_with_string_keys():
    d = reliability(RUN).to_dict()
    assert {"pass_at_k", "pass_hat_k", "flaky_cases", "case_rates", "flaky_kinds"} <= d.keys()
    back = json.loads(json.dumps(d))
    assert back["pass_at_k"]["2"] == pytest.approx(11 / 18)
    assert back["pass_hat_k"]["2"] == pytest.approx(7 / 18)
    assert back["flaky_cases"] == ["b"]
    assert back["case_rates"][0] == {"case_id": "c", "n": 4, "passes": 0, "rate": 0.0}
    with pytest.raises(ValueError):
        reliability(RUN, {"b": ["only-one-kind"]})  # kinds must line up with attempts


# ---------------------------------------------------------------- paired comparison


def test_compare_outcomes_counts_and_mcnemar():
    a = {f"p{i}": 1.0 for i in range(2)} | {"f0": 0.0} | {"r0": 1.0} | {f"x{i}": 0.0 for i in range(6)}
    b = {f"p{i}": 1.0 for i in range(2)} | {"f0": 0.0} | {"r0": 0.0} | {f"x{i}": 1.0 for i in range(6)}
    a |= {"gone1": 1.0, "gone2": 0.0}  # only in A
    b |= {"new1": 1.0}  # only in B
    cmp = compare_outcomes(a, b)
    assert (cmp.n_paired, cmp.only_a, cmp.only_b) == (10, 2, 1)
    assert (cmp.both_pass, cmp.both_fail, cmp.regressions, cmp.fixes, cmp.mixed) == (2, 1, 1, 6, 0)
    # 7 discordant pairs, 1 regression: p = 2 * P(X <= 1 | n=7, 1/2) = 2 * (1 + 7)/128 = 0.125
    assert cmp.mcnemar_p == pytest.approx(0.125)
    # mean(b - a) = (-1 + 6)/10
    assert cmp.diff == pytest.approx(0.5)
    assert cmp.diff_ci_low <= cmp.diff <= cmp.diff_ci_high
    assert len(cmp.cases) == 10 and {"case_id": "r0", "a": 1.0, "b": 0.0} in cmp.cases
    d = cmp.to_dict()
    assert set(d) == {
        "n_paired",
        "only_a",
        "only_b",
        "both_pass",
        "both_fail",
        "regressions",
        "fixes",
        "mixed",
        "mcnemar_p",
        "diff",
        "diff_ci_low",
        "diff_ci_high",
        "cases",
    }
    json.dumps(d)


def test_compare_outcomes_fractional_rates_are_mixed_and_no_discordance_gives_p_one():
    cmp = compare_outcomes({"a": 0.5, "b": 1.0, "c": 0.0}, {"a": 0.75, "b": 1.0, "c": 0.25})
    # "a" and "c" have a fractional rate on some side; only "b" enters the 2x2 table.
    assert (cmp.mixed, cmp.both_pass, cmp.regressions, cmp.fixes) == (2, 1, 0, 0)
    assert cmp.mcnemar_p == 1.0
    assert cmp.diff == pytest.approx((0.25 + 0 + 0.25) / 3)
    with pytest.raises(ValueError):
        compare_outcomes({"a": 1.5}, {"a": 1.0})


def test_bootstrap_interval_covers_true_difference_and_is_reproducible():
    rng = np.random.default_rng(7)
    ids = [f"c{i}" for i in range(400)]
    a = dict(zip(ids, (rng.random(400) < 0.5).astype(float)))
    b = dict(zip(ids, (rng.random(400) < 0.7).astype(float)))
    cmp = compare_outcomes(a, b, resamples=2000, seed=3)
    assert cmp.diff_ci_low < 0.2 < cmp.diff_ci_high
    assert cmp.diff_ci_low > 0  # the improvement is detected
    assert cmp.diff_ci_high - cmp.diff_ci_low < 0.2  # ~4 standard errors of ~0.034, not a vacuous interval
    again = compare_outcomes(a, b, resamples=2000, seed=3)
    assert (again.diff_ci_low, again.diff_ci_high) == (cmp.diff_ci_low, cmp.diff_ci_high)
    other = compare_outcomes(a, b, resamples=2000, seed=4)
    assert (other.diff_ci_low, other.diff_ci_high) != (cmp.diff_ci_low, cmp.diff_ci_high)


def test_bootstrap_with_identical_differences_and_no_pairs():
    cmp = compare_outcomes({"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 1.0})
    assert (cmp.diff, cmp.diff_ci_low, cmp.diff_ci_high) == (1.0, 1.0, 1.0)
    empty = compare_outcomes({"a": 1.0}, {"b": 0.0})
    assert (empty.n_paired, empty.only_a, empty.only_b) == (0, 1, 1)
    assert (empty.diff, empty.diff_ci_low, empty.diff_ci_high, empty.mcnemar_p) == (None, None, None, 1.0)


# ---------------------------------------------------------------- alignment


def test_align_inserted_deleted_changed():
    a = [
        ("call", "search", {"q": "Paris"}),
        ("call", "lookup", {"id": 1}),
        ("call", "weather", {"city": "paris", "days": 3, "limit": 10}),
        ("answer", None, "Sunny"),
    ]
    b = [
        ("call", "search", {"q": " paris "}),  # same after strip + case-fold
        ("call", "weather", {"limit": 10.0, "days": 5, "city": "PARIS"}),  # only "days" really differs
        ("call", "calc", {"expr": "1+1"}),
        ("answer", None, " sunny"),
    ]
    al = align(a, b)
    assert al.rows == [(0, 0, "same"), (1, None, "deleted"), (2, 1, "changed"), (None, 2, "inserted"), (3, 3, "same")]
    assert al.first_divergence == 1
    assert al.changed_keys == {2: ["days"]}
    assert al.to_dict()["rows"][2] == {"i": 2, "j": 1, "status": "changed"}


def test_align_identical_and_edge_sequences():
    seq = [("call", "f", {"x": 1, "y": [1, "A"]}), ("answer", None, "42")]
    same = align(seq, [("call", "f", {"y": [1.0, "a "], "x": 1.0}), ("answer", None, "42")])
    assert same.rows == [(0, 0, "same"), (1, 1, "same")]
    assert same.first_divergence is None
    assert normalize_args({"b": 3, "a": " X "}) == (("a", "x"), ("b", 3.0))
    assert isinstance(normalize_args(3), float)
    # True is not the number 1, and a key present on one side only is a difference.
    flag = align([("call", "f", {"x": True})], [("call", "f", {"x": 1, "z": None})])
    assert flag.rows == [(0, 0, "changed")] and flag.changed_keys == {0: ["x", "z"]}
    assert align([], [("call", "f", {})]).rows == [(None, 0, "inserted")]
    assert align([("call", "f", {})], []).first_divergence == 0


# ---------------------------------------------------------------- predictors


def _rows():
    failed = [T, T, T, T, F, F, F, F]
    sep = [5, 6, 7, 8, 1, 2, 3, 4]
    flag = [T, T, T, F, T, F, F, F]
    noise = [1, 0, 1, 0, 1, 0, 1, 0]
    return [
        {"failed": f, "sep": s, "rev": -s, "flag": g, "noise": z, "const": 3, "case_id": f"c{i}"}
        for i, (f, s, g, z) in enumerate(zip(failed, sep, flag, noise))
    ]


def test_predictors_auroc_and_sorting():
    out = predictors(_rows())  # signals inferred: every numeric/bool key, not the string case_id
    assert [p.signal for p in out] == ["rev", "sep", "flag", "noise", "const"]
    by = {p.signal: p for p in out}
    assert by["sep"].auroc == 1.0 and by["rev"].auroc == 0.0
    # flag: failed [1,1,1,0] vs passed [1,0,0,0]: 9 wins + (3 + 3) ties / 2 = 12 of 16 pairs
    assert by["flag"].auroc == pytest.approx(0.75)
    assert by["noise"].auroc == pytest.approx(0.5)
    assert by["const"].auroc is None and by["const"].strength is None
    assert (by["sep"].ci_low, by["sep"].ci_high) == (1.0, 1.0)  # every resample still separates
    assert by["flag"].ci_low < 0.75 < by["flag"].ci_high
    # Median split of flag at 0.5: high = the 4 true rows (3 failed), low = the 4 false rows (1 failed).
    assert (by["flag"].n_high, by["flag"].fail_rate_high, by["flag"].fail_rate_low) == (4, 0.75, 0.25)
    assert (by["sep"].split, by["sep"].fail_rate_high, by["sep"].fail_rate_low) == (4.5, 1.0, 0.0)
    again = predictors(_rows(), signals=["flag"])[0]
    assert (again.ci_low, again.ci_high) == (by["flag"].ci_low, by["flag"].ci_high)


def test_predictors_ties_single_class_missing_and_categories():
    rows = [{"failed": f, "m": m} for f, m in zip([T, T, T, T, F, F, F, F], [1, 1, 1, 1, 1, 1, 0, 0])]
    m = predictors(rows, signals=["m"])[0]
    # Median 1 is the maximum, so ties go high: high = the six 1s (4 failed), low = the two 0s (none failed).
    assert (m.split, m.n_high, m.n_low, m.fail_rate_high, m.fail_rate_low) == (1.0, 6, 2, 4 / 6, 0.0)

    one_class = predictors([{"failed": True, "x": i} for i in range(5)], signals=["x"])[0]
    assert one_class.auroc is None and one_class.n == 5

    rows = [
        {"failed": True, "kinds": ["wrong_tool"], "x": None},
        {"failed": True, "kinds": ["wrong_tool", "bad_args"], "x": 2},
        {"failed": False, "kinds": [], "x": 1},
        {"failed": False, "kinds": ["bad_args"], "x": 3},
        {"failed": None, "kinds": ["wrong_tool"], "x": 9},  # no outcome: skipped
    ]
    out = {p.signal: p for p in predictors(rows, signals=["kinds=wrong_tool", "x"])}
    assert out["kinds=wrong_tool"].auroc == 1.0 and out["kinds=wrong_tool"].n == 4
    assert out["x"].n == 3  # the None signal row is skipped too
    assert out["x"].auroc == pytest.approx(0.5)  # failed [2] vs passed [1, 3]: one win, one loss
    with pytest.raises(TypeError):
        predictors([{"failed": True, "kind": "wrong_tool"}], signals=["kind"])


# ---------------------------------------------------------------- agreement


def test_cohen_kappa_classic_table():
    # Table [[20, 5], [10, 15]]: p_o = 35/50 = 0.7, p_e = (25*30 + 25*20)/50^2 = 0.5, kappa = 0.2/0.5 = 0.4.
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert cohen_kappa(["x"] * 4, ["x"] * 4) == 1.0  # expected agreement 1: defined as 1.0
    assert cohen_kappa([], []) is None
    assert cohen_kappa({"i1": "a", "i2": "b", "i3": "b"}, {"i1": "a", "i2": "b", "i9": "a"}) == 1.0  # common items


# 4 items x 3 raters over categories A/B/C.
FLEISS_ITEMS = [["A", "A", "A"], ["A", "A", "B"], ["B", "B", "C"], ["A", "B", "C"]]


def _fleiss_textbook(items):
    cats = sorted({x for it in items for x in it})
    n, N = len(items[0]), len(items)
    counts = [[it.count(c) for c in cats] for it in items]
    p_i = [(sum(k * k for k in row) - n) / (n * (n - 1)) for row in counts]
    p_j = [sum(row[j] for row in counts) / (N * n) for j in range(len(cats))]
    p_bar, p_e = sum(p_i) / N, sum(p * p for p in p_j)
    return (p_bar - p_e) / (1 - p_e)


def test_fleiss_kappa_matches_textbook():
    # P_i = 1, 1/3, 1/3, 0 -> P_bar = 5/12; p_j = 1/2, 1/3, 1/6 -> P_e = 7/18; kappa = (1/36)/(11/18) = 1/22.
    assert _fleiss_textbook(FLEISS_ITEMS) == pytest.approx(1 / 22)
    assert fleiss_kappa(FLEISS_ITEMS) == pytest.approx(1 / 22)
    assert fleiss_kappa([["A", "A", "A"], ["A", "A", "A"]]) == 1.0
    with pytest.raises(ValueError):
        fleiss_kappa([["A", "A", "A"], ["A", "B"]])


def test_agreement_pairs_and_fleiss():
    labels = {f"i{k}": dict(zip("xyz", item)) for k, item in enumerate(FLEISS_ITEMS, 1)}
    labels["i5"] = {"x": "C", "y": "C", "z": None}  # z did not label i5
    out = agreement(labels)
    pairs = {(p["a"], p["b"]): p for p in out["pairs"]}
    assert set(pairs) == {("x", "y"), ("x", "z"), ("y", "z")}
    # x vs y on 5 items: AA AA BB AB CC -> p_o = 4/5; margins x (3,1,1), y (2,2,1): p_e = 9/25; kappa = 11/16.
    assert pairs[("x", "y")]["n"] == 5
    assert pairs[("x", "y")]["kappa"] == pytest.approx(11 / 16)
    assert pairs[("x", "z")]["n"] == 4
    assert out["fleiss"]["n"] == 4 and out["fleiss"]["raters"] == 3
    assert out["fleiss"]["kappa"] == pytest.approx(1 / 22)
    assert agreement({"i1": {"x": True, "y": True}, "i2": {"x": False, "y": True}})["fleiss"] is None  # two raters


def test_step_agreement_and_kind_confusion():
    s = step_agreement([2, 3, None, 5, 0, 7], [2, 4, None, 1, None, 9])
    # exact: items 0 and 2 (None = no wrong step agrees with None); within one adds item 1 (3 vs 4), not 5 (7 vs 9).
    assert s == {"n": 6, "exact": 2 / 6, "within_one": 3 / 6}
    conf = kind_confusion(
        {"i1": "wrong_tool", "i2": "bad_args", "i3": "wrong_tool", "i4": "x"},
        {"i1": "wrong_tool", "i2": "wrong_tool", "i3": "wrong_tool", "i5": "y"},
    )
    assert conf == {"labels": ["bad_args", "wrong_tool"], "matrix": [[0, 1], [0, 2]]}


def test_mcnemar_p_equals_scipys_exact_binomial_test():
    import random

    from scipy.stats import binomtest

    from evalrx.runstats import compare_outcomes

    rng = random.Random(0)
    for _ in range(60):
        reg, fix = rng.randint(0, 40), rng.randint(0, 40)
        a = {i: 1.0 for i in range(reg)} | {reg + i: 0.0 for i in range(fix)}
        b = {i: 0.0 for i in range(reg)} | {reg + i: 1.0 for i in range(fix)}
        got = compare_outcomes(a, b, resamples=2000).mcnemar_p
        want = binomtest(reg, reg + fix, 0.5).pvalue if reg + fix else 1.0
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
