"""Contrastive losses as pure JAX functions (see ``_core`` for the contract).

    from contrastive_jax import losses
    loss = losses.sincere(embeddings, labels, temperature=0.1)
    fn = losses.get("sincere")

Embedding losses take ``(embeddings [N, D], second, *, hparams, axis_name=None,
valid=None)``; ``second`` is instance ids (``nt_xent``), class labels (SupCon,
SINCERE, the ProjNCE family, MIO) or continuous metadata (the y-Aware family);
``global_uniformity`` takes none. The soft-target losses take class scores
``logits [B, K]`` and soft ``targets [B, K]``.
"""

from __future__ import annotations

from collections.abc import Callable

from contrastive_jax.losses.kernel import (
    conditional_alignment,
    conditional_uniformity,
    global_uniformity,
    y_aware_infonce,
)
from contrastive_jax.losses.mio import mio
from contrastive_jax.losses.nce import nt_xent, sincere, supcon
from contrastive_jax.losses.projnce import med_nce, med_supcon, projnce, soft_nce, soft_supcon
from contrastive_jax.losses.soft_target import soft_target_cross_entropy, soft_target_infonce

_REGISTRY: dict[str, Callable] = {
    fn.__name__: fn
    for fn in (
        nt_xent,
        supcon,
        sincere,
        projnce,
        soft_supcon,
        soft_nce,
        med_supcon,
        med_nce,
        y_aware_infonce,
        conditional_alignment,
        conditional_uniformity,
        global_uniformity,
        mio,
        soft_target_infonce,
        soft_target_cross_entropy,
    )
}


def get(name: str) -> Callable:
    """The loss function registered under ``name`` (e.g. from a config string)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; choose from {sorted(_REGISTRY)}") from None


def names() -> list[str]:
    """All registered loss names."""
    return sorted(_REGISTRY)


__all__ = ["get", "names", *sorted(_REGISTRY)]
