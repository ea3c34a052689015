"""Contrastive losses as pure JAX functions (see ``_core`` for the contract).

    from contrastive_jax import losses
    loss = losses.sincere(embeddings, labels, temperature=0.1)
    fn = losses.get("sincere")
"""

from __future__ import annotations

from collections.abc import Callable

from contrastive_jax.losses.nce import nt_xent, sincere, supcon

_REGISTRY: dict[str, Callable] = {
    "nt_xent": nt_xent,
    "supcon": supcon,
    "sincere": sincere,
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


__all__ = ["get", "names", "nt_xent", "sincere", "supcon"]
