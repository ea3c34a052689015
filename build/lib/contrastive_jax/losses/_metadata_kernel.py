"""The RBF kernel on metadata and the weights the y-Aware family builds from it.

``w_ab = exp(-||y_a - y_b||² / (2 sigma²))`` (no prefactor, so ``||w||_inf = 1``), in the
notation of :mod:`contrastive_jax.losses._kernel`: checking the metadata
(:func:`check_metadata`), the squared distances, the soft targets ``P`` of y-Aware InfoNCE
and conditional alignment (:func:`kernel_targets`, Eq. 1) and the repulsion weights ``Q``
of conditional uniformity (:func:`conditional_uniformity_weights`, Eq. 4). Used by the
dense losses and by their streamed form (:mod:`contrastive_jax.losses._kernel_streamed`)
alike.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from contrastive_jax.losses import _core

Array = jax.Array

#: Rows of conditional uniformity with ``1 - Ẑ_i`` below this are dropped (their
#: weights ``(1 - w_ij) / (1 - Ẑ_i)`` would divide by about zero).
UNIFORMITY_EPS = 1e-6


def check_metadata(metadata: Array, n: int, name: str = "metadata") -> Array:
    """Checks float metadata [n] or [n, p] and returns it as float32 [n, p]."""
    if not hasattr(metadata, "ndim") or not hasattr(metadata, "dtype"):
        raise ValueError(
            f"`{name}` must be a float array of shape [N] or [N, p], got {type(metadata)!r}"
        )
    if metadata.ndim not in (1, 2):
        raise ValueError(
            f"`{name}` must have shape [N] or [N, p] (rank 1 or 2), "
            f"got shape {tuple(metadata.shape)}"
        )
    if metadata.shape[0] != n:
        raise ValueError(
            f"`{name}` has {metadata.shape[0]} rows but `embeddings` has {n}; they must match"
        )
    if not jnp.issubdtype(metadata.dtype, jnp.floating):
        raise ValueError(f"`{name}` must be a floating-point array, got dtype {metadata.dtype}")
    if metadata.ndim == 2 and metadata.shape[1] < 1:
        raise ValueError(f"`{name}` must be non-empty, got shape {tuple(metadata.shape)}")
    return metadata.reshape(n, -1).astype(jnp.float32)


def squared_distances(anchor_metadata: Array, candidate_metadata: Array) -> Array:
    """``||y_a - y_b||²`` from the differences, exactly 0 for equal rows.

    Shapes: [n, p] x [m, p] -> [n, m].
    """
    diff = anchor_metadata[:, None, :] - candidate_metadata[None, :, :]
    return jnp.sum(jnp.square(diff), axis=-1)


def _scaled(sq_dist: Array, sigma: float | Array) -> Array:
    """``d² / (2 sigma²)``, divided in two steps so a tiny sigma overflows to inf, never NaN."""
    sigma = jnp.asarray(sigma, jnp.float32)
    return 0.5 * (sq_dist / sigma) / sigma


def kernel_targets(sq_dist: Array, others: Array, sigma: float | Array) -> Array:
    """Soft targets ``P_ab = softmax_{b in O(a)}(-d²_ab / (2 sigma²))`` (Eq. 1's weights): [n, m].

    The row's smallest distance is subtracted before scaling, so the nearest
    other row has log-weight exactly 0 and the rest at most 0 (clamped at
    -BIG): no overflow for any sigma > 0. Rows sum to 1 over ``others``; rows
    without others and entries outside ``others`` are 0.

    Args:
      sq_dist: float32 [n, m], ``||y_a - y_b||²``.
      others: bool [n, m], ``O(a)``.
      sigma: RBF bandwidth > 0.
    """
    nearest = jnp.min(jnp.where(others, sq_dist, jnp.inf), axis=1, keepdims=True)
    nearest = jnp.where(jnp.isfinite(nearest), nearest, 0.0)
    log_w = -jnp.minimum(_scaled(sq_dist - nearest, sigma), _core.BIG)
    targets = jax.nn.softmax(jnp.where(others, log_w, -_core.BIG), axis=1)
    return jnp.where(others, targets, 0.0)


def conditional_uniformity_weights(
    sq_dist: Array, anchor_valid: Array, candidate_valid: Array, sigma: float | Array
) -> tuple[Array, Array]:
    """Repulsion weights ``Q_ij = (1 - w_ij) / (1 - Ẑ_i)`` of conditional uniformity (Eq. 4).

    ``Ẑ_i = (1/M) sum_j w_ij`` over the M valid rows of the batch, j = i included
    (``docs/losses.md``), so ``sum_j Q_ij = M`` on every kept row. ``1 - w`` is
    ``-expm1(-d²/(2 sigma²))`` and ``1 - Ẑ_i`` is the mean of those, so neither
    loses precision when w is close to 1. Rows with ``1 - Ẑ_i < UNIFORMITY_EPS``
    (every valid row within ~sigma of y_i, e.g. all metadata equal) and padded
    rows or columns get weight 0. ``Q_ii = 0``, and ``Q_ij = 0`` whenever
    ``y_i = y_j`` (a row's other view).

    Args:
      sq_dist: float32 [n, m], ``||y_i - y_j||²``, anchors i against all rows j.
      anchor_valid: bool [n].
      candidate_valid: bool [m].
      sigma: RBF bandwidth > 0.

    Returns:
      ``(Q, kept)``: float32 [n, m] weights and bool [n] rows with ``Q_i. != 0``.
    """
    one_minus_w = -jnp.expm1(-jnp.minimum(_scaled(sq_dist, sigma), _core.BIG))
    one_minus_w = jnp.where(candidate_valid[None, :], one_minus_w, 0.0)
    num_valid = jnp.sum(candidate_valid.astype(jnp.float32))
    one_minus_z = jnp.sum(one_minus_w, axis=1) / jnp.maximum(num_valid, 1.0)
    kept = anchor_valid & (one_minus_z >= UNIFORMITY_EPS)
    weights = one_minus_w / jnp.where(kept, one_minus_z, 1.0)[:, None]
    return jnp.where(kept[:, None], weights, 0.0), kept
