"""Build a run from its :class:`~contrastive_jax.train.spec.RunSpec`: one place, for every user.

``run = build(spec, mesh, facts)`` makes what a run needs: its sizes (:class:`Plan`), the
model's graph, the optimiser and its schedule, the initial state (host arrays) and the jitted
step. The trainer (:func:`contrastive_jax.train.loop.train`), the dry run
(:mod:`contrastive_jax.sizing.dry_run`), :func:`contrastive_jax.train.pretrained.load_pretrained`
and so evaluation all build through it, so what the dry run compiles is the step the trainer
runs (gradient caching included). :func:`check_step` evaluates that step abstractly
(``jax.eval_shape``: traced, not compiled or run) on the batch the data will give: the
config errors that only shapes reveal (a y-Aware loss on data without metadata, a mixing
width that is not the head's) surface there, before the trainer creates the work directory.
The trace is cached, so the first real step does not trace again.

:class:`DataFacts` is what the build needs of the data: the trainer reads it off its
:class:`~contrastive_jax.train.inputs.Input`, the dry run and ``load_pretrained`` state it
without reading any data.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from contrastive_jax.data import batching
from contrastive_jax.parallel import DATA_AXIS
from contrastive_jax.train import grad_cache, runtime
from contrastive_jax.train.spec import RunSpec
from contrastive_jax.train.step import (
    TrainState,
    init_state,
    make_train_step,
    nonfinite_record,
)


class DataFacts(NamedTuple):
    """What a build needs of the data.

    Attributes:
      num_examples: training examples per epoch (sizes an epoch in steps).
      num_classes: classes of the labels (the online probe's outputs).
      image_size: S, the side of every view of a batch [B, V, S, S, 3]; None for vectors.
      metadata_width: p of the per-example metadata float [B, p]; None: the data has none.
      vector_width: F of feature-vector views [B, V, F]; None for images.
    """

    num_examples: int
    num_classes: int
    image_size: int | None
    metadata_width: int | None = None
    vector_width: int | None = None

    @property
    def view_shape(self) -> tuple[int, ...]:
        """The shape of one view: (F,) for vectors, (S, S, 3) for images."""
        if self.vector_width is not None:
            return (self.vector_width,)
        if self.image_size is None:
            raise ValueError("DataFacts needs image_size or vector_width")
        return (self.image_size, self.image_size, 3)


class Plan(NamedTuple):
    """A run's sizes: global batch, steps per epoch, total steps, micro-batches per device,
    the profiled steps and the step after which collapse is watched."""

    global_batch: int
    devices: int
    steps_per_epoch: int
    total_steps: int
    micro_batches: int  # 0: no gradient caching
    profile: tuple[int, int] | None
    warmup_steps: int  # the longer of the learning-rate and the temperature warm-ups


def plan(spec: RunSpec, facts: DataFacts, devices: int) -> Plan:
    """The sizes of ``spec`` on ``devices`` devices for data of ``facts``; raises ConfigError
    for a batch that the devices or the data do not divide."""
    global_batch = spec.data.global_batch_size
    per_device = batching.rows_per_part(global_batch, devices, "config.data.global_batch_size",
                                        "devices")
    steps_per_epoch = batching.steps_per_epoch(facts.num_examples, global_batch,
                                               spec.data.dataset)
    total_steps = spec.train.total_steps or spec.train.epochs * steps_per_epoch
    optimizer = spec.optimizer
    lr_warmup = (int(optimizer.warmup_steps) if optimizer.warmup_steps is not None
                 else round(float(optimizer.warmup_epochs) * steps_per_epoch))
    return Plan(
        global_batch=global_batch,
        devices=devices,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        micro_batches=grad_cache.num_micro_batches(per_device,
                                                   spec.train.micro_batch_size),
        profile=runtime.profile_range(spec.train.profile_steps, total_steps),
        warmup_steps=max(lr_warmup, spec.loss.temperature_warmup_steps),
    )


class Run(NamedTuple):
    """What a run needs, built from its spec (:func:`build`).

    Attributes:
      spec: the run's spec.
      facts: the data's facts it was built for.
      plan: its sizes.
      mesh: the device mesh of the step.
      graphdef, rest: the model's graph and its non-array state (``nnx.split``).
      tx, schedule: the optimiser and its learning-rate schedule.
      state: the initial :class:`~contrastive_jax.train.step.TrainState`, host arrays.
      step: the jitted ``step(state, batch, nonfinite) -> (state, metrics, nonfinite)``.
    """

    spec: RunSpec
    facts: DataFacts
    plan: Plan
    mesh: Mesh
    graphdef: Any
    rest: Any
    tx: optax.GradientTransformation
    schedule: optax.Schedule
    state: TrainState
    step: Any


def build(spec: RunSpec, mesh: Mesh, facts: DataFacts) -> Run:
    """The model, optimiser, initial state and jitted step of ``spec`` on ``mesh``."""
    sizes = plan(spec, facts, mesh.size)
    graphdef, rest, tx, schedule, state = init_state(
        spec.model, spec.optimizer, seed=spec.seed,
        probe_classes=facts.num_classes if spec.train.online_probe else None,
        transfer=spec.transfer, steps_per_epoch=sizes.steps_per_epoch,
        global_batch_size=sizes.global_batch, total_steps=sizes.total_steps,
    )
    step = make_train_step(graphdef, rest, tx, list(spec.terms), schedule, mesh,
                           micro_batch_size=spec.train.micro_batch_size,
                           micro_batch_loop=spec.train.micro_batch_loop,
                           frozen_encoder=spec.transfer.frozen_encoder)
    return Run(spec, facts, sizes, mesh, graphdef, rest, tx, schedule, state, step)


def abstract_args(run: Run) -> tuple[Any, dict[str, jax.ShapeDtypeStruct], Any]:
    """``(state, batch, nonfinite)`` of the step as ``jax.ShapeDtypeStruct`` with the
    trainer's shardings: state and record replicated, the batch split over ``data``."""
    replicated = NamedSharding(run.mesh, P())
    split = NamedSharding(run.mesh, P(DATA_AXIS))
    b, facts = run.plan.global_batch, run.facts
    batch = {
        "views": jax.ShapeDtypeStruct((b, run.spec.data.num_views, *facts.view_shape),
                                      jnp.float32, sharding=split),
        **{k: jax.ShapeDtypeStruct((b,), jnp.int32, sharding=split)
           for k in ("label", "index", "stop")},
    }
    if facts.metadata_width is not None:
        batch["metadata"] = jax.ShapeDtypeStruct((b, facts.metadata_width), jnp.float32,
                                                 sharding=split)
    record = nonfinite_record(list(run.spec.terms))
    return _abstract(run.state, replicated), batch, _abstract(record, replicated)


def check_step(run: Run) -> None:
    """Traces the step on abstract inputs; raises the ConfigError a bad config meets there.

    Nothing is compiled or run; JAX caches the trace for the first real step.
    """
    jax.eval_shape(run.step, *abstract_args(run))


def _abstract(tree: Any, sharding: NamedSharding) -> Any:
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a), jnp.result_type(a),
                                                       sharding=sharding), tree)
