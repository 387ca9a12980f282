"""aitrinity: computation, bandwidth and memory as exchangeable currencies of AI infrastructure.

The curated entry points (imported lazily, so ``import aitrinity`` stays cheap)::

    import aitrinity
    d = aitrinity.diagnose("llama-70b-training-h100")       # Diagnosis
    p = aitrinity.api.plan("llama-70b-serving-long-context") # PlanReport: search + chain
    r = aitrinity.resolve("my-scenario.yaml")                # Workload x Plan x System
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "diagnose", "estimate", "ledger", "resolve"]
# (``aitrinity.plan`` is the planner's subpackage; the planning entry point is ``aitrinity.api.plan``.)


def __getattr__(name: str) -> Any:
    if name in ("diagnose", "estimate", "ledger", "resolve"):
        from aitrinity import api

        return getattr(api, name)
    raise AttributeError(f"module 'aitrinity' has no attribute {name!r}")
