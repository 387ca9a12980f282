"""One data-parallel rank: ``python -m aitrinity.systems.ddp.worker CONFIG.json``; writes its results as JSON.

The launcher (``systems.ddp.launch``) starts one process per rank, in a shaped
network namespace when asked; configs and results are JSON files, checkpoints
safetensors (nothing is pickled across the process boundary). A config lists
runs; each run trains a fresh MLP with DDP (gloo) under a compression method,
or under ``auto``: the Controller re-plans the method every step from the
measured link bandwidth and latency, compute time and codec cost
(``cost.grad_compression.step_time``).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from aitrinity.control import Controller, Rates
from aitrinity.cost.grad_compression import message, step_time
from aitrinity.plan import registry
from aitrinity.systems.ddp import hooks, tasks

NOT_SWITCHED = {
    "bf16": "the same bytes as fp16 on the link",
    "powersgd": "its warm-started factors and error memory belong to a run that starts with it",
}
"""Gradient-compression methods ``auto`` leaves out of its options, and why."""
AUTO_OPTIONS = ("none", *(m for m in registry.choices("gradient-compression", "method") if m not in NOT_SWITCHED))
"""What ``auto`` switches between: no compression and the registry's gradient-compression methods (less
:data:`NOT_SWITCHED`)."""
LINK = "data-parallel link"


@dataclass
class Run:
    method: str = "none"
    """A method of ``cost.grad_compression`` or 'auto'."""
    seed: int = 0
    epochs: int = 10
    steps: int | None = None
    """Stop after this many steps (default: all epochs)."""
    batch: int = 64
    lr: float = 0.05
    density: float = 0.01
    error_feedback: bool | None = None
    cast: str | None = None
    """'fp16' or 'bf16': the hook runs inside PyTorch's cast wrapper (``hooks.cast_wrapper``)."""
    hidden: int = 256
    powersgd_rank: int = 4
    checkpoint_at: int | None = None
    checkpoint_dir: str | None = None
    resume: bool = False
    inject_nan_at: int | None = None
    options: list[str] = field(default_factory=lambda: list(AUTO_OPTIONS))
    record_steps: bool = True


def _params_digest(model: nn.Module) -> str:
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _save(path: Path, model: nn.Module, opt: torch.optim.Optimizer, state: hooks.CompressionState, step: int) -> None:
    from safetensors.torch import save_file

    tensors = {f"param.{k}": v.contiguous() for k, v in model.state_dict().items()}
    for i, p in enumerate(opt.param_groups[0]["params"]):
        buf = opt.state.get(p, {}).get("momentum_buffer")
        if buf is not None:
            tensors[f"momentum.{i}"] = buf.contiguous()
    tensors |= {f"hook.{k}": v.contiguous() for k, v in state.state_dict().items()}
    tensors["step"] = torch.tensor([step])
    save_file(tensors, str(path))


def _load(path: Path, model: nn.Module, opt: torch.optim.Optimizer, state: hooks.CompressionState) -> int:
    from safetensors.torch import load_file

    t = load_file(str(path))
    model.load_state_dict({k[6:]: v for k, v in t.items() if k.startswith("param.")})
    for i, p in enumerate(opt.param_groups[0]["params"]):
        if f"momentum.{i}" in t:
            opt.state[p]["momentum_buffer"] = t[f"momentum.{i}"].clone()
    state.load_state_dict({k[5:]: v for k, v in t.items() if k.startswith("hook.")})
    return int(t["step"][0])


def _steps(method: str, world: int) -> int:
    """Latency terms of one bucket's collectives (``cost.grad_compression.step_time``)."""
    return message(method, 1, world).steps(world)


class Telemetry:
    """What the Controller predicts from: the link's α and β, compute time and each method's codec cost.

    At the start (and on ``probe``) every option exchanges random buckets of the
    real sizes twice (the faster round counts), through the real hook, on every rank: that measures each
    method's codec seconds per element and one (latency steps, bytes sent,
    seconds) point per option, to which α and β are fitted by least squares.
    Then each step's observation of the active method updates β, the compute
    time and that method's codec cost (exponentially weighted), so a link that
    slows down or speeds up moves every prediction.

    Two predictions per option: ``model`` is the cost model's α-β step time
    (``cost.grad_compression.step_time``); ``predict``, what the Controller
    uses, takes each option's probed transfer time instead of the α-β line,
    scaled by how the active option's observed transfers compare with its
    probe -- gloo on a fast loopback is far from linear in message size.
    """

    def __init__(
        self, options: list[str], world: int, density: float, weight: float = 0.3, cast: str | None = None
    ) -> None:
        self.options, self.world, self.density, self.w = options, world, density, weight
        self.grad_dtype = {None: torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[cast]
        """The dtype buckets reach the hook in (a cast wrapper's), for the probes and the byte model."""
        self.alpha_s = 0.0
        self.bandwidth_Bps = 1.0
        self.compute_s: float | None = None
        self.codec: dict[str, float] = {}
        self.probe_comm: dict[str, float] = {}
        self.link_ratio = 1.0

    def _ewma(self, old: float | None, new: float) -> float:
        return new if old is None else (1 - self.w) * old + self.w * new

    def probe(self, numels: list[int]) -> None:
        pts = []
        for m in self.options:
            best: hooks.HookStats | None = None
            for _ in range(2):  # the first round warms the codec up; keep the faster round's codec time
                st = hooks.CompressionState(m, density=self.density)
                for i, n in enumerate(numels):
                    hooks.compress_bucket(st, i, torch.randn(n).to(self.grad_dtype))
                if best is None or st.stats.codec_s < best.codec_s:
                    best = st.stats
            assert best is not None
            pts.append((len(numels) * _steps(m, self.world), best.sent_bytes, best.comm_s))
            self.codec[m] = best.codec_s / max(best.elements, 1)
            self.probe_comm[m] = best.comm_s
        # least squares for comm = a * steps + b * bytes (a = α, b = 1/β), both kept positive
        a11 = sum(k * k for k, _, _ in pts)
        a12 = sum(k * b for k, b, _ in pts)
        a22 = sum(b * b for _, b, _ in pts)
        r1 = sum(k * t for k, _, t in pts)
        r2 = sum(b * t for _, b, t in pts)
        det = a11 * a22 - a12 * a12
        alpha, inv_beta = ((a22 * r1 - a12 * r2) / det, (a11 * r2 - a12 * r1) / det) if det else (0.0, 0.0)
        if inv_beta <= 0:  # latency-dominated: no bandwidth signal
            inv_beta = 1e-12
        if alpha < 0:
            alpha = 0.0
            inv_beta = r2 / a22 if a22 else 1e-12
        self.alpha_s, self.bandwidth_Bps = alpha, 1.0 / inv_beta

    def observe(
        self, method: str, buckets: int, sent: float, comm_s: float, codec_s: float, elements: int, compute_s: float
    ) -> None:
        self.compute_s = self._ewma(self.compute_s, compute_s)
        if elements:
            self.codec[method] = self._ewma(self.codec.get(method), codec_s / elements)
        transfer = comm_s - buckets * _steps(method, self.world) * self.alpha_s
        if sent >= 32 * 1024 and transfer > 0:
            self.bandwidth_Bps = 1.0 / self._ewma(1.0 / self.bandwidth_Bps, transfer / sent)
        if self.probe_comm.get(method):
            self.link_ratio = self._ewma(self.link_ratio, comm_s / self.probe_comm[method])

    def rates(self) -> Rates:
        """The link's bandwidth and latency and the step's compute time, as the Controller's telemetry."""
        return Rates(links_Bps={LINK: self.bandwidth_Bps}, latency_s={LINK: self.alpha_s}, compute_s=self.compute_s)

    def predict(self, method: str, numels: list[int]) -> float:
        """Compute + codec + the option's probed transfer time, scaled to the link as now observed."""
        assert self.compute_s is not None
        comm = self.probe_comm.get(method)
        if comm is None:
            return self.model(method, numels)
        return self.compute_s + self.codec.get(method, 0.0) * sum(numels) + comm * self.link_ratio

    def model(self, method: str, numels: list[int]) -> float:
        assert self.compute_s is not None
        return step_time(
            method,
            numels,
            self.world,
            bandwidth_Bps=self.bandwidth_Bps,
            latency_s=self.alpha_s,
            compute_s=self.compute_s,
            codec_s_per_element=self.codec.get(method, 0.0),
            grad_bytes=self.grad_dtype.itemsize,
            density=self.density,
        )


def _hooked(run: Run, model: nn.Module, rank: int) -> tuple[Any, hooks.CompressionState]:
    """``model`` in DDP with the compression hook registered (``auto`` starts uncompressed), and its state; with
    ``inject_nan_at``, rank 0's first gradient turns NaN at that step (the non-finite guard's test)."""
    ddp = nn.parallel.DistributedDataParallel(model)
    state = hooks.CompressionState(
        "none" if run.method == "auto" else run.method,
        density=run.density,
        error_feedback=run.error_feedback,
        seed=run.seed,
        rank=run.powersgd_rank,
    )
    hooks.register(ddp, state, cast=run.cast)
    if run.inject_nan_at is not None and rank == 0:
        first = next(model.parameters())
        first.register_hook(
            lambda g: g.index_fill(0, torch.tensor([0]), float("nan")) if state.step + 1 == run.inject_nan_at else g
        )
    return ddp, state


def _train_step(
    ddp: Any, opt: torch.optim.Optimizer, state: hooks.CompressionState, x: Any, y: Any, lr: float
) -> tuple[float, bool]:
    """One step at learning rate ``lr``: forward, backward (the hook compresses and all-reduces), and the optimizer's
    step unless a rank saw a non-finite gradient (then every rank skips it). Returns the loss and whether it was
    skipped."""
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(ddp(x), y)
    loss.backward()
    flag = torch.tensor([1.0 if state.found_nonfinite else 0.0])
    dist.all_reduce(flag)
    nonfinite = bool(flag.item() > 0)
    if not nonfinite:
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    return float(loss.item()), nonfinite


def _record(
    state: hooks.CompressionState, before: hooks.HookStats, step: int, loss: float, step_s: float, nonfinite: bool
) -> dict[str, Any]:
    """One step's record: its loss, method, times and bytes (the hook's statistics since ``before``)."""
    s = state.stats
    comm, codec = s.comm_s - before.comm_s, s.codec_s - before.codec_s
    return {
        "step": step,
        "loss": loss,
        "method": state.method,
        "step_s": step_s,
        "compute_s": step_s - comm - codec,
        "comm_s": comm,
        "codec_s": codec,
        "payload_bytes": s.payload_bytes - before.payload_bytes,
        "sent_bytes": s.sent_bytes - before.sent_bytes,
        "buckets": list(state.step_buckets),
        "nonfinite": nonfinite,
    }


def _adapt(
    run: Run,
    state: hooks.CompressionState,
    before: hooks.HookStats,
    ctl: Controller,
    tele: Telemetry,
    rank: int,
    step_s: float,
) -> dict[str, Any] | None:
    """``auto``: feed the step to the telemetry, let rank 0's Controller decide and switch every rank to its choice
    (broadcast, so they switch together); rank 0's decision, for its record."""
    s = state.stats
    comm, codec = s.comm_s - before.comm_s, s.codec_s - before.codec_s
    buckets = [state.bucket_numels[i] for i in sorted(state.bucket_numels)]
    if tele.compute_s is None:
        tele.probe(buckets)  # every rank, the same collectives, after DDP's first step fixed its buckets
    tele.observe(
        state.method,
        s.buckets - before.buckets,
        s.sent_bytes - before.sent_bytes,
        comm,
        codec,
        s.elements - before.elements,
        step_s - comm - codec,
    )
    choice = torch.tensor([0])
    decision = None
    if rank == 0:
        d = ctl.decide(lambda m, b=buckets: tele.predict(m, b))  # type: ignore[misc]
        choice[0] = run.options.index(d.choice)
        decision = {
            "choice": d.choice,
            "switched": d.switched,
            "reason": d.reason,
            "predicted_s": d.predicted_s,
            "model_s": {m: tele.model(m, buckets) for m in run.options},
            "rates": tele.rates().to_json(),
        }
    dist.broadcast(choice, 0)
    state.set_method(run.options[int(choice[0])])
    return decision


def train(run: Run, task: tasks.Task, rank: int, world: int) -> dict[str, Any]:
    model = tasks.mlp(task.features, task.classes, run.hidden, run.seed)
    ddp, state = _hooked(run, model, rank)
    auto = run.method == "auto"
    opt = torch.optim.SGD(model.parameters(), lr=run.lr, momentum=0.9)
    x, y = task.x_train[rank::world], task.y_train[rank::world]
    per_epoch = math.ceil(len(x) / run.batch)
    total = run.steps or run.epochs * per_epoch
    step = 0
    ckpt = Path(run.checkpoint_dir or ".") / f"rank{rank}.safetensors"
    if run.resume:
        step = _load(ckpt, model, opt, state)
    numels = [p.numel() for p in model.parameters()]
    ctl = Controller(run.options, "none") if auto else None
    tele = Telemetry(run.options, world, run.density, cast=run.cast) if auto else None
    records, skipped = [], 0
    while step < total:
        epoch, i = divmod(step, per_epoch)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(run.seed * 7919 + epoch))
        idx = order[i * run.batch : (i + 1) * run.batch]
        before = hooks.HookStats(**{k: v for k, v in state.stats.__dict__.items() if k != "by_method"})
        state.found_nonfinite = False
        state.step_buckets = []
        t0 = time.perf_counter()
        lr = run.lr * 0.5 * (1 + math.cos(math.pi * step / total))  # cosine decay to zero over the run
        loss, nonfinite = _train_step(ddp, opt, state, x[idx], y[idx], lr)
        skipped += nonfinite
        step_s = time.perf_counter() - t0
        rec = _record(state, before, step, loss, step_s, nonfinite)
        if ctl is not None and tele is not None:
            decision = _adapt(run, state, before, ctl, tele, rank, step_s)
            if decision is not None:
                rec["decision"] = decision
        if run.record_steps:
            records.append(rec)
        step += 1
        if run.checkpoint_at is not None and step == run.checkpoint_at and not run.resume:
            _save(ckpt, model, opt, state, step)
    return {
        "method": run.method,
        "cast": run.cast,
        "seed": run.seed,
        "rank": rank,
        "steps": step,
        "skipped_steps": skipped,
        "test_accuracy": tasks.accuracy(model, task.x_test, task.y_test),
        "params_digest": _params_digest(model),
        "params_finite": all(bool(torch.isfinite(p).all()) for p in model.parameters()),
        "bucket_numels": numels,
        "stats": state.stats.as_dict(),
        "records": records,
        "bandwidth_Bps": tele.bandwidth_Bps if tele else None,
        "alpha_s": tele.alpha_s if tele else None,
    }


def main(argv: list[str]) -> int:
    cfg = json.loads(Path(argv[0]).read_text())
    rank, world = cfg["rank"], cfg["world"]
    torch.set_num_threads(cfg.get("threads", 1))
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(cfg["port"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=__import__("datetime").timedelta(seconds=120))
    try:
        if "sharding" in cfg:
            from aitrinity.systems.ddp import sharding

            results = sharding.run(cfg["sharding"], rank)
        else:
            task = tasks.load(cfg.get("task", "digits"))
            results = [train(Run(**r), task, rank, world) for r in cfg["runs"]]
    finally:
        dist.destroy_process_group()
    out = Path(cfg["out"])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results))
    tmp.replace(out)  # whole or absent: the launcher trusts a rank whose file is there
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
