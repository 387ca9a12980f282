"""``trinity validate --training``: published large-scale training runs against the operator model.

Each run is the published layout as a scenario -- model, GPUs, TP / PP / DP, batch, sequence, recompute,
attention kernel, and whether gradients are reduced after the backward pass or overlapped with it --
priced by :func:`aitrinity.api.diagnose`, and compared in the publication's own metric:

* Megatron-LM (Narayanan et al. 2021, SC'21, Table 1 and §5.1): TFLOP/s per GPU counted with their
  formula ``96·B·s·l·h²·(1 + s/6h + V/16lh)`` (eq. 3, which includes the recomputed forward);
* Llama 3 (Dubey et al. 2024, Table 4): BF16 MFU, the model FLOPs with attention scores over peak;
* DeepSeek-V3 (DeepSeek-AI 2024, Table 1 and §3.2): training tokens per second per GPU, from the reported
  2,664K H800 GPU hours for 14.8T pre-training tokens (180K GPU hours per trillion tokens).

Nothing here is fitted to these numbers: the kernel times come from the catalog (or the measured tables
with an engine named) and the layout from the papers; what a paper does not state is an assumption
named in the run's ``assumed`` field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aitrinity.cost.ledger import Result

WITHIN = 0.10


@dataclass(frozen=True)
class PublishedRun:
    name: str
    source: str
    device: str
    gpus: int
    model: str
    seq_len: int
    global_batch: int
    plan: dict[str, object]
    overlap: Literal["sum", "max"]
    """``sum``: gradients reduced after the backward pass; ``max``: overlapped with it."""
    metric: Literal["megatron_tflops", "mfu", "tokens_per_gpu"]
    published: float
    assumed: tuple[str, ...] = field(default=())
    system: dict[str, object] = field(default_factory=dict)
    """Published facts of the system beyond the device and its count (``system.*`` fields)."""


_MEGATRON = dict(micro_batch=1, recompute="full", flash_attention=False, zero=0, tp=8)
_LLAMA3: dict[str, Any] = dict(  # Dubey et al. 2024, Table 4: tp 8, pp 16, 8k sequences, 16M-token batches
    device="h100-sxm",
    model="llama-3.1-405b",
    seq_len=8192,
    global_batch=2048,
    plan={
        "tp": 8,
        "pp": 16,
        # §3.3.2: an interleaved schedule, one layer taken from the first and the last stage so that "the first model
        # chunk on the first stage has only the embedding": chunks of one layer, 8 on each of the 16 ranks
        "virtual_stages": 8,
        "micro_batch": 1,
        "recompute": "full",
        "zero": 2,
        "sequence_parallel": True,
    },
    overlap="max",
    metric="mfu",
    assumed=(
        "v 8 (the paper's interleaved schedule; its depth read from section 3.3.2: one layer per model chunk)",
        "full recomputation (not stated; without it the layout needs 87-88 GiB per GPU here, with selective "
        "recomputation 87 GiB, over the H100's 80 GB)",
        "FSDP as ZeRO-2, overlapped",
    ),
)
RUNS: tuple[PublishedRun, ...] = (
    PublishedRun(
        "gpt-3 175b, 1,024 A100",
        "Narayanan et al. 2021, §5.1 (140 TFLOP/s per GPU, the 1,024-GPU rate of Table 1)",
        "a100-80gb-sxm",
        1024,
        "gpt-3-175b",
        2048,
        1536,
        {**_MEGATRON, "pp": 8},
        "sum",
        "megatron_tflops",
        140.0,
        ("pp 8 (the paper gives tp 8 for its 1,024-GPU runs, not this run's pp)",),
    ),
    PublishedRun(
        "megatron 1t, 3,072 A100",
        "Narayanan et al. 2021, Table 1, last row (163 TFLOP/s per GPU)",
        "a100-80gb-sxm",
        3072,
        "megatron-1t",
        2048,
        3072,
        {**_MEGATRON, "pp": 64},
        "sum",
        "megatron_tflops",
        163.0,
    ),
    PublishedRun(
        "llama 3 405b, 8,192 H100",
        "Dubey et al. 2024, Table 4, first row (43% BF16 MFU; tp 8, pp 16, dp 64)",
        gpus=8192,
        published=0.43,
        **_LLAMA3,
    ),
    PublishedRun(
        "llama 3 405b, 16,384 H100",
        "Dubey et al. 2024, Table 4, second row (41% BF16 MFU; tp 8, pp 16, dp 128)",
        gpus=16384,
        published=0.41,
        **_LLAMA3,
    ),
    PublishedRun(
        "deepseek-v3 671b, 2,048 H800",
        "DeepSeek-AI 2024, DeepSeek-V3 Technical Report, Table 1 (2,664K H800 GPU hours for 14.8T tokens: 1,543 "
        "tokens/s per GPU) and section 3.2 (pp 16, ep 64 over 8 nodes, ZeRO-1 DP, no TP, 2,048 H800)",
        "h800",
        2048,
        "deepseek-v3",
        4096,
        15360,  # the batch it keeps after its first 469B tokens (section 4.2)
        {"pp": 16, "ep": 64, "zero": 1, "micro_batch": 1, "recompute": "selective", "compute_dtype": "fp8"},
        "max",
        "tokens_per_gpu",
        14.8e12 / (2664e3 * 3600),
        (
            "1F1B for DualPipe (its bubble is smaller; its overlap of all-to-all with compute is the max overlap)",
            "selective recomputation for its recomputed norms and MLA up-projections",
            "fp8 GEMMs at the catalog's fp8 rate",
            "its multi-token-prediction module (D = 1, section 2.2) on the last stage, its block counted among that "
            "stage's layers as Megatron-Core places it (the report does not give DualPipe's split)",
        ),
        system={"comm_sm_share": 20 / 132},  # section 3.2.2: its all-to-all kernels hold 20 of the H800's 132 SMs
    ),
    PublishedRun(
        "llama 3 405b, 16,384 H100, 131k context",
        "Dubey et al. 2024, Table 4, third row (38% BF16 MFU; tp 8, cp 16, pp 16, dp 8, 131,072-token sequences)",
        gpus=16384,
        published=0.38,
        **{
            **_LLAMA3,
            "seq_len": 131072,
            "global_batch": 128,  # 16M tokens: dp 8 x 16 sequences
            # section 3.3.2: K and V all-gathered before the attention, "exposed in the critical path"
            "plan": {**_LLAMA3["plan"], "cp": 16, "cp_method": "allgather"},
        },
    ),
)


class TrainingCheck(Result):
    run: str
    source: str
    metric: str
    published: float
    predicted: float
    error: float
    """(predicted - published) / published."""
    within: bool
    step_time_s: float
    kernels: str
    fits: bool
    assumed: list[str]


def scenario(run: PublishedRun, engine: str = "generic") -> dict[str, object]:
    """The run as a scenario document (what ``trinity diagnose`` reads from YAML)."""
    return {
        "name": run.name.replace(" ", "-").replace(",", ""),
        "system": {
            "device": run.device,
            "num_devices": run.gpus,
            "devices_per_node": 8,
            "overlap": run.overlap,
            "engine": engine,
            **run.system,
        },
        "workload": {"model": run.model, "training": {"seq_len": run.seq_len, "global_batch": run.global_batch}},
        "plan": dict(run.plan),
    }


METRICS = {
    "megatron_tflops": "TFLOP/s per GPU (Megatron's count)",
    "mfu": "BF16 MFU",
    "tokens_per_gpu": "tokens/s per GPU",
}


def check(run: PublishedRun, engine: str = "generic") -> TrainingCheck:
    from aitrinity import api, catalog
    from aitrinity.cost.diagnosis import Diagnosis
    from aitrinity.spec._base import validate
    from aitrinity.spec.scenario import Scenario

    d = api.diagnose(validate(Scenario, scenario(run, engine)))
    assert isinstance(d, Diagnosis) and d.estimate.training is not None
    t = d.estimate.training
    if run.metric == "megatron_tflops":  # Narayanan et al. 2021, eq. 3
        m = catalog.model(run.model)
        b, s, lay, h, v = run.global_batch, run.seq_len, m.num_layers, m.hidden_size, m.vocab_size
        flops = 96.0 * b * s * lay * h * h * (1 + s / (6 * h) + v / (16 * lay * h))
        predicted = flops / (t.step_time_s * run.gpus) / 1e12
    elif run.metric == "tokens_per_gpu":
        predicted = t.tokens_per_s / run.gpus
    else:
        predicted = t.mfu
    err = (predicted - run.published) / run.published
    return TrainingCheck(
        run=run.name,
        source=run.source,
        metric=METRICS[run.metric],
        published=run.published,
        predicted=predicted,
        error=err,
        within=abs(err) <= WITHIN,
        step_time_s=t.step_time_s,
        kernels=d.estimate.kernels or "",
        fits=d.capacity.fits,
        assumed=list(run.assumed),
    )


def check_all(engine: str = "generic", runs: Sequence[PublishedRun] = RUNS) -> list[TrainingCheck]:
    return [check(r, engine) for r in runs]


def markdown(checks: Sequence[TrainingCheck]) -> str:
    """The comparison as a Markdown table, with the assumptions under it."""
    lines = [
        "| run | metric | published | predicted | error | step | fits | kernels |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        fmt = "{:.1f}" if c.published > 1 else "{:.1%}"
        mark = "" if c.within else " (over 10%)"
        lines.append(
            f"| {c.run} | {c.metric} | {fmt.format(c.published)} | {fmt.format(c.predicted)} | {c.error:+.1%}{mark} "
            f"| {c.step_time_s:.2f} s | {'yes' if c.fits else 'no'} | {c.kernels} |"
        )
    lines.append("")
    lines.extend(f"- {c.run}: {c.source}" + (f"; assumed: {'; '.join(c.assumed)}" if c.assumed else "") for c in checks)
    return "\n".join(lines)
