"""Alignment and uniformity on the hypersphere (Wang & Isola 2020) and their sum as a loss.

:func:`alignment`, :func:`alignment_from_labels` and :func:`uniformity` are the paper's
``align_loss`` and ``uniform_loss`` in JAX (re-exported by :mod:`contrastive_jax.metrics`,
which logs them); :func:`align_uniform` is their weighted sum, the paper's training
objective, registered as a loss. They follow the loss contract (``valid`` masks padded rows;
with ``axis_name`` they run inside ``jax.shard_map``/``jax.pmap``, score local rows against the
gathered batch and return the global value, with the gradient of the global value, on every
device). Above ``blockwise.BLOCKWISE_THRESHOLD`` global rows (or with ``block_size``) the
pairwise parts stream over blocks of anchor rows like the other losses: the alignment as a
sum of per-row terms (``blockwise.stream_rows``), the uniformity as an online log-sum-exp
over rows (``blockwise.stream_rows_logsumexp``), never holding an [N, N] array.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from contrastive_jax.losses import _core, _docs, blockwise

Array = jax.Array


def _safe_power(sq: Array, half_alpha: float | Array) -> Array:
    """``sq ** half_alpha`` for ``sq >= 0``; 0 at ``sq = 0`` with a zero gradient."""
    positive = sq > 0
    return jnp.where(positive, jnp.where(positive, sq, 1.0) ** half_alpha, 0.0)


def _pair_sq_distances(batch: _core.ContrastBatch) -> Array:
    """``||a_r - c_j||^2 = ||a_r||^2 + ||c_j||^2 - 2 a_r.c_j`` [n, m], clipped at 0.

    Rows are unit vectors except all-zero input rows, which stay zero.
    """
    dots = _core.similarity_logits(batch.anchors, batch.candidates, 1.0)
    sq_a = jnp.sum(batch.anchors * batch.anchors, axis=1)
    sq_c = jnp.sum(batch.candidates * batch.candidates, axis=1)
    return jnp.maximum(sq_a[:, None] + sq_c[None, :] - 2.0 * dots, 0.0)


def _pair_mean(values: Array, mask: Array, axis_name: _core.AxisName) -> Array:
    """Mean of ``values`` over the True entries of ``mask`` of all devices (0 if none)."""
    total = _core.differentiable_psum(jnp.sum(jnp.where(mask, values, 0.0)), axis_name)
    count = _core.psum_if(jnp.sum(mask.astype(jnp.float32)), axis_name)
    return total / jnp.maximum(count, 1.0)


def _static_or_param(value: float | Array, anchors: Array) -> tuple[float | None, Any]:
    """A hyperparameter as ``(number, ())`` when it is a Python or NumPy number (compiled in,
    so ``x ** 1.0`` is ``x``), else ``(None, array)``, a differentiated ``stream_rows``
    parameter with the anchors' varying-axis type."""
    if isinstance(value, (int, float, np.number)):
        return float(value), ()
    return None, blockwise.like_anchors(value, anchors)


def _row_sq_distances(dots: Array, sq_rows: Array, sq_cols: Array) -> Array:
    """``||a_r - c_j||^2`` [b, m] from ``dots = A C^T`` and the rows' squared norms, clipped at 0."""
    return jnp.maximum(sq_rows[:, None] + sq_cols[None, :] - 2.0 * dots, 0.0)


def _alignment_block(half_alpha: float | None):
    """Row-block function of the alignment for :func:`blockwise.stream_rows`.

    ``(dots [b, m], alpha / 2 or (), (labels, global index, valid, squared norm) [b],
    (labels, valid, squared norm) [m])`` -> (sum over the row's pairs of
    ``||z_r - z_j||^alpha`` [b]; number of its pairs, float32 [b]).
    """

    def block_fn(dots, params, rows, cols):
        labels, index, anchor_valid, sq_rows = rows
        candidate_labels, candidate_valid, sq_cols = cols
        pairs = (
            (labels[:, None] == candidate_labels[None, :])
            & (index[:, None] != jnp.arange(dots.shape[1])[None, :])
            & anchor_valid[:, None]
            & candidate_valid[None, :]
        )
        power = params if half_alpha is None else half_alpha
        per_pair = _safe_power(_row_sq_distances(dots, sq_rows, sq_cols), power)
        total = jnp.sum(jnp.where(pairs, per_pair, 0.0), axis=1)
        return total, jnp.sum(pairs.astype(jnp.float32), axis=1)

    return block_fn


def _uniformity_block(t: float | None):
    """Row-block function of the uniformity for :func:`blockwise.stream_rows_logsumexp`.

    ``(dots [b, m], t or (), (global index, valid, squared norm) [b], (valid, squared
    norm) [m])`` -> (``r = log sum_{j != r, valid} exp(-t ||z_r - z_j||^2)`` [b],
    ``-BIG`` on rows without such a pair; those rows' flags, bool [b]).
    """

    def block_fn(dots, params, rows, cols):
        index, anchor_valid, sq_rows = rows
        candidate_valid, sq_cols = cols
        others = (
            (index[:, None] != jnp.arange(dots.shape[1])[None, :])
            & anchor_valid[:, None]
            & candidate_valid[None, :]
        )
        scale = params if t is None else t
        logits = -scale * _row_sq_distances(dots, sq_rows, sq_cols)
        kept = jnp.any(others, axis=1)
        r = _core.masked_logsumexp(logits, others, axis=1)
        return jnp.where(kept, r, -_core.BIG), kept

    return block_fn


def _alignment_streamed(embeddings, labels, alpha, valid, axis_name, block) -> Array:
    """:func:`alignment_from_labels` streamed over blocks of ``block`` anchor rows."""
    rows = blockwise.gather_rows(embeddings, labels, valid, axis_name)
    half_alpha, params = _static_or_param(0.5 * alpha, rows.anchors)
    sq = jnp.sum(rows.anchors * rows.anchors, axis=1)
    total, pairs = blockwise.stream_rows(
        _alignment_block(half_alpha), rows.anchors, rows.candidates, params,
        (labels, rows.index, rows.anchor_valid, sq),
        (rows.candidate_data, rows.candidate_valid, _core.all_gather_rows(sq, axis_name)),
        block,
    )
    count = _core.psum_if(jnp.sum(pairs), axis_name)
    return _core.differentiable_psum(total, axis_name) / jnp.maximum(count, 1.0)


def _uniformity_streamed(embeddings, t, valid, axis_name, block) -> Array:
    """:func:`uniformity` as one online log-sum-exp over blocks of ``block`` anchor rows.

    Over the ordered pairs ``r != j`` (each distinct pair twice, so the mean is that of
    the distinct pairs): ``L = log sum_r e^{r_r} - log(M (M - 1))``, M valid rows.
    """
    n = embeddings.shape[0]
    rows = blockwise.gather_rows(embeddings, jnp.zeros((n,), jnp.int32), valid, axis_name)
    scale, params = _static_or_param(t, rows.anchors)
    sq = jnp.sum(rows.anchors * rows.anchors, axis=1)
    lse, _ = blockwise.stream_rows_logsumexp(
        _uniformity_block(scale), rows.anchors, rows.candidates, params,
        (rows.index, rows.anchor_valid, sq),
        (rows.candidate_valid, _core.all_gather_rows(sq, axis_name)),
        block,
    )
    if axis_name is not None:
        shift = jax.lax.pmax(jax.lax.stop_gradient(lse), axis_name)
        lse = shift + jnp.log(_core.differentiable_psum(jnp.exp(lse - shift), axis_name))
    num_valid = _core.psum_if(jnp.sum(rows.anchor_valid.astype(jnp.float32)), axis_name)
    pairs = num_valid * (num_valid - 1.0)
    return jnp.where(pairs > 0, lse - jnp.log(jnp.maximum(pairs, 1.0)), 0.0)


# --------------------------------------------------------------------------- metrics


def alignment(
    z1: Array,
    z2: Array,
    *,
    alpha: float | Array = 2.0,
    axis_name: str | None = None,
    valid: Array | None = None,
) -> Array:
    """Alignment of positive pairs (Wang & Isola 2020, Sec. 4.1, ``align_loss``).

    ``L_align = mean_i || f(x_i) - f(y_i) ||_2^alpha`` with ``f(x_i)``, ``f(y_i)``
    the L2-normalised rows ``i`` of ``z1`` and ``z2``. Range [0, 2^alpha]; lower is
    better aligned.

    Args:
      z1: float [N, D], first view of each pair (normalised inside).
      z2: float [N, D], second view, row i paired with row i of ``z1``.
      alpha: exponent > 0 (the paper's default 2).
      axis_name: mesh/pmap axis; the mean then runs over the pairs of all devices.
      valid: optional bool [N]; False rows (pairs) are padding.

    Returns:
      float32 scalar (0 when no pair is valid).

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import metrics
      >>> z1 = jnp.array([[1.0, 0.0], [0.0, 1.0]])
      >>> z2 = jnp.array([[1.0, 0.0], [1.0, 1.0]])  # the second pair is 45 degrees apart
      >>> print(f"{float(metrics.alignment(z1, z2)):.4f}")  # (0 + (2 - sqrt 2)) / 2
      0.2929

    References:
      Wang, T. and Isola, P. (2020). Understanding contrastive representation learning
      through alignment and uniformity on the hypersphere. ICML 2020, arXiv:2005.10242.
      BibTeX: ``wang2020alignment`` (docs/losses.md, "Citing the papers").
    """
    z1 = _core.check_embeddings(z1, "z1")
    z2 = _core.check_embeddings(z2, "z2")
    if z1.shape != z2.shape:
        raise ValueError(f"`z1` and `z2` must have the same shape, got {z1.shape} and {z2.shape}")
    alpha = _core.check_positive(alpha, "alpha")
    valid = _core.check_valid(valid, z1.shape[0])
    z1, z2 = _core.mask_padding(z1, valid), _core.mask_padding(z2, valid)
    diff = _core.l2_normalize(z1) - _core.l2_normalize(z2)
    per_pair = _safe_power(jnp.sum(diff * diff, axis=1), 0.5 * alpha)
    return _core.valid_anchor_mean(per_pair, valid, axis_name)


@_docs.shared_args
def alignment_from_labels(
    embeddings: Array,
    labels: Array,
    *,
    alpha: float | Array = 2.0,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
) -> Array:
    """Alignment of a flat multi-view batch: mean over positive pairs of ``||z_i - z_j||^alpha``.

    ``L_align = (1/|P|) sum_{(i, j) in P} || z_i - z_j ||^alpha``,
    ``P = {(i, j) : i != j, c_i = c_j, both valid}`` over the global batch, rows
    L2-normalised. For a two-view batch with instance ids this equals
    :func:`alignment` of the two views (each pair is counted in both orders).

    Args:
      embeddings: float [N, D], every view as its own row (normalised inside).
      labels: int [N] instance ids (SimCLR) or class labels (supervised).
      alpha: exponent > 0 (Wang & Isola's default 2).
      {axis_name}
      {valid}
      {block_size}

    Returns:
      float32 scalar (0 when there is no positive pair).

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import metrics
      >>> z = jnp.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
      >>> labels = jnp.array([0, 0, 1, 1])  # two tight pairs
      >>> print(f"{float(metrics.alignment_from_labels(z, labels)):.4f}")
      0.0099

    References:
      Wang, T. and Isola, P. (2020). Understanding contrastive representation learning
      through alignment and uniformity on the hypersphere. ICML 2020, arXiv:2005.10242.
      BibTeX: ``wang2020alignment`` (docs/losses.md, "Citing the papers").
    """
    embeddings = _core.check_embeddings(embeddings)
    labels = _core.check_labels(labels, embeddings.shape[0])
    alpha = _core.check_positive(alpha, "alpha")
    valid = _core.check_valid(valid, embeddings.shape[0])
    embeddings = _core.mask_padding(embeddings, valid)
    block = blockwise.choose_block(block_size, embeddings.shape[0] * _core.num_devices(axis_name))
    if block is not None:
        return _alignment_streamed(embeddings, labels, alpha, valid, axis_name, block)
    batch = _core.contrast_batch(embeddings, labels, valid, axis_name)
    same = batch.anchor_labels[:, None] == batch.candidate_labels[None, :]
    pairs = (
        same & ~batch.is_self & batch.anchor_valid[:, None] & batch.candidate_valid[None, :]
    )
    per_pair = _safe_power(_pair_sq_distances(batch), 0.5 * alpha)
    return _pair_mean(per_pair, pairs, axis_name)


@_docs.shared_args
def uniformity(
    embeddings: Array,
    *,
    t: float | Array = 2.0,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
) -> Array:
    """Uniformity (Wang & Isola 2020, Sec. 4.1, ``uniform_loss``).

    ``L_uniform = log( (1/|Pairs|) sum_{i<j} exp(-t ||z_i - z_j||^2) )`` over the
    distinct pairs of valid rows of the global batch, rows L2-normalised.
    Range [-4t, 0]; lower is more uniform. For points spread uniformly on the
    circle S^1 it tends to ``-2t + log I_0(2t)`` (N evenly spaced points give
    ``log((N A - 1) / (N - 1))`` with ``A = exp(-2t) I_0(2t)``).

    Computed as a masked log-sum-exp (streamed: an online one over blocks of rows);
    under ``axis_name`` the per-device log-sum-exps are combined with a
    (stop-gradient) global max, so value and gradient equal a single-device call on
    the concatenated batch.

    Args:
      embeddings: float [N, D] (normalised inside).
      t: kernel scale > 0 (the paper's default 2).
      {axis_name}
      {valid}
      {block_size}

    Returns:
      float32 scalar (0 when fewer than two rows are valid).

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import metrics
      >>> square = jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
      >>> # 4 pairs at squared distance 2, 2 at 4: log((4 e^-4 + 2 e^-8) / 6)
      >>> print(f"{float(metrics.uniformity(square)):.4f}")
      -4.3963

    References:
      Wang, T. and Isola, P. (2020). Understanding contrastive representation learning
      through alignment and uniformity on the hypersphere. ICML 2020, arXiv:2005.10242.
      BibTeX: ``wang2020alignment`` (docs/losses.md, "Citing the papers").
    """
    embeddings = _core.check_embeddings(embeddings)
    t = _core.check_positive(t, "t")
    n = embeddings.shape[0]
    valid = _core.check_valid(valid, n)
    embeddings = _core.mask_padding(embeddings, valid)
    block = blockwise.choose_block(block_size, n * _core.num_devices(axis_name))
    if block is not None:
        return _uniformity_streamed(embeddings, t, valid, axis_name, block)
    batch = _core.contrast_batch(embeddings, jnp.zeros((n,), jnp.int32), valid, axis_name)
    rows = _core.local_row_offset(n, axis_name) + jnp.arange(n)
    cols = jnp.arange(batch.candidates.shape[0])
    pairs = (
        (rows[:, None] < cols[None, :])
        & batch.anchor_valid[:, None]
        & batch.candidate_valid[None, :]
    )
    logits = -jnp.asarray(t, jnp.float32) * _pair_sq_distances(batch)
    local_lse = _core.masked_logsumexp(logits.reshape(-1), pairs.reshape(-1), axis=0)
    if axis_name is None:
        lse = local_lse
    else:
        shift = jax.lax.pmax(jax.lax.stop_gradient(local_lse), axis_name)
        lse = shift + jnp.log(_core.differentiable_psum(jnp.exp(local_lse - shift), axis_name))
    count = _core.psum_if(jnp.sum(pairs.astype(jnp.float32)), axis_name)
    return jnp.where(count > 0, lse - jnp.log(jnp.maximum(count, 1.0)), 0.0)


# --------------------------------------------------------------------------- loss


@_core.explicit_sharding
@_docs.shared_args
def align_uniform(
    embeddings: Array,
    instance: Array,
    *,
    alpha: float | Array = 2.0,
    t: float | Array = 2.0,
    uniformity_weight: float = 1.0,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
) -> Array:
    """Wang & Isola's ``L_align + lambda (L_uniform(z1) + L_uniform(z2)) / 2`` of a two-view batch.

    ``L_align = mean_i ||z1_i - z2_i||^alpha`` over the example pairs (their
    Sec. 4.1, ``align_loss``; :func:`alignment_from_labels`
    with the instance ids) and ``L_uniform(z) = log mean_{i<j} exp(-t ||z_i - z_j||^2)``
    over the distinct pairs of each view (``uniform_loss``,
    :func:`uniformity`), rows L2-normalised.

    Args:
      embeddings: float [N, D], N even: the two views of each example on
        consecutive rows (``2i`` and ``2i + 1``), the layout of the training step's
        flat two-view batch (``config.data.num_views = 2``).
      instance: int [N], the example id of each row (pairs for the alignment).
      alpha: alignment exponent > 0 (the paper's 2).
      t: uniformity scale > 0 (the paper's 2).
      uniformity_weight: lambda (the paper's 1).
      {axis_name}
        Both parts then run over the global batch.
      {valid}
      {block_size}
        The uniformity of each view streams with it, over that view's N / 2 rows.

    Returns:
      float32 scalar.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
      >>> ids = jnp.array([0, 0, 1, 1])
      >>> round(float(losses.align_uniform(z, ids)), 4)  # aligned; each view has one pair at |d|^2 = 2
      -4.0

    References:
      Tongzhou Wang and Phillip Isola (2020). Understanding Contrastive Representation
      Learning through Alignment and Uniformity on the Hypersphere. ICML 2020,
      arXiv:2005.10242, Sec. 4.1 (``align_loss``, ``uniform_loss``).
      BibTeX: ``wang2020alignment`` (docs/losses.md, "Citing the papers").
    """
    embeddings = _core.check_embeddings(embeddings)
    if embeddings.shape[0] % 2:
        raise ValueError(
            f"`embeddings` must be [N, D] with N even (two views per example), got "
            f"{embeddings.shape}"
        )
    instance = _core.check_labels(instance, embeddings.shape[0], "instance")
    valid = _core.check_valid(valid, embeddings.shape[0])
    block = blockwise.choose_block(block_size, embeddings.shape[0] * _core.num_devices(axis_name))
    # Every part streams with the whole batch's choice (None: dense, and the parts agree).
    align = alignment_from_labels(
        embeddings, instance, alpha=alpha, axis_name=axis_name, valid=valid, block_size=block
    )
    uniform = [
        uniformity(embeddings[v::2], t=t, axis_name=axis_name, valid=valid[v::2],
                   block_size=block)
        for v in (0, 1)
    ]
    return align + uniformity_weight * (uniform[0] + uniform[1]) / 2
