"""The jitted pretraining step: a pure function of (state, batch).

Data flow: views [B, V, H, W, C] (sharded over ``data``) -> [optional MixUp/CutMix
of each device's flat rows] -> encoder + head per device inside ``jax.shard_map``
-> loss with ``axis_name="data"`` (local anchors against the gathered global
batch) -> gradient of the replicated global loss, taken outside the
``shard_map`` -> optimiser update on replicated parameters.

Randomness inside the model (dropout, stochastic depth) is a pure function
of (run seed, step, device): the model's RNG streams are reseeded on every
step with ``fold_in(fold_in(state.rng, state.step), device index)``, so a
resumed run draws the masks an uninterrupted run would have drawn.

With a mixing stage (``config.loss.mixing``, :func:`objective.batch_mixing` of the
step's ``terms``), each device mixes its flat rows [b V, H, W, C] (the V views of an
example on consecutive rows; a row's partner is the row at the mirrored
position of the device's rows) with
:func:`contrastive_jax.train.mixing.mix_batch` before the network, keyed by
``fold_in(fold_in(fold_in(state.rng, state.step), MIXING_STREAM), device index)``
(deterministic per step, so resume stays exact), and the terms get the mixed,
smoothed targets as ``Targets.soft_label``. The online probe, if any, still
trains on the rows' own labels.

``micro_batch_size`` (``config.train.micro_batch_size``; None or 0: off) is the examples
per device of each micro-batch of gradient caching
(:mod:`contrastive_jax.train.grad_cache`): the device's rows are embedded in
``b / micro_batch_size`` micro-batches whose activations are recomputed in the backward
pass, so the step's activation memory is that of one micro-batch while the loss still
sees the global batch. The gradient is the plain step's for networks without batch
statistics; batch norm normalises each micro-batch with its own statistics.
``micro_batch_loop`` (``config.train.micro_batch_loop``) is the form of the loop over
micro-batches, ``"unrolled"`` or ``"scan"`` (:func:`grad_cache.embed`).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from contrastive_jax import metrics, models
from contrastive_jax.errors import ConfigError
from contrastive_jax.models import ModelSpec
from contrastive_jax.parallel import DATA_AXIS
from contrastive_jax.train import grad_cache, objective, optim
from contrastive_jax.train import mixing as mixing_lib
from contrastive_jax.train.transfer import TransferSpec, frozen_labels, keep_frozen

Array = jax.Array
ArrayLike = jax.typing.ArrayLike

#: Folded into a step's key to give the key of its MixUp/CutMix draws (a stream apart from
#: the model's dropout keys, which fold the device index into the step's key directly).
MIXING_STREAM = 0x6D6978


class NonFinite(NamedTuple):
    """The on-device record of non-finite steps, read by the host only at log steps.

    The loop passes it through every step beside the :class:`TrainState` and
    stores its ``count`` in the checkpoint's metadata (the checkpointed arrays
    keep the structure of the state alone).

    Attributes:
      count: int32 [], non-finite steps so far in the run.
      first_step: int32 [], the 1-based step of the first non-finite step since
        the host last cleared it (0: none).
      first_values: name -> float32 [], the logged values of that step (the
        loss, each ``loss/<term>`` and ``grad_norm``), for the report.
    """

    # Host numpy scalars when fresh (nonfinite_record), jax.Arrays once through a step.
    # A NamedTuple field may shadow tuple.count (valid at runtime); mypy rejects it.
    count: ArrayLike  # type: ignore[assignment]
    first_step: ArrayLike
    first_values: dict[str, ArrayLike]


def nonfinite_record(terms: list[objective.Term], count: int = 0) -> NonFinite:
    """A fresh :class:`NonFinite` (host arrays) for the loss ``terms``, starting at ``count``.

    The values of "no non-finite step yet" are zeros, not NaN: with several processes
    ``jax.device_put`` checks that every process passes equal values, and NaN never equals NaN.
    """
    names = ["loss", *(f"loss/{t.name}" for t in terms), "grad_norm"]
    return NonFinite(np.int32(count), np.int32(0), {name: np.float32(0.0) for name in names})


class TrainState(NamedTuple):
    """Everything a step reads and writes; checkpointed as one pytree.

    Attributes:
      step: int32 [], steps taken.
      params: nnx.State of the model's ``nnx.Param`` leaves (encoder, head, probe).
      batch_stats: nnx.State of the ``nnx.BatchStat`` leaves (running BN statistics).
      opt_state: the optax state.
      rng: uint32 [2] raw key data of the run's RNG; constant, folded with ``step``
        (and the device index) into each step's dropout keys.
    """

    step: Array
    params: Any
    batch_stats: Any
    opt_state: Any
    rng: Array


class PretrainModel(nnx.Module):
    """Encoder + projection head, and an optional online linear probe.

    The probe (SimCLR's protocol) is a linear classifier on stop-gradient
    encoder features, trained jointly by the same optimiser; it reports train
    accuracy during pretraining and never sends gradient to the encoder.
    """

    def __init__(self, network: nnx.Module, num_features: int, num_classes: int | None,
                 *, rngs: nnx.Rngs) -> None:
        self.network = network
        self.probe = (
            nnx.Linear(num_features, num_classes, rngs=rngs) if num_classes else None
        )


def split_model(model: PretrainModel):
    """(graphdef, params, batch_stats, rest) of a model."""
    return nnx.split(model, nnx.Param, nnx.BatchStat, ...)


def build_model(model: ModelSpec, *, seed: int,
                probe_classes: int | None = None) -> PretrainModel:
    """Encoder + head of ``model`` (+ an online probe of ``probe_classes`` classes), seeded by
    ``seed``.

    Args:
      model: the model's sections (``spec.model`` of :func:`contrastive_jax.train.spec.parse`,
        or :func:`contrastive_jax.models.model_spec` of a mapping with ``encoder`` and
        ``head``, see :mod:`contrastive_jax.models.factory`).
      seed: seeds the initialisation (the encoder's, then the head's, then the probe's: the
        network does not depend on whether there is a probe).
      probe_classes: classes of the online linear probe; None (or 0): no probe
        (``config.train.online_probe`` off).
    """
    rngs = nnx.Rngs(seed)
    encoder = models.create_encoder(model.encoder, rngs=rngs)
    head = models.create_head(model.head, encoder.num_features, rngs=rngs)
    network = models.ContrastiveModel(encoder, head)
    return PretrainModel(network, encoder.num_features, probe_classes, rngs=rngs)


def init_state(
    model: ModelSpec,
    optimizer: optim.OptimizerSpec,
    *,
    seed: int,
    probe_classes: int | None = None,
    transfer: TransferSpec | None = None,
    steps_per_epoch: int,
    global_batch_size: int,
    total_steps: int,
) -> tuple[Any, Any, optax.GradientTransformation, optax.Schedule, TrainState]:
    """A fresh ``(graphdef, rest, tx, schedule, state)`` (host arrays) of a run's typed
    sections: ``spec.model``, ``spec.optimizer``, ``spec.seed``, ``spec.transfer`` of
    :class:`~contrastive_jax.train.spec.RunSpec` (:func:`contrastive_jax.train.build.build`
    passes them), the online probe's classes as for :func:`build_model`; the sizes set the
    learning-rate schedule (:func:`contrastive_jax.train.optim.make_optimizer`). Needs
    neither TensorFlow nor ml_collections::

        graphdef, rest, tx, schedule, state = init_state(
            models.model_spec({"encoder": {"name": "resnet50"}, "head": {}}),
            optim.resolve({"name": "sgd"}), seed=0,
            steps_per_epoch=100, global_batch_size=256, total_steps=100)
        step = make_train_step(graphdef, rest, tx, parse_terms({"name": "supcon"}),
                               schedule, mesh)

    ``transfer.trainable == "head"`` (linear evaluation, :mod:`contrastive_jax.train.transfer`;
    None: the defaults, everything trains) puts the encoder in inference mode (in the graph;
    with ``transfer.frozen_encoder_bn == "batch"`` it stays in training mode, its batch norm
    on each batch's statistics, the running ones restored after each step by
    :func:`~contrastive_jax.train.transfer.keep_frozen`) and leaves it out of the optimiser
    (``optax.set_to_zero``). ``transfer.init_from`` is not read here
    (:func:`contrastive_jax.train.pretrained.initialise` reads it).
    """
    transfer = TransferSpec() if transfer is None else transfer
    pretrain_model = build_model(model, seed=seed, probe_classes=probe_classes)
    pretrain_model.train()
    frozen = transfer.frozen_encoder
    if frozen and transfer.frozen_encoder_bn == "running":  # BN on the running statistics
        network: Any = pretrain_model.network  # a ContrastiveModel
        network.encoder.eval()
    graphdef, params, batch_stats, rest = split_model(pretrain_model)
    tx, schedule = optim.make_optimizer(
        optimizer,
        params,
        steps_per_epoch=steps_per_epoch,
        global_batch_size=global_batch_size,
        total_steps=total_steps,
    )
    if frozen:  # the encoder out of the optimiser: no update, no optimiser state
        tx = optax.multi_transform({"trainable": tx, "frozen": optax.set_to_zero()},
                                   frozen_labels(params, True))
    state = TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        batch_stats=batch_stats,
        opt_state=tx.init(params),
        rng=jax.random.key_data(jax.random.key(seed)),
    )
    return graphdef, rest, tx, schedule, state


def make_train_step(
    graphdef: Any,
    rest: Any,
    tx: optax.GradientTransformation,
    terms: list[objective.Term],
    schedule: optax.Schedule,
    mesh: Mesh,
    *,
    micro_batch_size: int | None = None,
    micro_batch_loop: str = "scan",
    frozen_encoder: bool = False,
) -> jax.stages.Wrapped:
    """Builds ``step(state, batch[, nonfinite]) -> (state, metrics[, nonfinite])``, jitted.

    The state (and the record) are donated.

    ``batch`` holds global arrays sharded over ``data``: ``views`` float
    [B, V, H, W, C], ``label`` int [B], ``index`` int [B] (global example ids,
    the instance ids of NT-Xent) and optionally ``metadata`` float [B, p].
    Returned metrics are replicated scalars: ``loss``, ``loss/<term>``,
    ``alignment``, ``uniformity``, ``learning_rate``, ``grad_norm``, ``finite``
    (1.0 when loss and gradients are finite), ``probe_accuracy`` with a probe,
    ``temperature/<term>`` for a term with a temperature warm-up.
    An optional ``stop`` int [B] field (each process's SIGTERM flag on its
    rows) comes back as ``stop``, its maximum over the global batch: every
    process learns that one of them was told to stop through the step's own
    collectives, with no extra cross-process call.
    A non-finite step returns the input's parameters, batch statistics and
    optimiser state unchanged (only ``step`` advances), so the caller can skip
    it (``config.train.skip_nonfinite``) or stop with the last good state; both
    choices run the same compiled step. Given a :class:`NonFinite` record as
    third argument, the step also returns it updated: non-finite steps counted,
    the step number and values of the first one kept, so the host learns of
    them when it next reads the record (at a log step), with no read per step.

    ``micro_batch_size`` (``config.train.micro_batch_size``; None or 0: off) and
    ``micro_batch_loop`` turn on gradient caching (the module docstring says how the step
    draws its randomness, mixes its rows and caches its gradients).

    ``frozen_encoder`` (``config.model.trainable == "head"``: linear evaluation) stops the
    gradient at the encoder's features and keeps the encoder's parameters and batch
    statistics bit for bit as they were (:func:`~contrastive_jax.train.transfer.keep_frozen`).
    """
    mix = objective.batch_mixing(terms)
    grad_cache.check_loop(micro_batch_loop)
    if frozen_encoder and micro_batch_size:
        raise ConfigError("config.train.micro_batch_size: gradient caching needs a trained "
                          "encoder; with config.model.trainable='head' set it to 0")
    per_device = functools.partial(
        _per_device, graphdef, rest, tuple(terms), mix, micro_batch_size, micro_batch_loop,
        frozen_encoder)

    def loss_fn(params, batch_stats, key_data, step, batch):
        local_specs = {k: P(DATA_AXIS) for k in batch}
        sharded = jax.shard_map(
            per_device,
            mesh=mesh,
            in_specs=(P(), P(), P(), P(), local_specs),
            out_specs=(P(), (P(), P())),
        )
        return sharded(params, batch_stats, key_data, step, batch)

    def step(state: TrainState, batch: dict[str, Array], nonfinite: NonFinite | None = None):
        stop = batch.get("stop")
        batch = {k: batch[k] for k in _BATCH_KEYS if batch.get(k) is not None}
        step_key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
        (loss, (logged, new_stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, state.batch_stats, jax.random.key_data(step_key), state.step, batch
        )
        new_stats = keep_frozen(state.batch_stats, new_stats, frozen_encoder)
        new, finite = _guarded_update(tx, state, grads, loss, new_stats, logged)
        new = new._replace(params=keep_frozen(state.params, new.params, frozen_encoder))
        logged["learning_rate"] = schedule(state.step)
        if stop is not None:
            logged["stop"] = jnp.max(stop).astype(jnp.float32)
        if nonfinite is None:
            return new, logged
        return new, logged, _count_nonfinite(nonfinite, finite, state.step, logged)

    return jax.jit(step, donate_argnums=(0, 2))


#: The fields of a batch that reach the model (``stop`` is read apart).
_BATCH_KEYS = ("views", "label", "index", "metadata")


def _per_device(graphdef, rest, terms: tuple[objective.Term, ...],
                mix: objective.Mixing | None, micro_batch_size: int | None,
                micro_batch_loop: str, frozen_encoder: bool, params, batch_stats,
                key_data: Array, step: Array, local: dict[str, Array]):
    """One device's share of the step, inside ``shard_map``: (loss, (metrics, batch stats)).

    ``local`` holds the device's examples (``views`` [b, V, H, W, C], ``label``, ``index``,
    optionally ``metadata``); the loss is the replicated global one (the terms gather the
    projections over ``data``).
    """
    # copy=True: fresh variables of this trace, so the RNG streams can be reseeded.
    model = nnx.merge(graphdef, params, batch_stats, rest, copy=True)
    device_key = jax.random.fold_in(
        jax.random.wrap_key_data(key_data), jax.lax.axis_index(DATA_AXIS)
    )
    nnx.reseed(model, default=device_key, dropout=device_key)
    rows, label, soft_label = _rows(local, key_data, mix)
    micro = grad_cache.num_micro_batches(local["views"].shape[0], micro_batch_size)
    if micro:
        features, projections = grad_cache.embed(
            model.network, rows, num_micro_batches=micro, key=device_key, loop=micro_batch_loop,
        )
    elif frozen_encoder:  # linear evaluation: no gradient into the encoder
        features = jax.lax.stop_gradient(model.network.encoder(rows))
        projections = model.network.head(features)
    else:
        features, projections = model.network(rows)
    if mix is not None and projections.shape[-1] != mix.num_classes:
        raise ConfigError(
            f"config.loss.mixing.num_classes={mix.num_classes}, but the head outputs "
            f"{projections.shape[-1]} class scores per example (config.model.head)"
        )
    v = local["views"].shape[1]
    metadata = local.get("metadata")
    targets = objective.Targets(
        instance=_per_row(local["index"], v).astype(jnp.int32),
        label=label,
        metadata=None if metadata is None else _per_row(metadata, v),
        soft_label=soft_label,
    )
    total, logged = _objective(terms, projections, targets, step, v)
    if model.probe is not None:
        probe_loss, probe_logged = _probe(model.probe, features, targets.label)
        logged.update(probe_logged)
        total = total + probe_loss
    new_stats = jax.tree.map(
        lambda s: jax.lax.pmean(s, DATA_AXIS), nnx.state(model, nnx.BatchStat)
    )
    return total, (logged, new_stats)


def _per_row(a: Array, v: int) -> Array:
    """A per-example array [b, ...] repeated for each of the V views of an example [b V, ...]."""
    return jnp.repeat(a, v, axis=0)


def _rows(local: dict[str, Array], key_data: Array, mix: objective.Mixing | None):
    """The device's flat rows [b V, H, W, C] (the V views of an example on consecutive
    rows), their labels int [b V], and, with a mixing stage, the rows mixed by MixUp/CutMix
    and their soft targets float [b V, K] (None without)."""
    views = local["views"]
    b, v = views.shape[:2]
    rows = views.reshape((b * v,) + views.shape[2:])
    label = _per_row(local["label"], v).astype(jnp.int32)
    soft_label = None
    if mix is not None:
        mix_key = jax.random.fold_in(jax.random.wrap_key_data(key_data), MIXING_STREAM)
        rows, soft_label = mixing_lib.mix_batch(
            rows, label, mix_key, num_classes=mix.num_classes,
            mixup_alpha=mix.mixup_alpha, cutmix_alpha=mix.cutmix_alpha,
            mixup_prob=mix.mixup_prob, switch_prob=mix.switch_prob,
            label_smoothing=mix.label_smoothing, axis_name=DATA_AXIS,
        )
    return rows, label, soft_label


def _objective(terms: tuple[objective.Term, ...], projections: Array,
               targets: objective.Targets, step: Array,
               num_views: int) -> tuple[Array, dict[str, Array]]:
    """The weighted loss terms on the projections [n, d] (``num_views`` V rows per example),
    and what is logged of them: each term, each warm-up's temperature, the alignment and
    uniformity of the projections."""
    total, values = objective.evaluate(terms, projections, targets, axis_name=DATA_AXIS,
                                       step=step, num_views=num_views)
    logged = {f"loss/{k}": val for k, val in values.items()}
    for term in terms:
        if term.warmup_temperature is not None:
            logged[f"temperature/{term.name}"] = jnp.asarray(term.temperature_at(step))
    unit = projections.astype(jnp.float32)
    logged["alignment"] = jax.lax.pmean(
        metrics.alignment_from_labels(unit, targets.instance), DATA_AXIS
    )
    logged["uniformity"] = jax.lax.pmean(metrics.uniformity(unit), DATA_AXIS)
    return total, logged


def _probe(probe: nnx.Module, features: Array, label: Array) -> tuple[Array, dict[str, Array]]:
    """SimCLR's online linear probe on stop-gradient features [n, F]: its cross-entropy
    (added to the loss; it trains the probe alone) and its train accuracy."""
    logits = probe(jax.lax.stop_gradient(features).astype(jnp.float32))
    probe_loss = jax.lax.pmean(
        optax.softmax_cross_entropy_with_integer_labels(logits, label).mean(), DATA_AXIS,
    )
    accuracy = jax.lax.pmean(jnp.mean(jnp.argmax(logits, -1) == label), DATA_AXIS)
    return probe_loss, {"probe_loss": probe_loss, "probe_accuracy": accuracy}


def _guarded_update(tx: optax.GradientTransformation, state: TrainState, grads, loss: Array,
                    new_stats, logged: dict[str, Array]) -> tuple[TrainState, Array]:
    """The optimiser's update, kept only if the loss and the gradient are finite (the input's
    parameters, batch statistics and optimiser state otherwise; ``step`` advances either
    way); logs ``loss``, ``grad_norm`` and ``finite``. Returns (new state, finite)."""
    grad_norm = optax.global_norm(grads)
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    kept_params, kept_stats, kept_opt_state = jax.tree.map(
        lambda a, b: jnp.where(finite, a, b),
        (params, new_stats, opt_state),
        (state.params, state.batch_stats, state.opt_state),
    )
    logged.update(loss=loss, grad_norm=grad_norm, finite=finite.astype(jnp.float32))
    return TrainState(state.step + 1, kept_params, kept_stats, kept_opt_state, state.rng), finite


def _count_nonfinite(nonfinite: NonFinite, finite: Array, step: Array,
                     logged: dict[str, Array]) -> NonFinite:
    """The record updated with this (0-based) ``step``: counted if not finite, and kept as the
    first with its logged values if none was recorded since the host last cleared it."""
    first = ~finite & (nonfinite.first_step == 0)
    return NonFinite(
        nonfinite.count + (~finite).astype(jnp.int32),
        jnp.where(first, step + 1, nonfinite.first_step),
        {k: jnp.where(first, logged[k].astype(jnp.float32), v)
         for k, v in nonfinite.first_values.items()},
    )
