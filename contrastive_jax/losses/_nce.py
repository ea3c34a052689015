"""NT-Xent (SimCLR's InfoNCE), SupCon (Khosla et al.'s L_out) and SINCERE (Feeney & Hughes).

Notation (as in Feeney & Hughes, arXiv:2309.14277, Section 3; see also
``docs/losses.md``): ``S_tj = z_t . z_j / tau`` for unit rows, ``P_t`` the
positives of anchor t (same label, not t), ``N_t`` its negatives (other label),
``A_t = P_t ∪ N_t``. Every loss is the mean over valid anchors (``|P_t| >= 1``
and not padded) of the global batch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from contrastive_jax.losses import _core, _docs, _precision, blockwise

Array = jax.Array

def supcon_per_anchor(logits: Array, positives: Array, candidates: Array) -> Array:
    """Per-anchor SupCon L_out from logits (Feeney & Hughes, Eq. 3).

    ``l_t = LSE_{a in A_t} S_ta - mean_{p in P_t} S_tp``.

    Args:
      logits: float32 [n, m], ``S``.
      positives: bool [n, m], ``P_t`` per row.
      candidates: bool [n, m], ``A_t`` per row (every valid column but the anchor).

    Returns:
      float32 [n]; rows without positives hold an unused finite value.
    """
    count = jnp.sum(positives, axis=1)
    mean_positive = jnp.sum(jnp.where(positives, logits, 0.0), axis=1) / jnp.maximum(count, 1)
    return _core.masked_logsumexp(logits, candidates, axis=1) - mean_positive


def sincere_per_anchor(logits: Array, positives: Array, negatives: Array) -> Array:
    """Per-anchor SINCERE from logits (Feeney & Hughes, Eq. 12, softplus form).

    ``l_t = mean_{p in P_t} softplus(LSE_{j in N_t} S_tj - S_tp)``: for the pair
    (t, p) the denominator is ``{p} ∪ N_t``. An anchor without negatives gets
    exactly 0 with zero gradient.

    Args:
      logits: float32 [n, m].
      positives: bool [n, m], ``P_t``.
      negatives: bool [n, m], ``N_t``.

    Returns:
      float32 [n]; rows without positives hold 0.
    """
    return _sincere_rows(logits, positives, negatives)


@jax.custom_vjp
def _sincere_rows(logits: Array, positives: Array, negatives: Array) -> Array:
    return _sincere_rows_fwd(logits, positives, negatives)[0]


def _sincere_rows_fwd(logits, positives, negatives):
    """Forward with one exp per entry, ``e = exp(-|L_t - S_tj|)``, reused by the backward:
    ``softplus(g) = max(g, 0) + log1p(e)``, ``sigmoid(g) = [g >= 0 ? 1 : e] / (1 + e)`` and,
    on negatives (where ``g >= 0``), ``exp(S_tj - L_t) = e``."""
    count = jnp.maximum(jnp.sum(positives, axis=1), 1).astype(jnp.float32)
    gap = _core.masked_logsumexp(logits, negatives, axis=1)[:, None] - logits
    small = jnp.exp(-jnp.abs(gap))
    pair = jnp.maximum(gap, 0.0) + jnp.log1p(small)
    per_anchor = jnp.sum(jnp.where(positives, pair, 0.0), axis=1) / count
    return per_anchor, (gap, small, positives, negatives, count)


def _sincere_rows_bwd(residuals, cotangent):
    """Eq. (13) at the logit level: ``-c σ(L_t - S_tp) / |P_t|`` on positives,
    ``c a_t e^{S_tj - L_t} / |P_t|`` on negatives, ``a_t = sum_p σ(L_t - S_tp)``."""
    gap, small, positives, negatives, count = residuals
    on_positives = jnp.where(positives, jnp.where(gap >= 0, 1.0, small) / (1.0 + small), 0.0)
    weight = (cotangent / count)[:, None]
    total = jnp.sum(on_positives, axis=1, keepdims=True)
    grad = weight * (jnp.where(negatives, total * small, 0.0) - on_positives)
    return grad, None, None


_sincere_rows.defvjp(_sincere_rows_fwd, _sincere_rows_bwd)


def _label_masks(
    anchor_labels: Array, is_self: Array, candidate_labels: Array, candidate_valid: Array
) -> tuple[Array, Array, Array]:
    """Positive, negative and all-candidate masks [n, m] of a labelled batch.

    Args:
      anchor_labels: [n]; is_self: bool [n, m]; candidate_labels: [m];
      candidate_valid: bool [m].
    """
    same = anchor_labels[:, None] == candidate_labels[None, :]
    live = candidate_valid[None, :]
    positives = same & ~is_self & live
    negatives = ~same & live
    return positives, negatives, ~is_self & live


def _per_anchor(kind: str, logits: Array, positives: Array, negatives: Array,
                candidates: Array) -> Array:
    if kind == "supcon":
        return supcon_per_anchor(logits, positives, candidates)
    return sincere_per_anchor(logits, positives, negatives)


def _label_block(kind: str):
    """Row-block function of SupCon / SINCERE for :func:`blockwise.stream_rows`.

    ``(dots [b, m], temperature, (labels, global index, valid) [b], (labels, valid) [m])``
    -> (loss of each valid anchor, 0 elsewhere [b]; anchor_ok bool [b]).
    """

    def block_fn(dots, temperature, rows, cols):
        labels, index, anchor_valid = rows
        candidate_labels, candidate_valid = cols
        is_self = index[:, None] == jnp.arange(dots.shape[1])[None, :]
        positives, negatives, candidates = _label_masks(
            labels, is_self, candidate_labels, candidate_valid
        )
        per_anchor = _per_anchor(kind, dots / temperature, positives, negatives, candidates)
        anchor_ok = anchor_valid & jnp.any(positives, axis=1)
        return jnp.where(anchor_ok, per_anchor, 0.0), anchor_ok

    return block_fn


def _label_loss(kind, embeddings, labels, temperature, valid, axis_name, block_size,
                precision="float32") -> Array:
    """SupCon or SINCERE, dense or streamed, reduced over valid anchors."""
    precision = _precision.check_precision(precision)
    embeddings = _core.check_embeddings(embeddings)
    labels = _core.check_labels(labels, embeddings.shape[0])
    temperature = _core.check_positive(temperature, "temperature")
    n = embeddings.shape[0]
    num_devices = _core.num_devices(axis_name)
    block = blockwise.choose_block(block_size, n * num_devices)
    if block is None:
        batch = _core.contrast_batch(embeddings, labels, valid, axis_name)
        logits = _core.similarity_logits(batch.anchors, batch.candidates, temperature, precision)
        positives, negatives, candidates = _label_masks(
            batch.anchor_labels, batch.is_self, batch.candidate_labels, batch.candidate_valid
        )
        per_anchor = _per_anchor(kind, logits, positives, negatives, candidates)
        anchor_ok = batch.anchor_valid & jnp.any(positives, axis=1)
        return _core.valid_anchor_mean(per_anchor, anchor_ok, axis_name)
    rows = blockwise.gather_rows(embeddings, labels, valid, axis_name)
    total, anchor_ok = blockwise.stream_rows(
        _label_block(kind),
        rows.anchors,
        rows.candidates,
        blockwise.like_anchors(temperature, rows.anchors),
        (labels, rows.index, rows.anchor_valid),
        (rows.candidate_data, rows.candidate_valid),
        block,
        precision,
    )
    return blockwise.global_mean(total, anchor_ok, axis_name)


@_core.explicit_sharding
@_docs.shared_args
def supcon(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.1,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
    precision: str = "float32",
) -> Array:
    """Supervised contrastive loss, L_out form: mean over positives outside the log.

    For anchor t with positives ``P_t`` and candidates ``A_t`` (every other valid
    row)::

      l_t = -(1/|P_t|) sum_{p in P_t} log( e^{S_tp} / sum_{a in A_t} e^{S_ta} )
          = LSE_{a in A_t} S_ta - mean_{p in P_t} S_tp,

    averaged over valid anchors (``|P_t| >= 1``). No ``base_temperature``
    rescaling: the temperature divides once.

    Args:
      embeddings: float [N, D] rows on this device (normalised inside).
      labels: int [N] class labels (both views of an image share the label).
      temperature: tau > 0.
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      {axis_name}
      {valid}
      {block_size}
      {precision}

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> labels = jnp.array([0, 0, 1, 1])
      >>> round(float(losses.supcon(z, labels, temperature=0.5)), 4)
      0.4302

    References:
      Prannay Khosla et al. (2020). Supervised Contrastive Learning.
      arXiv:2004.11362, Eq. (2) (L_out).
      Patrick Feeney and Michael C. Hughes (2023). SINCERE: Supervised
      Information Noise-Contrastive Estimation REvisited. arXiv:2309.14277,
      Eq. (3) (the form used here); Tables 1-2 (SupCon baseline).
      BibTeX: ``khosla2020supcon``, ``feeney2023sincere`` (docs/losses.md, "Citing the papers").
    """
    return _label_loss(
        "supcon", embeddings, labels, temperature, valid, axis_name, block_size, precision
    )


@_core.explicit_sharding
@_docs.shared_args
def nt_xent(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.1,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
    precision: str = "float32",
) -> Array:
    """NT-Xent / InfoNCE in SimCLR's two-view form: each view's positive is its other view.

    ::

      l_i = -S_{i,p(i)} + log sum_{j != i} e^{S_ij},

    averaged over all anchors, where ``p(i)`` is the other row with the same
    instance id; the denominator runs over every other row, the positive
    included. Implemented as SupCon over instance ids, which is the same function
    when every id occurs twice and is layout-free (any row order). With more
    than two views per id this is the multi-positive (SupCon) generalisation.
    Under ``axis_name`` the ids must be globally unique (e.g. the global example
    index), else images on different devices become false positives.

    Args:
      embeddings: float [N, D], both views of each image as separate rows.
      labels: int [N] instance ids, one per source image.
      temperature: tau > 0 (SimCLR: 0.5 on CIFAR, 0.1 on ImageNet).
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      {axis_name}
      {valid}
      {block_size}
      {precision}

    Returns:
      float32 scalar. (SimCLR's TF code reports twice this value: the sum of
      the two directions' means.)

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> ids = jnp.array([0, 0, 1, 1])
      >>> round(float(losses.nt_xent(z, ids, temperature=0.5)), 4)
      0.4302

    References:
      Ting Chen, Simon Kornblith, Mohammad Norouzi and Geoffrey Hinton (2020).
      A Simple Framework for Contrastive Learning of Visual Representations.
      arXiv:2002.05709, Eq. (1) (NT-Xent).
      BibTeX: ``chen2020simclr`` (docs/losses.md, "Citing the papers").
    """
    return supcon(
        embeddings,
        labels,
        temperature=temperature,
        axis_name=axis_name,
        valid=valid,
        block_size=block_size,
        precision=precision,
    )


@_core.explicit_sharding
@_docs.shared_args
def sincere(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.1,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
    precision: str = "float32",
) -> Array:
    """SINCERE: supervised InfoNCE whose denominators hold one positive and the negatives.

    ::

      l_t = -(1/|P_t|) sum_{p in P_t} log( e^{S_tp} / (e^{S_tp} + sum_{j in N_t} e^{S_tj}) )
          = mean_{p in P_t} softplus( LSE_{j in N_t} S_tj - S_tp ),

    averaged over valid anchors. Same-class rows never sit in a denominator
    without the numerator, so the gradient never pushes an anchor away from a
    positive (the coefficient on every z_p is <= 0, Eq. 13).

    Args:
      embeddings: float [N, D] rows on this device (normalised inside).
      labels: int [N] class labels.
      temperature: tau > 0 (0.1 in the paper).
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      {axis_name}
      {valid}
      {block_size}
      {precision}

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> labels = jnp.array([0, 0, 0, 1])
      >>> round(float(losses.sincere(z, labels, temperature=0.5)), 4)
      0.5777
      >>> round(float(losses.supcon(z, labels, temperature=0.5)), 4)  # positives repel
      1.1625

    References:
      Patrick Feeney and Michael C. Hughes (2023). SINCERE: Supervised
      Information Noise-Contrastive Estimation REvisited. arXiv:2309.14277,
      Eq. (12) (the loss), Eq. (13) (its gradient); Tables 1-2.
      BibTeX: ``feeney2023sincere`` (docs/losses.md, "Citing the papers").
    """
    return _label_loss(
        "sincere", embeddings, labels, temperature, valid, axis_name, block_size, precision
    )
