"""A plain-torch decoder built from a ModelSpec: the real thing the cost model is measured against.

Llama-style (RMSNorm, rotary-free attention with native GQA, SwiGLU MLP, untied
LM head) or GPT-style (LayerNorm, GELU MLP, biases). Random weights; only the
shapes and the operations matter. Used by the validation tests (torch is an optional extra: import this module only where torch is installed).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from aitrinity.spec.model import ModelSpec


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        a, g, d = self.a, self.g, self.d
        q = self.q(x).view(b, s, g, a // g, d).permute(0, 2, 3, 1, 4)  # b g r s d
        k = self.k(x).view(b, s, g, 1, d).permute(0, 2, 3, 4, 1)  # b g 1 d s (native GQA: no repeat)
        v = self.v(x).view(b, s, g, 1, d).permute(0, 2, 3, 1, 4)  # b g 1 s d
        scores = (q @ k) * d**-0.5
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        p = scores.masked_fill(mask, float("-inf")).softmax(-1)
        out = (p @ v).permute(0, 3, 1, 2, 4).reshape(b, s, a * d)
        return self.o(out)


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
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


class Decoder(nn.Module):
    def __init__(self, m: ModelSpec) -> None:
        super().__init__()
        self.embed = nn.Embedding(m.vocab_size, m.hidden_size)
        self.pos = nn.Embedding(m.learned_positions, m.hidden_size) if m.position == "learned" else None
        self.blocks = nn.ModuleList(Block(m) for _ in range(m.num_layers))
        self.norm = _norm(m)
        self.head = None if m.tie_embeddings else nn.Linear(m.hidden_size, m.vocab_size, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        if self.pos is not None:
            x = x + self.pos(torch.arange(ids.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        return self.head(x) if self.head is not None else x @ self.embed.weight.T
