"""SoftSupCon / SoftNCE with the cosine kernel: the Nadaraya–Watson projection fused
with the loss, two passes over the Gram matrix in all.

With ``distance="cosine"`` the kernel weights of Jeong & Hero's Eq. (17),
``w_jl = max(0, 1 - t_jl²)``, ``t_jl = (1/2 - 1/2 G_jl) / h``, and the SupCon
logits ``S_jl = G_jl / tau`` are functions of the same Gram matrix
``G = z zᵀ`` of the unit rows. The separate forms (``projnce.nw_projection``
then ``blockwise.stream_rows``) form each row block of ``G`` three times and take
nine [b, m] x [m, D]-sized products for it; here it is formed twice:

* pass 1: ``G_b`` gives the block's kernel weights and soft labels (accumulated
  into the projections' numerator and denominator) and, for the SupCon form, the
  anchors' ``U_j = log sum_{l != j} e^{S_jl}``;
* between the passes: ``f̂`` [K, D], the class logits ``T = z f̂ᵀ / tau`` of the
  local anchors, the loss from ``(U, T)`` and its gradient ``dL/dU``, ``dL/dT``
  (``jax.vjp`` of the loss's per-anchor function), hence ``dL/df̂``;
* pass 2: ``G_b`` again gives both the projection's backward
  (``dL/dG`` through the kernel, as in ``projnce.nw_projection``) and the SupCon
  part ``dL/dS_jl = dL/dU_j · softmax_l(S_j)``; their sum is ``M_b`` [b, m].

When the class sums are one-hot products the soft labels of pass 1 are kept
([m, K]), so every row's ``dNW_j / s_j`` and ``ds_j = -sum_c dNW_jc NW_jc / s_j``
are known before pass 2 and no class sum is recomputed; since ``G`` is
symmetric a block then forms its rows of ``M`` and its columns, and its
gradient is the one product ``(M + Mᵀ)_b z``. Value and gradient: four
[b, m] x [m, D]-sized products per block (two Gram blocks, the one-hot class
sums, one gradient product) instead of nine; with segment-sum class sums (many
classes) the soft labels are recomputed and the gradient takes ``M_b z`` and
``M_bᵀ z_b``. The undifferentiated call is pass 1 and the loss. Memory:
O(b·m + m·K).

Under ``axis_name`` every device runs both passes over all m gathered rows (the
projection needs every row's soft labels, as in ``projnce.nw_projection``) and
scores only its local anchors, so it returns the gradient of its own anchors'
loss into the gathered rows; the gather's transpose sums them over devices.
Derivation: ``docs/losses.md`` ("Cosine kernel, fused").
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from contrastive_jax.losses import _core

Array = jax.Array
#: ``row_loss(uniformity [n] or None, class_dots [n, K], tau, anchor_valid [n],
#: anchor_class [n], counts [K]) -> (per-anchor loss, 0 where not scored [n]; anchor_ok [n])``
#: with ``uniformity_j = log sum_{l != j} e^{S_jl}`` and ``class_dots = z f̂ᵀ`` (not
#: divided by tau).
RowLoss = Callable[..., tuple[Array, Array]]


def _dot(x: Array, y: Array) -> Array:
    """``x @ y.T`` in float32 at full precision."""
    return jnp.matmul(x, y.T, precision=jax.lax.Precision.HIGHEST)


def _mm(x: Array, y: Array) -> Array:
    """``x @ y`` in float32 at full precision."""
    return jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST)


def _class_sum(x: Array, class_ids: Array, onehot: Array | None, num_classes: int) -> Array:
    """``sum_{l: c_l = c} x_jl``: [b, m] -> [b, K] (one-hot product or segment sum)."""
    if onehot is not None:
        return _mm(x, onehot)
    return jax.ops.segment_sum(x.T, class_ids, num_segments=num_classes).T


def _blocks(block: int, *arrays: Array) -> tuple[Array, ...]:
    """Each [m, ...] array as [num_blocks, block, ...], zero-padded."""
    m = arrays[0].shape[0]
    num_blocks = -(-m // block)
    pad = num_blocks * block - m
    return tuple(
        jnp.pad(x, ((0, pad),) + ((0, 0),) * (x.ndim - 1)).reshape(
            (num_blocks, block) + x.shape[1:]
        )
        for x in arrays
    )


def _weights(gram: Array, row_valid: Array, valid: Array, h: Array):
    """``(t, active, w)`` [b, m]: ``t = (1/2 - 1/2 G) / h``, ``w = 1 - t²`` where
    ``t² < 1`` between valid rows, else 0."""
    t = (0.5 - 0.5 * gram) / h
    active = row_valid[:, None] & valid[None, :] & (t * t < 1.0)
    return t, active, jnp.where(active, 1.0 - t * t, 0.0)


def _others(row_index: Array, valid: Array) -> Array:
    """Valid columns l != j of the block's rows: bool [b, m]."""
    columns = jnp.arange(valid.shape[0], dtype=jnp.int32)
    return (row_index[:, None] != columns[None, :]) & valid[None, :]


def _pass1(z, tau, h, valid, class_ids, onehot, num_classes, block, uniformity, keep_soft):
    """Projection numerator [K, D] and denominator [K]; per row ``U`` [m] (or None),
    ``s`` [m] and, with ``keep_soft``, the soft labels [m, K] (else None)."""
    m = z.shape[0]
    zb, vb, ib = _blocks(block, z, valid, jnp.arange(m, dtype=jnp.int32))

    def body(carry, x):
        numerator, denominator = carry
        rows, row_valid, row_index = x
        gram = _dot(rows, z)
        _, _, w = _weights(gram, row_valid, valid, h)
        total = jnp.sum(w, axis=1)
        soft = _core.safe_divide(_class_sum(w, class_ids, onehot, num_classes), total[:, None])
        carry = (numerator + _mm(soft.T, rows), denominator + jnp.sum(soft, axis=0))
        u = (
            _core.masked_logsumexp(gram / tau, _others(row_index, valid), axis=1)
            if uniformity else None
        )
        return carry, (u, total, soft if keep_soft else None)

    like = jnp.zeros_like(z[0, 0])
    init = (jnp.zeros((num_classes, z.shape[1]), z.dtype) + like,
            jnp.zeros((num_classes,), z.dtype) + like)
    (numerator, denominator), per_row = jax.lax.scan(body, init, (zb, vb, ib))
    u, total, soft = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:])[:m], per_row)
    return numerator, denominator, u, total, soft


def _middle(row_loss, z, tau, numerator, denominator, u, anchor_valid, anchor_class, counts,
            offset, block, with_grad):
    """Projections and the loss of the local anchors, ``block`` anchors at a time (the
    class logits are [block, K]): ``(total, anchor_ok [n], prototypes)`` and, with
    ``with_grad``, ``(dU [n] or None, d anchors [n, D], dL/df̂ [K, D], dL/dtau)``."""
    n = anchor_valid.shape[0]
    prototypes = _core.safe_divide(numerator, denominator[:, None])
    anchors = jax.lax.dynamic_slice_in_dim(z, offset, n)
    local_u = None if u is None else jax.lax.dynamic_slice_in_dim(u, offset, n)
    ab, vb, cb = _blocks(block, anchors, anchor_valid, anchor_class)
    ub = None if u is None else _blocks(block, local_u)[0]

    def total_of(uniformity, class_dots, temperature, row_valid, row_class):
        per_anchor, anchor_ok = row_loss(
            uniformity, class_dots, temperature, row_valid, row_class, counts
        )
        return jnp.sum(per_anchor), anchor_ok

    def body(carry, x):
        total, d_prototypes, d_tau = carry
        rows, row_valid, row_class, row_u = x
        class_dots = _dot(rows, prototypes)
        if not with_grad:
            value, anchor_ok = total_of(row_u, class_dots, tau, row_valid, row_class)
            return (total + value, d_prototypes, d_tau), (anchor_ok, None, None)
        value, vjp, anchor_ok = jax.vjp(
            lambda uu, cd, tt: total_of(uu, cd, tt, row_valid, row_class),
            row_u, class_dots, tau, has_aux=True,
        )
        d_u, d_class_dots, g_tau = vjp(jnp.ones_like(value))
        # class_dots = rows f̂ᵀ.
        carry = (total + value, d_prototypes + _mm(d_class_dots.T, rows), d_tau + g_tau)
        return carry, (anchor_ok, d_u, _mm(d_class_dots, prototypes))

    like = jnp.zeros_like(z[0, 0])
    init = (like, jnp.zeros_like(prototypes) + like, jnp.zeros_like(tau) + like)
    (total, d_prototypes, d_tau), per_row = jax.lax.scan(body, init, (ab, vb, cb, ub))
    anchor_ok, d_u, d_anchors = jax.tree.map(
        lambda x: x.reshape((-1,) + x.shape[2:])[:n], per_row
    )
    return (total, anchor_ok, prototypes), (d_u, d_anchors, d_prototypes, d_tau)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def soft_cosine_total(row_loss: RowLoss, uniformity: bool, num_classes: int, block: int,
                      z: Array, tau: Array,
                      h: Array, valid: Array, class_ids: Array, onehot: Array | None,
                      anchor_valid: Array, anchor_class: Array, counts: Array,
                      offset: Array) -> tuple[Array, Array]:
    """Sum over the local anchors of SoftSupCon or SoftNCE with the cosine kernel.

    Args:
      row_loss: the loss of each anchor from its ``U`` and class products (static).
      uniformity: whether ``row_loss`` takes ``U`` (SoftSupCon; static). If not
        (SoftNCE), it gets None and no ``U`` is computed.
      num_classes: K, class slots (static).
      block: rows per block (static).
      z: float32 [m, D], the unit rows of the global batch.
      tau: float32 scalar temperature.
      h: float32 scalar bandwidth.
      valid: bool [m].
      class_ids: int32 [m] in [0, K).
      onehot: float32 [m, K] one-hot of ``class_ids`` or None (class sums as
        segment sums; pass 2 then recomputes the soft labels).
      anchor_valid: bool [n], anchor_class int32 [n]: the local anchors, rows
        ``offset`` .. ``offset + n`` of ``z``.
      counts: int32 [K], valid rows per class.
      offset: int32 scalar, the local anchors' first global row.

    Returns:
      ``(total, anchor_ok [n])``.
    """
    numerator, denominator, u, _, _ = _pass1(
        z, tau, h, valid, class_ids, onehot, num_classes, block, uniformity, False
    )
    (total, anchor_ok, _), _ = _middle(row_loss, z, tau, numerator, denominator, u,
                                       anchor_valid, anchor_class, counts, offset, block, False)
    return total, anchor_ok


def _fwd(row_loss, uniformity, num_classes, block, z, tau, h, valid, class_ids, onehot,
         anchor_valid, anchor_class, counts, offset):
    keep_soft = onehot is not None
    numerator, denominator, u, s, soft = _pass1(
        z, tau, h, valid, class_ids, onehot, num_classes, block, uniformity, keep_soft
    )
    (total, anchor_ok, prototypes), (d_u_local, d_anchors, d_prototypes, d_tau) = _middle(
        row_loss, z, tau, numerator, denominator, u, anchor_valid, anchor_class, counts, offset,
        block, True,
    )
    m = z.shape[0]
    # f̂ = numerator / denominator.
    d_numerator = _core.safe_divide(d_prototypes, denominator[:, None])
    d_denominator = -_core.safe_divide(jnp.sum(d_prototypes * prototypes, axis=1), denominator)

    like = jnp.zeros_like(z[0, 0])
    d_u = u_safe = None
    if uniformity:
        d_u = jax.lax.dynamic_update_slice_in_dim(jnp.zeros((m,), z.dtype) + like, d_u_local,
                                                  offset, 0)
        u_safe = jnp.where(u > -0.5 * _core.BIG, u, 0.0)  # a row without columns: no exp overflow
    # With the soft labels kept, every row's dNW/s and ds are known before pass 2, so a
    # block forms both M_b and the block's columns of M (G is symmetric) and takes one
    # product (M_b + (Mᵀ)_b) z instead of M_b z and M_bᵀ z_b.
    symmetric = soft is not None
    d_class_all = d_total_all = d_class_t = None
    if symmetric:
        d_class_all = _core.safe_divide(_dot(z, d_numerator) + d_denominator[None, :],
                                        s[:, None])
        d_total_all = -jnp.sum(d_class_all * soft, axis=1)
        d_class_t = d_class_all.T
    zb, vb, ib, cb, sb = _blocks(block, z, valid, jnp.arange(m, dtype=jnp.int32), class_ids, s)
    ub, dub = (None, None) if not uniformity else _blocks(block, u_safe, d_u)
    softb, dcb, dtb = (None,) * 3 if not symmetric else _blocks(
        block, soft, d_class_all, d_total_all
    )

    def body(carry, x):
        d_cols, d_h, d_t = carry
        rows, row_valid, row_index, row_class, total_w, row_u, row_du, row_soft, d_class, \
            d_total = x
        gram = _dot(rows, z)
        t, active, w = _weights(gram, row_valid, valid, h)
        if not symmetric:
            row_soft = _core.safe_divide(
                _class_sum(w, class_ids, onehot, num_classes), total_w[:, None]
            )
            # numerator += softᵀ rows, denominator += colsum(soft); soft = class_sum(w) / s.
            d_soft = _dot(rows, d_numerator) + d_denominator[None, :]
            d_class = _core.safe_divide(d_soft, total_w[:, None])
            d_total = -_core.safe_divide(jnp.sum(d_soft * row_soft, axis=1), total_w)
        d_rows = _mm(row_soft, d_numerator)
        d_w = jnp.where(active, jnp.take(d_class, class_ids, axis=1) + d_total[:, None], 0.0)
        # w = 1 - t², t = (1/2 - 1/2 G) / h: d w / d G = t / h, d w / d h = 2 t² / h.
        d_h = d_h + 2.0 * jnp.sum(d_w * t * t) / h
        if symmetric:
            d_w = d_w + jnp.where(active, d_class_t[row_class] + d_total_all[None, :], 0.0)
        d_gram = d_w * t / h
        if uniformity:
            logits = gram / tau
            p = jnp.where(_others(row_index, valid), jnp.exp(logits - row_u[:, None]), 0.0)
            d_logits = row_du[:, None] * p
            d_t = d_t - jnp.sum(d_logits * logits) / tau
            d_gram = d_gram + d_logits / tau
            if symmetric:
                # Column j of anchor l's softmax: j != l and j valid.
                column = (row_index[:, None] != jnp.arange(m)[None, :]) & row_valid[:, None]
                p_t = jnp.where(column, jnp.exp(logits - u_safe[None, :]), 0.0)
                d_gram = d_gram + d_u[None, :] * p_t / tau
        d_rows = d_rows + _mm(d_gram, z)
        if not symmetric:
            d_cols = d_cols + _mm(d_gram.T, rows)
        return (d_cols, d_h, d_t), d_rows

    init = (jnp.zeros_like(z) + like, jnp.zeros_like(h) + like, jnp.zeros_like(tau) + like)
    (d_cols, d_h, d_t), d_rows = jax.lax.scan(
        body, init, (zb, vb, ib, cb, sb, ub, dub, softb, dcb, dtb)
    )
    d_z = d_cols + d_rows.reshape(-1, z.shape[1])[:m]
    d_z = d_z + jax.lax.dynamic_update_slice_in_dim(jnp.zeros_like(d_z), d_anchors, offset, 0)
    return (total, anchor_ok), (d_z, d_tau + d_t, d_h)


def _bwd(row_loss, uniformity, num_classes, block, residuals, cotangents):
    d_z, d_tau, d_h = residuals
    ct = cotangents[0]
    return (ct * d_z, ct * d_tau, ct * d_h) + (None,) * 7


soft_cosine_total.defvjp(_fwd, _bwd)
