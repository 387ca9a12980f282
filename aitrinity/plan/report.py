"""What ``trinity plan`` returns: the search result and the chain that explains its best plan."""

from __future__ import annotations

from aitrinity.cost.ledger import Result
from aitrinity.plan.chain import Chain
from aitrinity.plan.search import SearchResult
from aitrinity.plan.search_disaggregated import SplitSearchResult
from aitrinity.plan.search_serving import ServingSearchResult


class PlanReport(Result):
    scenario: str
    kind: str
    search: SearchResult | ServingSearchResult
    chain: Chain | None
    min_devices: int | None = None
    """When no plan fits: devices the scenario's own plan needs to fit (None: it fits, or no count does)."""
    splits: SplitSearchResult | None = None
    """Serving: the disaggregated prefill / decode splits searched beside the aggregated plans (``--disaggregated``,
    or a scenario with ``plan.disaggregation``); None when not asked for."""
