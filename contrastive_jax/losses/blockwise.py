"""Memory-lean SupCon / SINCERE: stream over column blocks, recompute in the VJP.

The dense losses hold the [n, m] logit matrix and, under autodiff, several
[n, m] residuals. Here the candidates are processed ``block`` columns at a time
with an online log-sum-exp (spec/sincere-supcon.md §5), and a ``jax.custom_vjp``
recomputes each block's logits in the backward pass from O(n + m) saved
statistics, so memory is O(n·D + m·D + n·block) instead of O(n·m).

Backward, per anchor t with upstream cotangent c_t (G = dℓ/dS, Eq. 13/14 at the
logit level, spec §3.3):

* SupCon: ``G_tj = c_t (softmax_{A_t}(S_t)_j - [j in P_t] / |P_t|)``.
* SINCERE: ``G_tp = -c_t σ(L_t - S_tp) / |P_t|`` on positives and
  ``G_tj = c_t (a_t / |P_t|) e^{S_tj - L_t}`` on negatives, with
  ``L_t = LSE_{N_t} S_t``, ``a_t = Σ_{p in P_t} σ(L_t - S_tp)``.

Then ``d anchors = G C / τ``, ``d candidates = Gᵀ A / τ`` and
``d τ = -Σ G ⊙ S / τ``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from contrastive_jax.losses._core import BIG

Array = jax.Array


class _Blocks(NamedTuple):
    """Candidates cut into [num_blocks, block, ...] with padding marked invalid."""

    embeddings: Array  # [nb, b, D]
    labels: Array  # [nb, b]
    valid: Array  # [nb, b]
    index: Array  # [nb, b] global column index


def _to_blocks(candidates: Array, labels: Array, valid: Array, block: int) -> _Blocks:
    m = candidates.shape[0]
    nb = -(-m // block)
    pad = nb * block - m

    def cut(x):
        widths = [(0, pad)] + [(0, 0)] * (x.ndim - 1)
        return jnp.pad(x, widths).reshape((nb, block) + x.shape[1:])

    return _Blocks(
        cut(candidates), cut(labels), cut(valid), jnp.arange(nb * block).reshape(nb, block)
    )


def _block_masks(anchor_labels, anchor_index, blk_labels, blk_valid, blk_index):
    """(positives, negatives, others) bool [n, b] of one column block."""
    same = anchor_labels[:, None] == blk_labels[None, :]
    live = blk_valid[None, :]
    not_self = anchor_index[:, None] != blk_index[None, :]
    return same & not_self & live, ~same & live, not_self & live


def _block_logits(anchors, blk_embeddings, temperature):
    return jnp.matmul(anchors, blk_embeddings.T, precision=jax.lax.Precision.HIGHEST) / temperature


def _online_lse(anchors, blocks, anchor_labels, anchor_index, temperature, which):
    """Per-row log-sum-exp over the ``which`` mask ("others" or "negatives"), streamed."""

    def body(carry, blk):
        run_max, run_sum = carry
        logits = _block_logits(anchors, blk.embeddings, temperature)
        pos, neg, others = _block_masks(
            anchor_labels, anchor_index, blk.labels, blk.valid, blk.index
        )
        mask = others if which == "others" else neg
        masked = jnp.where(mask, logits, -BIG)
        new_max = jnp.maximum(run_max, jnp.max(masked, axis=1))
        run_sum = run_sum * jnp.exp(run_max - new_max) + jnp.sum(
            jnp.exp(masked - new_max[:, None]), axis=1
        )
        stats = (jnp.sum(jnp.where(pos, logits, 0.0), axis=1), jnp.sum(pos, axis=1))
        return (new_max, run_sum), stats

    # *_like keeps the varying-axis type of the anchors inside shard_map.
    init = (jnp.full_like(anchors[:, 0], -BIG), jnp.zeros_like(anchors[:, 0]))
    (run_max, run_sum), (pos_sums, pos_counts) = jax.lax.scan(body, init, blocks)
    lse = run_max + jnp.log(run_sum)
    return lse, jnp.sum(pos_sums, axis=0), jnp.sum(pos_counts, axis=0)


def _forward(kind, anchors, candidates, anchor_labels, candidate_labels, candidate_valid,
             offset, temperature, block):
    anchors = anchors.astype(jnp.float32)
    blocks = _to_blocks(candidates.astype(jnp.float32), candidate_labels, candidate_valid, block)
    anchor_index = offset + jnp.arange(anchors.shape[0])
    temperature = jnp.asarray(temperature, jnp.float32)
    if kind == "supcon":
        lse, pos_sum, count = _online_lse(
            anchors, blocks, anchor_labels, anchor_index, temperature, "others"
        )
        per_anchor = lse - pos_sum / jnp.maximum(count, 1)
        aux = jnp.zeros_like(lse)
    else:
        lse, _, count = _online_lse(
            anchors, blocks, anchor_labels, anchor_index, temperature, "negatives"
        )

        def body(acc, blk):
            logits = _block_logits(anchors, blk.embeddings, temperature)
            pos, _, _ = _block_masks(anchor_labels, anchor_index, blk.labels, blk.valid, blk.index)
            gap = lse[:, None] - logits
            terms = jnp.where(pos, jax.nn.softplus(gap), 0.0).sum(1)
            sigm = jnp.where(pos, jax.nn.sigmoid(gap), 0.0).sum(1)
            return (acc[0] + terms, acc[1] + sigm), None

        zeros = jnp.zeros_like(lse)
        (total, aux), _ = jax.lax.scan(body, (zeros, zeros), blocks)
        per_anchor = total / jnp.maximum(count, 1)
    residuals = (anchors, blocks, anchor_labels, anchor_index, temperature, lse, count, aux)
    return per_anchor, residuals


def _backward(kind, block, m, residuals, cotangent):
    anchors, blocks, anchor_labels, anchor_index, temperature, lse, count, aux = residuals
    scale = cotangent / jnp.maximum(count, 1).astype(jnp.float32)

    def body(carry, blk):
        d_anchors, d_temp = carry
        logits = _block_logits(anchors, blk.embeddings, temperature)
        pos, neg, others = _block_masks(
            anchor_labels, anchor_index, blk.labels, blk.valid, blk.index
        )
        if kind == "supcon":
            soft = jnp.where(others, jnp.exp(logits - lse[:, None]), 0.0)
            grad = cotangent[:, None] * soft - jnp.where(pos, scale[:, None], 0.0)
        else:
            gap = lse[:, None] - logits
            on_pos = jnp.where(pos, -jax.nn.sigmoid(gap), 0.0)
            on_neg = jnp.where(neg, aux[:, None] * jnp.exp(-gap), 0.0)
            grad = scale[:, None] * (on_pos + on_neg)
        d_anchors = d_anchors + jnp.matmul(
            grad, blk.embeddings, precision=jax.lax.Precision.HIGHEST
        ) / temperature
        d_blk = jnp.matmul(grad.T, anchors, precision=jax.lax.Precision.HIGHEST) / temperature
        d_temp = d_temp - jnp.sum(grad * logits) / temperature
        return (d_anchors, d_temp), d_blk

    init = (jnp.zeros_like(anchors), jnp.zeros_like(anchors[0, 0]))
    (d_anchors, d_temp), d_blocks = jax.lax.scan(body, init, blocks)
    d_candidates = d_blocks.reshape((-1, anchors.shape[1]))[:m]
    return d_anchors, d_candidates, d_temp


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 8))
def _per_anchor(kind, anchors, candidates, anchor_labels, candidate_labels, candidate_valid,
                offset, temperature, block):
    return _forward(kind, anchors, candidates, anchor_labels, candidate_labels,
                    candidate_valid, offset, temperature, block)[0]


def _per_anchor_fwd(kind, anchors, candidates, anchor_labels, candidate_labels, candidate_valid,
                    offset, temperature, block):
    per_anchor, residuals = _forward(kind, anchors, candidates, anchor_labels, candidate_labels,
                                     candidate_valid, offset, temperature, block)
    return per_anchor, (residuals, candidates.shape[0], candidate_labels, candidate_valid,
                        offset)


def _per_anchor_bwd(kind, block, saved, cotangent):
    residuals, m, candidate_labels, candidate_valid, offset = saved
    d_anchors, d_candidates, d_temp = _backward(kind, block, m, residuals, cotangent)
    anchor_labels = residuals[2]

    def no_grad(x):
        if jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.zeros_like(x)
        return jnp.zeros(x.shape, jax.dtypes.float0)

    return (d_anchors, d_candidates, no_grad(anchor_labels), no_grad(candidate_labels),
            no_grad(candidate_valid), no_grad(offset), d_temp)


_per_anchor.defvjp(_per_anchor_fwd, _per_anchor_bwd)


def supcon_per_anchor_blockwise(
    anchors: Array,
    candidates: Array,
    anchor_labels: Array,
    candidate_labels: Array,
    candidate_valid: Array,
    offset: Array,
    temperature: float | Array,
    block: int,
) -> tuple[Array, Array]:
    """Per-anchor SupCon L_out [n] and positive counts [n], streamed over column blocks.

    Args:
      anchors: float32 [n, D] unit rows (the local anchors).
      candidates: float32 [m, D] unit rows (the global batch; anchors are rows
        ``offset .. offset + n`` of it).
      anchor_labels, candidate_labels: int [n], [m].
      candidate_valid: bool [m].
      offset: int [], global index of the first anchor.
      temperature: tau.
      block: columns per block (static).
    """
    per_anchor = _per_anchor("supcon", anchors, candidates, anchor_labels, candidate_labels,
                             candidate_valid, offset, _like_anchors(temperature, anchors), block)
    return per_anchor, _positive_counts(anchor_labels, candidate_labels, candidate_valid,
                                        offset, block)


def sincere_per_anchor_blockwise(
    anchors: Array,
    candidates: Array,
    anchor_labels: Array,
    candidate_labels: Array,
    candidate_valid: Array,
    offset: Array,
    temperature: float | Array,
    block: int,
) -> tuple[Array, Array]:
    """Per-anchor SINCERE [n] and positive counts [n], streamed; arguments as SupCon's."""
    per_anchor = _per_anchor("sincere", anchors, candidates, anchor_labels, candidate_labels,
                             candidate_valid, offset, _like_anchors(temperature, anchors), block)
    return per_anchor, _positive_counts(anchor_labels, candidate_labels, candidate_valid,
                                        offset, block)


def _like_anchors(temperature: float | Array, anchors: Array) -> Array:
    """τ as a float32 array with the anchors' varying-axis type (inside shard_map the
    custom VJP returns a per-device cotangent for it; the broadcast's transpose sums it)."""
    return jnp.asarray(temperature, jnp.float32) + jnp.zeros_like(anchors[0, 0])


def _positive_counts(anchor_labels, candidate_labels, candidate_valid, offset, block):
    """|P_t| per anchor, streamed over label blocks (integers only, no gradient)."""
    labels = _to_blocks(candidate_labels[:, None], candidate_labels, candidate_valid, block)
    anchor_index = offset + jnp.arange(anchor_labels.shape[0])

    def body(acc, blk):
        pos, _, _ = _block_masks(anchor_labels, anchor_index, blk.labels, blk.valid, blk.index)
        return acc + jnp.sum(pos, axis=1), None

    counts, _ = jax.lax.scan(body, jnp.zeros_like(anchor_labels, dtype=jnp.int32), labels)
    return counts
