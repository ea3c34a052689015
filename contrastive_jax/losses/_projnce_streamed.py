"""The streamed form of the ProjNCE family: row-block functions for ``blockwise.stream_rows``.

Above ``blockwise.BLOCKWISE_THRESHOLD`` global rows (or with ``block_size``) the losses of
:mod:`contrastive_jax.losses._projnce` stream over anchor blocks with a fused gradient,
with the rows and the [K, D] class projections (:mod:`contrastive_jax.losses._projection`)
as candidates; with the cosine distance the Nadaraya–Watson kernel and the logits come
from the same Gram blocks (``nw_gram``). Without ``num_classes`` the streamed form is
compiled for a few class-slot counts (:func:`class_slot_sizes`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from contrastive_jax.losses import _core, blockwise
from contrastive_jax.losses import _nw_gram as nw_gram
from contrastive_jax.losses import _projection as projection

Array = jax.Array


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
    return nce_type_block((class_dots,), (temperature,), (anchor_valid, anchor_class), (counts,))


def nce_type_block(dots, params, rows, cols):
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


def streamed_total(kind, k, rows, anchor_rows, class_ids, temperature, n, axis_name, block,
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
            z_valid, class_ids, projection.class_onehot(class_ids, k, m), anchor_valid, anchor_class,
            counts, _core.local_row_offset(n, axis_name),
        )
    if kind == "projnce":
        sums = jax.ops.segment_sum(jnp.where(z_valid[:, None], z, 0.0), class_ids, num_segments=k)
        prototypes = _core.safe_divide(sums, counts.astype(jnp.float32)[:, None])
    elif kind.startswith("soft"):
        prototypes = projection.nw_prototypes_of(z, z_valid, class_ids, k, bandwidth, distance, block)
    else:
        prototypes = projection.class_medians(
            z, z_valid, class_ids, counts.astype(jnp.float32), median_mode
        )
    tau = blockwise.like_anchors(temperature, rows.anchors)
    if kind.endswith("_nce"):
        return blockwise.stream_rows(
            nce_type_block, rows.anchors, (prototypes,), (tau,),
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
