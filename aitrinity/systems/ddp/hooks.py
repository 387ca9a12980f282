"""Gradient-compression communication hooks for DDP (``hook(state, bucket) -> Future``), gloo or NCCL.

Tested on gloo (CPU); the code keeps every tensor on the gradient's device for
NCCL, which no machine of this project has run yet.

``register(ddp_model, state)`` installs ``compression_hook``; the state says
which method (``cost.grad_compression``: none, fp16, bf16, int8, topk, sign)
and keeps the error-feedback residuals and the stats. Each bucket is
compressed, exchanged and decoded synchronously inside the hook (no overlap
with the rest of backward), so the stats time encode, transfer and decode
exactly; the returned future is already complete.

- int8: stochastic rounding (QSGD-style, Alistarh et al. 2017) to 127 levels
  per 2048-element block with an fp32 scale; a quantized all-reduce: all-to-all
  of the chunks, dequantize + sum, re-quantize, all-gather (ZeRO++ qgZ).
- topk: the ``k`` largest-magnitude entries with their int32 indices, all-gathered
  (Lin et al. 2018), with error feedback (Stich et al. 2018).
- sign: packed signs times the block's mean magnitude, all-gathered, with error
  feedback (EF-signSGD, Karimireddy et al. 2019).
- fp16 / bf16: a cast and a plain all-reduce (PyTorch's ``fp16_compress_hook``).
- powersgd: PyTorch's own ``powerSGD_hook`` (rank ``r``, error feedback and warm
  start; its first two steps are plain all-reduces), which works on gloo; its bytes
  come from the counter PyTorch's state keeps, and the time it takes is booked
  as ``comm_s`` (its encode and transfer interleave inside PyTorch's futures).
  Its error-feedback state lives in PyTorch's ``PowerSGDState`` and is not part
  of ``state_dict``.

Error feedback adds the previous step's compression error to the gradient
before encoding and keeps the new error (per parameter, in fp32); it is on by
default for topk and sign, and can be switched on for any method. The
residuals survive a change of method (the adaptive hook switches between
steps) and are saved and restored with ``state_dict``/``load_state_dict``
(tensors only: safetensors-ready, no pickle). Each bucket is encoded in model
parameter order whatever order DDP laid it out in, so a run restored from a
checkpoint continues bit-identically (tested for topk, sign and int8).

Hooks compose the way PyTorch's do: ``cast_wrapper('fp16')(hook)`` is
PyTorch's own ``fp16_compress_wrapper``, which hands the inner hook the bucket
in half precision and casts its result back. ``compression_hook`` sends what
it does not quantize in the bucket's dtype (a plain all-reduce, top-k values),
so the wrapper halves those bytes (``cost.grad_compression.message`` with
``grad_bytes=2``), and PowerSGD inside it runs in fp16. ``register(model,
state, cast='fp16')`` installs the composition.

A non-finite gradient entry is never sent: it is zeroed before encoding,
left out of the residual, counted in ``stats.nonfinite_elements`` and flagged
in ``state.found_nonfinite`` for the training loop to skip the step on every
rank (as ``torch.amp.GradScaler`` does with ``found_inf``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from aitrinity.cost.grad_compression import SCALE_BLOCK, BucketMessage, int8_padded, message, topk_count

log = logging.getLogger(__name__)

_BITS = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)


@dataclass
class HookStats:
    steps: int = 0
    buckets: int = 0
    elements: int = 0
    payload_bytes: int = 0
    """Bytes handed to collectives (each rank's message)."""
    sent_bytes: float = 0.0
    """Bytes this rank sent over the links (``BucketMessage.sent_bytes``)."""
    codec_s: float = 0.0
    """Time in the hook outside collectives: encode, decode, error feedback."""
    comm_s: float = 0.0
    sq_error: float = 0.0
    """Sum over buckets of ||decoded local message - gradient||^2 (the local compression error)."""
    sq_norm: float = 0.0
    nonfinite_elements: int = 0
    by_method: dict[str, int] = field(default_factory=dict)
    """Buckets sent with each method."""

    @property
    def relative_error(self) -> float:
        return (self.sq_error / self.sq_norm) ** 0.5 if self.sq_norm else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()} | {"relative_error": self.relative_error}


class CompressionState:
    """What the hook needs across steps: the method, its parameters, residuals, RNG and stats."""

    def __init__(
        self,
        method: str = "none",
        *,
        density: float = 0.01,
        error_feedback: bool | None = None,
        process_group: Any = None,
        seed: int = 0,
        rank: int = 4,
    ) -> None:
        if method != "powersgd":
            message(method, 1, 1, density=density)  # validates the method and density
        self.method = method
        self.density = density
        self.powersgd_rank = rank
        self._psgd: Any = None
        self._seed = seed
        self._ef = error_feedback
        self.group = process_group
        self.world = dist.get_world_size(process_group) if dist.is_initialized() else 1
        self.rank = dist.get_rank(process_group) if dist.is_initialized() else 0
        self.residuals: dict[int, torch.Tensor] = {}
        self.generator = torch.Generator().manual_seed(seed * 1000 + self.rank)
        self.stats = HookStats()
        self.found_nonfinite = False
        self.step = 0
        self.step_buckets: list[int] = []
        """Elements of each bucket exchanged since the caller last cleared it (one step's buckets)."""
        self.bucket_numels: dict[int, int] = {}
        self.param_index: dict[int, int] = {}
        """id(parameter) -> its index in the model (set by ``register``): residuals are kept per parameter."""
        """Elements of each bucket seen so far (DDP rebuilds its buckets after the first step)."""

    @property
    def error_feedback(self) -> bool:
        return self._ef if self._ef is not None else self.method in ("topk", "sign")

    def set_method(self, method: str, density: float | None = None) -> None:
        """Switch between steps; residuals are kept (the next method starts from them)."""
        message(method, 1, 1, density=density or self.density)
        self.method = method
        if density is not None:
            self.density = density

    def state_dict(self) -> dict[str, torch.Tensor]:
        out = {f"residual.{i}": r for i, r in self.residuals.items()}
        out["generator"] = self.generator.get_state()
        out["step"] = torch.tensor([self.step])
        return out

    def load_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        self.residuals = {int(k.split(".", 1)[1]): v.clone() for k, v in sd.items() if k.startswith("residual.")}
        self.generator.set_state(sd["generator"])
        self.step = int(sd["step"][0])


# ----------------------------------------------------------------------------- codecs


def _quantize(x: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Stochastic int8 rounding per SCALE_BLOCK block: (int8 values, fp32 scales). ``x.numel()`` % block == 0."""
    blocks = x.view(-1, SCALE_BLOCK)
    scale = blocks.abs().amax(dim=1) / 127.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    noise = torch.rand(blocks.shape, generator=gen).to(x.device)  # CPU generator: same draws on any device
    q = torch.floor(blocks / safe[:, None] + noise).clamp_(-127, 127).to(torch.int8)
    return q.view(-1), scale


def _dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (q.view(-1, SCALE_BLOCK).float() * scale[:, None]).view(-1)


def _pack_signs(x: torch.Tensor) -> torch.Tensor:
    bits = (x >= 0).to(torch.uint8)
    pad = (-bits.numel()) % 8
    if pad:
        bits = torch.cat([bits, torch.zeros(pad, dtype=torch.uint8, device=x.device)])
    return (bits.view(-1, 8) * _BITS.to(x.device)).sum(dim=1, dtype=torch.uint8)


def _unpack_signs(packed: torch.Tensor, numel: int) -> torch.Tensor:
    bits = (packed[:, None] & _BITS.to(packed.device)).ne(0).view(-1)[:numel]
    return bits.float() * 2.0 - 1.0


def _sign_scales(x: torch.Tensor) -> torch.Tensor:
    n = x.numel()
    pad = (-n) % SCALE_BLOCK
    a = torch.cat([x.abs(), torch.zeros(pad, device=x.device)]) if pad else x.abs()
    counts = torch.full((a.numel() // SCALE_BLOCK,), float(SCALE_BLOCK), device=x.device)
    if pad:
        counts[-1] = SCALE_BLOCK - pad
    return a.view(-1, SCALE_BLOCK).sum(dim=1) / counts


def _expand(scales: torch.Tensor, numel: int) -> torch.Tensor:
    return scales.repeat_interleave(SCALE_BLOCK)[:numel]


# ----------------------------------------------------------------------------- the hook


class _Exchange:
    """Runs collectives and adds their bytes and time to the stats."""

    def __init__(self, state: CompressionState) -> None:
        self.s = state
        self.payload = 0

    def all_reduce(self, t: torch.Tensor) -> None:
        self.payload += t.numel() * t.element_size()
        t0 = time.perf_counter()
        dist.all_reduce(t, group=self.s.group)
        self.s.stats.comm_s += time.perf_counter() - t0

    def all_gather(self, t: torch.Tensor, count: bool = True) -> list[torch.Tensor]:
        if count:
            self.payload += t.numel() * t.element_size()
        out = [torch.empty_like(t) for _ in range(self.s.world)]
        t0 = time.perf_counter()
        dist.all_gather(out, t, group=self.s.group)
        self.s.stats.comm_s += time.perf_counter() - t0
        return out

    def all_to_all(self, t: torch.Tensor) -> torch.Tensor:
        """With the all-gather that follows, one quantized all-reduce of ``t`` (counted here, once)."""
        self.payload += t.numel() * t.element_size()
        out = torch.empty_like(t)
        t0 = time.perf_counter()
        dist.all_to_all_single(out, t, group=self.s.group)
        self.s.stats.comm_s += time.perf_counter() - t0
        return out


def _exchange(
    state: CompressionState, method: str, acc: torch.Tensor, ex: _Exchange, wire: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The averaged gradient over ranks, and this rank's own message decoded (its compression error is the
    difference to ``acc``; error feedback keeps that difference). ``acc`` is fp32; ``wire`` is the bucket's
    own dtype, in which uncompressed and top-k values travel."""
    n, w = acc.numel(), state.world
    if method == "none":  # in the bucket's dtype (a cast wrapper's fp16 travels as fp16)
        t = acc.to(wire, copy=True)
        sent = acc if wire == torch.float32 else t.float()
        ex.all_reduce(t)
        return t.float() / w, sent
    if method in ("fp16", "bf16"):
        t = acc.to(torch.float16 if method == "fp16" else torch.bfloat16)
        sent = t.float()
        ex.all_reduce(t)
        return t.float() / w, sent
    if method == "int8":
        p = int8_padded(n, w)
        x = torch.cat([acc, acc.new_zeros(p - n)]) if p > n else acc
        q, scale = _quantize(x, state.generator)
        sent = _dequantize(q, scale)[:n]
        # all-to-all: chunk j (values and scales) to rank j; the scales ride in the same message
        chunk = p // w
        msg = torch.cat([q.view(w, chunk), scale.view(torch.int8).view(w, -1)], dim=1).contiguous().view(-1)
        got = ex.all_to_all(msg).view(w, -1)
        mine = sum(_dequantize(got[r, :chunk], got[r, chunk:].clone().view(torch.float32)) for r in range(w))
        q2, s2 = _quantize(torch.as_tensor(mine) / w, state.generator)
        parts = ex.all_gather(torch.cat([q2, s2.view(torch.int8)]), count=False)
        avg = torch.cat([_dequantize(g[:chunk], g[chunk:].clone().view(torch.float32)) for g in parts])
        return avg[:n], sent
    if method == "topk":
        k = topk_count(n, state.density)
        idx = acc.abs().topk(k, sorted=False).indices
        vals = acc[idx].to(wire)  # values in the bucket's dtype, int32 indices first (aligned views)
        sent = torch.zeros_like(acc)
        sent[idx] = vals.float()
        msg = torch.cat([idx.to(torch.int32).view(torch.uint8), vals.view(torch.uint8)])
        out = torch.zeros_like(acc)
        for m in ex.all_gather(msg):
            out.index_add_(0, m[: 4 * k].view(torch.int32).long(), m[4 * k :].view(wire).float())
        return out / w, sent
    if method == "sign":
        scales = _sign_scales(acc)
        sent = torch.where(acc >= 0, 1.0, -1.0) * _expand(scales, n)
        packed = _pack_signs(acc)
        msg = torch.cat([packed, scales.view(torch.uint8)])
        out = torch.zeros_like(acc)
        nb = packed.numel()
        for m in ex.all_gather(msg):
            out += _unpack_signs(m[:nb], n) * _expand(m[nb:].clone().view(torch.float32), n)
        return out / w, sent
    raise ValueError(method)


def _residual(
    state: CompressionState, index: int, parts: list[tuple[int, int]] | None, like: torch.Tensor
) -> torch.Tensor | None:
    """The bucket's error-feedback residual, assembled per parameter when the bucket's parameters are known."""
    if parts is None:
        res = state.residuals.get(index)
        return res if res is not None and res.shape == like.shape else None
    if not all(p in state.residuals for p, _ in parts):
        return None
    return torch.cat([state.residuals[p] for p, _ in parts])


def _keep_residual(state: CompressionState, index: int, parts: list[tuple[int, int]] | None, r: torch.Tensor) -> None:
    if parts is None:
        state.residuals[index] = r
        return
    for (p, _), piece in zip(parts, r.split([n for _, n in parts]), strict=True):
        state.residuals[p] = piece.clone()


def compress_bucket(
    state: CompressionState, index: int, grad: torch.Tensor, parts: list[tuple[int, int]] | None = None
) -> torch.Tensor:
    """Exchange one flat gradient bucket under ``state.method``; returns the averaged gradient (same dtype).

    ``parts``: (parameter index, elements) of the bucket's parameters in buffer
    order; residuals are then kept per parameter, so they survive DDP rebuilding
    its buckets and a restart (whose first buckets are laid out differently).
    """
    method = state.method
    t0 = time.perf_counter()
    comm0 = state.stats.comm_s
    g = grad.detach().float()
    finite = torch.isfinite(g)
    bad = int(g.numel() - int(finite.sum()))
    if bad:
        state.found_nonfinite = True
        state.stats.nonfinite_elements += bad
        log.warning("rank %d: %d non-finite gradient entries in bucket %d were not sent", state.rank, bad, index)
        g = torch.where(finite, g, torch.zeros_like(g))
    ef = state.error_feedback and method != "none"
    res = _residual(state, index, parts, g) if ef else None
    acc = g + res if res is not None else g
    ex = _Exchange(state)
    avg, sent = _exchange(state, method, acc, ex, grad.dtype)
    lost = acc - sent
    if ef:
        _keep_residual(state, index, parts, lost)
    state.bucket_numels[index] = g.numel()
    state.step_buckets.append(g.numel())
    s = state.stats
    s.codec_s += time.perf_counter() - t0 - (s.comm_s - comm0)
    collective = message(method, 1, state.world, density=state.density).collective
    s.buckets += 1
    s.elements += g.numel()
    s.payload_bytes += ex.payload
    s.sent_bytes += BucketMessage(method, ex.payload, collective).sent_bytes(state.world)
    s.sq_error += float(lost.pow(2).sum())
    s.sq_norm += float(g.pow(2).sum())
    s.by_method[method] = s.by_method.get(method, 0) + 1
    return avg.to(grad.dtype)


def compression_hook(state: CompressionState, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    """The DDP comm hook: the bucket's buffer, exchanged under ``state``; a completed future."""
    if bucket.is_last():
        state.step += 1
        state.stats.steps += 1
    if state.method == "powersgd":
        return _powersgd(state, bucket)
    buf = bucket.buffer()
    if not state.param_index:
        out = compress_bucket(state, bucket.index(), buf)
    else:
        # encode in model-parameter order, whatever order DDP laid the bucket out in (it rebuilds its
        # buckets after the first step, and a restarted run starts from the initial layout): scale
        # blocks, random rounding and residuals then line up across restarts
        parts = [(state.param_index[id(p)], p.numel()) for p in bucket.parameters()]
        pieces = buf.split([n for _, n in parts])
        order = sorted(range(len(parts)), key=lambda i: parts[i][0])
        canon = compress_bucket(state, bucket.index(), torch.cat([pieces[i] for i in order]), [parts[i] for i in order])
        back = canon.split([parts[i][1] for i in order])
        out = torch.cat([back[order.index(i)] for i in range(len(parts))])
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(out)
    return fut


def _powersgd(state: CompressionState, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps

    if state._psgd is None:
        state._psgd = ps.PowerSGDState(
            process_group=state.group,
            matrix_approximation_rank=state.powersgd_rank,
            start_powerSGD_iter=2,
            random_seed=state._seed,
        )
    psgd = state._psgd
    compressing = psgd.iter >= psgd.start_powerSGD_iter
    before = psgd.total_numel_after_compression
    n, size = bucket.buffer().numel(), bucket.buffer().element_size()
    t0 = time.perf_counter()
    out = ps.powerSGD_hook(psgd, bucket).wait()
    s = state.stats
    s.comm_s += time.perf_counter() - t0
    elems = psgd.total_numel_after_compression - before if compressing else n
    payload = elems * size  # fp32, or fp16/bf16 under a cast wrapper
    state.bucket_numels[bucket.index()] = n
    state.step_buckets.append(n)
    s.buckets += 1
    s.elements += n
    s.payload_bytes += payload
    s.sent_bytes += BucketMessage("powersgd", payload, "all-reduce").sent_bytes(state.world)
    s.by_method["powersgd"] = s.by_method.get("powersgd", 0) + 1
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(out)
    return fut


# DDP checks the hook's annotations as objects (not the strings postponed evaluation leaves)
compression_hook.__annotations__.update(
    bucket=dist.GradBucket,  # type: ignore[attr-defined]
    **{"return": torch.futures.Future[torch.Tensor]},
)


Hook = Callable[[Any, Any], "torch.futures.Future[torch.Tensor]"]
CASTS = ("fp16", "bf16")


def _bf16_cast_wrapper(hook: Hook) -> Hook:
    """PyTorch's ``bf16_compress_wrapper``, line for line, under another name: DDP refuses a hook *named*
    ``bf16_compress_wrapper_hook`` unless CUDA + NCCL 2.10 are present, although gloo all-reduces bf16."""

    def bf16_cast_hook(hook_state: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        bucket.set_buffer(bucket.buffer().to(torch.bfloat16))
        fut = hook(hook_state, bucket)

        def back(f: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            out: torch.Tensor = bucket.buffer()
            out.copy_(f.value())
            return out

        return fut.then(back)

    bf16_cast_hook.__annotations__.update(bucket=dist.GradBucket, **{"return": torch.futures.Future[torch.Tensor]})  # type: ignore[attr-defined]
    return bf16_cast_hook


def cast_wrapper(cast: str) -> Callable[[Hook], Hook]:
    """hook -> hook: PyTorch's own ``fp16_compress_wrapper``, or its bf16 twin.

    The wrapped hook gets the bucket cast to half precision and its result is
    cast back, so it composes with ``compression_hook`` (fp16 top-k values:
    ``k(2 + 4)`` bytes; a half-precision all-reduce for 'none') and with
    PyTorch's own hooks (fp16 PowerSGD). An entry beyond fp16's range becomes
    inf in the cast and is then reported as non-finite like any other. For
    bf16 PyTorch's ``bf16_compress_wrapper`` cannot be used on gloo (DDP
    checks the hook's name and demands CUDA + NCCL), so ``_bf16_cast_wrapper``
    repeats it under another name.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    wrappers = {"fp16": default_hooks.fp16_compress_wrapper, "bf16": _bf16_cast_wrapper}
    if cast not in wrappers:
        raise ValueError(f"unknown cast {cast!r}: expected one of {', '.join(CASTS)}")
    return wrappers[cast]


def register(
    model: torch.nn.parallel.DistributedDataParallel, state: CompressionState, *, cast: str | None = None
) -> None:
    """Install ``compression_hook`` on a DDP model, inside PyTorch's cast wrapper when ``cast`` is given."""
    state.param_index = {id(p): i for i, p in enumerate(model.module.parameters())}
    hook: Hook = compression_hook
    if cast is not None:
        hook = cast_wrapper(cast)(hook)
    model.register_comm_hook(state, hook)
