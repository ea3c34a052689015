"""Every evaluator by name: what the loop and ``linear_eval --evaluators`` can run.

To add one: a module in ``contrastive_jax/eval/`` with a class of the protocol of
:mod:`.evaluator` (``__init__(setup)``, the class method ``interval(setup)``, ``run(network,
step) -> dict``), and its line below (docs/architecture.md, "Adding an evaluator").
"""

from __future__ import annotations

from contrastive_jax.errors import ConfigError
from contrastive_jax.eval.evaluator import Evaluator, Setup
from contrastive_jax.eval.knn_monitor import KnnMonitor
from contrastive_jax.eval.probes import KnnProbe, LinearProbe, RidgeProbe
from contrastive_jax.eval.validation import Validation

#: Name -> evaluator class.
EVALUATORS: dict[str, type[Evaluator]] = {
    "knn_monitor": KnnMonitor,  # online kNN top-1 (config.train.eval_every)
    "validation": Validation,  # top-1/top-5 of the class scores (validate_every_epochs)
    "linear": LinearProbe,  # the linear probe of the frozen features
    "knn": KnnProbe,  # the weighted kNN probe of the frozen features
    "ridge": RidgeProbe,  # the ridge probe of the frozen features
}


def in_run(setup: Setup) -> dict[str, tuple[Evaluator, int]]:
    """The evaluators whose interval the run's config sets: name -> (evaluator, interval)."""
    return {name: (cls(setup), every) for name, cls in EVALUATORS.items()
            if (every := cls.interval(setup))}


def check_names(names: tuple[str, ...]) -> None:
    """Raises ConfigError naming the ``names`` that are not registered, and the registered."""
    unknown = [name for name in names if name not in EVALUATORS]
    if unknown or not names:
        raise ConfigError(f"no evaluator named {', '.join(map(repr, unknown)) or 'at all'}; "
                          f"the evaluators are {', '.join(EVALUATORS)}")


def by_name(setup: Setup, names: tuple[str, ...]) -> dict[str, Evaluator]:
    """The evaluators ``names``, built for ``setup``.

    Raises:
      ConfigError: a name that is not registered (the registered ones named).
    """
    check_names(names)
    return {name: EVALUATORS[name](setup) for name in names}
