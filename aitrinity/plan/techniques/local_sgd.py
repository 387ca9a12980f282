"""Local SGD (compute -> bandwidth): average parameters every ``period`` steps instead of every step.

Effect on the ledger: the data-parallel synchronisation is amortised over ``period`` steps
(:func:`aitrinity.cost.effects.grad_sync`). Not searched by the planner.

Quality: local SGD trades link bytes for statistical efficiency -- the workers' models drift apart
between averages, so it may need more optimizer steps to reach the loss synchronous SGD reaches. How many
more depends on the model, the data, ``period`` and the number of workers: Lin et al. 2020 (ICLR, "Don't
use large mini-batches, use local SGD") report the same accuracy in the same number of epochs for small
periods after a synchronous warm-up, Ortiz et al. 2021 ("Trade-offs of local SGD at scale") a loss of
accuracy at scale. No single number fits, so it is the entry's ``steps_factor`` (default 1: no
statistical cost assumed, and said so), and the break-even report gives the largest factor at which local
SGD still pays off -- the statistical budget the link leaves it.
"""

from aitrinity.plan.exchanges import ExchangeInfo
from aitrinity.plan.registry import Exchange, given_steps_factor, register
from aitrinity.spec.exchanges import LocalSGD

SOURCE = "steps_factor as given (Lin et al. 2020; Ortiz et al. 2021)"


EXCHANGE = register(
    Exchange(
        ExchangeInfo(
            "local-sgd",
            "local SGD",
            "compute->bandwidth",
            "statistical efficiency (more steps)",
            "data-parallel link bytes",
            "dp_link",
            "below",
            "faster",
            "Lin et al. 2020, 'Don't use large mini-batches'",
        ),
        ("training",),
        LocalSGD,
        given_steps_factor(SOURCE),
    )
)
