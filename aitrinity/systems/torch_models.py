"""A plain-torch decoder built from a ModelSpec: the real thing the cost model is measured against.

Llama-style (RMSNorm, rotary-free attention with native GQA, SwiGLU MLP, untied
LM head) or GPT-style (LayerNorm, GELU MLP, biases). Random weights; only the
shapes and the operations matter. Used by ``trinity validate`` and the tests;
torch is an optional extra, so import this module only where torch is installed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from aitrinity.spec.model import ModelSpec

KV = tuple[torch.Tensor, torch.Tensor]


class _FusedRMSNorm(torch.autograd.Function):
    """RMSNorm that saves what fused kernels (Apex, Transformer Engine) save: the input and 1/rms."""

    @staticmethod
    def forward(ctx, x, weight, eps):  # type: ignore[no-untyped-def]
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (x.float() * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        x, weight, rstd = ctx.saved_tensors
        xhat = x.float() * rstd
        g = grad.float() * weight.float()
        dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        dw = (grad.float() * xhat).reshape(-1, x.shape[-1]).sum(0)
        return dx.to(x.dtype), dw.to(weight.dtype), None


class RMSNorm(nn.Module):
    def __init__(self, h: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FusedRMSNorm.apply(x, self.weight, 1e-6)


def _norm(m: ModelSpec) -> nn.Module:
    return nn.LayerNorm(m.hidden_size) if m.norm == "layernorm" else RMSNorm(m.hidden_size)


class Attention(nn.Module):
    def __init__(self, m: ModelSpec) -> None:
        super().__init__()
        h, a, g, d = m.hidden_size, m.num_attention_heads, m.kv_heads, m.dim_head
        self.a, self.g, self.d = a, g, d
        self.q = nn.Linear(h, a * d, bias=m.qkv_bias)
        self.k = nn.Linear(h, g * d, bias=m.qkv_bias)
        self.v = nn.Linear(h, g * d, bias=m.qkv_bias)
        self.o = nn.Linear(a * d, h, bias=m.linear_bias)
        self.recompute_core = False
        """Selective recomputation (Korthikanti et al. 2022): keep no scores, redo them in backward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attend(x, None)[0]

    def attend(self, x: torch.Tensor, past: KV | None) -> tuple[torch.Tensor, KV]:
        """Attention of ``x`` (the newest positions) over the cached ``past`` keys/values and its own.

        Returns the output and the layer's KV cache, K and V as (b, g, tokens, d): g KV heads, as a
        GQA cache keeps them.
        """
        b, s, _ = x.shape
        a, g, d = self.a, self.g, self.d
        r = a // g
        # Query heads grouped under their KV head and folded into the row dimension, so that one batched
        # matmul per KV head serves all of its query heads: K and V are never expanded (native GQA).
        q = self.q(x).view(b, s, g, r, d).permute(0, 2, 3, 1, 4).reshape(b, g, r * s, d)
        k_new = self.k(x).view(b, s, g, d).transpose(1, 2)  # b g s d
        v_new = self.v(x).view(b, s, g, d).transpose(1, 2)
        k_all = k_new if past is None else torch.cat([past[0], k_new], dim=2)
        v_all = v_new if past is None else torch.cat([past[1], v_new], dim=2)
        if self.recompute_core and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            out = checkpoint(self._core, q, k_all, v_all, s, use_reentrant=False)
        else:
            out = self._core(q, k_all, v_all, s)
        return self.o(out), (k_all, v_all)

    def _core(self, q: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor, s: int) -> torch.Tensor:
        """Scores, causal mask, softmax and the weighted sum of values: what selective recomputation redoes."""
        b, g = q.shape[0], self.g
        r, d, a = self.a // g, self.d, self.a
        start, total = k_all.shape[2] - s, k_all.shape[2]
        scores = (q @ k_all.transpose(-1, -2)).view(b, g, r, s, total) * d**-0.5
        mask = torch.arange(total)[None, :] > (start + torch.arange(s))[:, None]
        p = scores.masked_fill(mask, float("-inf")).softmax(-1)
        return (p.view(b, g, r * s, total) @ v_all).view(b, g, r, s, d).permute(0, 3, 1, 2, 4).reshape(b, s, a * d)


class MLP(nn.Module):
    def __init__(self, m: ModelSpec) -> None:
        super().__init__()
        h, f = m.hidden_size, m.intermediate_size
        self.gated = m.mlp == "gated"
        self.up = nn.Linear(h, f, bias=m.linear_bias)
        self.down = nn.Linear(f, h, bias=m.linear_bias)
        self.gate = nn.Linear(h, f, bias=m.linear_bias) if self.gated else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, m: ModelSpec) -> None:
        super().__init__()
        self.n1, self.attn, self.n2, self.mlp = _norm(m), Attention(m), _norm(m), MLP(m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.step(x, None)[0]

    def step(self, x: torch.Tensor, past: KV | None) -> tuple[torch.Tensor, KV]:
        attn, kv = self.attn.attend(self.n1(x), past)
        x = x + attn
        return x + self.mlp(self.n2(x)), kv


class Decoder(nn.Module):
    def __init__(self, m: ModelSpec) -> None:
        super().__init__()
        self.embed = nn.Embedding(m.vocab_size, m.hidden_size)
        self.pos = nn.Embedding(m.learned_positions, m.hidden_size) if m.position == "learned" else None
        self.blocks = nn.ModuleList(Block(m) for _ in range(m.num_layers))
        self.norm = _norm(m)
        self.head = None if m.tie_embeddings else nn.Linear(m.hidden_size, m.vocab_size, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits for a whole sequence (training, prefill); each block is called as a module, so module
        hooks (FSDP2's unshard, activation checkpointing wrappers) see it."""
        x = self.embed(ids)
        if self.pos is not None:
            x = x + self.pos(torch.arange(ids.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        return self.head(x) if self.head is not None else x @ self.embed.weight.T

    def step(self, ids: torch.Tensor, cache: list[KV] | None) -> tuple[torch.Tensor, list[KV]]:
        """Logits for ``ids`` (the newest tokens) given the KV ``cache`` of earlier ones, and the new cache."""
        start = cache[0][0].shape[2] if cache else 0
        x = self.embed(ids)
        if self.pos is not None:
            x = x + self.pos(start + torch.arange(ids.shape[1]))
        new: list[KV] = []
        for i, blk in enumerate(self.blocks):
            assert isinstance(blk, Block)
            x, kv = blk.step(x, cache[i] if cache else None)
            new.append(kv)
        x = self.norm(x)
        return (self.head(x) if self.head is not None else x @ self.embed.weight.T), new
