"""Optimisers and learning-rate schedules for pretraining (SimCLR's LARS recipe, SGD, AdamW).

The schedule is a linear warm-up followed by cosine decay, with the peak learning rate scaled
with the global batch size B as in SimCLR:

* ``"linear"``: ``peak = base_learning_rate * B / 256`` (SimCLR LARS: 0.3 x B/256),
* ``"sqrt"``: ``peak = base_learning_rate * sqrt(B)`` (SimCLR LARS: 0.075 x sqrt(B), better for
  small batches),
* ``"none"``: ``peak = base_learning_rate``.

Biases and normalisation parameters (BatchNorm/LayerNorm scale and offset; in practice every
parameter with ``ndim <= 1``) are excluded by one mask, :func:`decay_mask`, from weight decay and,
for LARS, from trust-ratio adaptation, as in SimCLR's LARS (``optax.lars`` with the same mask for
``weight_decay_mask`` and ``trust_ratio_mask`` reproduces it exactly, classic momentum included).
``decay_biases=True`` excludes the normalisation parameters only (:func:`norm_mask`), as the
SupCon authors' TF code with ``--use_bias_weight_decay=True``.

    tx, schedule = make_optimizer(config.optimizer, params, steps_per_epoch=97,
                                  global_batch_size=512, total_steps=97_000)
    opt_state = tx.init(params)
"""

from __future__ import annotations

import dataclasses
import logging
import math
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import optax

from contrastive_jax._sections import check_domains, section_fields
from contrastive_jax.errors import ConfigError, check_fields

OPTIMIZERS = ("lars", "sgd", "adamw", "rmsprop")
LR_SCALINGS = ("linear", "sqrt", "none")
#: The decay after the warm-up (``config.optimizer.decay``): cosine to ``final_lr_factor``,
#: step decay at given epochs, or staircase exponential decay.
DECAYS = ("cosine", "step", "exponential")

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class OptimizerSpec:
    """``config.optimizer``: every optimiser and schedule field, its default and its checks.

    Defaults: SimCLR's LARS recipe (0.3 x B/256, 10 warm-up epochs). The SINCERE pretraining
    recipe (Feeney & Hughes 2023, "SINCERE: Supervised Information Noise-Contrastive
    Estimation REvisited", arXiv:2309.14277, Sec. 4.3: SGD with momentum 0.9, 10 epochs
    warming up from 0.0005 to 0.5, cosine back to 0.0005 over 1,000 epochs at B = 512, weight
    decay 1e-4 on all parameters) is ``name="sgd"``, ``base_learning_rate=0.5``,
    ``lr_scaling="none"``, ``weight_decay=1e-4``, ``warmup_init=0.0005``,
    ``final_lr_factor=0.001``, ``decay_norm_and_bias=True``.
    """

    # One of OPTIMIZERS: "lars" (optax.lars), "sgd" (momentum SGD), "adamw", "rmsprop"
    # (TF1's RMSPropOptimizer: mean square initialised to 1, eps inside the root, momentum).
    name: str = "lars"
    # Learning rate before batch-size scaling; the peak of the schedule after it.
    base_learning_rate: float = 0.3
    # One of LR_SCALINGS: "linear" (x B/256), "sqrt" (x sqrt(B)) or "none".
    lr_scaling: str = "linear"
    # Weight-decay coefficient (added to the gradient for lars/sgd, decoupled for adamw).
    weight_decay: float = 1e-6
    # Momentum of lars and sgd (adamw keeps optax's b1=0.9, b2=0.999).
    momentum: float = 0.9
    # LARS trust coefficient eta: trust ratio = eta * |w| / |g + wd * w|.
    trust_coefficient: float = 1e-3
    # Nesterov momentum for lars and sgd.
    nesterov: bool = False
    # Linear warm-up length in epochs (may be fractional); see warmup_steps.
    warmup_epochs: float = 10.0
    # Warm-up length in optimiser steps; when not None it replaces warmup_epochs.
    warmup_steps: int | None = None
    # Learning rate at step 0, the start of the warm-up (absolute, not scaled).
    warmup_init: float = 0.0
    # Learning rate at the last step as a fraction of the peak learning rate.
    final_lr_factor: float = 0.0
    # Schedule length in epochs; None: the run's length (train.epochs or train.total_steps).
    schedule_epochs: float | None = None
    # Schedule length in steps; when not None it replaces schedule_epochs and the run's length.
    schedule_steps: int | None = None
    # Clip gradients to this global L2 norm before the optimiser; None: no clipping.
    grad_clip_norm: float | None = None
    # Also decay biases and normalisation parameters (and, for lars, adapt their rate with
    # the trust ratio); the SINCERE reference (SGD) decays every parameter.
    decay_norm_and_bias: bool = False
    # With decay_norm_and_bias False: decay (and, for lars, adapt) the biases of Linear and
    # Conv layers too, excluding the normalisation parameters only; the SupCon TF code's
    # use_bias_weight_decay=True (its LARS excludes the variables named batch_normalization).
    decay_biases: bool = False
    # The decay after the warm-up, one of DECAYS: "cosine" (to final_lr_factor x peak),
    # "step" (x decay_rate at each epoch of decay_epochs) or "exponential" (x decay_rate
    # every decay_every_epochs, staircase).
    decay: str = "cosine"
    # "step": the epochs at which the learning rate is multiplied by decay_rate.
    decay_epochs: tuple[float, ...] = ()
    # "step" and "exponential": the factor of each decay.
    decay_rate: float = 0.1
    # "exponential": epochs between decays (counted from the end of the warm-up).
    decay_every_epochs: float = 1.0
    # "rmsprop": decay of the mean square of the gradient.
    rmsprop_decay: float = 0.9
    # "rmsprop": epsilon added to the mean square under the root.
    rmsprop_epsilon: float = 1e-3

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise ConfigError(
                f"optimizer.name={self.name!r} is not one of {', '.join(OPTIMIZERS)}")
        if self.lr_scaling not in LR_SCALINGS:
            raise ConfigError(
                f"optimizer.lr_scaling={self.lr_scaling!r} is not one of {', '.join(LR_SCALINGS)}"
            )
        if not float(self.base_learning_rate) > 0:
            raise ConfigError(
                f"optimizer.base_learning_rate must be positive, got {self.base_learning_rate}")
        if self.grad_clip_norm is not None and not self.grad_clip_norm > 0:
            raise ConfigError(
                f"optimizer.grad_clip_norm must be positive, got {self.grad_clip_norm}")
        warmup = self.warmup_steps if self.warmup_steps is not None else self.warmup_epochs
        if warmup < 0:
            field = "warmup_steps" if self.warmup_steps is not None else "warmup_epochs"
            raise ConfigError(
                f"optimizer.{field}: the warm-up must be non-negative, got {warmup}")
        if self.decay not in DECAYS:
            raise ConfigError(
                f"optimizer.decay={self.decay!r} is not one of {', '.join(DECAYS)}")
        epochs = tuple(self.decay_epochs)
        if any(not isinstance(e, (int, float)) or isinstance(e, bool) or e <= 0
               for e in epochs) or list(epochs) != sorted(epochs):
            raise ConfigError(
                f"optimizer.decay_epochs={epochs!r} must be increasing positive epochs")
        if self.decay == "step" and not epochs:
            raise ConfigError("optimizer.decay='step' needs optimizer.decay_epochs, e.g. "
                              "--config.optimizer.decay_epochs='(60, 75, 90)'")
        if not 0 < float(self.decay_rate) <= 1:
            raise ConfigError(f"optimizer.decay_rate must be in (0, 1], got {self.decay_rate}")
        if not float(self.decay_every_epochs) > 0:
            raise ConfigError(
                f"optimizer.decay_every_epochs must be > 0, got {self.decay_every_epochs}")
        if not 0 <= float(self.rmsprop_decay) < 1 or not float(self.rmsprop_epsilon) > 0:
            raise ConfigError(
                f"optimizer.rmsprop_decay must be in [0, 1) and optimizer.rmsprop_epsilon > 0, "
                f"got {self.rmsprop_decay} and {self.rmsprop_epsilon}")
        if self.schedule_steps is not None and self.schedule_steps <= 0:
            raise ConfigError(
                "optimizer.schedule_steps: the schedule must have at least one step, got "
                f"{self.schedule_steps}")
        check_domains(self, OPTIMIZER_DOMAINS, "config.optimizer")


#: The domain of each numeric field of :class:`OptimizerSpec` (None: unset, where allowed).
OPTIMIZER_DOMAINS = {
    "base_learning_rate": "> 0", "weight_decay": ">= 0", "momentum": "[0, 1)",
    "trust_coefficient": "> 0", "warmup_epochs": ">= 0", "warmup_steps": "int >= 0",
    "warmup_init": ">= 0", "final_lr_factor": "[0, 1]", "schedule_epochs": "> 0",
    "schedule_steps": "int >= 1", "grad_clip_norm": "> 0", "decay_epochs": "> 0",
    "decay_rate": "(0, 1]", "decay_every_epochs": "> 0", "rmsprop_decay": "[0, 1)",
    "rmsprop_epsilon": "> 0",
}


#: Every optimiser field and its default (those of :class:`OptimizerSpec`, as a dict).
OPTIMIZER_DEFAULTS = dataclasses.asdict(OptimizerSpec())


def default_optimizer_config():
    """``config.optimizer`` with the defaults of :class:`OptimizerSpec`."""
    import ml_collections  # the config layer's library; the optimiser itself needs none

    return ml_collections.ConfigDict(section_fields(OptimizerSpec))


def resolve(config: Any) -> OptimizerSpec:
    """An :class:`OptimizerSpec` of an optimiser config (an ``OptimizerSpec``, a
    ``ConfigDict``, a namespace or a mapping of some fields; the others take their defaults).

    Raises:
      ConfigError: a field that :class:`OptimizerSpec` does not declare (naming the nearest
        one, or the new name of a renamed one), or a bad value (naming the field).
    """
    if isinstance(config, OptimizerSpec):
        return config
    fields = vars(config) if isinstance(config, SimpleNamespace) else dict(config.items())
    for name, new in (("epochs", "schedule_epochs"), ("total_steps", "schedule_steps")):
        if name in fields:
            raise ConfigError(f"config.optimizer.{name} was renamed to config.optimizer.{new}; "
                              "set that field instead")
    check_fields("config.optimizer", fields, OPTIMIZER_DEFAULTS)
    return OptimizerSpec(**fields)


def decay_mask(params: Any) -> Any:
    """The bias/normalisation exclusion mask: ``True`` for parameters with ``ndim > 1``.

    Args:
      params: a pytree of arrays, e.g. the ``nnx.Param`` state of ``nnx.split``.

    Returns:
      A pytree of the same structure with boolean leaves: ``True`` (decay and adapt) for kernels
      and embeddings, ``False`` for biases and BatchNorm/LayerNorm scales and offsets.
    """
    return jax.tree.map(lambda p: jnp.ndim(p) > 1, params)


def norm_mask(params: Any) -> Any:
    """The normalisation exclusion mask: ``False`` for the parameters of BatchNorm and
    LayerNorm layers, ``True`` for every other parameter (kernels and biases alike).

    A normalisation layer is recognised by its ``scale`` parameter (Flax's BatchNorm and
    LayerNorm name theirs ``scale`` and ``bias``; Linear and Conv layers ``kernel`` and
    ``bias``): a leaf is excluded when it or a sibling is named ``scale``.

    Args:
      params: a pytree of arrays keyed by names, e.g. the ``nnx.Param`` state of ``nnx.split``.

    Returns:
      A pytree of the same structure with boolean leaves.
    """
    paths = [tuple(_key(k) for k in path)
             for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    norm_layers = {_layer(path) for path in paths if "scale" in path[-2:]}
    return jax.tree_util.tree_map_with_path(
        lambda path, _: _layer(tuple(_key(k) for k in path)) not in norm_layers, params)


def _key(key: Any) -> Any:
    for attribute in ("key", "name", "idx"):
        if hasattr(key, attribute):
            return getattr(key, attribute)
    return key


def _layer(path: tuple) -> tuple:
    """The layer of a parameter's path: the path without the parameter's name (and without
    the ``value`` attribute of an ``nnx.Param`` leaf)."""
    if path and path[-1] == "value":
        path = path[:-1]
    return path[:-1]


def peak_learning_rate(config: Any, global_batch_size: int) -> float:
    """``config.base_learning_rate`` scaled by the global batch size per ``config.lr_scaling``."""
    config = resolve(config)
    base = float(config.base_learning_rate)
    if global_batch_size <= 0:
        raise ValueError(f"global_batch_size must be positive, got {global_batch_size}")
    if config.lr_scaling == "linear":
        return base * global_batch_size / 256
    if config.lr_scaling == "sqrt":
        return base * math.sqrt(global_batch_size)
    return base  # "none"


def make_schedule(
    config: Any,
    *,
    steps_per_epoch: int,
    global_batch_size: int,
    total_steps: int | None = None,
) -> optax.Schedule:
    """Linear warm-up from ``warmup_init`` to the scaled peak, then cosine decay.

    The decay reaches ``final_lr_factor * peak`` at the last step and stays there. The schedule
    length is ``config.schedule_steps``, else ``config.schedule_epochs * steps_per_epoch``, else the
    ``total_steps`` argument (the trainer's run length). A warm-up that does not fit (a run of a
    few steps with a recipe's warm-up) is clamped to ``length - 1`` steps with a warning.

    Args:
      config: an optimiser config (a ``ConfigDict`` or a mapping of some fields of
        :class:`OptimizerSpec`; missing fields take their defaults).
      steps_per_epoch: optimiser steps per epoch (converts epochs to steps).
      global_batch_size: images per step over all devices (scales the learning rate).
      total_steps: the run length, used when the config sets neither total_steps nor epochs.

    Returns:
      A function from the step count to the learning rate.
    """
    config = resolve(config)
    if steps_per_epoch <= 0:
        raise ValueError(f"steps_per_epoch must be positive, got {steps_per_epoch}")
    peak = peak_learning_rate(config, global_batch_size)
    if config.schedule_steps is not None:
        length = int(config.schedule_steps)
    elif config.schedule_epochs is not None:
        length = round(config.schedule_epochs * steps_per_epoch)
    elif total_steps is not None:
        length = total_steps
    else:
        raise ConfigError(
            "set optimizer.schedule_steps, optimizer.schedule_epochs or pass total_steps")
    if config.warmup_steps is not None:
        warmup = int(config.warmup_steps)
    else:
        warmup = round(config.warmup_epochs * steps_per_epoch)
    if length <= 0:
        raise ConfigError(f"the schedule must have at least one step, got {length}")
    if warmup >= length:
        # A smoke test of a few steps with a recipe's warm-up: warm up over all but the last step.
        logger.warning(
            "the warm-up (%d steps) is not shorter than the schedule (%d steps); "
            "clamped to %d steps", warmup, length, length - 1,
        )
        warmup = length - 1
    if config.decay == "cosine":
        return optax.warmup_cosine_decay_schedule(
            init_value=float(config.warmup_init),
            peak_value=peak,
            warmup_steps=warmup,
            decay_steps=length,
            end_value=float(config.final_lr_factor) * peak,
        )
    if config.decay == "step":
        decayed = step_decay(peak, [round(e * steps_per_epoch) for e in config.decay_epochs],
                             float(config.decay_rate))
    else:
        decayed = exponential_decay(peak, float(config.decay_every_epochs) * steps_per_epoch,
                                    float(config.decay_rate), start=warmup)
    if not warmup:
        return decayed
    ramp = optax.linear_schedule(float(config.warmup_init), peak, warmup)
    return lambda count: jnp.where(count < warmup, ramp(count), decayed(count))


def step_decay(peak: float, boundaries: list[int], rate: float) -> optax.Schedule:
    """``peak * rate ** (number of boundaries <= step)``: the learning rate multiplied by
    ``rate`` at each of the 0-based steps ``boundaries`` (``optax.piecewise_constant_schedule``;
    a boundary given twice decays twice).

    HobbitLong/SupContrast ``util.py`` ``adjust_learning_rate`` (not ``--cosine``):
    ``lr * lr_decay_rate ** sum(epoch > lr_decay_epochs)`` with 1-based epochs, i.e. the
    decays take effect from the 0-based epochs 60, 75 and 90 of ``lr_decay_epochs='60,75,90'``.
    """
    scales: dict[int, float] = {}
    for boundary in boundaries:
        scales[boundary] = scales.get(boundary, 1.0) * rate
    return optax.piecewise_constant_schedule(peak, scales)


def exponential_decay(peak: float, steps_per_decay: float, rate: float, *,
                      start: int = 0) -> optax.Schedule:
    """``peak * rate ** floor((step - start) / steps_per_decay)`` (staircase): TF's
    ``tf.train.exponential_decay(..., staircase=True)`` counted from ``start`` (the end of
    the warm-up), as google-research ``supcon/utils.py`` ``exponential_decay`` inside
    ``build_learning_rate_schedule`` (``decay_steps = steps_per_epoch * epochs_per_decay``,
    a float, which ``optax.exponential_decay`` divides by as TF does)."""
    return optax.exponential_decay(
        peak, steps_per_decay, rate,
        transition_begin=start, staircase=True)


def make_optimizer(
    config: Any,
    params: Any,
    *,
    steps_per_epoch: int,
    global_batch_size: int,
    total_steps: int | None = None,
) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """The optimiser named by ``config.name`` with the schedule of :func:`make_schedule`.

    * ``"lars"``: ``optax.lars`` (weight decay added to the gradient, trust ratio
      ``eta |w| / |g + wd w|``, learning rate, then the momentum trace), with :func:`decay_mask`
      as both the weight-decay and the trust-ratio mask;
    * ``"sgd"``: weight decay added to the gradient (masked), then momentum SGD;
    * ``"adamw"``: AdamW with the mask for its decoupled weight decay.

    ``config.decay_norm_and_bias=True`` drops the mask (every parameter is decayed and, for LARS,
    adapted); ``config.decay_biases=True`` replaces it by :func:`norm_mask` (only the
    normalisation parameters are excluded). With ``config.grad_clip_norm`` set, gradients are first clipped to that global norm.

    Args:
      config: an optimiser config (a ``ConfigDict`` or a mapping of some fields of
        :class:`OptimizerSpec`; missing fields take their defaults).
      params: the parameters to optimise (an ``nnx.State`` or any pytree of arrays); checked to
        be non-empty, the optimiser state is made by ``tx.init(params)``.
      steps_per_epoch: optimiser steps per epoch.
      global_batch_size: images per step over all devices.
      total_steps: the run length, see :func:`make_schedule`.

    Returns:
      ``(tx, schedule)``: the gradient transformation and its learning-rate schedule.
    """
    config = resolve(config)
    if not jax.tree.leaves(params):
        raise ValueError("params has no leaves: nothing to optimise")
    schedule = make_schedule(
        config,
        steps_per_epoch=steps_per_epoch,
        global_batch_size=global_batch_size,
        total_steps=total_steps,
    )
    mask = (True if config.decay_norm_and_bias
            else norm_mask if config.decay_biases else decay_mask)
    if config.name == "lars":
        tx = optax.lars(
            schedule,
            weight_decay=config.weight_decay,
            weight_decay_mask=mask,
            trust_coefficient=config.trust_coefficient,
            trust_ratio_mask=mask,
            momentum=config.momentum,
            nesterov=config.nesterov,
        )
    elif config.name == "sgd":
        tx = optax.chain(
            optax.add_decayed_weights(config.weight_decay, mask=mask),
            optax.sgd(schedule, momentum=config.momentum, nesterov=config.nesterov),
        )
    elif config.name == "rmsprop":
        # TF1 RMSPropOptimizer (google-research supcon/utils.py build_optimizer): the mean
        # square starts at 1, eps inside the root, the learning rate applied before momentum.
        tx = optax.chain(
            optax.add_decayed_weights(config.weight_decay, mask=mask),
            optax.rmsprop(schedule, decay=config.rmsprop_decay, eps=config.rmsprop_epsilon,
                          initial_scale=1.0, eps_in_sqrt=True, momentum=config.momentum),
        )
    else:
        tx = optax.adamw(schedule, weight_decay=config.weight_decay, mask=mask)
    if config.grad_clip_norm is not None:
        tx = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), tx)
    return tx, schedule
