"""Split inference with a codec (compute -> bandwidth): run the first layers on the device, send the cut
layer's activations, encoded, over the uplink (Kang et al. 2017, Neurosurgeon).

Effect: :mod:`aitrinity.cost.edge` prices every split x codec x lossless coder; :mod:`aitrinity.plan.split`
searches them. Quality: the accuracy the codec loses at that split, which only a measurement can give --
the scenario's ``accuracy_drop`` table (a lossless codec loses nothing); the edge planner keeps choices
within ``max_accuracy_drop``.
"""

from typing import Any

from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Exchange, Quality, register


def quality(option: Any) -> Quality:
    """``option``: anything with the measured ``accuracy_drop`` of its codec (None: not measured, lossless)."""
    drop = getattr(option, "accuracy_drop", None) or 0.0
    return Quality(accuracy_drop=drop, source="measured (the scenario's accuracy_drop)" if drop else "")


EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "edge-split",
            "split inference with a codec",
            "compute->bandwidth",
            "device compute and encode work",
            "uplink bytes (raw input vs the cut layer's encoded activations)",
            None,
            "above",
            "faster",
            "Kang et al. 2017 (Neurosurgeon); Matsubara et al. 2022 (split computing survey)",
        ),
        ("edge",),
        quality=quality,
        searched=True,
        used=lambda _: False,  # an edge plan is a split x codec choice, not an LLM plan
    )
)
