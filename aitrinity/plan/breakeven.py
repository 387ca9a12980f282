"""Break-even rules: the bandwidth at which an exchange starts (or stops) paying off.

For an exchange in ``plan.exchanges`` we price the plan with and without it
while scaling the bandwidth of the one resource that decides it (the link the
data-parallel gradients cross, the host link, a tier's path, device-memory
bandwidth) and locate the scale where the verdict flips, by a log-spaced scan
and bisection. The rule is exact under the scenario's own cost model and
overlap model -- it is the same pricing that produced the diagnosis.

The flip is located on the *margin* (the time per unit of work with the exchange minus without it, beyond
:data:`TOLERANCE`): a scan finds the first quarter decade where it changes sign and Brent's method (Brent 1973,
*Algorithms for Minimization without Derivatives*, ch. 4; the variant of scipy's ``brentq``) closes the bracket,
a handful of pricings where the margin is smooth, bisection's count where it jumps. A plan without the exchange
that moves no byte over the swept path is priced once, not at every scale.

* ``faster`` exchanges (compression, prefix reuse, quantization) pay off where
  the plan with them takes less time per unit of work;
* ``hidden`` exchanges (offloads) buy memory and pay off where their transfers
  cost no time (they hide behind other work under the overlap model).

Work unit: a training step per token, a serving request per output token. A technique with a
statistical cost (local SGD, lossy gradient compression: :class:`aitrinity.plan.registry.Quality`'s
``steps_factor``) needs that many more steps for the same result, so its time per unit is multiplied by
it, and its report says the largest factor it could afford at today's bandwidth.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from aitrinity.cost.diagnosis import ExchangeReport
from aitrinity.cost.estimate import CHANNEL_LABELS, Estimate, price_serving_ledger, training_estimate
from aitrinity.cost.kernels import Kernels
from aitrinity.cost.ledger import Ledger
from aitrinity.cost.serving import CHANNEL_OF_TIER, serving_ledger
from aitrinity.plan import registry
from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Quality
from aitrinity.spec.model import ModelSpec
from aitrinity.spec.scenario import Plan, Scenario, System, moves_kv
from aitrinity.units import format_bandwidth, format_bytes

TOLERANCE = 1e-6
SCAN: list[float] = [10.0 ** (k / 4.0) for k in range(-16, 17)]  # bandwidth scales 1e-4 .. 1e4
LOG_XTOL = 1.4e-4
"""How close (in log scale) the search closes in on a flip: the threshold to 1 part in 14,000, below the three
significant figures it is printed with -- what 12 halvings of a quarter decade gave."""
ISOLATED = ("host", "host_dram", "storage")
"""Swept channels that reach the pricing only through the ledger's traffic on them (the collectives' and the
operator model's links and HBM are read directly): a plan that sends nothing over them costs the same at every
scale."""


def _scaled(system: System, channel: str, k: float) -> System:
    """The system with one channel's bandwidth multiplied by ``k``."""

    def bw(spec, field: str = "bandwidth_Bps"):  # type: ignore[no-untyped-def]
        return spec.model_copy(update={field: getattr(spec, field) * k}) if spec is not None else None

    if channel == "hbm":
        return system.model_copy(update={"device": bw(system.device, "memory_bandwidth_Bps")})
    update = {
        "intra_node": {"intra_node_link": bw(system.intra_node_link)},
        "inter_node": {"inter_node_link": bw(system.inter_node_link)},
        "host": {"host_link": bw(system.host_link), "host_memory": bw(system.host_memory)},
        "host_dram": {"host_memory": bw(system.host_memory)},
        "storage": {"host_link": bw(system.host_link), "storage": bw(system.storage)},
        "remote": {"inter_node_link": bw(system.inter_node_link), "remote_pool": bw(system.remote_pool)},
    }[channel]
    return system.model_copy(update=update)


def _nominal(system: System, channel: str) -> float:
    """The figure a user knows: a link's line rate, a path's achievable rate, HBM's peak."""
    if channel == "hbm":
        return system.device.memory_bandwidth_Bps
    if channel in ("intra_node", "inter_node", "host"):
        link = {
            "intra_node": system.intra_node_link,
            "inter_node": system.inter_node_link or system.intra_node_link,
            "host": system.host_link,
        }[channel]
        return link.bandwidth_Bps
    return system.channel(channel).bandwidth_Bps


_LABEL = {**CHANNEL_LABELS, "hbm": "device-memory bandwidth"}


def _per_unit(est: Estimate, plan: Plan) -> float:
    """Time per unit of work, counting the extra steps a statistical cost asks for."""
    factor = registry.quality_of(plan.exchanges).steps_factor
    if est.training:
        return factor * est.training.step_time_s / est.ledger.training.tokens_per_step  # type: ignore[union-attr]
    assert est.serving is not None and est.ledger.serving is not None
    f = est.ledger.serving
    return factor * est.serving.request_latency_s / (max(f.batch, 1) * f.output_tokens)


def _without(plan: Plan, index: int) -> Plan:
    """The plan minus one exchange (and minus KV compression if nothing moves KV any more)."""
    rest = [x for j, x in enumerate(plan.exchanges) if j != index]
    kept = moves_kv(rest)
    rest = [x for x in rest if x.kind != "kv-compression" or kept]
    return plan.model_copy(update={"exchanges": rest})


def _channel(inf: ExchangeInfo, x: object, ledger: Ledger) -> str | None:
    if inf.swept == "dp_link":
        dp = [t for t in ledger.phases[0].traffic if t.purpose.startswith(("DP gradient", "ZeRO-3 gradient"))]
        return dp[0].channel if dp else None
    if inf.swept == "host":
        return "host"
    if inf.swept == "hbm_bandwidth":
        return "hbm"
    if inf.swept == "kv_link":
        kv = [t for p in ledger.phases for t in p.traffic if "KV" in t.purpose]
        return kv[0].channel if kv else None
    tier = getattr(x, "tier", "hbm")
    return "hbm" if tier == "hbm" else CHANNEL_OF_TIER[tier]


def exchange_reports(
    scenario: Scenario, model: ModelSpec, system: System, kernels: Kernels | None = None
) -> list[ExchangeReport]:
    """A break-even report for every exchange in the scenario's plan, priced with ``kernels`` where the operator model
    prices (``diagnose`` passes the ones it priced the scenario with; None: the device's catalog roofline)."""
    return [report(scenario, model, system, i, kernels) for i in range(len(scenario.plan.exchanges))]


def report(
    scenario: Scenario, model: ModelSpec, system: System, index: int, kernels: Kernels | None = None
) -> ExchangeReport:
    plan = scenario.plan
    x = plan.exchanges[index]
    inf = registry.get(x.kind).info
    quality = registry.get(x.kind).quality(x)
    own_factor = quality.steps_factor
    estimate = _pricer(scenario, model, kernels)
    without_plan = _without(plan, index)
    with_est, without_est = estimate(plan, system), estimate(without_plan, system)
    relieved = without_est.memory.used_bytes - with_est.memory.used_bytes
    channel = _channel(inf, x, with_est.ledger)
    t_without = _per_unit(without_est, without_plan)
    t_with = _per_unit(with_est, plan)

    def result(
        resource: str | None, threshold: float | None, current: float | None, now: bool, sentence: str
    ) -> ExchangeReport:
        return ExchangeReport(
            kind=x.kind,
            title=inf.title,
            pathway=inf.pathway,
            spends=inf.spends,
            relieves=inf.relieves,
            time_per_unit_with_s=t_with,
            time_per_unit_without_s=t_without,
            device_bytes_relieved=relieved,
            fits_without=without_est.memory.fits,
            resource=resource,
            threshold_Bps=threshold,
            current_Bps=current,
            pays_off=now,
            accuracy_drop=quality.accuracy_drop,
            steps_factor=quality.steps_factor,
            sentence=sentence,
        )

    if channel is None:
        return result(None, None, None, False, f"{inf.title}: nothing to relieve here (no traffic of that kind).")

    margin = _Margin(inf, estimate, system, channel, (plan, without_plan), (without_est.ledger, t_without))
    k_star = _boundary(margin, margin.paying, inf.pays_when == "below")
    nominal = _nominal(system, channel)
    now = margin.pays(1.0)
    resource = _LABEL[channel]
    threshold = None if k_star is None else k_star * nominal
    sentence = _verdict(inf, resource, threshold, nominal, now)
    if inf.swept == "dp_link" and inf.rule == "faster":  # a statistical cost is the price of fewer bytes
        sentence += _steps_budget(t_without, t_with / own_factor, own_factor)
    sentence += _costs(quality, relieved, only_fits=not without_est.memory.fits and with_est.memory.fits)
    return result(resource, threshold, nominal, now, sentence + ".")


class _Margin:
    """The exchange's margin at ``channel``'s bandwidth scaled by ``k``: its time per unit of work minus the time
    without it (``plans``), shifted by :data:`TOLERANCE` of today's time without it so that it pays off where the
    margin is negative (by its rule: faster, strictly; or no slower, where zero pays too). Cached per scale: the
    scan's ``k = 1`` is today's verdict too."""

    def __init__(
        self,
        inf: ExchangeInfo,
        estimate: Callable[[Plan, System], Estimate],
        system: System,
        channel: str,
        plans: tuple[Plan, Plan],
        without: tuple[Ledger, float],
    ) -> None:
        self._estimate, self._system, self._channel = estimate, system, channel
        self._with_plan, self._without_plan = plans
        without_ledger, t_without = without
        self._fixed_without = t_without if _unmoved(system, channel, without_ledger) else None
        self._shift = TOLERANCE * t_without if inf.rule == "faster" else -TOLERANCE * t_without
        self.strict = inf.rule == "faster"
        self._priced: dict[float, float] = {}

    def __call__(self, k: float) -> float:
        if k not in self._priced:
            self._priced[k] = self._price(k)
        return self._priced[k]

    def _price(self, k: float) -> float:
        s = _scaled(self._system, self._channel, k)
        t_with = _per_unit(self._estimate(self._with_plan, s), self._with_plan)
        t_without = self._fixed_without
        if t_without is None:
            t_without = _per_unit(self._estimate(self._without_plan, s), self._without_plan)
        return t_with - t_without + self._shift

    def pays(self, k: float) -> bool:
        return self.paying(self(k))

    def paying(self, margin: float) -> bool:
        return margin < 0 if self.strict else margin <= 0


def _unmoved(system: System, channel: str, ledger: Ledger) -> bool:
    """Whether scaling ``channel`` leaves ``ledger``'s price alone: an :data:`ISOLATED` channel, and none of the
    ledger's traffic crosses a path whose bandwidth the scaling changes."""
    if channel not in ISOLATED:
        return False
    scaled = _scaled(system, channel, 2.0)
    used = {t.channel for p in ledger.phases for t in p.traffic if t.bytes_per_device > 0}
    return all(scaled.channel(c).bandwidth_Bps == system.channel(c).bandwidth_Bps for c in used)


def _costs(quality: Quality, relieved: float, only_fits: bool) -> str:
    """The verdict's tail: the accuracy the exchange costs, the device memory it frees."""
    out = ""
    if quality.accuracy_drop:
        out += f"; it costs about {quality.accuracy_drop:.1%} of the model's accuracy ({quality.source})"
    if relieved > 0:
        out += f"; it frees {format_bytes(relieved)} of device memory"
        if only_fits:
            out += " (the plan fits only with it)"
    return out


def _pricer(scenario: Scenario, model: ModelSpec, kernels: Kernels | None) -> Callable[[Plan, System], Estimate]:
    """The scenario's ledger and its pricing, as ``diagnose`` runs them (with its ``kernels``), for any plan and
    system."""
    w = scenario.workload

    def estimate(p: Plan, s: System) -> Estimate:
        if w.training is not None:
            return training_estimate(scenario.name, model, w.training, p, s, kernels)
        assert w.serving is not None
        led = serving_ledger(scenario.name, model, w.serving, p, s)
        return price_serving_ledger(led, model, p, w.serving, s, kernels)

    return estimate


def _verdict(inf: ExchangeInfo, resource: str, threshold: float | None, nominal: float, now: bool) -> str:
    """Where it pays off (or costs no time) on the swept bandwidth, and whether it does today."""
    verb = "pays off" if inf.rule == "faster" else "costs no time"
    if threshold is None:
        bandwidth = resource if resource.endswith("bandwidth") else f"{resource} bandwidth"
        if now:
            return f"{inf.title} {verb} at any {bandwidth}"
        if inf.rule == "faster":
            return f"{inf.title} never pays off here, whatever the {bandwidth}"
        return f"{inf.title} always costs time here, whatever the {bandwidth}"
    side = "below" if inf.pays_when == "below" else "above"
    return (
        f"{inf.title} {verb} while the {resource} is {side} {format_bandwidth(threshold)}; "
        f"here it is {format_bandwidth(nominal)}, so it {'does' if now else 'does not'}"
    )


def _steps_budget(t_without: float, t_with_exact: float, assumed: float) -> str:
    """The largest step factor the technique affords here: it pays off while it needs fewer extra steps."""
    afford = t_without / t_with_exact
    told = f"{assumed:g}x assumed" if assumed != 1.0 else "none assumed"
    if afford <= 1.0:
        return f" (even with no statistical cost it would not pay off here; {told})"
    return f"; it stays ahead while it needs at most {afford:.2f}x the optimizer steps it needs without it ({told})"


def _boundary(margin: Callable[[float], float], paying: Callable[[float], bool], below: bool) -> float | None:
    """The scale where the exchange flips: from paying (small k) to not when ``below``, the reverse otherwise.
    ``margin(k)`` says how far it is from the flip, ``paying(margin)`` on which side.

    The scan over :data:`SCAN` stops at the first flip; :func:`_brent` closes in on it. None when it never flips
    over 1e-4 .. 1e4 of today's bandwidth.
    """
    previous = margin(SCAN[0])
    for i in range(len(SCAN) - 1):  # priced lazily: the scan stops at the first flip
        current = margin(SCAN[i + 1])
        if paying(previous) != paying(current) and paying(previous) == below:
            if previous == 0.0 or current == 0.0:  # a scan point sits on the flip itself
                return SCAN[i] if previous == 0.0 else SCAN[i + 1]
            x = _brent(lambda x: margin(math.exp(x)), math.log(SCAN[i]), math.log(SCAN[i + 1]), previous, current)
            return math.exp(x)
        previous = current
    return None


def _brent(f: Callable[[float], float], a: float, b: float, fa: float, fb: float) -> float:
    """A zero of ``f`` between ``a`` and ``b`` (``fa``, ``fb`` of opposite signs) to within :data:`LOG_XTOL`: Brent's
    method -- inverse quadratic or linear interpolation where it converges, bisection where it does not, a step of
    at least the tolerance toward the other end so that the bracket closes (Brent 1973, ch. 4; after scipy's
    ``brentq``)."""
    x_pre, x_cur, f_pre, f_cur = a, b, fa, fb
    x_blk, f_blk, s_pre, s_cur = a, fa, b - a, b - a
    delta = LOG_XTOL / 2
    while True:
        if f_pre != 0.0 and f_cur != 0.0 and (f_pre < 0.0) != (f_cur < 0.0):
            x_blk, f_blk = x_pre, f_pre  # the bracket's other end
            s_pre = s_cur = x_cur - x_pre
        if abs(f_blk) < abs(f_cur):  # keep the better end as the current one
            x_pre, x_cur, x_blk = x_cur, x_blk, x_cur
            f_pre, f_cur, f_blk = f_cur, f_blk, f_cur
        s_bis = (x_blk - x_cur) / 2
        if f_cur == 0.0 or abs(s_bis) < delta:
            return x_cur
        step, trusted = s_bis, False
        if abs(s_pre) > delta and abs(f_cur) < abs(f_pre):
            if x_pre == x_blk:  # secant
                trial = -f_cur * (x_cur - x_pre) / (f_cur - f_pre)
            else:  # inverse quadratic
                d_pre = (f_pre - f_cur) / (x_pre - x_cur)
                d_blk = (f_blk - f_cur) / (x_blk - x_cur)
                trial = -f_cur * (f_blk * d_blk - f_pre * d_pre) / (d_blk * d_pre * (f_blk - f_pre))
            trusted = 2 * abs(trial) < min(abs(s_pre), 3 * abs(s_bis) - delta)  # short enough to trust
            step = trial if trusted else s_bis
        s_pre, s_cur = (s_cur, step) if trusted else (s_bis, s_bis)
        x_pre, f_pre = x_cur, f_cur
        x_cur += step if abs(step) > delta else math.copysign(delta, s_bis)
        f_cur = f(x_cur)
