"""ProjNCE and its Nadaraya–Watson and median variants (Jeong & Hero 2025,
"Generalizing Supervised Contrastive Learning: A Projection Perspective",
arXiv:2506.09810).

Notation (the paper's Section 2; conventions and derivations in
``docs/losses.md``): rows are L2-normalised, ``S_ik = z_i . z_k / tau``,
``P⁻(i)`` the other rows with the anchor's label, ``n_c`` the number of valid
rows of class c in the global batch and ``m_ic = n_c - 1[c = c_i]``. A
projection ``g(c)`` maps a class to a vector built from the batch (class mean,
NW projection or coordinate-wise median), never renormalised.

Two loss shapes share these projections (Section 3 of the paper):

* SupCon type (ProjNCE, SoftSupCon, MedSupCon): ``g₋ = f``, the SupCon
  denominator ``log sum_{k != i} e^{S_ik}``, plus the adjustment term of Eq. (10)
  ``R_i = sum_{k != i} e^{z_i . g₊(c_k) / tau} / sum_{k != i} e^{S_ik}
  = sum_c m_ic e^{z_i . g₊(c) / tau} / sum_{k != i} e^{S_ik}`` (leave-one-out
  over rows), computed in log space and averaged over the same anchors as the
  rest of the loss.
* NCE type (SoftNCE, MedNCE): ``g₊ = g₋ = g``, so ``R ≡ 1`` and there is no R;
  the denominator runs over every valid row j, the anchor included:
  ``log sum_j e^{z_i . g(c_j) / tau} = log sum_c n_c e^{z_i . g(c) / tau}``.

Classes: by default labels are mapped to dense indices among the distinct
labels of the global batch (at most m of them); with ``num_classes`` the labels
themselves index [num_classes, D] statistics. Every
anchor needs ``|P⁻(i)| >= 1``. Under ``axis_name`` embeddings and labels are
all-gathered and every class statistic is computed from the gathered global
batch, with gradients flowing into remote rows through the gather.

Above ``blockwise.BLOCKWISE_THRESHOLD`` rows (or with ``block_size``) the losses
stream over anchor blocks with a fused gradient (``blockwise.stream_rows``,
with the rows and the [K, D] projections as candidates), and the
Nadaraya–Watson projection is computed over row blocks with a recomputing
custom VJP (:func:`nw_projection`), so no [N, N] or [N, N, D] array exists.
Without ``num_classes`` the streamed path is compiled for a few class-slot counts
and runs the smallest that holds the batch's distinct labels
(:func:`class_slot_sizes`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from contrastive_jax.losses import _blockwise as blockwise
from contrastive_jax.losses import _core
from contrastive_jax.losses import _nw_gram as nw_gram
from contrastive_jax.losses._nce import supcon_per_anchor

Array = jax.Array

_DISTANCES = ("l1", "l2", "cosine")
_MEDIAN_MODES = ("lower", "average")


class _LabelledBatch(NamedTuple):
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


def _labelled_batch(
    embeddings: Array,
    labels: Array,
    temperature: float | Array,
    valid: Array | None,
    axis_name: str | tuple[str, ...] | None,
) -> _LabelledBatch:
    """Checks the inputs, gathers the batch and builds masks and class indices."""
    embeddings = _core.check_embeddings(embeddings)
    labels = _core.check_labels(labels, embeddings.shape[0])
    _core.check_positive(temperature, "temperature")
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
    return _LabelledBatch(
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


def _class_means(lb: _LabelledBatch) -> Array:
    """``mu_c = (1/n_c) sum_{k: c_k = c} z_k`` over valid rows, self included: [m, D].

    Rows of absent class indices are 0.
    """
    rows = jnp.where(lb.batch.candidate_valid[:, None], lb.batch.candidates, 0.0)
    sums = jax.ops.segment_sum(rows, lb.class_ids, num_segments=rows.shape[0])
    return _core.safe_divide(sums, lb.class_counts[:, None])


def _squared_scaled_distance(z: Array, distance: str, bandwidth: float | Array) -> Array:
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


def _nw_soft_labels(
    lb: _LabelledBatch, bandwidth: float | Array, distance: str
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
    t_sq = _squared_scaled_distance(lb.batch.candidates, distance, bandwidth)
    weights = jnp.where(valid[None, :], jnp.maximum(1.0 - t_sq, 0.0), 0.0)
    per_class = jax.ops.segment_sum(weights.T, lb.class_ids, num_segments=weights.shape[0]).T
    soft = _core.safe_divide(per_class, jnp.sum(weights, axis=1, keepdims=True))
    return jnp.where(valid[:, None], soft, 0.0)


def _nw_prototypes(soft_labels: Array, lb: _LabelledBatch) -> Array:
    """NW projection, Eq. (18): ``f̂(c) = sum_j NW(c; z_j) z_j / sum_j NW(c; z_j)``, [m, D].

    ``soft_labels`` [m, m] from :func:`_nw_soft_labels`; rows of absent class
    indices are 0.
    """
    numerator = jnp.matmul(
        soft_labels.T, lb.batch.candidates, precision=jax.lax.Precision.HIGHEST
    )
    return _core.safe_divide(numerator, jnp.sum(soft_labels, axis=0)[:, None])


def _median_prototypes(lb: _LabelledBatch, median_mode: str) -> Array:
    """Coordinate-wise class median over the valid rows, self included: [m, D].

    See :func:`_class_medians`; rows of absent class indices are 0.
    """
    return _class_medians(
        lb.batch.candidates, lb.batch.candidate_valid, lb.class_ids, lb.class_counts, median_mode
    )


def _class_medians(
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


def _class_onehot(class_ids: Array, num_classes: int, m: int) -> Array | None:
    """One-hot [m, K] for class sums as products when K is small, else None."""
    if num_classes > ONEHOT_MAX_CLASSES or m * num_classes * 4 > 64 * 2**20:
        return None
    return jax.nn.one_hot(class_ids, num_classes, dtype=jnp.float32)


def _nw_prototypes_of(
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
        z, h, valid, class_ids, _class_onehot(class_ids, num_classes, m), distance,
        num_classes, rows if block is None else min(rows, block),
    )


# --------------------------------------------------------------------------- terms


def _log_adjustment(
    anchors: Array,
    numerator_prototypes: Array,
    denominator_prototypes: Array,
    columns: Array,
    temperature: float | Array,
) -> Array:
    """``log R_i`` of Eq. (7)/(10) for given per-column projections: float32 [n].

    ``R_i = sum_{k in columns_i} e^{z_i . g₊_k / tau} / sum_{k in columns_i} e^{z_i . g₋_k / tau}``
    with ``g₊_k = numerator_prototypes[k]`` [m, D] and ``g₋_k =
    denominator_prototypes[k]`` [m, D]; ``columns`` [n, m] is ``k != i`` for
    the leave-one-out estimator (Eq. 10) or every valid k for the full sum.
    A difference of two log-sum-exps, so it neither overflows nor underflows.
    """
    numerator = _core.similarity_logits(anchors, numerator_prototypes, temperature)
    denominator = _core.similarity_logits(anchors, denominator_prototypes, temperature)
    return _core.masked_logsumexp(numerator, columns, axis=1) - _core.masked_logsumexp(
        denominator, columns, axis=1
    )


def _own_logit(lb: _LabelledBatch, prototypes: Array, temperature: float | Array) -> Array:
    """``z_i . g(c_i) / tau`` for each local anchor: [n]."""
    own = prototypes[lb.anchor_class_ids]
    return jnp.sum(lb.batch.anchors * own, axis=1) / jnp.asarray(temperature, jnp.float32)


def _adjustment(lb: _LabelledBatch, prototypes: Array, temperature: float | Array) -> Array:
    """Leave-one-out ``R_i`` (Eq. 10) with ``g₊ = prototypes``, ``g₋ = f``: [n].

    ``log R_i`` is zeroed on anchors that are not scored before the exp, so an
    overflow there cannot reach a gradient.
    """
    log_r = _log_adjustment(
        lb.batch.anchors,
        prototypes[lb.class_ids],
        lb.batch.candidates,
        lb.others,
        temperature,
    )
    return jnp.exp(jnp.where(lb.anchor_ok, log_r, 0.0))


def _supcon_type(lb: _LabelledBatch, prototypes: Array, temperature: float | Array) -> Array:
    """``-z_i . g(c_i)/tau + log sum_{k != i} e^{S_ik} + R_i`` (Eq. 14 with j != i): [n]."""
    uniformity = _core.masked_logsumexp(lb.logits, lb.others, axis=1)
    return uniformity - _own_logit(lb, prototypes, temperature) + _adjustment(
        lb, prototypes, temperature
    )


def _nce_type(lb: _LabelledBatch, prototypes: Array, temperature: float | Array) -> Array:
    """``-z_i . g(c_i)/tau + log sum_j e^{z_i . g(c_j)/tau}``, j over all valid rows (Eq. 15): [n]."""
    logits = _core.similarity_logits(lb.batch.anchors, prototypes[lb.class_ids], temperature)
    return _core.masked_logsumexp(logits, lb.live, axis=1) - _own_logit(
        lb, prototypes, temperature
    )


def _check_choice(value: str, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}, got {value!r}")


# --------------------------------------------------------------------------- streamed


def _check_num_classes(num_classes: int | None, labels: Array) -> None:
    """``num_classes`` is None or a positive int; concrete labels must lie in [0, num_classes)."""
    if num_classes is None:
        return
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or (
        num_classes < 1
    ):
        raise ValueError(f"`num_classes` must be a positive integer or None, got {num_classes!r}")
    try:
        concrete = np.asarray(labels)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return
    if concrete.size and (concrete.min() < 0 or concrete.max() >= num_classes):
        raise ValueError(
            f"`labels` must lie in [0, num_classes={num_classes}) when `num_classes` is given, "
            f"got values in [{concrete.min()}, {concrete.max()}]"
        )


def _supcon_type_block(kind: str):
    """Row-block function of ProjNCE (``kind="projnce"``) or a SupCon-type projection
    loss (``"projection"``: SoftSupCon, MedSupCon) for :func:`blockwise.stream_rows`.

    ``((S·tau [b, m], T·tau [b, K]), (tau, beta), (labels, global index, valid, class)
    [b], (labels [m], valid [m], n_c int32 [K]))`` -> (loss of each valid anchor, 0
    elsewhere [b]; anchor_ok bool [b]), with ``T_ic = z_i . g(c) / tau``.
    """

    def block_fn(dots, params, rows, cols):
        temperature, beta = params
        labels, index, anchor_valid, anchor_class = rows
        candidate_labels, candidate_valid, counts = cols
        logits, class_logits = dots[0] / temperature, dots[1] / temperature
        others = (index[:, None] != jnp.arange(logits.shape[1])[None, :]) & candidate_valid[
            None, :
        ]
        own_count = counts[anchor_class].astype(jnp.float32)
        anchor_ok = anchor_valid & (own_count >= 2)
        uniformity = _core.masked_logsumexp(logits, others, axis=1)
        if kind == "projnce":
            positives = others & (labels[:, None] == candidate_labels[None, :])
            alignment = jnp.sum(jnp.where(positives, logits, 0.0), axis=1) / jnp.maximum(
                own_count - 1.0, 1.0
            )
        else:
            alignment = jnp.take_along_axis(class_logits, anchor_class[:, None], axis=1)[:, 0]
        per_anchor = _supcon_type_rows(
            uniformity, alignment, class_logits, anchor_class, counts, anchor_ok, beta
        )
        return per_anchor, anchor_ok

    return block_fn


def _supcon_type_rows(uniformity, alignment, class_logits, anchor_class, counts, anchor_ok,
                      beta):
    """``U_i - alignment_i + beta R_i`` on scored anchors, 0 elsewhere: [b].

    ``uniformity`` [b] is ``log sum_{k != i} e^{S_ik}``, ``class_logits`` [b, K] is
    ``T``, ``counts`` int32 [K] is ``n_c``; ``log R_i = log sum_c m_ic e^{T_ic} - U_i``.
    """
    num_classes = counts.shape[0]
    # m_ic = n_c - 1[c = c_i]: the rows k != i of class c.
    is_own = jnp.arange(num_classes)[None, :] == anchor_class[:, None]
    others_per_class = counts[None, :].astype(jnp.float32) - is_own
    log_numerator = _core.masked_logsumexp(
        class_logits + jnp.log(jnp.maximum(others_per_class, 1.0)),
        others_per_class > 0,
        axis=1,
    )
    log_r = jnp.where(anchor_ok, log_numerator - uniformity, 0.0)
    per_anchor = uniformity - alignment + beta * jnp.exp(log_r)
    return jnp.where(anchor_ok, per_anchor, 0.0)


def _soft_supcon_rows(uniformity, class_dots, temperature, anchor_valid, anchor_class, counts):
    """SoftSupCon of each anchor from ``U`` [b] and ``z_i . f̂(c)`` [b, K]
    (:data:`nw_gram.RowLoss`): ``(loss, 0 where not scored; anchor_ok)``."""
    class_logits = class_dots / temperature
    anchor_ok = anchor_valid & (counts[anchor_class] >= 2)
    alignment = jnp.take_along_axis(class_logits, anchor_class[:, None], axis=1)[:, 0]
    per_anchor = _supcon_type_rows(
        uniformity, alignment, class_logits, anchor_class, counts, anchor_ok, 1.0
    )
    return per_anchor, anchor_ok


def _soft_nce_rows(uniformity, class_dots, temperature, anchor_valid, anchor_class, counts):
    """SoftNCE of each anchor from ``z_i . f̂(c)`` [b, K] (``uniformity`` is None)."""
    del uniformity
    return _nce_type_block((class_dots,), (temperature,), (anchor_valid, anchor_class), (counts,))


def _nce_type_block(dots, params, rows, cols):
    """Row-block function of an NCE-type projection loss (SoftNCE, MedNCE):
    ``log sum_c n_c e^{T_ic} - T_{i,c_i}`` from ``(T·tau [b, K],)`` alone."""
    (temperature,) = params
    anchor_valid, anchor_class = rows
    (counts,) = cols
    class_logits = dots[0] / temperature
    counts_f = counts.astype(jnp.float32)
    anchor_ok = anchor_valid & (counts_f[anchor_class] >= 2)
    denominator = _core.masked_logsumexp(
        class_logits + jnp.log(jnp.maximum(counts_f, 1.0))[None, :], (counts > 0)[None, :], axis=1
    )
    own = jnp.take_along_axis(class_logits, anchor_class[:, None], axis=1)[:, 0]
    return jnp.where(anchor_ok, denominator - own, 0.0), anchor_ok


def _projection_loss(
    kind: str,
    embeddings: Array,
    labels: Array,
    temperature: float | Array,
    valid: Array | None,
    axis_name: str | tuple[str, ...] | None,
    block_size: int | None,
    num_classes: int | None,
    *,
    beta: float | Array = 1.0,
    bandwidth: float | Array = 0.6,
    distance: str = "l1",
    median_mode: str = "lower",
) -> Array:
    """Every loss of this module, dense or streamed. ``kind``: ``projnce``,
    ``soft_supcon``, ``soft_nce``, ``med_supcon`` or ``med_nce``; only the
    hyperparameters of that kind are checked and used."""
    if kind == "projnce":
        _core.check_nonnegative(beta, "beta")
    elif kind.startswith("soft"):
        _check_choice(distance, _DISTANCES, "distance")
        _core.check_positive(bandwidth, "bandwidth")
    else:
        _check_choice(median_mode, _MEDIAN_MODES, "median_mode")
    embeddings = _core.check_embeddings(embeddings)
    labels = _core.check_labels(labels, embeddings.shape[0])
    _core.check_positive(temperature, "temperature")
    _check_num_classes(num_classes, labels)
    n = embeddings.shape[0]
    num_devices = _core.num_devices(axis_name)
    block = blockwise.choose_block(block_size, n * num_devices)
    if block is None:
        return _dense_loss(kind, embeddings, labels, temperature, valid, axis_name, beta,
                           bandwidth, distance, median_mode)
    rows = blockwise.gather_rows(embeddings, labels, valid, axis_name)
    anchor_rows = (labels, rows.index, rows.anchor_valid)
    hparams = dict(beta=beta, bandwidth=bandwidth, distance=distance, median_mode=median_mode)
    if num_classes is not None:
        total, anchor_ok = _streamed_total(
            kind, num_classes, rows, anchor_rows, rows.candidate_data, temperature, n,
            axis_name, block, **hparams,
        )
        return blockwise.global_mean(total, anchor_ok, axis_name)
    m = rows.candidates.shape[0]
    _, class_ids = jnp.unique(rows.candidate_data, return_inverse=True, size=m)
    class_ids = class_ids.reshape(m).astype(jnp.int32)
    sizes = class_slot_sizes(m)
    branches = [
        functools.partial(_streamed_total, kind, k, rows, anchor_rows, temperature=temperature,
                          n=n, axis_name=axis_name, block=block, **hparams)
        for k in sizes
    ]
    if len(branches) == 1:
        total, anchor_ok = branches[0](class_ids)
    else:
        # Dense ids lie in [0, number of distinct labels): the smallest size that holds them.
        which = jnp.searchsorted(jnp.asarray(sizes), jnp.max(class_ids) + 1)
        total, anchor_ok = jax.lax.switch(which, branches, class_ids)
    return blockwise.global_mean(total, anchor_ok, axis_name)


#: Smallest number of class slots the streamed losses compile for when ``num_classes``
#: is not given; see :func:`class_slot_sizes`.
CLASS_SLOTS_MIN = 128
#: Ratio between consecutive class-slot sizes.
CLASS_SLOTS_GROWTH = 4


def class_slot_sizes(m: int) -> tuple[int, ...]:
    """Static numbers of class slots K the streamed losses are compiled for, without
    ``num_classes``: ``CLASS_SLOTS_MIN · CLASS_SLOTS_GROWTH^i`` below m, then m.

    Labels are mapped to dense indices among the distinct labels of the global batch
    (``jnp.unique``), so a batch with k distinct labels needs only k slots; the loss
    runs (``lax.switch``) the branch with the smallest size >= k, whose class
    statistics are [K, D] and whose class products are [block, K] instead of
    [block, m]. Every branch computes the same value; only the cost differs.
    """
    sizes = []
    k = CLASS_SLOTS_MIN
    while k < m:
        sizes.append(k)
        k *= CLASS_SLOTS_GROWTH
    return (*sizes, m)


def _streamed_total(kind, k, rows, anchor_rows, class_ids, temperature, n, axis_name, block,
                    *, beta, bandwidth, distance, median_mode):
    """Sum over local valid anchors of a streamed projection loss with K = ``k`` class
    slots, ``class_ids`` [m] int32 in [0, k): ``(total, anchor_ok [n])``."""
    labels, index, anchor_valid = anchor_rows
    z, z_valid = rows.candidates, rows.candidate_valid
    counts = jax.ops.segment_sum(z_valid.astype(jnp.int32), class_ids, num_segments=k)
    anchor_class = jax.lax.dynamic_slice_in_dim(
        class_ids, _core.local_row_offset(n, axis_name), n
    )
    if kind.startswith("soft") and distance == "cosine":
        # Kernel and logits from the same Gram blocks: one fused pass pair (nw_gram).
        m = z.shape[0]
        return nw_gram.soft_cosine_total(
            _soft_supcon_rows if kind == "soft_supcon" else _soft_nce_rows,
            kind == "soft_supcon", k, block, z,
            blockwise.like_anchors(temperature, rows.anchors),
            blockwise.like_anchors(bandwidth, rows.anchors),
            z_valid, class_ids, _class_onehot(class_ids, k, m), anchor_valid, anchor_class,
            counts, _core.local_row_offset(n, axis_name),
        )
    if kind == "projnce":
        sums = jax.ops.segment_sum(jnp.where(z_valid[:, None], z, 0.0), class_ids, num_segments=k)
        prototypes = _core.safe_divide(sums, counts.astype(jnp.float32)[:, None])
    elif kind.startswith("soft"):
        prototypes = _nw_prototypes_of(z, z_valid, class_ids, k, bandwidth, distance, block)
    else:
        prototypes = _class_medians(
            z, z_valid, class_ids, counts.astype(jnp.float32), median_mode
        )
    tau = blockwise.like_anchors(temperature, rows.anchors)
    if kind.endswith("_nce"):
        return blockwise.stream_rows(
            _nce_type_block, rows.anchors, (prototypes,), (tau,),
            (anchor_valid, anchor_class), (counts,), block,
        )
    return blockwise.stream_rows(
        _supcon_type_block("projnce" if kind == "projnce" else "projection"),
        rows.anchors,
        (z, prototypes),
        (tau, blockwise.like_anchors(beta, rows.anchors)),
        (labels, index, anchor_valid, anchor_class),
        (rows.candidate_data, z_valid, counts),
        block,
    )


def _dense_loss(kind, embeddings, labels, temperature, valid, axis_name, beta, bandwidth,
                distance, median_mode) -> Array:
    """The [n, m] form of :func:`_projection_loss`."""
    lb = _labelled_batch(embeddings, labels, temperature, valid, axis_name)
    if kind == "projnce":
        supcon = supcon_per_anchor(lb.logits, lb.positives, lb.others)
        per_anchor = supcon + jnp.asarray(beta, jnp.float32) * _adjustment(
            lb, _class_means(lb), temperature
        )
        return _core.valid_anchor_mean(per_anchor, lb.anchor_ok, axis_name)
    if kind.startswith("soft"):
        m = lb.class_ids.shape[0]
        prototypes = _nw_prototypes_of(
            lb.batch.candidates, lb.batch.candidate_valid, lb.class_ids, m, bandwidth, distance
        )
    else:
        prototypes = _median_prototypes(lb, median_mode)
    term = _nce_type if kind.endswith("_nce") else _supcon_type
    return _core.valid_anchor_mean(term(lb, prototypes, temperature), lb.anchor_ok, axis_name)


# --------------------------------------------------------------------------- losses


#: Arguments every loss of this module takes, spliced into the docstrings by
#: :func:`_splice_shared_args` at the markers ``{loss_inputs}`` and ``{shared_args}``.
_LOSS_INPUTS = """embeddings: float [N, D] rows on this device (normalised inside).
      labels: int [N] class labels.
      temperature: tau > 0 (0.07 in the paper)."""
_SHARED_ARGS = """axis_name: mesh axis, or tuple of mesh axes, of the enclosing
        ``shard_map`` or ``pmap`` to gather the batch over; None for global arrays,
        sharded or not (see ``_core``).
      valid: optional bool [N]; False rows are padding (neither anchors nor
        candidates nor class statistics).
      block_size: stream over blocks of this many anchor rows (O(N·D + block·N)
        memory, fused gradient; see ``blockwise``); None chooses the dense form
        up to ``blockwise.BLOCKWISE_THRESHOLD`` global rows and streams above.
      num_classes: optional static number of classes; labels must then lie in
        [0, num_classes), and the streamed form has [num_classes, D] class
        statistics and [block, num_classes] class products. Without it the labels
        are mapped to dense indices among the distinct labels of the global batch,
        and the streamed form runs the smallest of its compiled class-slot counts
        (:func:`class_slot_sizes`) that holds them. Same value either way.

    Returns:
      float32 scalar, the mean over valid anchors of the global batch."""


def _splice_shared_args(doc: str) -> str:
    """``doc`` with the shared argument descriptions at its markers (also used by the API
    site, whose doc tool reads the docstrings from source)."""
    return doc.replace("{loss_inputs}", _LOSS_INPUTS).replace("{shared_args}", _SHARED_ARGS)


def _document(fn):
    """Splices the shared argument descriptions into ``fn``'s docstring."""
    fn.__doc__ = _splice_shared_args(fn.__doc__)
    return fn


@_core.explicit_sharding
@_document
def projnce(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.07,
    beta: float | Array = 1.0,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
    num_classes: int | None = None,
) -> Array:
    """ProjNCE: SupCon plus the β-weighted adjustment term R with class-mean projections.

    For anchor i with label c_i, unit rows, ``S_ik = z_i . z_k / tau`` and
    ``P(i)`` the other valid rows of class c_i::

      l_i = -mean_{p in P(i)} S_ip + log sum_{k != i} e^{S_ik} + beta R_i
      R_i = sum_{k != i} e^{z_i . mu(c_k) / tau} / sum_{k != i} e^{S_ik}

    ``mu(c)`` is the mean of the valid rows of class c (self included, not
    renormalised); the sums run over the valid rows k != i. The loss is the mean
    of ``l_i`` over valid anchors with ``|P(i)| >= 1``; ``beta = 0`` is SupCon
    exactly. Gradients flow through the class means. Conventions:
    ``docs/losses.md``.

    Args:
      {loss_inputs}
      beta: weight of R, >= 0 (1 is ProjNCE; the paper also shows 5 and 10).
      {shared_args}

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> labels = jnp.array([0, 0, 1, 1])
      >>> round(float(losses.projnce(z, labels, temperature=0.5)), 4)
      1.5243

    References:
      Minoh Jeong and Alfred Hero (2025). Generalizing Supervised Contrastive Learning:
      A Projection Perspective. arXiv:2506.09810. Definition 2.3 and Eq. (12) (the
      loss), Eq. (10) (the leave-one-out R); Table 1 (CIFAR with label noise).
    """
    return _projection_loss("projnce", embeddings, labels, temperature, valid, axis_name,
                            block_size, num_classes, beta=beta)


@_core.explicit_sharding
@_document
def soft_supcon(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.07,
    bandwidth: float | Array = 0.6,
    distance: str = "l1",
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
    num_classes: int | None = None,
) -> Array:
    """SoftSupCon: ProjNCE's form with Nadaraya–Watson class projections ``f̂`` (β = 1).

    ::

      l_i = -z_i . f̂(c_i) / tau + log sum_{k != i} e^{S_ik} + R_i
      R_i = sum_{k != i} e^{z_i . f̂(c_k) / tau} / sum_{k != i} e^{S_ik}
      f̂(c) = sum_j NW(c; z_j) z_j / sum_j NW(c; z_j)
      NW(c; z_j) = sum_l K(d(z_j, z_l) / h) 1[c_l = c] / sum_l K(d(z_j, z_l) / h)

    with ``K(t) = max(0, 1 - t²)`` and j, l over the valid rows of the global
    batch (j = l included), averaged over valid anchors with another row of
    their class. The first denominator excludes k = i, as SupCon. Gradients flow
    through the soft labels. With ``h`` below every pairwise distance, ``f̂(c)``
    is the class mean. The projection is computed over blocks of rows: O(N²D)
    time for ``l1`` (elementwise), two [N, N] products for ``l2``/``cosine``, and
    O(block·N·D) memory at most (``nw_projection``); streamed with ``cosine``, the
    kernel and the logits come from the same Gram blocks (``nw_gram``).

    Args:
      {loss_inputs}
      bandwidth: kernel bandwidth h > 0 (0.6 in the paper).
      distance: ``"l1"`` (the paper's default), ``"l2"`` or ``"cosine"``
        (``1/2 - 1/2 cos``).
      {shared_args}

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> labels = jnp.array([0, 0, 1, 1])
      >>> round(float(losses.soft_supcon(z, labels, temperature=0.5, bandwidth=1.5)), 4)
      1.371

    References:
      Minoh Jeong and Alfred Hero (2025). Generalizing Supervised Contrastive Learning:
      A Projection Perspective. arXiv:2506.09810. Definition 3.1 and Eq. (14)
      (SoftSupCon), Eqs. (17)-(18) (the Nadaraya–Watson soft labels and projection);
      Tables 2-3.
    """
    return _projection_loss("soft_supcon", embeddings, labels, temperature, valid, axis_name,
                            block_size, num_classes, bandwidth=bandwidth, distance=distance)


@_core.explicit_sharding
@_document
def soft_nce(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.07,
    bandwidth: float | Array = 0.6,
    distance: str = "l1",
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
    num_classes: int | None = None,
) -> Array:
    """SoftNCE: InfoNCE between each row and the Nadaraya–Watson projections (no R).

    ::

      l_i = -z_i . f̂(c_i) / tau + log sum_{j=1}^{N} e^{z_i . f̂(c_j) / tau}
          = -T_{i,c_i} + log sum_c n_c e^{T_ic},    T_ic = z_i . f̂(c) / tau

    with ``f̂`` as in :func:`soft_supcon`, ``n_c`` the valid rows of class c and j
    over every valid row, j = i included; i.e. cross-entropy with logits
    ``T_ic + log n_c`` plus the constant ``log n_{c_i}``. Averaged over valid
    anchors with another row of their class.

    Args:
      {loss_inputs}
      bandwidth: kernel bandwidth h > 0 (0.6 in the paper).
      distance: ``"l1"`` (the paper's default), ``"l2"`` or ``"cosine"``.
      {shared_args}

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> labels = jnp.array([0, 0, 1, 1])
      >>> round(float(losses.soft_nce(z, labels, temperature=0.5, distance="cosine")), 4)
      1.011

    References:
      Minoh Jeong and Alfred Hero (2025). Generalizing Supervised Contrastive Learning:
      A Projection Perspective. arXiv:2506.09810. Definition 3.2 and Eq. (15) (SoftNCE),
      Eqs. (17)-(18); Tables 2-3.
    """
    return _projection_loss("soft_nce", embeddings, labels, temperature, valid, axis_name,
                            block_size, num_classes, bandwidth=bandwidth, distance=distance)


@_core.explicit_sharding
@_document
def med_supcon(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.07,
    median_mode: str = "lower",
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
    num_classes: int | None = None,
) -> Array:
    """MedSupCon: SoftSupCon with the coordinate-wise class median as projection.

    ::

      l_i = -z_i . f_med(c_i) / tau + log sum_{k != i} e^{S_ik} + R_i
      R_i = sum_{k != i} e^{z_i . f_med(c_k) / tau} / sum_{k != i} e^{S_ik}

    ``f_med(c)`` is the per-coordinate median of the valid rows of class c, self
    included, not renormalised (its norm may exceed 1). ``lower`` takes the lower
    middle element for even counts (PyTorch's ``median``), ``average`` the mean
    of the two middle ones (numpy's). Gradients reach the selected rows only.

    Args:
      {loss_inputs}
      median_mode: ``"lower"`` or ``"average"``.
      {shared_args}

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> labels = jnp.array([0, 0, 1, 1])
      >>> round(float(losses.med_supcon(z, labels, temperature=0.5)), 4)
      1.2966

    References:
      Minoh Jeong and Alfred Hero (2025). Generalizing Supervised Contrastive Learning:
      A Projection Perspective. arXiv:2506.09810. Section 3.3 (median projections) and
      Appendix C, Eq. (33) with the projection replaced by the median; Table 1.
    """
    return _projection_loss("med_supcon", embeddings, labels, temperature, valid, axis_name,
                            block_size, num_classes, median_mode=median_mode)


@_core.explicit_sharding
@_document
def med_nce(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.07,
    median_mode: str = "lower",
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
    num_classes: int | None = None,
) -> Array:
    """MedNCE: SoftNCE with the coordinate-wise class median as projection (no R).

    ::

      l_i = -z_i . f_med(c_i) / tau + log sum_{j=1}^{N} e^{z_i . f_med(c_j) / tau}
          = -T_{i,c_i} + log sum_c n_c e^{T_ic},    T_ic = z_i . f_med(c) / tau

    with ``f_med`` as in :func:`med_supcon` and j = i included.

    Args:
      {loss_inputs}
      median_mode: ``"lower"`` or ``"average"``.
      {shared_args}

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> labels = jnp.array([0, 0, 1, 1])
      >>> round(float(losses.med_nce(z, labels, temperature=0.5)), 4)
      0.8278

    References:
      Minoh Jeong and Alfred Hero (2025). Generalizing Supervised Contrastive Learning:
      A Projection Perspective. arXiv:2506.09810. Section 3.3 and Appendix C, Eq. (34)
      with the projection replaced by the median.
    """
    return _projection_loss("med_nce", embeddings, labels, temperature, valid, axis_name,
                            block_size, num_classes, median_mode=median_mode)
