"""One small batch per registered loss, for the tests that run every loss the same way.

:func:`case` gives ``(loss taking (first, second), first, second, valid)`` with N = 16
rows, two of them padding; :func:`loss_kwargs` its hyperparameters, dense
(``block_size=None``) or streamed (:data:`STREAMED` rows a block, which divides no
layout's rows, so every layout has a padded last block).
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np

from contrastive_jax import losses

N, D, K = 16, 4, 4
#: A block of 3 anchor rows: streamed, with a padded last block on every layout.
STREAMED = 3
#: Hyperparameters per loss (tau = 0.5 keeps the ProjNCE-type R term well inside float32).
HPARAMS = {
    "soft_supcon": {"distance": "cosine", "bandwidth": 1.5},  # the fused Gram path (nw_gram)
    "soft_nce": {"bandwidth": 1.5},
    "med_nce": {"median_mode": "average"},
    "mio": {"l2_weight": 1.0},
}


def _without_second(loss_fn):
    @functools.wraps(loss_fn)
    def call(first, second, **kwargs):
        del second
        return loss_fn(first, **kwargs)

    return call


def case(name: str):
    """``(loss taking (first, second), first, second, valid)`` for the loss ``name``."""
    rng = np.random.default_rng(sum(map(ord, name)))
    kind = losses.second_argument(name)
    logits = losses.first_argument(name) == "logits"
    first = jnp.asarray(rng.normal(size=(N, K if logits else D)), jnp.float32)
    labels = np.repeat(np.arange(N // 4), 4)[rng.permutation(N)]
    second = {
        "instance": jnp.asarray(labels, jnp.int32),
        "label": jnp.asarray(labels, jnp.int32),
        "metadata": jnp.asarray(rng.normal(size=(N,)), jnp.float32),
        "paired_embeddings": jnp.asarray(rng.normal(size=(N, D)), jnp.float32),
        "soft_targets": jax.nn.softmax(jnp.asarray(rng.normal(size=(N, K)), jnp.float32) * 3),
        None: jnp.zeros((N,), jnp.int32),
    }[kind]
    valid = jnp.asarray(np.arange(N) % 7 != 3)  # two padded rows
    loss_fn = losses.get(name)
    return (loss_fn if kind is not None else _without_second(loss_fn)), first, second, valid


def streams(name: str) -> bool:
    """Whether the loss has a streamed form (a ``block_size`` argument)."""
    return "block_size" in inspect.signature(losses.get(name)).parameters


def loss_kwargs(name: str, block_size: int | None) -> dict:
    """The hyperparameters of :func:`case`'s call: tau = 0.5, :data:`HPARAMS`, and
    ``block_size`` where the loss streams."""
    parameters = inspect.signature(losses.get(name)).parameters
    kwargs = {"temperature": 0.5} if "temperature" in parameters else {}
    kwargs.update(HPARAMS.get(name, {}))
    if streams(name):
        kwargs["block_size"] = block_size
    return kwargs
