"""JudgeMetrics: the figures on known confusion tables, and where they are undefined."""

from __future__ import annotations

import pytest

from webgym_rollout.judge.metrics import JudgeMetrics


def test_agreement_on_a_known_table():
    # n 50: p_o = 35/50 = 0.7; p_e = (25*30 + 25*20) / 2500 = 0.5; kappa = (0.7 - 0.5) / 0.5 = 0.4
    m = JudgeMetrics.from_pairs([(True, True)] * 20 + [(False, True)] * 5 + [(True, False)] * 10
                             + [(False, False)] * 15)
    assert (m.tp, m.fp, m.fn, m.tn, m.n) == (20, 5, 10, 15, 50)
    assert m.agreement == pytest.approx(0.7) and m.precision == pytest.approx(0.8)
    assert m.recall == pytest.approx(20 / 30) and m.specificity == pytest.approx(0.75)
    assert m.kappa == pytest.approx(0.4)
    assert m.f1 == pytest.approx(40 / 55) and m.success_rate_gap == pytest.approx(-0.1)
    assert m.label_success_rate == pytest.approx(0.6) and m.judge_success_rate == pytest.approx(0.5)
    assert m.to_dict() == {"n": 50, "tp": 20, "fp": 5, "tn": 15, "fn": 10, "agreement": m.agreement,
                           "precision": m.precision, "recall": m.recall, "f1": m.f1,
                           "specificity": m.specificity, "kappa": m.kappa, "label_success_rate": 0.6,
                           "judge_success_rate": 0.5, "success_rate_gap": m.success_rate_gap}
    # every verdict the wrong way round: p_o 0, p_e 0.5
    assert JudgeMetrics.from_pairs([(True, False), (False, True)]).kappa == pytest.approx(-1.0)


def test_agreement_degenerate_tables():
    empty = JudgeMetrics()
    assert empty.n == 0 and empty.agreement is None and empty.kappa is None and empty.precision is None
    all_pass = JudgeMetrics.from_pairs([(True, True)] * 4)  # one class on both sides: p_e = 1
    assert all_pass.agreement == 1.0 and all_pass.precision == 1.0 and all_pass.recall == 1.0
    assert all_pass.specificity is None and all_pass.kappa is None
    all_fail = JudgeMetrics.from_pairs([(False, False)] * 3)
    assert all_fail.specificity == 1.0 and all_fail.precision is None and all_fail.recall is None
    assert all_fail.kappa is None
    opposite = JudgeMetrics.from_pairs([(True, False)] * 3)  # each side one class, not the same: p_e = 0
    assert opposite.kappa == 0.0 and opposite.agreement == 0.0 and opposite.recall == 0.0
    assert opposite.precision is None and opposite.specificity is None
    one_sided = JudgeMetrics.from_pairs([(True, True), (True, False), (True, True)])  # truth all pass
    assert one_sided.kappa == 0.0 and one_sided.specificity is None
    assert one_sided.recall == pytest.approx(2 / 3)


def test_f1_success_rates_and_gap():
    # label 1 1 1 1 1 0 0 0 / judge 1 1 1 0 0 1 0 0: TP 3, FN 2, FP 1, TN 2
    pairs = [(True, True)] * 3 + [(True, False)] * 2 + [(False, True)] + [(False, False)] * 2
    m = JudgeMetrics.from_pairs(pairs)
    assert (m.tp, m.fp, m.tn, m.fn, m.n) == (3, 1, 2, 2, 8)
    assert m.agreement == m.accuracy == pytest.approx(5 / 8)
    assert (m.precision, m.recall, m.f1) == pytest.approx((3 / 4, 3 / 5, 2 / 3))
    rates = (m.label_success_rate, m.judge_success_rate, m.success_rate_gap)
    assert rates == pytest.approx((5 / 8, 4 / 8, -1 / 8))
    # A judge that never says success: precision is undefined, not 0; the gap is minus the label rate.
    never = JudgeMetrics.from_pairs([(True, False), (False, False)])
    assert (never.precision, never.recall, never.f1, never.success_rate_gap) == (None, 0.0, 0.0, -0.5)
    assert JudgeMetrics().accuracy is None and JudgeMetrics().n == 0 and JudgeMetrics().f1 is None
