"""MIO: class-balanced binary contrastive loss (Manna, Bhattacharya & Pal, "MIO: Mutual
Information Optimization using Self-Supervised Binary Contrastive Learning",
arXiv:2111.12664).

Notation (the paper's Section 3; conventions in ``docs/losses.md``): rows are L2-normalised,
``C_ab = z_a . z_b`` (cosine), ``sigma`` the logistic function. Positive pairs
are the ordered pairs (a, b), b != a, with the same label (the other view of the
image in the two-view layout); negative pairs are the ordered pairs with
different labels. Each pair is an independent logistic classification of
``C_ab / tau``: there is no softmax coupling across the batch.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from contrastive_jax.losses import _core, _docs, blockwise

Array = jax.Array


def _global_pair_mean(values: Array, pairs: Array, axis_name: str | tuple[str, ...] | None) -> Array:
    """``sum_{pairs} values / #pairs`` over the global batch; 0 when there is no pair.

    ``values`` and ``pairs`` are [n, m] (local anchors against all rows); the sum
    is differentiable under shard_map and pmap (``_core.differentiable_psum``).
    """
    total = _core.differentiable_psum(jnp.sum(jnp.where(pairs, values, 0.0)), axis_name)
    count = _core.psum_if(jnp.sum(pairs.astype(jnp.float32)), axis_name)
    return total / jnp.maximum(count, 1.0)


@_core.explicit_sharding
@_docs.shared_args
def mio(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.5,
    l2_weight: float | Array = 0.0,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
) -> Array:
    """MIO: every ordered pair is a logistic classification, same label vs different label.

    ::

      L_O = -(1/T_P) sum_{(a,b) in Pos} log sigma(C_ab / tau)
            - (1/T_N) sum_{(a,b) in Neg} log(1 - sigma(C_ab / tau))
          = mean_{Pos} softplus(-C_ab / tau) + mean_{Neg} softplus(C_ab / tau)
      loss = L_O + l2_weight * (1/D) mean_{(a,b) in Pos} ||z_a - z_b||²

    a class-balanced binary cross-entropy with logits (the official code's two
    ``BCEWithLogitsLoss`` means). T_P and T_N are the numbers of ordered
    positive and negative pairs of the global batch: T_P = 2B and
    T_N = 4B² - 4B for B images with two views (Eq. 5), where this equals
    Eq. (5)'s per-anchor form. The means run over pairs, not over anchors, with
    global counts; with uneven groups or padding that weights pairs equally.
    Pairs are taken from valid anchors only: an anchor without a positive (a
    singleton label) or a padded row contributes no pair, and padded rows are
    never candidates. With no negative pair (a single image) that term is 0;
    with no positive pair the loss is 0.

    The L2 term is the official code's ``mse_loss(ẑ¹, ẑ²)`` on normalised
    rows (the mean over the B x D elements), written over positive pairs so it
    needs only the labels; it is at most 4/D. Models (C)/(D) of the paper use
    ``l2_weight = 1``; (A)/(B) use 0 (the default). Eq. (39)'s literal sum over
    pairs of unnormalised z is B·D times larger and is not implemented.

    Args:
      embeddings: float [N, D] rows on this device (normalised inside).
      labels: int [N] instance ids (both views of an image share the id); more
        than two rows per id act as several positives.
      temperature: tau > 0 (0.5 in the paper, for positives and negatives).
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      l2_weight: lambda >= 0 of the L2 regulariser.
      {axis_name}
      {valid}
      {block_size}
        The global pair counts come from the label counts.

    Returns:
      float32 scalar, identical on every device.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> ids = jnp.array([0, 0, 1, 1])
      >>> round(float(losses.mio(z, ids, temperature=0.5)), 4)
      0.9621

    References:
      Siladitya Manna, Saumik Bhattacharya and Umapada Pal (2021). MIO: Mutual
      Information Optimization using Self-Supervised Binary Contrastive
      Learning. arXiv:2111.12664, Eqs. (4)-(5) (L_O), Eq. (39) (the L2 term);
      Table 4.
      BibTeX: ``manna2021mio`` (docs/losses.md, "Citing the papers").
    """
    embeddings = _core.check_embeddings(embeddings)
    labels = _core.check_labels(labels, embeddings.shape[0])
    temperature = _core.check_positive(temperature, "temperature")
    l2_weight = _core.check_nonnegative(l2_weight, "l2_weight")
    num_devices = _core.num_devices(axis_name)
    block = blockwise.choose_block(block_size, embeddings.shape[0] * num_devices)
    if block is not None:
        return _mio_streamed(embeddings, labels, temperature, l2_weight, valid, axis_name, block)
    batch = _core.contrast_batch(embeddings, labels, valid, axis_name)
    cosine = _core.similarity_logits(batch.anchors, batch.candidates, 1.0)
    logits = cosine / jnp.asarray(temperature, jnp.float32)
    same = batch.anchor_labels[:, None] == batch.candidate_labels[None, :]
    live = batch.candidate_valid[None, :]
    positives = same & ~batch.is_self & live
    anchor_ok = batch.anchor_valid & jnp.any(positives, axis=1)
    positives = positives & anchor_ok[:, None]
    negatives = ~same & live & anchor_ok[:, None]

    binary = _global_pair_mean(jax.nn.softplus(-logits), positives, axis_name)
    binary = binary + _global_pair_mean(jax.nn.softplus(logits), negatives, axis_name)

    sq_norm_a = jnp.sum(jnp.square(batch.anchors), axis=1)
    sq_norm_c = jnp.sum(jnp.square(batch.candidates), axis=1)
    sq_dist = sq_norm_a[:, None] + sq_norm_c[None, :] - 2.0 * cosine
    l2 = _global_pair_mean(sq_dist, positives, axis_name) / embeddings.shape[1]
    return binary + jnp.asarray(l2_weight, jnp.float32) * l2


def _pair_masks(labels, index, anchor_ok, candidate_labels, candidate_valid):
    """Positive and negative pair masks [b, m] of the anchors with ``anchor_ok``."""
    same = labels[:, None] == candidate_labels[None, :]
    live = candidate_valid[None, :] & anchor_ok[:, None]
    is_self = index[:, None] == jnp.arange(candidate_labels.shape[0])[None, :]
    return same & ~is_self & live, ~same & live


@jax.custom_vjp
def _binary_rows(logits, positives, negatives, inv_pos, inv_neg):
    """``sum_j inv_pos softplus(-x_ij) [pos] + inv_neg softplus(x_ij) [neg]`` per row [b].

    One exp per entry, ``e = exp(-|x|)``, shared by both softplus terms
    (``softplus(±x) = max(±x, 0) + log1p(e)``) and by the gradient
    (``sigmoid(x) = [x >= 0 ? 1 : e] / (1 + e)``).
    """
    return _binary_rows_fwd(logits, positives, negatives, inv_pos, inv_neg)[0]


def _binary_rows_fwd(logits, positives, negatives, inv_pos, inv_neg):
    small = jnp.exp(-jnp.abs(logits))
    log_term = jnp.log1p(small)
    on_pos = jnp.sum(jnp.where(positives, jnp.maximum(-logits, 0.0) + log_term, 0.0), axis=1)
    on_neg = jnp.sum(jnp.where(negatives, jnp.maximum(logits, 0.0) + log_term, 0.0), axis=1)
    residuals = (logits, small, positives, negatives, inv_pos, inv_neg, on_pos, on_neg)
    return inv_pos * on_pos + inv_neg * on_neg, residuals


def _binary_rows_bwd(residuals, cotangent):
    logits, small, positives, negatives, inv_pos, inv_neg, on_pos, on_neg = residuals
    sigmoid = jnp.where(logits >= 0, 1.0, small) / (1.0 + small)
    # d softplus(-x) = sigmoid(x) - 1, d softplus(x) = sigmoid(x).
    grad = jnp.where(positives, inv_pos * (sigmoid - 1.0), jnp.where(negatives, inv_neg * sigmoid, 0.0))
    return (
        cotangent[:, None] * grad,
        None,
        None,
        jnp.sum(cotangent * on_pos),
        jnp.sum(cotangent * on_neg),
    )


_binary_rows.defvjp(_binary_rows_fwd, _binary_rows_bwd)


@functools.cache
def _mio_block(with_l2: bool):
    """Row-block function of MIO for :func:`blockwise.stream_rows`: each row's pair
    terms already divided by the global pair counts (``params``), so the rows sum to
    the loss. ``with_l2=False`` (a concrete ``l2_weight`` of 0) leaves out the L2
    term's two passes over the block.

    ``(dots [b, m] cosines, (tau, 1/T_P, 1/T_N, l2_weight / (D T_P)),
    (labels, global index, anchor_ok, squared norm) [b], (labels, valid, squared norm)
    [m])`` -> (contribution [b], None).
    """

    def block_fn(dots, params, rows, cols):
        temperature, inv_pos, inv_neg, l2_scale = params
        labels, index, anchor_ok, sq_norm = rows
        candidate_labels, candidate_valid, candidate_sq_norm = cols
        positives, negatives = _pair_masks(
            labels, index, anchor_ok, candidate_labels, candidate_valid
        )
        binary = _binary_rows(dots / temperature, positives, negatives, inv_pos, inv_neg)
        if not with_l2:
            return binary, None
        # sum_{pos} ||z_i - z_j||² = |P_i| ||z_i||² + sum_{pos} (||z_j||² - 2 z_i . z_j).
        num_pos = jnp.sum(positives, axis=1).astype(jnp.float32)
        on_pos = jnp.sum(
            jnp.where(positives, candidate_sq_norm[None, :] - 2.0 * dots, 0.0), axis=1
        )
        return binary + l2_scale * (num_pos * sq_norm + on_pos), None

    return block_fn


def _mio_streamed(embeddings, labels, temperature, l2_weight, valid, axis_name, block):
    """MIO streamed over blocks of ``block`` anchor rows; the global pair counts come
    from the class sizes of the gathered labels (no pass over pairs)."""
    n = embeddings.shape[0]
    rows = blockwise.gather_rows(embeddings, labels, valid, axis_name)
    m = rows.candidates.shape[0]
    _, class_ids = jnp.unique(rows.candidate_data, return_inverse=True, size=m)
    class_ids = class_ids.reshape(m)
    live = rows.candidate_valid.astype(jnp.float32)
    class_size = jax.ops.segment_sum(live, class_ids, num_segments=m)[class_ids]
    # Every valid row with another row of its label is an anchor with n_c - 1
    # positives and M - n_c negatives; the counts are global on every device.
    row_ok = rows.candidate_valid & (class_size >= 2)
    total_pos = jnp.sum(jnp.where(row_ok, class_size - 1.0, 0.0))
    total_neg = jnp.sum(jnp.where(row_ok, jnp.sum(live) - class_size, 0.0))
    inv_pos, inv_neg = 1.0 / jnp.maximum(total_pos, 1.0), 1.0 / jnp.maximum(total_neg, 1.0)
    params = tuple(
        blockwise.like_anchors(jax.lax.stop_gradient(p), rows.anchors)
        for p in (inv_pos, inv_neg)
    )
    params = (
        blockwise.like_anchors(temperature, rows.anchors),
        *params,
        blockwise.like_anchors(
            jnp.asarray(l2_weight, jnp.float32) * jax.lax.stop_gradient(inv_pos)
            / embeddings.shape[1],
            rows.anchors,
        ),
    )
    anchor_ok = jax.lax.dynamic_slice_in_dim(row_ok, _core.local_row_offset(n, axis_name), n)
    sq_norm = jnp.sum(jnp.square(rows.anchors), axis=1)
    try:
        with_l2 = float(l2_weight) != 0.0
    except (TypeError, jax.errors.ConcretizationTypeError):
        with_l2 = True  # traced: keep the term
    total, _ = blockwise.stream_rows(
        _mio_block(with_l2),
        rows.anchors,
        rows.candidates,
        params,
        (labels, rows.index, anchor_ok, sq_norm),
        (rows.candidate_data, rows.candidate_valid, _core.all_gather_rows(sq_norm, axis_name)),
        block,
    )
    return _core.differentiable_psum(total, axis_name)
