"""Dense references the tests compare the losses' internals with (not used by the library)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from contrastive_jax.losses import _core
from contrastive_jax.losses._projection import LabelledBatch

Array = jax.Array


def squared_scaled_distance(z: Array, distance: str, bandwidth: float | Array) -> Array:
    """``t_jl² = (d(z_j, z_l) / h)²`` for unit rows z [m, D] -> [m, m] (dense reference).

    ``l1``: ``sum |u - v|`` (subgradient 0 at u = v). ``l2``: the kernel needs
    ``d² = sum (u - v)²`` only, so no square root (whose gradient is NaN at 0) is
    taken. Both are formed from the differences, so they are exactly 0 on the
    diagonal and for duplicated rows (O(m² D) memory). ``cosine``:
    ``1/2 - 1/2 u.v`` (rows are already unit norm).
    """
    h = jnp.asarray(bandwidth, jnp.float32)
    if distance == "cosine":
        gram = jnp.matmul(z, z.T, precision=jax.lax.Precision.HIGHEST)
        return jnp.square((0.5 - 0.5 * gram) / h)
    diff = z[:, None, :] - z[None, :, :]
    if distance == "l1":
        return jnp.square(jnp.sum(jnp.abs(diff), axis=-1) / h)
    return jnp.sum(jnp.square(diff), axis=-1) / jnp.square(h)


def nw_soft_labels(
    lb: LabelledBatch, bandwidth: float | Array, distance: str
) -> Array:
    """Nadaraya–Watson soft labels, Eq. (17): float32 [m, m] (rows j, class indices c).

    Dense reference (O(m² D) memory for ``l1``) for tests; the losses use the
    blockwise :func:`nw_projection`.

    ``NW(c; z_j) = sum_l K(t_jl) 1[c_l = c] / sum_l K(t_jl)`` with
    ``K(t) = max(0, 1 - t²)`` and the reference set D = the valid rows of the
    global batch, z_j itself included (so a valid row's denominator is >= 1).
    Padded rows get all-zero soft labels.
    """
    valid = lb.batch.candidate_valid
    t_sq = squared_scaled_distance(lb.batch.candidates, distance, bandwidth)
    weights = jnp.where(valid[None, :], jnp.maximum(1.0 - t_sq, 0.0), 0.0)
    per_class = jax.ops.segment_sum(weights.T, lb.class_ids, num_segments=weights.shape[0]).T
    soft = _core.safe_divide(per_class, jnp.sum(weights, axis=1, keepdims=True))
    return jnp.where(valid[:, None], soft, 0.0)


def nw_prototypes(soft_labels: Array, lb: LabelledBatch) -> Array:
    """NW projection, Eq. (18): ``f̂(c) = sum_j NW(c; z_j) z_j / sum_j NW(c; z_j)``, [m, D].

    ``soft_labels`` [m, m] from :func:`nw_soft_labels`; rows of absent class
    indices are 0.
    """
    numerator = jnp.matmul(
        soft_labels.T, lb.batch.candidates, precision=jax.lax.Precision.HIGHEST
    )
    return _core.safe_divide(numerator, jnp.sum(soft_labels, axis=0)[:, None])
