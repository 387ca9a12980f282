"""Pick, each period, the option the cost model predicts fastest -- with hysteresis and switch costs (pure).

The caller supplies ``predict(option) -> seconds`` built from the latest
telemetry (measured bandwidth, compute time, codec cost). The Controller
switches from the current option to the predicted best only when the best
beats the current one by more than ``margin`` (a fraction) *and* the switch
cost is paid back within ``payback`` periods, for ``patience`` consecutive
periods in a row; otherwise it stays. The last ``keep`` periods' predictions
and the reason for each decision are kept (``history``), so a run can be
explained afterwards, and a long run's memory stays bounded; ``periods`` and
``switches`` count the whole run.

Its options are what a loop can switch between (the exchange registry's
entries for the technique, :func:`aitrinity.plan.registry.choices`), its
predictions come from the caller, priced on what the loop measured
(:class:`aitrinity.control.telemetry.Rates`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Decision:
    period: int
    choice: str
    switched: bool
    predicted_s: dict[str, float]
    reason: str


@dataclass
class Controller:
    options: Sequence[str]
    current: str
    margin: float = 0.1
    patience: int = 2
    switch_cost_s: float = 0.0
    payback: int = 10
    keep: int = 1000
    """Periods of ``history`` kept (the newest)."""
    history: deque[Decision] = field(init=False)
    periods: int = field(default=0, init=False)
    """Decisions taken in the whole run."""
    switches: int = field(default=0, init=False)
    """Switches in the whole run."""
    _streak: int = 0
    _candidate: str | None = None

    def __post_init__(self) -> None:
        if self.current not in self.options:
            raise ValueError(f"current option {self.current!r} is not among {list(self.options)}")
        if self.margin < 0 or self.patience < 1 or self.keep < 1:
            raise ValueError("margin >= 0, patience >= 1 and keep >= 1")
        self.history = deque(maxlen=self.keep)

    def decide(self, predict: Callable[[str], float]) -> Decision:
        pred = {o: predict(o) for o in self.options}
        best = min(pred, key=lambda o: (pred[o], o != self.current))
        cur = pred[self.current]
        gain = cur - pred[best]
        switched = False
        if best == self.current:
            self._streak, self._candidate = 0, None
            reason = f"{self.current} is predicted fastest ({cur:.4g} s)"
        elif math.isfinite(cur) and gain <= self.margin * cur:  # (the current option infeasible: any other gains)
            self._streak, self._candidate = 0, None
            reason = f"{best} would save {gain / cur:.1%}, within the {self.margin:.0%} margin: stay"
        elif gain * self.payback <= self.switch_cost_s:
            self._streak, self._candidate = 0, None
            reason = f"{best} saves {gain:.3g} s a period: the {self.switch_cost_s:.3g} s switch would not pay back"
        else:
            self._streak = self._streak + 1 if self._candidate == best else 1
            self._candidate = best
            if self._streak >= self.patience:
                reason = f"switch {self.current} -> {best}: predicted {cur:.4g} s -> {pred[best]:.4g} s"
                self.current, switched = best, True
                self._streak, self._candidate = 0, None
            else:
                reason = f"{best} predicted faster ({self._streak}/{self.patience} periods)"
        d = Decision(self.periods, self.current, switched, pred, reason)
        self.history.append(d)
        self.periods += 1
        self.switches += switched
        return d
