"""Contrastive losses as pure JAX functions.

    from contrastive_jax import losses
    loss = losses.sincere(embeddings, labels, temperature=0.1)
    fn = losses.get("sincere")              # the same function, by name (e.g. from a config)
    losses.second_argument("sincere")       # "label": what its second argument is

Embedding losses take ``(embeddings [N, D], second, *, hparams, axis_name=None,
valid=None)`` and return the mean over valid anchors of the global batch (the
contract is described in ``docs/conventions.md``). ``second`` is one of
:data:`SECOND_ARGUMENTS`: instance ids (``nt_xent``), class labels (SupCon,
SINCERE, the ProjNCE family, MIO), continuous metadata (the y-Aware family) or the
other tower's embeddings (the two-tower losses ``clip`` and ``siglip``, whose row i of
each tower is one pair); ``global_uniformity`` takes none. The soft-target losses take class scores
``logits [B, K]`` and soft ``targets [B, K]`` instead.

This package needs only the core install (jax, chex, numpy).
"""

from __future__ import annotations

from collections.abc import Callable

from contrastive_jax.losses._kernel import (
    conditional_alignment,
    conditional_uniformity,
    global_uniformity,
    y_aware_infonce,
)
from contrastive_jax.losses._mio import mio
from contrastive_jax.losses._nce import nt_xent, sincere, supcon
from contrastive_jax.losses._projnce import med_nce, med_supcon, projnce, soft_nce, soft_supcon
from contrastive_jax.losses._soft_target import soft_target_cross_entropy, soft_target_infonce
from contrastive_jax.losses._two_tower import clip, siglip

#: What a loss's second positional argument is, by kind:
#:
#: * ``"instance"``: int [N] instance ids; the views of one image share an id (SimCLR).
#: * ``"label"``: int [N] class labels.
#: * ``"metadata"``: float [N] or [N, P] continuous metadata (the y-Aware family's kernel).
#: * ``"soft_targets"``: float [B, K] target distributions; the first argument is then class
#:   scores ``logits [B, K]``, not embeddings.
#: * ``"paired_embeddings"``: float [N, D] the other tower of a two-tower model (CLIP,
#:   SigLIP): the first argument is ``image_embeddings [N, D]``, the second
#:   ``text_embeddings [N, D]``, and row i of each is one positive pair.
#: * ``None``: no second argument (``global_uniformity``).
SECOND_ARGUMENTS = ("instance", "label", "metadata", "paired_embeddings", "soft_targets", None)

_REGISTRY: dict[str, tuple[Callable, str | None]] = {
    fn.__name__: (fn, second)
    for fn, second in (
        (nt_xent, "instance"),
        (supcon, "label"),
        (sincere, "label"),
        (projnce, "label"),
        (soft_supcon, "label"),
        (soft_nce, "label"),
        (med_supcon, "label"),
        (med_nce, "label"),
        (mio, "label"),
        (y_aware_infonce, "metadata"),
        (conditional_alignment, "metadata"),
        (conditional_uniformity, "metadata"),
        (global_uniformity, None),
        (soft_target_infonce, "soft_targets"),
        (soft_target_cross_entropy, "soft_targets"),
        (clip, "paired_embeddings"),
        (siglip, "paired_embeddings"),
    )
}


def _entry(name: str) -> tuple[Callable, str | None]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; choose from {sorted(_REGISTRY)}") from None


def get(name: str) -> Callable:
    """The loss function registered under ``name`` (e.g. from a config string).

    Raises:
      ValueError: no loss is registered under ``name``; the message lists the names.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
      >>> loss = losses.get("sincere")(z, jnp.array([0, 0, 1, 1]), temperature=0.5)
      >>> print(f"{float(loss):.4f}")
      0.2965
    """
    return _entry(name)[0]


def second_argument(name: str) -> str | None:
    """The kind of second argument of the loss ``name``, one of :data:`SECOND_ARGUMENTS`.

    Raises:
      ValueError: no loss is registered under ``name``.

    Examples:
      >>> from contrastive_jax import losses
      >>> losses.second_argument("nt_xent"), losses.second_argument("y_aware_infonce")
      ('instance', 'metadata')
      >>> print(losses.second_argument("global_uniformity"))
      None
    """
    return _entry(name)[1]


def names() -> list[str]:
    """All registered loss names, sorted."""
    return sorted(_REGISTRY)


def embedding_losses() -> list[str]:
    """The registered losses whose first argument is embeddings [N, D], sorted.

    These are the losses a pretraining objective can use; the others take class scores.
    """
    return sorted(name for name, (_, second) in _REGISTRY.items() if second != "soft_targets")


__all__ = [
    "SECOND_ARGUMENTS",
    "embedding_losses",
    "get",
    "names",
    "second_argument",
    *sorted(_REGISTRY),
]
