"""The streamed form of the y-Aware family: row-block functions for ``blockwise.stream_rows``.

Above ``blockwise.BLOCKWISE_THRESHOLD`` global rows (or with ``block_size``) the losses of
:mod:`contrastive_jax.losses._kernel` stream over blocks of anchor rows with a fused
gradient: y-Aware InfoNCE, conditional alignment and global uniformity as a sum of
per-anchor losses (:func:`streamed_loss`), conditional uniformity as one online
log-sum-exp over the blocks (:func:`conditional_uniformity_streamed`). The kernel weights
come from :mod:`contrastive_jax.losses._metadata_kernel`, as in the dense form.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from contrastive_jax.losses import _core, blockwise
from contrastive_jax.losses._metadata_kernel import (
    check_metadata,
    conditional_uniformity_weights,
    kernel_targets,
    squared_distances,
)


def _kernel_block(kind: str):
    """Row-block function of y-Aware InfoNCE (``kind="y_aware"``), conditional
    alignment (``"alignment"``) or global uniformity (``"uniformity"``) for
    :func:`blockwise.stream_rows`.

    ``(dots [b, m], (tau, sigma), (metadata [b, p], global index, valid) [b],
    (metadata [m, p], valid [m], number of valid rows))`` -> (loss of each valid
    anchor, 0 elsewhere [b]; anchor_ok bool [b]). Global uniformity ignores the
    metadata (a [.., 1] zero column).
    """

    def block_fn(dots, params, rows, cols):
        temperature, sigma = params
        metadata, index, anchor_valid = rows
        candidate_metadata, candidate_valid, num_valid = cols
        others = (index[:, None] != jnp.arange(dots.shape[1])[None, :]) & candidate_valid[
            None, :
        ]
        # |O(a)| = M - 1 for a valid anchor (its own column is a valid one).
        count = num_valid - anchor_valid.astype(jnp.float32)
        anchor_ok = anchor_valid & (count >= 1)
        logits = dots / temperature
        per_anchor = jnp.zeros_like(count)
        if kind in ("y_aware", "alignment"):
            targets = kernel_targets(
                squared_distances(metadata, candidate_metadata), others, sigma
            )
            per_anchor = per_anchor - jnp.sum(jnp.where(others, targets * logits, 0.0), axis=1)
        if kind in ("y_aware", "uniformity"):
            per_anchor = per_anchor + _core.masked_logsumexp(logits, others, axis=1) - jnp.log(
                jnp.maximum(count, 1.0)
            )
        return jnp.where(anchor_ok, per_anchor, 0.0), anchor_ok

    return block_fn


def _streamed_inputs(embeddings, metadata, temperature, sigma, valid, axis_name):
    """Checked, gathered rows and the arguments of the streamed kernel losses:
    ``(rows, params, row_data, col_data)``; ``metadata=None`` gives an integer zero
    column."""
    embeddings = _core.check_embeddings(embeddings)
    n = embeddings.shape[0]
    temperature = _core.check_positive(temperature, "temperature")
    if metadata is None:
        # An integer placeholder: not differentiated (global uniformity ignores it).
        metadata, sigma = jnp.zeros((n, 1), jnp.int32), 1.0
    else:
        metadata = jax.lax.stop_gradient(check_metadata(metadata, n))
        assert sigma is not None  # the metadata losses always pass one
        sigma = _core.check_positive(sigma, "sigma")
    rows = blockwise.gather_rows(embeddings, metadata, valid, axis_name)
    params = (
        blockwise.like_anchors(temperature, rows.anchors),
        blockwise.like_anchors(sigma, rows.anchors),
    )
    num_valid = jnp.sum(rows.candidate_valid.astype(jnp.float32))
    return (
        rows,
        params,
        (metadata, rows.index, rows.anchor_valid),
        (rows.candidate_data, rows.candidate_valid, jax.lax.stop_gradient(num_valid)),
    )


def streamed_loss(kind, embeddings, metadata, temperature, sigma, valid, axis_name, block):
    """y-Aware InfoNCE, conditional alignment or global uniformity streamed over blocks
    of ``block`` anchor rows."""
    rows, params, row_data, col_data = _streamed_inputs(
        embeddings, metadata, temperature, sigma, valid, axis_name
    )
    total, anchor_ok = blockwise.stream_rows(
        _kernel_block(kind), rows.anchors, rows.candidates, params, row_data, col_data, block
    )
    return blockwise.global_mean(total, anchor_ok, axis_name)


def _conditional_uniformity_block(dots, params, rows, cols):
    """Row-block function of conditional uniformity for
    :func:`blockwise.stream_rows_logsumexp`.

    ``r_i = log sum_j Q_ij e^{S_ij}`` for a kept row i (``-BIG`` otherwise), computed
    as ``s_i + log sum_j Q_ij e^{S_ij - s_i}`` with ``s_i`` the row's largest logit
    among ``Q_ij > 0``; aux: the kept rows, bool [b].
    """
    temperature, sigma = params
    metadata, _, anchor_valid = rows
    candidate_metadata, candidate_valid, _ = cols
    weights, kept = conditional_uniformity_weights(
        squared_distances(metadata, candidate_metadata), anchor_valid, candidate_valid, sigma
    )
    logits = dots / temperature
    positive = weights > 0
    row_max = jax.lax.stop_gradient(
        jnp.max(jnp.where(positive, logits, -_core.BIG), axis=1, keepdims=True)
    )
    scaled = jnp.sum(weights * jnp.exp(jnp.where(positive, logits - row_max, -_core.BIG)), axis=1)
    r = row_max[:, 0] + jnp.log(jnp.where(kept, scaled, 1.0))
    return jnp.where(kept, r, -_core.BIG), kept


def conditional_uniformity_streamed(
    embeddings, metadata, temperature, sigma, valid, axis_name, block
):
    """Conditional uniformity with one online log-sum-exp over blocks of anchor rows.

    ``sum_j Q_ij = M`` on every kept row, so the weight total is ``M · #kept`` and
    ``L = log sum_i e^{r_i} - log(M · #kept)``.
    """
    rows, params, row_data, col_data = _streamed_inputs(
        embeddings, metadata, temperature, sigma, valid, axis_name
    )
    lse, kept = blockwise.stream_rows_logsumexp(
        _conditional_uniformity_block, rows.anchors, rows.candidates, params, row_data,
        col_data, block,
    )
    if axis_name is not None:
        shift = jax.lax.pmax(jax.lax.stop_gradient(lse), axis_name)
        lse = shift + jnp.log(_core.differentiable_psum(jnp.exp(lse - shift), axis_name))
    num_kept = _core.psum_if(jnp.sum(kept.astype(jnp.float32)), axis_name)
    num_valid = _core.psum_if(jnp.sum(rows.anchor_valid.astype(jnp.float32)), axis_name)
    mass = num_valid * num_kept
    return jnp.where(mass > 0, lse - jnp.log(jnp.maximum(mass, 1.0)), 0.0)
