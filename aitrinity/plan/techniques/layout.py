"""The parallel layout and batching as exchanges: plan fields with pathways, searched by the planner.

Tensor, pipeline, expert and context parallelism spend link bytes to relieve per-device memory; larger
micro-batches, interleaved stages and larger serving batches spend memory to relieve idle compute. None
has a quality cost.
"""

from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Dimension, Exchange, field_move, register
from aitrinity.spec.scenario import Plan


def _size(_: Plan) -> bool:
    """Batch sizes are always there: a plan does not "use" them the way it uses a technique."""
    return False


TP = register(
    Exchange(
        ExchangeInfo(
            "tp",
            "tensor parallelism",
            "bandwidth->memory",
            "per-layer activation all-reduces",
            "weight and activation bytes per device",
            None,
            "above",
            "hidden",
            "Shoeybi et al. 2019",
        ),
        ("training", "serving"),
        searched=True,
        used=lambda p: p.tp > 1,
        move=field_move("tp", "tensor parallel", 1, 1),
    )
)
PP = register(
    Exchange(
        ExchangeInfo(
            "pp",
            "pipeline parallelism",
            "bandwidth->memory",
            "point-to-point bytes and a bubble",
            "weight bytes per device",
            None,
            "above",
            "hidden",
            "Narayanan et al. 2021",
        ),
        ("training", "serving"),
        searched=True,
        used=lambda p: p.pp > 1,
        move=field_move("pp", "pipeline parallel", 2, 1),
    )
)
EP = register(
    Exchange(
        ExchangeInfo(
            "ep",
            "expert parallelism",
            "bandwidth->memory",
            "token all-to-alls",
            "expert weight bytes per device",
            None,
            "above",
            "hidden",
            "Lepikhin et al. 2020 (GShard)",
        ),
        ("training", "serving"),
        used=lambda p: p.ep > 1,
        move=field_move("ep", "expert parallel", 3, 1),
    )
)
CP = register(
    Exchange(
        ExchangeInfo(
            "cp",
            "context parallelism",
            "bandwidth->memory",
            "K/V all-gathers (ring) or Q/K/V/O all-to-alls (Ulysses) per layer",
            "activation or KV-cache bytes per device and a prompt's prefill time (each rank holds 1/cp of a sequence)",
            None,
            "above",
            "hidden",
            "Liu et al. 2023 (ring attention); Jacobs et al. 2023 (DeepSpeed-Ulysses); Dubey et al. 2024, sec. 3.3.2; "
            "Yang et al. 2024 (context parallelism in inference)",
        ),
        ("training", "serving"),
        searched=True,
        used=lambda p: p.cp > 1,
        move=field_move("cp", "context parallel", 4, 1),
    )
)
MICRO_BATCH = register(
    Exchange(
        ExchangeInfo(
            "micro-batch",
            "larger micro-batches",
            "memory->compute",
            "activation bytes",
            "idle compute (pipeline bubble, small GEMMs)",
            None,
            "above",
            "hidden",
            "Narayanan et al. 2021, eq. 1",
        ),
        ("training",),
        searched=True,
        used=_size,
        move=field_move("micro_batch", "micro-batch", 7, 1),
        dimension=Dimension("micro_batch", (1, 2, 4, 8, 16), lambda v: f"mb{v}"),
    )
)
VIRTUAL_STAGES = register(
    Exchange(
        ExchangeInfo(
            "virtual-stages",
            "interleaved pipeline stages",
            "memory->compute",
            "activation bytes (1 + (p-1)/(p v)) and point-to-point messages",
            "idle compute (pipeline bubble)",
            None,
            "above",
            "hidden",
            "Narayanan et al. 2021, section 2.2; Korthikanti et al. 2022, section 4.2.3",
        ),
        ("training",),
        searched=True,
        used=lambda p: p.virtual_stages > 1,
        move=field_move("virtual_stages", "virtual pipeline stages", 8, 1),
        dimension=Dimension("virtual_stages", (1, 2, 4), lambda _: "", plain=1),  # (the layout names it: v2)
    )
)
BATCH = register(
    Exchange(
        ExchangeInfo(
            "batch",
            "larger batches",
            "memory->compute",
            "KV-cache bytes",
            "weight reads per token (idle compute in decode)",
            None,
            "above",
            "hidden",
            "Pope et al. 2022, section 2 (decode arithmetic intensity grows with the batch)",
        ),
        ("serving",),
        searched=True,
        used=_size,
        dimension=Dimension(
            "batch",
            (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            lambda v: f"batch {v}",
            given=lambda job: job.batch if isinstance(job.batch, int) else None,  # a number, not "max"
        ),
    )
)
