"""The class projections of the ProjNCE family and the batch they are built from.

A projection ``g(c)`` maps a class to a vector built from the valid rows of the global
batch (the notation of :mod:`contrastive_jax.losses._projnce`): the class mean
(ProjNCE), the Nadaraya–Watson projection ``f̂(c)`` of Jeong & Hero (2025, Eqs. 17-18;
SoftSupCon, SoftNCE) or the coordinate-wise class median (MedSupCon, MedNCE). Each is
[K, D] for K class indices, never renormalised, with gradients into the rows.

The Nadaraya–Watson projection is computed over row blocks with a recomputing custom
VJP (:func:`nw_projection`), so no [N, N] or [N, N, D] array exists; the median has a
custom VJP that passes each picked value's cotangent to the rows that hold it.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from contrastive_jax.losses import _core, blockwise

Array = jax.Array


class LabelledBatch(NamedTuple):
    """A contrast batch with its label masks and global class indices.

    Attributes:
      batch: the normalised, gathered :class:`_core.ContrastBatch`.
      logits: float32 [n, m], ``S``.
      positives: bool [n, m], ``P⁻(i)`` among valid columns.
      others: bool [n, m], valid columns k != i (SupCon denominator and R's sums).
      live: bool [n, m], valid columns, the anchor's own included.
      class_ids: int32 [m], dense class index of each column, in [0, m).
      anchor_class_ids: int32 [n], class index of each local anchor.
      class_counts: float32 [m], ``n_c`` per class index (valid rows only).
      anchor_ok: bool [n], valid anchors with ``|P⁻(i)| >= 1``.
    """

    batch: _core.ContrastBatch
    logits: Array
    positives: Array
    others: Array
    live: Array
    class_ids: Array
    anchor_class_ids: Array
    class_counts: Array
    anchor_ok: Array


def labelled_batch(
    embeddings: Array,
    labels: Array,
    temperature: float | Array,
    valid: Array | None,
    axis_name: str | None,
) -> LabelledBatch:
    """Checks the inputs, gathers the batch and builds masks and class indices."""
    embeddings = _core.check_embeddings(embeddings)
    labels = _core.check_labels(labels, embeddings.shape[0])
    temperature = _core.check_positive(temperature, "temperature")
    batch = _core.contrast_batch(embeddings, labels, valid, axis_name)
    n, m = batch.is_self.shape
    logits = _core.similarity_logits(batch.anchors, batch.candidates, temperature)
    same = batch.anchor_labels[:, None] == batch.candidate_labels[None, :]
    live = jnp.broadcast_to(batch.candidate_valid[None, :], (n, m))
    positives = same & ~batch.is_self & live
    _, class_ids = jnp.unique(batch.candidate_labels, return_inverse=True, size=m)
    class_ids = class_ids.reshape(m).astype(jnp.int32)
    counts = jax.ops.segment_sum(
        batch.candidate_valid.astype(jnp.float32), class_ids, num_segments=m
    )
    offset = _core.local_row_offset(n, axis_name)
    return LabelledBatch(
        batch=batch,
        logits=logits,
        positives=positives,
        others=~batch.is_self & live,
        live=live,
        class_ids=class_ids,
        anchor_class_ids=jax.lax.dynamic_slice_in_dim(class_ids, offset, n),
        class_counts=counts,
        anchor_ok=batch.anchor_valid & jnp.any(positives, axis=1),
    )


# --------------------------------------------------------------------------- projections


def class_means(lb: LabelledBatch) -> Array:
    """``mu_c = (1/n_c) sum_{k: c_k = c} z_k`` over valid rows, self included: [m, D].

    Rows of absent class indices are 0.
    """
    rows = jnp.where(lb.batch.candidate_valid[:, None], lb.batch.candidates, 0.0)
    sums = jax.ops.segment_sum(rows, lb.class_ids, num_segments=rows.shape[0])
    return _core.safe_divide(sums, lb.class_counts[:, None])


def median_prototypes(lb: LabelledBatch, median_mode: str) -> Array:
    """Coordinate-wise class median over the valid rows, self included: [m, D].

    See :func:`class_medians`; rows of absent class indices are 0.
    """
    return class_medians(
        lb.batch.candidates, lb.batch.candidate_valid, lb.class_ids, lb.class_counts, median_mode
    )


def class_medians(
    z: Array, valid: Array, class_ids: Array, counts: Array, median_mode: str
) -> Array:
    """Coordinate-wise median of the valid rows of each class: [K, D].

    ``z`` [m, D], ``valid`` bool [m], ``class_ids`` int32 [m] in [0, K), ``counts``
    float32 [K] (valid rows per class). Each coordinate is sorted once by (class
    index, value), padded rows last, so class c occupies the segment starting at
    ``sum_{c' < c} n_c'``; ``lower`` takes its element ``(n_c - 1) // 2``,
    ``average`` the mean of elements ``(n_c - 1) // 2`` and ``n_c // 2``. Rows of
    absent classes are 0. O(m D log m) time.

    Gradient (:func:`_median_vjp`): each picked value passes its cotangent to the
    valid rows of its class that hold that value in that coordinate, split evenly
    when several do (ties; a subgradient), so the backward pass is O(m D) and the
    sort carries no row indices.
    """
    return _median_vjp(z, valid, class_ids, counts, median_mode)


def _median_positions(counts: Array, median_mode: str) -> tuple[Array, ...]:
    counts = counts.astype(jnp.int32)
    if median_mode == "average":
        return (counts - 1) // 2, counts // 2
    return ((counts - 1) // 2,)


def _medians_and_picks(z, valid, class_ids, counts, median_mode):
    """``(medians [K, D], picked values [K, D] per median position)``."""
    m, d = z.shape
    key = jnp.where(valid, class_ids, counts.shape[0])
    _, ordered = jax.lax.sort(
        (jnp.broadcast_to(key[None, :], (d, m)), jax.lax.stop_gradient(z.T)),
        dimension=1, num_keys=2,
    )
    start = jnp.cumsum(counts.astype(jnp.int32)) - counts.astype(jnp.int32)
    picks = tuple(
        ordered[:, jnp.clip(start + position, 0, m - 1)].T
        for position in _median_positions(counts, median_mode)
    )
    median = sum(picks) / len(picks)
    return jnp.where(counts[:, None] > 0, median, 0.0), picks


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _median_vjp(z, valid, class_ids, counts, median_mode):
    return _medians_and_picks(z, valid, class_ids, counts, median_mode)[0]


def _median_fwd(z, valid, class_ids, counts, median_mode):
    median, picks = _medians_and_picks(z, valid, class_ids, counts, median_mode)
    return median, (z, valid, class_ids, counts, picks)


def _median_bwd(median_mode, residuals, d_median):
    z, valid, class_ids, counts, picks = residuals
    k = counts.shape[0]
    d_rows = jnp.where(valid[:, None], d_median[class_ids], 0.0) / len(picks)
    d_z = jnp.zeros_like(z)
    for picked in picks:
        # Rows of the class that hold the picked value; ties share its cotangent.
        hit = valid[:, None] & (z == picked[class_ids])
        ties = jax.ops.segment_sum(hit.astype(jnp.float32), class_ids, num_segments=k)
        d_z = d_z + jnp.where(hit, d_rows / jnp.maximum(ties[class_ids], 1.0), 0.0)
    return d_z, None, None, None


_median_vjp.defvjp(_median_fwd, _median_bwd)


# --------------------------------------------------------------------------- blockwise NW

#: Row block of the ℓ1 Nadaraya–Watson pass: rows such that the [block, D, m]
#: coordinate differences have about this many entries (64 MiB in float32; 16
#: rows at m = 8192, D = 128, twice as fast per row as 4 in a quick timing).
NW_L1_ELEMENTS = 1 << 24


def _nw_block_size(distance: str, m: int, d: int) -> int:
    """Rows per block of :func:`nw_projection` for m rows of dimension d."""
    if distance == "l1":
        return max(1, min(m, NW_L1_ELEMENTS // (m * d)))
    return max(1, min(m, max(8, blockwise.BLOCK_ELEMENTS // m)))


def _block_sq_scaled(zb: Array, z: Array, distance: str, h: Array) -> Array:
    """``t_jl² = (d(z_j, z_l) / h)²`` for a block of rows zb [b, D] against z [m, D]: [b, m].

    ``l1``: ``(sum |u - v|)²`` from the coordinate differences ([b, D, m] memory,
    laid out so the sum runs over a major axis). ``l2``: ``||u||² + ||v||² - 2 u.v``
    (clamped at 0; no square root, whose gradient is NaN at 0). ``cosine``:
    ``(1/2 - 1/2 u.v)²`` (unit rows).
    """
    if distance == "l1":
        return jnp.square(jnp.sum(jnp.abs(zb[:, :, None] - z.T[None, :, :]), axis=1) / h)
    gram = jnp.matmul(zb, z.T, precision=jax.lax.Precision.HIGHEST)
    if distance == "l2":
        sq = jnp.sum(zb * zb, axis=1)[:, None] + jnp.sum(z * z, axis=1)[None, :]
        return jnp.maximum(sq - 2.0 * gram, 0.0) / jnp.square(h)
    return jnp.square((0.5 - 0.5 * gram) / h)


def _class_sum(x: Array, class_ids: Array, onehot: Array | None, num_classes: int) -> Array:
    """``sum_{l: c_l = c} x_jl``: [b, m] -> [b, K], a product with the one-hot
    [m, K] matrix when it is given, else a segment sum."""
    if onehot is not None:
        return jnp.matmul(x, onehot, precision=jax.lax.Precision.HIGHEST)
    return jax.ops.segment_sum(x.T, class_ids, num_segments=num_classes).T


def _nw_block(zb, vb, z, valid, class_ids, onehot, h, distance, num_classes):
    """Kernel weights and soft labels of a block of rows: ``(t² [b, m], active [b, m],
    s [b], NW [b, K])`` with ``NW_jc = sum_{l: c_l = c} w_jl / s_j``, ``s_j = sum_l w_jl``."""
    t_sq = _block_sq_scaled(zb, z, distance, h)
    active = vb[:, None] & valid[None, :] & (t_sq < 1.0)
    weights = jnp.where(active, 1.0 - t_sq, 0.0)
    total = jnp.sum(weights, axis=1)
    soft = _core.safe_divide(_class_sum(weights, class_ids, onehot, num_classes), total[:, None])
    return t_sq, active, total, soft


def _nw_blocks(z, valid, class_ids, block):
    """Rows, valid flags, class ids and global row indices in ``block``-row blocks
    (zero-padded, padding invalid): [num_blocks, block, ...] each."""
    m = z.shape[0]
    num_blocks = -(-m // block)
    pad = num_blocks * block - m

    def blocks(x):
        return jnp.pad(x, ((0, pad),) + ((0, 0),) * (x.ndim - 1)).reshape(
            (num_blocks, block) + x.shape[1:]
        )

    return blocks(z), blocks(valid), blocks(class_ids), blocks(jnp.arange(m, dtype=jnp.int32))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def nw_projection(z, bandwidth, valid, class_ids, onehot, distance, num_classes, block):
    """Nadaraya–Watson projection ``f̂(c)`` of every class (Jeong & Hero, Eqs. 17–18): [K, D].

    ``f̂(c) = sum_j NW(c; z_j) z_j / sum_j NW(c; z_j)``,
    ``NW(c; z_j) = sum_l K(t_jl) 1[c_l = c] / sum_l K(t_jl)``, ``K(t) = max(0, 1 - t²)``,
    ``t_jl = d(z_j, z_l) / h``, over the valid rows j, l of ``z`` (j = l included).

    Rows are processed ``block`` at a time: memory O(block·m) (O(block·m·D) for
    ``l1``), never [m, m] or [m, m, D]. The gradient (into ``z`` and the
    bandwidth) is a custom VJP that recomputes each block's weights in a second
    pass; it back-propagates through the prototypes' ratio, the soft labels'
    normalisation and the kernel, and for ``l2``/``cosine`` the distance gradient
    is two [block, m] x [m, D] products. A block whose valid rows have no kernel
    neighbour but themselves (recorded by the forward pass) has one-hot soft
    labels and no distance gradient: its backward step skips the distances
    (``lax.cond``).

    Args:
      z: float32 [m, D] rows (unit norm for ``cosine``).
      bandwidth: float32 scalar h > 0.
      valid: bool [m].
      class_ids: int32 [m] in [0, K).
      onehot: float32 [m, K] one-hot of ``class_ids`` (class sums as products) or
        None (segment sums).
      distance: ``"l1"``, ``"l2"`` or ``"cosine"`` (static).
      num_classes: K (static).
      block: rows per block (static).

    Returns:
      float32 [K, D]; rows of classes without a valid row are 0.
    """
    return _nw_forward(z, bandwidth, valid, class_ids, onehot, distance, num_classes, block)[0]


def _nw_forward(z, bandwidth, valid, class_ids, onehot, distance, num_classes, block):
    zb, vb, cb, ib = _nw_blocks(z, valid, class_ids, block)
    columns = jnp.arange(z.shape[0], dtype=jnp.int32)

    def body(carry, x):
        numerator, denominator = carry
        rows, row_valid, _, row_index = x
        _, active, _, soft = _nw_block(
            rows, row_valid, z, valid, class_ids, onehot, bandwidth, distance, num_classes
        )
        numerator = numerator + jnp.matmul(soft.T, rows, precision=jax.lax.Precision.HIGHEST)
        # Whether a row of the block has a kernel neighbour other than itself.
        coupled = jnp.any(active & (row_index[:, None] != columns[None, :]))
        return (numerator, denominator + jnp.sum(soft, axis=0)), coupled

    init = (
        jnp.zeros((num_classes, z.shape[1]), z.dtype) + jnp.zeros_like(z[0, 0]),
        jnp.zeros((num_classes,), z.dtype) + jnp.zeros_like(z[0, 0]),
    )
    (numerator, denominator), coupled = jax.lax.scan(body, init, (zb, vb, cb, ib))
    prototypes = _core.safe_divide(numerator, denominator[:, None])
    return prototypes, (z, bandwidth, valid, class_ids, onehot, denominator, prototypes, coupled)


def _nw_fwd(z, bandwidth, valid, class_ids, onehot, distance, num_classes, block):
    return _nw_forward(z, bandwidth, valid, class_ids, onehot, distance, num_classes, block)


def _nw_bwd(distance, num_classes, block, residuals, d_prototypes):
    z, h, valid, class_ids, onehot, denominator, prototypes, coupled = residuals
    m = z.shape[0]
    # f = numerator / denominator.
    d_numerator = _core.safe_divide(d_prototypes, denominator[:, None])
    d_denominator = -_core.safe_divide(jnp.sum(d_prototypes * prototypes, axis=1), denominator)
    zb, vb, cb, _ = _nw_blocks(z, valid, class_ids, block)

    z_t = z.T

    def coupled_block(carry, rows, row_valid, row_class):
        d_z, d_z_t, d_h = carry
        t_sq, active, total, soft = _nw_block(
            rows, row_valid, z, valid, class_ids, onehot, h, distance, num_classes
        )
        # numerator += soft^T rows, denominator += colsum(soft).
        d_soft = (
            jnp.matmul(rows, d_numerator.T, precision=jax.lax.Precision.HIGHEST)
            + d_denominator[None, :]
        )
        d_rows = jnp.matmul(soft, d_numerator, precision=jax.lax.Precision.HIGHEST)
        # soft = class_sum(w) / total.
        d_class = _core.safe_divide(d_soft, total[:, None])
        d_total = -_core.safe_divide(jnp.sum(d_soft * soft, axis=1), total)
        d_w = jnp.take(d_class, class_ids, axis=1) + d_total[:, None]
        # w = 1 - t² on active pairs.
        d_t_sq = jnp.where(active, -d_w, 0.0)
        d_h = d_h - 2.0 * jnp.sum(d_t_sq * t_sq) / h
        if distance == "l1":
            # t² = (L1 / h)², d t² / d z_j = 2 (L1 / h²) sign(z_j - z_l) = U_jl sign(.).
            # One row at a time on [D, m]: XLA fuses the two sums over a [b, m, D]
            # slab (over l into row j, over j into column l) 30x slower.
            u = d_t_sq * 2.0 * jnp.sqrt(t_sq) / h

            def one_row(d_zt, x):
                row, u_row = x
                signed = jnp.sign(row[:, None] - z_t) * u_row[None, :]
                return d_zt - signed, jnp.sum(signed, axis=1)

            d_z_t, d_own = jax.lax.scan(one_row, d_z_t, (rows, u))
            d_rows = d_rows + d_own
        elif distance == "l2":
            u = d_t_sq * 2.0 / jnp.square(h)
            d_rows = d_rows + rows * jnp.sum(u, axis=1)[:, None] - jnp.matmul(
                u, z, precision=jax.lax.Precision.HIGHEST
            )
            d_z = d_z + z * jnp.sum(u, axis=0)[:, None] - jnp.matmul(
                u.T, rows, precision=jax.lax.Precision.HIGHEST
            )
        else:
            # t² = ((1/2 - 1/2 u.v) / h)², d t² / d(u.v) = -(1/2 - 1/2 u.v) / h² = -t / h.
            gram_grad = -d_t_sq * jnp.sqrt(t_sq) / h
            d_rows = d_rows + jnp.matmul(gram_grad, z, precision=jax.lax.Precision.HIGHEST)
            d_z = d_z + jnp.matmul(gram_grad.T, rows, precision=jax.lax.Precision.HIGHEST)
        return (d_z, d_z_t, d_h), d_rows

    def lone_block(carry, rows, row_valid, row_class):
        # Every valid row's only kernel neighbour is itself: w_jj = 1 at t_jj = 0 (or a
        # rounding error away from it), NW(.; z_j) is the one-hot of c_j and no
        # distance carries a gradient; only the prototypes' numerator does.
        return carry, jnp.where(row_valid[:, None], d_numerator[row_class], 0.0)

    def body(carry, x):
        rows, row_valid, row_class, row_coupled = x
        return jax.lax.cond(
            row_coupled, coupled_block, lone_block, carry, rows, row_valid, row_class
        )

    like = jnp.zeros_like(d_prototypes[0, 0])
    init = (jnp.zeros_like(z) + like, jnp.zeros_like(z_t) + like, jnp.zeros_like(h) + like)
    (d_z, d_z_t, d_h), d_rows = jax.lax.scan(body, init, (zb, vb, cb, coupled))
    d_z = d_z + d_z_t.T + d_rows.reshape(-1, z.shape[1])[:m]
    return d_z, d_h, None, None, None


nw_projection.defvjp(_nw_fwd, _nw_bwd)


#: Class sums of the Nadaraya–Watson pass are products with a one-hot [m, K] matrix
#: up to this many classes (a [b, m] x [m, K] product costs K/D of the Gram
#: matrix's), segment sums (scatters, O(b·m) whatever K) above.
ONEHOT_MAX_CLASSES = 256


def class_onehot(class_ids: Array, num_classes: int, m: int) -> Array | None:
    """One-hot [m, K] for class sums as products when K is small, else None."""
    if num_classes > ONEHOT_MAX_CLASSES or m * num_classes * 4 > 64 * 2**20:
        return None
    return jax.nn.one_hot(class_ids, num_classes, dtype=jnp.float32)


def nw_prototypes_of(
    z: Array, valid: Array, class_ids: Array, num_classes: int, bandwidth, distance: str,
    block: int | None = None,
) -> Array:
    """:func:`nw_projection` with its class-sum form and block size chosen: [K, D].

    ``block`` (the loss's anchor block, if streamed) caps the automatic block size.
    """
    m, d = z.shape
    h = jnp.asarray(bandwidth, jnp.float32) + jnp.zeros_like(z[0, 0])
    rows = _nw_block_size(distance, m, d)
    return nw_projection(
        z, h, valid, class_ids, class_onehot(class_ids, num_classes, m), distance,
        num_classes, rows if block is None else min(rows, block),
    )
