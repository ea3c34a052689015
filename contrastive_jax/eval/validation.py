"""Top-1 / top-5 of the class scores on the held-out split during training (the linear
evaluation and fine-tuning protocols).

An evaluator (:mod:`.evaluator`, registered as ``validation``): every
``config.train.validate_every_epochs`` epochs (0: off) and at the last step, the loop runs
:class:`Validation` on the current network: in inference mode (batch norm on its running
statistics, no dropout) it scores every example of the ``test`` split (the evaluation
transform: resize and centre crop, :func:`contrastive_jax.data.make_eval_iterator`) and counts the examples whose label is the
top class (top-1) or among the 5 top classes (top-5; top-K for K < 5 classes). The head's
outputs are the class scores: a head ``classifier`` (or an MLP head) to ``num_classes``.

Data-parallel like the training step: each process reads its rows of each global batch of
``config.data.global_batch_size`` examples (the last padded), the batch is split over the
mesh's devices and the counts are summed over them (``psum``), so the counts are integers,
the same on every process count. The loop logs ``val_top1`` and ``val_top5`` (fractions)
and reports the final and the best evaluation (:class:`Record`); HobbitLong/SupContrast's
``main_linear.py`` reports the best test accuracy over the epochs, SimCLR's and the SupCon
TF code's the final one.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import PartitionSpec as P

from contrastive_jax import data as data_lib
from contrastive_jax.errors import ConfigError
from contrastive_jax.eval.evaluator import Setup
from contrastive_jax.parallel import DATA_AXIS, batch_sharding

#: The held-out split that is evaluated.
SPLIT = "test"


class Record(NamedTuple):
    """One evaluation: the 1-based step after which it ran, the epoch (steps / steps per
    epoch) and the top-1 and top-5 fractions."""

    step: int
    epoch: float
    top1: float
    top5: float


def best(records: list[Record]) -> Record | None:
    """The evaluation of highest top-1 (the earliest of equals); None without any."""
    return max(records, key=lambda r: r.top1, default=None)  # max keeps the first of equals


class Validation:
    """Counts top-1/top-5 hits of the network's class scores on the ``test`` split.

    Args:
      setup: the run (:class:`~contrastive_jax.eval.evaluator.Setup`): its data section (the
        evaluation transform, ``global_batch_size``), its loaded source, its mesh.

    Raises:
      ConfigError: the data has no ``test`` split.
    """

    metrics: ClassVar[tuple[str, ...]] = ("val_top1", "val_top5")

    def __init__(self, setup: Setup) -> None:
        spec, source = setup.spec, setup.source
        if source is None or SPLIT not in source.splits:
            raise ConfigError(
                f"config.train.validate_every_epochs={spec.train.validate_every_epochs} "
                f"evaluates the {SPLIT!r} split, which config.data.dataset="
                f"{spec.data.dataset!r} does not have")
        self.mesh = setup.mesh
        self.k = min(5, source.num_classes)
        self.batches = data_lib.make_eval_iterator(
            spec.data, SPLIT, spec.data.global_batch_size, process_index=jax.process_index(),
            process_count=jax.process_count(), source=source)
        self._counters: dict[Any, Any] = {}  # one jitted count per network structure

    @classmethod
    def interval(cls, setup: Setup) -> int:
        """``config.train.validate_every_epochs`` epochs in steps (0: off)."""
        return setup.spec.train.validate_every_epochs * setup.steps_per_epoch

    def run(self, network: nnx.Module, step: int) -> dict[str, float]:
        """``{"val_top1", "val_top5"}`` of ``network``'s class scores (its head's outputs)."""
        del step
        # The weights are the run's replicated arrays; the rest (RNG counts) is closed over.
        graphdef, weights, *rest = nnx.split(network, (nnx.Param, nnx.BatchStat), ...)
        if graphdef not in self._counters:
            self._counters[graphdef] = _make_counter(graphdef, rest, self.mesh, self.k)
        count = self._counters[graphdef]
        sharding = batch_sharding(self.mesh)
        totals = np.zeros(3, np.int64)
        for batch in self.batches:
            arrays = [jax.make_array_from_process_local_data(sharding, batch[k])
                      for k in ("image", "label", "valid")]
            totals += np.asarray(jax.device_get(count(weights, *arrays)), np.int64)
        top1, top5, examples = (int(t) for t in totals)
        return {"val_top1": top1 / examples, "val_top5": top5 / examples}


def _make_counter(graphdef: Any, rest: Any, mesh: Any, k: int):
    """``count(weights, images, label, valid) -> int32 [3]``: the top-1 hits, the top-``k``
    hits and the valid rows of a global batch, summed over the devices."""

    def per_device(weights, images, label, valid):
        _, scores = nnx.merge(graphdef, weights, *rest)(images)
        top = jax.lax.top_k(scores.astype(jnp.float32), k)[1]
        label = label.astype(top.dtype)
        hit1 = (top[:, 0] == label) & valid
        hitk = jnp.any(top == label[:, None], axis=-1) & valid
        counts = jnp.stack([hit1.sum(), hitk.sum(), valid.sum()]).astype(jnp.int32)
        return jax.lax.psum(counts, DATA_AXIS)

    sharded = jax.shard_map(per_device, mesh=mesh,
                            in_specs=(P(), P(DATA_AXIS), P(DATA_AXIS), P(DATA_AXIS)),
                            out_specs=P())
    return jax.jit(sharded)
