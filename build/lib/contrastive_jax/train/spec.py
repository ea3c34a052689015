"""A run's specification: the command line's config, parsed and checked once.

``spec = parse(config)`` turns the ``ml_collections.ConfigDict`` of the command line (or of a
config file) into a frozen :class:`RunSpec` of typed sections, before anything is read or
written; :func:`contrastive_jax.train.build.build` makes a run of it, and each module
receives its own section:

* ``spec.train``: :class:`~contrastive_jax.train.config.TrainSpec`; the loop, the step's
  options, the kNN monitor;
* ``spec.loss``: :class:`~contrastive_jax.train.objective.LossSpec`, parsed into
  ``spec.terms``, the weighted loss terms the step evaluates;
* ``spec.optimizer``: :class:`~contrastive_jax.train.optim.OptimizerSpec`; the optimiser;
* ``spec.model``: :class:`~contrastive_jax.models.ModelSpec` (its ``encoder`` and ``head``:
  :mod:`contrastive_jax.models.factory`); the model;
* ``spec.transfer``: :class:`~contrastive_jax.train.transfer.TransferSpec` (``config.model``'s
  ``init_from``, ``trainable``, ``init_head_layers``); where the model starts from and what
  trains (linear evaluation, fine-tuning);
* ``spec.data``: :class:`~contrastive_jax.data.DataSpec` (:mod:`contrastive_jax.data.config`);
  the run's sizes and the input.

What :func:`parse` checks: every field is declared (a misspelt one names the nearest, a
renamed one its new name: :func:`contrastive_jax.train.config.check_config`), every value
(each section's ``__post_init__``, the loss terms), and the settings that must agree across
sections (the two-tower losses' two views). Settings that follow from others are derived
here: a ViT's input side is the data's (``model.encoder.image_size`` None and a dataset of
known side or ``data.image_size`` set). What needs the data's or the step's shapes (a
y-Aware loss on a dataset without metadata, a mixing width that is not the head's) is
checked by :func:`contrastive_jax.train.build.check_step`, which evaluates the step
abstractly; both run before the work directory is created.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections

from contrastive_jax import models
from contrastive_jax.data.config import DataSpec, data_spec
from contrastive_jax.errors import ConfigError
from contrastive_jax.models import ModelSpec
from contrastive_jax.train import objective, optim, transfer
from contrastive_jax.train.config import TrainSpec, check_config


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """A parsed, checked run: one section per module, and the config as given."""

    seed: int
    data: DataSpec
    model: ModelSpec
    transfer: transfer.TransferSpec  # config.model's init_from, trainable, init_head_layers
    loss: objective.LossSpec
    terms: tuple[objective.Term, ...]
    optimizer: optim.OptimizerSpec
    train: TrainSpec
    config: ml_collections.ConfigDict  # as given (written to the work directory)


def parse(config: ml_collections.ConfigDict) -> RunSpec:
    """The :class:`RunSpec` of a pretraining config; raises ConfigError naming the field.

    Reads nothing and writes nothing: a refused config leaves no trace.
    """
    check_config(config)
    seed = config.seed
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"config.seed must be an int, got {seed!r}")
    train = TrainSpec(**_plain(config.train))
    loss = objective.LossSpec(**_plain(config.loss))
    terms = tuple(objective.parse_terms(loss))
    optimizer = optim.resolve(config.optimizer)
    data = data_spec(config.data)
    _check_pairs(terms, data)
    return RunSpec(
        seed=seed, data=data, model=_model_spec(config.model, data),
        transfer=transfer.parse_transfer(config.model), loss=loss, terms=terms,
        optimizer=optimizer, train=train, config=config,
    )


def _plain(section: ml_collections.ConfigDict) -> dict[str, Any]:
    """A section's fields, its sub-configs as plain dicts."""
    return {k: v.to_dict() if isinstance(v, ml_collections.ConfigDict) else v
            for k, v in section.items()}


def _model_spec(model: ml_collections.ConfigDict, data: DataSpec) -> ModelSpec:
    """The model section, with a ViT's ``image_size`` derived from the data's side."""
    spec = models.model_spec({k: model[k] for k in ("encoder", "head")})
    size = data.known_image_size
    if spec.encoder.name in models.VIT_VARIANTS and spec.encoder.image_size is None and size:
        spec = dataclasses.replace(
            spec, encoder=dataclasses.replace(spec.encoder, image_size=size))
    return spec


def _check_pairs(terms: tuple[objective.Term, ...], data: DataSpec) -> None:
    """A two-tower loss pairs the two views of each example: it needs exactly two."""
    paired = [t.name for t in terms if t.target in objective.PAIRINGS]
    if paired and data.num_views != 2:
        raise ConfigError(
            f"config.data.num_views={data.num_views}, but the two-tower loss {paired[0]!r} "
            "(config.loss.name) pairs the two views of each example: set num_views=2"
        )
