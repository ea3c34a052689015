"""The evaluator protocol: one interface for what the loop and ``linear_eval`` measure.

An evaluator is built once from a :class:`Setup` (the run's typed sections, its data and
devices) and then called with a network in evaluation mode (BatchNorm on its running
statistics, no dropout) and the step it was trained to::

    from contrastive_jax.eval.registry import EVALUATORS

    evaluator = EVALUATORS["knn_monitor"](setup)
    evaluator.run(network, step)          # {"knn_top1": 0.61, "knn_seconds": 2.3}

Every evaluator has:

* ``interval(setup) -> int`` (a class method): the steps between two of its evaluations in a
  pretraining run, read off the run's config (0: the loop does not run it). The loop runs the
  evaluators whose interval its config sets, after every ``interval`` steps and after the last.
* ``run(network, step) -> dict``: its metrics, JSON-able. The loop logs them and needs floats;
  an offline evaluator (the probes) may give nested records (accuracy with its interval).

The evaluators are registered by name in :data:`contrastive_jax.eval.registry.EVALUATORS`;
``python -m contrastive_jax.linear_eval --evaluators NAME,...`` runs any of them on a
checkpoint, the loop the ones its config turns on.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from flax import nnx
from jax.sharding import Mesh

from contrastive_jax.eval.linear import ProbeProtocol

if TYPE_CHECKING:
    from contrastive_jax.data.base import Source
    from contrastive_jax.train.spec import RunSpec


@dataclasses.dataclass(frozen=True)
class Setup:
    """What an evaluator is built from.

    Attributes:
      spec: the run's typed sections (:class:`~contrastive_jax.train.spec.RunSpec`): the
        data section's evaluation transform, the train section's evaluator settings.
      source: the run's loaded dataset (None: random images, which no evaluator reads).
      mesh: the devices of the run (an evaluator that shards its batches uses them).
      total_steps: the run's length (its last step is always evaluated).
      steps_per_epoch: steps of one pass over the training split.
      probe: the offline probes' protocol (:class:`~contrastive_jax.eval.ProbeProtocol`).
      features: ``"features"`` (the encoder's) or ``"pixels"`` (the normalised images, the
        baseline a representation must beat): what the offline probes read.
    """

    spec: RunSpec
    source: Source | None
    mesh: Mesh
    total_steps: int
    steps_per_epoch: int
    probe: ProbeProtocol = ProbeProtocol()
    features: str = "features"
    #: What the evaluators of one setup share (the probes: one network's embedded splits).
    cache: dict[Any, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)


class Evaluator(Protocol):
    """A measurement of a network (see the module docstring)."""

    #: The names of the metrics :meth:`run` returns.
    metrics: ClassVar[tuple[str, ...]]

    def __init__(self, setup: Setup) -> None: ...

    @classmethod
    def interval(cls, setup: Setup) -> int:
        """Steps between two evaluations in the run of ``setup`` (0: not run by the loop)."""
        ...

    def run(self, network: nnx.Module, step: int) -> dict[str, Any]:
        """The metrics of ``network`` (evaluation mode) trained to ``step``."""
        ...


def due(interval: int, step: int, total_steps: int) -> bool:
    """Whether an evaluator of ``interval`` runs after the 1-based ``step`` (every
    ``interval`` steps, and after the last)."""
    return bool(interval) and (step % interval == 0 or step == total_steps)
