"""The pretraining objective: one loss of :mod:`contrastive_jax.losses` or a
weighted sum of several (e.g. SimCLR + SupCon "JointTraining").

Config (``config.loss``)::

    name = "sincere"              # or "nt_xent+supcon" for a sum
    weights = ()                  # one weight per term; empty = all 1.0
    temperature = None            # None: each loss's own default; a number: every term's
    kwargs = {}                   # per-term hyperparameters, e.g. {"projnce": {"beta": 1.0}}
    targets = {}                  # optional: per-term second argument, e.g. {"mio": "instance"}

A temperature in a term's ``kwargs`` wins over ``temperature``; with neither, the loss's
own default applies (MIO 0.5, the ProjNCE family 0.07, SINCERE/SupCon/NT-Xent 0.1).

Each loss is fed the second argument it is defined on, as the registry records it
(:func:`contrastive_jax.losses.second_argument`): instance ids for ``nt_xent``, class
labels for the supervised losses, metadata for the y-Aware family, nothing for
``global_uniformity``. ``config.loss.targets`` (optional) overrides it per term, e.g.
``{"mio": "instance"}`` for self-supervised MIO (the two views of an image as the
positive pair). Besides the losses, the terms of :mod:`contrastive_jax.train.terms`
(``align_uniform``) are names of ``config.loss.name``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp

from contrastive_jax import losses
from contrastive_jax.errors import ConfigError
from contrastive_jax.train import terms as extra_terms

Array = jax.Array

class Term(NamedTuple):
    name: str
    weight: float
    target: str | None
    fn: Callable[..., Array]
    kwargs: Mapping[str, object]


class Targets(NamedTuple):
    """Per-row second arguments of a flat multi-view batch (rows of this device)."""

    instance: Array  # int [n], global example index
    label: Array  # int [n]
    metadata: Array | None  # float [n, p]


def parse_terms(loss_config) -> list[Term]:
    """Reads ``config.loss`` into a list of weighted terms; raises ConfigError on bad names.

    ``config.loss.temperature`` (when not None) is passed to every term, unless the term's
    ``kwargs`` sets its own; when neither sets one the loss's own default applies.
    """
    names = [n.strip() for n in str(loss_config.name).split("+") if n.strip()]
    if not names:
        raise ConfigError("config.loss.name is empty; give a loss name such as 'sincere'")
    weights = tuple(loss_config.get("weights", ()) or ())
    if weights and len(weights) != len(names):
        raise ConfigError(
            f"config.loss.weights has {len(weights)} entries for {len(names)} terms {names}"
        )
    weights = weights or (1.0,) * len(names)
    all_kwargs = dict(loss_config.get("kwargs", {}) or {})
    unknown = set(all_kwargs) - set(names)
    if unknown:
        raise ConfigError(f"config.loss.kwargs names losses that are not terms: {sorted(unknown)}")
    temperature = loss_config.get("temperature", None)
    overrides = dict(loss_config.get("targets", {}) or {})
    unknown = set(overrides) - set(names)
    if unknown:
        raise ConfigError(f"config.loss.targets names losses that are not terms: {sorted(unknown)}")
    for name, target in overrides.items():
        if target not in Targets._fields:
            raise ConfigError(
                f"config.loss.targets.{name}={target!r} is not one of {Targets._fields}"
            )
    embedding_losses = losses.embedding_losses()
    terms = []
    for name, weight in zip(names, weights, strict=True):
        if name in extra_terms.TERMS:
            fn, target = extra_terms.TERMS[name]
            kwargs = {}  # no temperature: these terms have none
        elif name in embedding_losses:
            fn, target = losses.get(name), losses.second_argument(name)
            kwargs = {} if temperature is None else {"temperature": float(temperature)}
        else:
            raise ConfigError(
                f"config.loss.name: {name!r} is not an embedding loss for pretraining; "
                f"choose from {[*embedding_losses, *extra_terms.TERMS]}"
            )
        if name in overrides:
            if target is None:
                raise ConfigError(f"config.loss.targets.{name}: {name!r} takes no second argument")
            target = overrides[name]
        kwargs.update(dict(all_kwargs.get(name, {})))
        terms.append(Term(name, float(weight), target, fn, kwargs))
    return terms


def evaluate(
    terms: list[Term],
    projections: Array,
    targets: Targets,
    *,
    axis_name: str | None,
    valid: Array | None = None,
) -> tuple[Array, dict[str, Array]]:
    """Weighted sum of the terms on ``projections`` [n, d]; returns (total, {name: value})."""
    values = {}
    total = jnp.zeros((), jnp.float32)
    for term in terms:
        if term.target is None:
            value = term.fn(projections, axis_name=axis_name, valid=valid, **term.kwargs)
        else:
            second = getattr(targets, term.target)
            if second is None:
                raise ConfigError(
                    f"loss {term.name!r} needs per-example metadata, but the dataset has none"
                )
            value = term.fn(projections, second, axis_name=axis_name, valid=valid, **term.kwargs)
        values[term.name] = value
        total = total + term.weight * value
    return total, values
