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
