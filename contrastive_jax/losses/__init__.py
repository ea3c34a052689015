"""Contrastive losses as pure JAX functions.

    from contrastive_jax import losses
    loss = losses.sincere(embeddings, labels, temperature=0.1)
    fn = losses.get("sincere")              # the same function, by name (e.g. from a config)
    losses.second_argument("sincere")       # "label": what its second argument is

Every loss and regulariser is registered here, once, with the kinds of its arguments.
Embedding losses take ``(embeddings [N, D], second, *, hparams, axis_name=None,
valid=None)`` and return the mean over valid anchors of the global batch (the
contract is described in ``docs/conventions.md``). ``second`` is one of
:data:`SECOND_ARGUMENTS`: instance ids (``nt_xent``, ``align_uniform``), class labels
(SupCon, SINCERE, the ProjNCE family, MIO), continuous metadata (the y-Aware family)
or the other tower's embeddings (the two-tower losses ``clip`` and ``siglip``, whose row i
of each tower is one pair);
``global_uniformity`` takes none. The losses on class scores (:data:`FIRST_ARGUMENTS`
``"logits"``) take ``logits [B, K]`` and soft ``targets [B, K]`` (the soft-target losses)
or class labels (``label_cross_entropy``, ``label_soft_target_infonce``) instead.

Besides the registered losses, the package exports the pieces other parts of the library
build on: :func:`smooth_labels` (the targets of the train step's MixUp/CutMix stage) and the
batch metrics :func:`alignment`, :func:`alignment_from_labels` and :func:`uniformity` (also
in :mod:`contrastive_jax.metrics`). Its one public module, :mod:`.blockwise`, is the memory-lean
streamed path and its block-size policy (:data:`.blockwise.BLOCKWISE_THRESHOLD`,
:data:`.blockwise.BLOCK_RULES`, :func:`.blockwise.choose_block`); the other modules are private.

This package needs only the core install (jax, numpy and scipy; the losses
themselves import only jax and numpy).
"""

from __future__ import annotations

from collections.abc import Callable

from contrastive_jax.losses._align_uniform import (
    align_uniform,
    alignment,
    alignment_from_labels,
    uniformity,
)
from contrastive_jax.losses._kernel import (
    conditional_alignment,
    conditional_uniformity,
    global_uniformity,
    y_aware_infonce,
)
from contrastive_jax.losses._mio import mio
from contrastive_jax.losses._nce import nt_xent, sincere, supcon
from contrastive_jax.losses._projnce import med_nce, med_supcon, projnce, soft_nce, soft_supcon
from contrastive_jax.losses._soft_target import (
    label_cross_entropy,
    label_soft_target_infonce,
    smooth_labels,
    soft_target_cross_entropy,
    soft_target_infonce,
)
from contrastive_jax.losses._two_tower import clip, siglip

#: What a loss's first positional argument is: ``"embeddings"`` float [N, D] (rows
#: normalised inside) or ``"logits"`` float [B, K] class scores.
FIRST_ARGUMENTS = ("embeddings", "logits")

#: What a loss's second positional argument is, by kind:
#:
#: * ``"instance"``: int [N] instance ids; the views of one image share an id (SimCLR).
#: * ``"label"``: int [N] class labels (int [B] for the losses on class scores, which also
#:   take soft targets float [B, K] in their place).
#: * ``"metadata"``: float [N] or [N, P] continuous metadata (the y-Aware family's kernel).
#: * ``"soft_targets"``: float [B, K] target distributions; the first argument is then class
#:   scores ``logits [B, K]``, not embeddings.
#: * ``"paired_embeddings"``: float [N, D] the other tower of a two-tower model (CLIP,
#:   SigLIP): the first argument is ``image_embeddings [N, D]``, the second
#:   ``text_embeddings [N, D]``, and row i of each is one positive pair.
#: * ``None``: no second argument (``global_uniformity``).
SECOND_ARGUMENTS = ("instance", "label", "metadata", "paired_embeddings", "soft_targets", None)

_REGISTRY: dict[str, tuple[Callable, str, str | None]] = {
    fn.__name__: (fn, first, second)
    for fn, first, second in (
        (nt_xent, "embeddings", "instance"),
        (supcon, "embeddings", "label"),
        (sincere, "embeddings", "label"),
        (projnce, "embeddings", "label"),
        (soft_supcon, "embeddings", "label"),
        (soft_nce, "embeddings", "label"),
        (med_supcon, "embeddings", "label"),
        (med_nce, "embeddings", "label"),
        (mio, "embeddings", "label"),
        (y_aware_infonce, "embeddings", "metadata"),
        (conditional_alignment, "embeddings", "metadata"),
        (conditional_uniformity, "embeddings", "metadata"),
        (global_uniformity, "embeddings", None),
        (align_uniform, "embeddings", "instance"),
        (soft_target_infonce, "logits", "soft_targets"),
        (soft_target_cross_entropy, "logits", "soft_targets"),
        (label_cross_entropy, "logits", "label"),
        (label_soft_target_infonce, "logits", "label"),
        (clip, "embeddings", "paired_embeddings"),
        (siglip, "embeddings", "paired_embeddings"),
    )
}


def _entry(name: str) -> tuple[Callable, str, str | None]:
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
    return _entry(name)[2]


def first_argument(name: str) -> str:
    """The kind of first argument of the loss ``name``, one of :data:`FIRST_ARGUMENTS`.

    Raises:
      ValueError: no loss is registered under ``name``.

    Examples:
      >>> from contrastive_jax import losses
      >>> losses.first_argument("supcon"), losses.first_argument("label_cross_entropy")
      ('embeddings', 'logits')
    """
    return _entry(name)[1]


def names() -> list[str]:
    """All registered loss names, sorted."""
    return sorted(_REGISTRY)


def embedding_losses() -> list[str]:
    """The registered losses whose first argument is embeddings [N, D], sorted.

    The others take class scores [B, K] (:func:`first_argument` ``"logits"``).
    """
    return sorted(name for name, (_, first, _) in _REGISTRY.items() if first == "embeddings")


__all__ = [
    "FIRST_ARGUMENTS",
    "SECOND_ARGUMENTS",
    "alignment",
    "alignment_from_labels",
    "embedding_losses",
    "first_argument",
    "get",
    "names",
    "second_argument",
    "smooth_labels",
    "uniformity",
    *sorted(_REGISTRY),
]
