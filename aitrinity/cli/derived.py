"""Figures derived from a catalog entry, shown by ``trinity catalog show``."""

from __future__ import annotations

from pydantic import BaseModel

from aitrinity.spec.edge import DnnSpec
from aitrinity.spec.hardware import DeviceSpec, LinkSpec, MemoryTierSpec
from aitrinity.spec.model import ModelSpec
from aitrinity.units import format_bytes, format_count, format_time

Fact = tuple[float | str, str]


def derived(kind: str, spec: BaseModel) -> dict[str, Fact]:
    """name -> (number, human text). Numbers are SI; the text says the unit."""
    if isinstance(spec, ModelSpec):
        from aitrinity.cost.flops import token_flops
        from aitrinity.cost.memory import kv_bytes_per_token
        from aitrinity.cost.params import count

        pc = count(spec)
        kv = kv_bytes_per_token(spec, "bf16")
        out: dict[str, Fact] = {
            "params_total": (pc.total, format_count(pc.total)),
            "params_active": (pc.active(spec), format_count(pc.active(spec))),
            "attention": (spec.attention_kind, spec.attention_kind),
            "kv_bytes_per_token_bf16": (kv, format_bytes(kv)),
            "forward_flops_per_token": (token_flops(spec).dense, f"{token_flops(spec).dense / 1e9:.3g} GFLOP"),
            "weights_bf16_bytes": (2.0 * pc.total, format_bytes(2.0 * pc.total)),
        }
        if spec.reference_params:
            err = pc.total / spec.reference_params - 1
            out["vs_reference_params"] = (err, f"{err:+.2%} vs published {format_count(spec.reference_params)}")
        return out
    if isinstance(spec, DeviceSpec):
        # roofline ridge point: arithmetic intensity above which a kernel is compute-bound (Williams et al. 2009)
        return {
            f"ridge_point_{k}": (v / spec.memory_bandwidth_Bps, f"{v / spec.memory_bandwidth_Bps:.0f} FLOP/byte")
            for k, v in spec.peak_flops.items()
        }
    if isinstance(spec, DnnSpec):
        from aitrinity.cost.dnn import layer_table

        table = layer_table(spec)
        big = max(table.layers, key=lambda x: x.out_bytes)
        facts: dict[str, Fact] = {
            "params": (table.params, format_count(table.params)),
            "forward_flops": (table.flops, f"{table.flops / 1e9:.3g} GFLOP (conv and matmul, 2 per MAC)"),
            "chain_nodes": (len(table.layers), f"{len(table.layers)} split points + input"),
            "input_bytes": (table.input_bytes, format_bytes(table.input_bytes, binary=False)),
            "largest_output": (big.out_bytes, f"{format_bytes(big.out_bytes, binary=False)} after {big.name}"),
        }
        if spec.published_params:
            err = table.params / spec.published_params - 1
            facts["vs_published_params"] = (err, f"{err:+.2%} vs published {format_count(spec.published_params)}")
        return facts
    if isinstance(spec, LinkSpec | MemoryTierSpec):
        eff = spec.efficiency if isinstance(spec, LinkSpec) else 1.0
        t = spec.latency_s + 2**30 / (spec.bandwidth_Bps * eff)
        return {"time_for_1_GiB": (t, format_time(t))}
    return {}
