"""What a planner objective needs from the system: a plan's $ needs a device-hour price, its joules a device power.

Without the figure every candidate's score is unknown (NaN), and a search would report no feasible plan and blame
the candidates; :func:`require` says what is missing instead.
"""

from __future__ import annotations

from aitrinity.errors import SpecError
from aitrinity.spec.scenario import System


def require(objective: str, system: System, context: str = "") -> None:
    """Raise :class:`SpecError` when ``objective`` (``cost`` / ``energy``, a planner's; ``tokens_per_dollar`` /
    ``tokens_per_joule``, the hardware comparison's) needs a figure ``system`` does not have; ``context`` names
    the design or scenario in the message."""
    name = system.device.name + (f" ({context})" if context else "")
    if objective in ("cost", "tokens_per_dollar") and system.price_per_hour_usd is None:
        raise SpecError.at(
            "system.price_per_device_hour",
            f"objective {objective} ranks plans by $, but {name} has no device-hour price in the catalog: give one, "
            "e.g. --set system.price_per_device_hour=3.5 (a design edit: price=$3.5/h)",
        )
    if objective in ("energy", "tokens_per_joule") and system.power_W is None:
        raise SpecError.at(
            "system.power_per_device",
            f"objective {objective} ranks plans by joules, but {name} has no published power: give one, "
            "e.g. --set system.power_per_device=700W (a design edit: power=700W)",
        )
