"""Top-1 / top-5 of the class scores on the held-out split during training (the linear
evaluation and fine-tuning protocols).

Every ``config.train.validate_every_epochs`` epochs (0: off) and at the last step, the loop
calls :class:`Validator` with the current :class:`~contrastive_jax.train.step.TrainState`: the
network in inference mode (batch norm on its running statistics, no dropout) scores every
example of the ``test`` split (the evaluation transform: resize and centre crop,
:func:`contrastive_jax.data.make_eval_iterator`) and counts the examples whose label is the
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

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import PartitionSpec as P

from contrastive_jax import data as data_lib
from contrastive_jax.errors import ConfigError
from contrastive_jax.parallel import DATA_AXIS, batch_sharding
from contrastive_jax.train.step import split_model

#: The held-out split that is evaluated.
SPLIT = "test"
#: Names of the scalars a :class:`Validator` returns.
METRICS = ("val_top1", "val_top5")


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


class Validator:
    """Counts top-1/top-5 hits of the run's network on the ``test`` split.

    Args:
      run: the built run (:func:`contrastive_jax.train.build.build`): its graph, mesh, plan.
      data_config: ``config.data`` (the evaluation transform, normalisation).
      source: the run's loaded source; None (synthetic data) is refused.

    Raises:
      ConfigError: the data has no ``test`` split, or its classes are not the head's outputs.
    """

    def __init__(self, run: Any, data_config: Any, source: Any) -> None:
        if source is None or SPLIT not in source.splits:
            raise ConfigError(
                f"config.train.validate_every_epochs={run.spec.train.validate_every_epochs} "
                f"evaluates the {SPLIT!r} split, which config.data.dataset="
                f"{run.spec.data.dataset!r} does not have")
        self.every = run.spec.train.validate_every_epochs * run.plan.steps_per_epoch
        self.total_steps = run.plan.total_steps
        self.steps_per_epoch = run.plan.steps_per_epoch
        self.mesh = run.mesh
        self.batches = data_lib.make_eval_iterator(
            data_config, SPLIT, run.plan.global_batch, process_index=jax.process_index(),
            process_count=jax.process_count(), source=source)
        model = nnx.merge(run.graphdef, run.state.params, run.state.batch_stats, run.rest)
        model.eval()
        graphdef, _, _, rest = split_model(model)
        self._count = _make_counter(graphdef, rest, run.mesh, min(5, run.facts.num_classes))

    def due(self, done: int) -> bool:
        """Whether to evaluate after step ``done`` (1-based)."""
        return done % self.every == 0 or done == self.total_steps

    def __call__(self, state: Any, done: int) -> Record:
        """The top-1 and top-5 of ``state``'s network after step ``done``."""
        sharding = batch_sharding(self.mesh)
        totals = np.zeros(3, np.int64)
        for batch in self.batches:
            arrays = [jax.make_array_from_process_local_data(sharding, batch[k])
                      for k in ("image", "label", "valid")]
            totals += np.asarray(jax.device_get(self._count(state.params, state.batch_stats,
                                                            *arrays)), np.int64)
        top1, top5, examples = (int(t) for t in totals)
        return Record(done, done / self.steps_per_epoch, top1 / examples, top5 / examples)


def _make_counter(graphdef: Any, rest: Any, mesh: Any, k: int):
    """``count(params, batch_stats, images, label, valid) -> int32 [3]``: the top-1 hits, the
    top-``k`` hits and the valid rows of a global batch, summed over the devices."""

    def per_device(params, batch_stats, images, label, valid):
        model = nnx.merge(graphdef, params, batch_stats, rest)
        _, scores = model.network(images)
        top = jax.lax.top_k(scores.astype(jnp.float32), k)[1]
        label = label.astype(top.dtype)
        hit1 = (top[:, 0] == label) & valid
        hitk = jnp.any(top == label[:, None], axis=-1) & valid
        counts = jnp.stack([hit1.sum(), hitk.sum(), valid.sum()]).astype(jnp.int32)
        return jax.lax.psum(counts, DATA_AXIS)

    sharded = jax.shard_map(per_device, mesh=mesh,
                            in_specs=(P(), P(), P(DATA_AXIS), P(DATA_AXIS), P(DATA_AXIS)),
                            out_specs=P())
    return jax.jit(sharded)
