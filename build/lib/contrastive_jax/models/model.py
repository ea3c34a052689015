"""Encoder + projection head, the module the trainer optimises."""

from __future__ import annotations

import jax
from flax import nnx


class ContrastiveModel(nnx.Module):
    """An encoder followed by a head.

    ``__call__``: x [B, H, W, C] -> (features [B, F], projections [B, D]); the
    features feed linear evaluation, the projections the contrastive loss.

    Args:
      encoder: a module mapping images to [B, F] and exposing ``num_features`` = F.
      head: a module mapping [B, F] to [B, D].
    """

    def __init__(self, encoder: nnx.Module, head: nnx.Module):
        self.encoder = encoder
        self.head = head

    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        features = self.encoder(x)
        return features, self.head(features)
