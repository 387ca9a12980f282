"""The Controller: switch only past the margin, after `patience` periods, when the switch pays back."""

import pytest

from aitrinity.control import Controller


def test_hysteresis_and_patience():
    c = Controller(["a", "b"], "a", margin=0.1, patience=2)
    assert c.decide({"a": 1.0, "b": 0.95}.__getitem__).choice == "a"  # 5%: within the margin
    d = c.decide({"a": 1.0, "b": 0.5}.__getitem__)
    assert d.choice == "a" and not d.switched and "1/2" in d.reason
    d = c.decide({"a": 1.0, "b": 0.5}.__getitem__)
    assert d.choice == "b" and d.switched
    # a single good period for "a" is not enough to switch back
    assert c.decide({"a": 0.3, "b": 0.5}.__getitem__).choice == "b"
    assert c.decide({"a": 0.6, "b": 0.5}.__getitem__).choice == "b"  # the streak broke
    assert [h.switched for h in c.history] == [False, False, True, False, False]


def test_switch_cost_must_pay_back():
    c = Controller(["a", "b"], "a", margin=0.0, patience=1, switch_cost_s=5.0, payback=10)
    assert c.decide({"a": 1.0, "b": 0.7}.__getitem__).choice == "a"  # 0.3 s x 10 < 5 s
    assert c.decide({"a": 1.0, "b": 0.4}.__getitem__).choice == "b"  # 0.6 s x 10 > 5 s


def test_bad_setup():
    with pytest.raises(ValueError):
        Controller(["a"], "z")


def test_history_is_bounded_and_the_run_counted():
    """A long run keeps its newest `keep` decisions; periods and switches count the whole run."""
    c = Controller(["a", "b"], "a", margin=0.0, patience=1, keep=50)
    for i in range(5000):
        best = "b" if (i // 10) % 2 else "a"  # the better option flips every 10 periods
        c.decide({"a": 1.0 if best == "a" else 2.0, "b": 1.0 if best == "b" else 2.0}.__getitem__)
    assert len(c.history) == 50
    assert [d.period for d in c.history] == list(range(4950, 5000))
    assert c.periods == 5000 and c.switches == 499  # every flip but the first period's
    with pytest.raises(ValueError):
        Controller(["a"], "a", keep=0)


def test_an_infeasible_current_option_is_left_for_any_feasible_one():
    """The option in use priced infinite (it does not fit) is left, margin or not: an infinite current time once
    read as 'within the margin' (inf <= 0.1 x inf) and the Controller stayed on a plan that cannot run."""
    c = Controller(["a", "b"], "a", margin=0.1, patience=1)
    d = c.decide({"a": float("inf"), "b": 2.0}.__getitem__)
    assert d.switched and d.choice == "b"
    assert not c.decide({"a": float("inf"), "b": float("inf")}.__getitem__).switched  # nothing better: stay
