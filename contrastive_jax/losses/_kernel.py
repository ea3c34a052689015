"""y-Aware InfoNCE, conditional alignment and global / conditional uniformity (Dufumier,
Gori, Victor, Grigis & Duchesnay 2021, "Conditional Alignment and Uniformity for
Contrastive Learning with Continuous Proxy Labels", arXiv:2111.05643).

Notation (the paper's Section 2; conventions in ``docs/losses.md``): rows are L2-normalised,
``S_ab = z_a . z_b / tau``; ``y_a`` in R^p is the metadata of row a (both views of
an image are two rows with the same metadata); the RBF kernel is
``w_ab = exp(-||y_a - y_b||² / (2 sigma²))`` (no prefactor, so ``||w||_inf = 1``);
``O(a)`` are the other valid rows of the global batch and ``N_a = |O(a)|``.

* ``P_ab = w_ab / sum_{c in O(a)} w_ac`` for b in O(a) (0 elsewhere) is the
  row-softmax of the log-kernel, computed in log space, so sigma -> 0 gives the
  delta kernel (NT-Xent / SupCon) without underflow or NaN.
* Every row has a positive kernel weight for every other row, so an anchor is
  valid when it is not padded and ``N_a >= 1``. The same anchors are used by
  y-Aware InfoNCE, conditional alignment and global uniformity, so
  ``y_aware_infonce = conditional_alignment + global_uniformity`` holds exactly
  on every batch (Eq. 2 for finite N), padded or not.
* Metadata is a constant: it is gathered with the embeddings under
  ``axis_name`` and never differentiated (``stop_gradient``).

The kernel has one isotropic bandwidth ``sigma``; for a diagonal bandwidth per
metadata column divide each column by its own sigma and pass
``sigma=1``.

This module holds the four losses and their dense form; the kernel and the weights
``P`` and ``Q`` are in :mod:`contrastive_jax.losses._metadata_kernel`, the streamed form
(many rows, or ``block_size``) in :mod:`contrastive_jax.losses._kernel_streamed`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from contrastive_jax.losses import _core, _docs, blockwise
from contrastive_jax.losses import _kernel_streamed as streamed
from contrastive_jax.losses._metadata_kernel import (
    check_metadata,
    conditional_uniformity_weights,
    kernel_targets,
    squared_distances,
)

Array = jax.Array


# --------------------------------------------------------------------------- batch


class _KernelBatch(NamedTuple):
    """Local anchors scored against the global batch, with the metadata distances.

    Attributes:
      logits: float32 [n, m], ``S``.
      others: bool [n, m], ``O(a)``: valid columns other than the anchor.
      sq_dist: float32 [n, m], ``||y_a - y_b||²``; None without metadata.
      anchor_valid: bool [n], not padded.
      candidate_valid: bool [m].
      anchor_ok: bool [n], not padded and ``N_a >= 1``.
    """

    logits: Array
    others: Array
    sq_dist: Array | None
    anchor_valid: Array
    candidate_valid: Array
    anchor_ok: Array


def _kernel_batch(
    embeddings: Array,
    metadata: Array | None,
    temperature: float | Array,
    sigma: float | Array | None,
    valid: Array | None,
    axis_name: str | tuple[str, ...] | None,
) -> _KernelBatch:
    """Checks the inputs, normalises and gathers rows and metadata, builds the masks.

    ``metadata=None`` (global uniformity) skips the metadata and ``sigma``.
    """
    embeddings = _core.check_embeddings(embeddings)
    n = embeddings.shape[0]
    temperature = _core.check_positive(temperature, "temperature")
    if metadata is not None:
        metadata = jax.lax.stop_gradient(check_metadata(metadata, n))
        assert sigma is not None  # the metadata losses always pass one
        sigma = _core.check_positive(sigma, "sigma")
    batch = _core.contrast_batch(
        embeddings, jnp.zeros((n,), jnp.int32) if metadata is None else metadata, valid, axis_name
    )
    others = ~batch.is_self & batch.candidate_valid[None, :]
    return _KernelBatch(
        logits=_core.similarity_logits(batch.anchors, batch.candidates, temperature),
        others=others,
        sq_dist=None
        if metadata is None
        else squared_distances(batch.anchor_labels, batch.candidate_labels),
        anchor_valid=batch.anchor_valid,
        candidate_valid=batch.candidate_valid,
        anchor_ok=batch.anchor_valid & jnp.any(others, axis=1),
    )


def _alignment_per_anchor(kb: _KernelBatch, sigma: float | Array) -> Array:
    """``-sum_{b in O(a)} P_ab S_ab``: [n]."""
    assert kb.sq_dist is not None  # built with metadata
    targets = kernel_targets(kb.sq_dist, kb.others, sigma)
    return -jnp.sum(jnp.where(kb.others, targets * kb.logits, 0.0), axis=1)


def _uniformity_per_anchor(kb: _KernelBatch) -> Array:
    """``log sum_{b in O(a)} e^{S_ab} - log N_a``: [n] (finite for rows without others)."""
    count = jnp.sum(kb.others.astype(jnp.float32), axis=1)
    return _core.masked_logsumexp(kb.logits, kb.others, axis=1) - jnp.log(jnp.maximum(count, 1.0))


# --------------------------------------------------------------------------- losses


@_core.explicit_sharding
@_docs.shared_args
def y_aware_infonce(
    embeddings: Array,
    metadata: Array,
    *,
    temperature: float | Array = 0.1,
    sigma: float | Array = 5.0,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
) -> Array:
    """y-Aware InfoNCE: InfoNCE whose positives are weighted by an RBF kernel on metadata.

    For anchor a and its ``N_a`` other valid rows ``O(a)``::

      l_a = -(1/N_a) sum_{k in O(a)} (w_ak / Ẑ_a) log( e^{S_ak} / M_a )
          = -sum_{k in O(a)} P_ak (S_ak - LSE_{j in O(a)} S_aj) - log N_a

    with ``w_ak = exp(-||y_a - y_k||² / (2 sigma²))``,
    ``M_a = (1/N_a) sum_{j in O(a)} e^{S_aj}``, ``Ẑ_a = (1/N_a) sum_{j in O(a)} w_aj``
    and ``P_ak = w_ak / (N_a Ẑ_a)``, averaged over valid anchors. The constant
    ``-log N_a`` from the 1/N inside the log is kept and the loss is the mean
    over anchors (the official code divides by B instead and has no -log N).
    As sigma -> 0 with distinct metadata per image this is NT-Xent - log N; with
    tied metadata it is SupCon L_out - log N over the tie groups.

    Args:
      embeddings: float [N, D] rows on this device (normalised inside).
      metadata: float [N] or [N, p] continuous proxy labels (both views of an
        image share them); constant, never differentiated.
      temperature: tau > 0 (0.1 in the official code).
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      sigma: RBF bandwidth > 0 in metadata units (5 years of age in the official code).
      {axis_name}
      {valid}
      {block_size}

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> age = jnp.array([20.0, 22.0, 60.0, 61.0])
      >>> round(float(losses.y_aware_infonce(z, age, temperature=0.5, sigma=5.0)), 4)
      -0.6684

    References:
      Benoit Dufumier et al. (2021). Contrastive Learning with Continuous Proxy
      Meta-Data for 3D MRI Classification. MICCAI 2021, arXiv:2106.08808.
      Benoit Dufumier, Pietro Gori, Julie Victor, Antoine Grigis and Edouard
      Duchesnay (2021). Conditional Alignment and Uniformity for Contrastive
      Learning with Continuous Proxy Labels. Med-NeurIPS workshop,
      arXiv:2111.05643 (HAL hal-03523114), Eq. (1).
      BibTeX: ``dufumier2021yaware``, ``dufumier2021conditional`` (docs/losses.md, "Citing the papers").
    """
    block = _block_for(embeddings, axis_name, block_size)
    if block is not None:
        return streamed.streamed_loss(
            "y_aware", embeddings, metadata, temperature, sigma, valid, axis_name, block
        )
    kb = _kernel_batch(embeddings, metadata, temperature, sigma, valid, axis_name)
    per_anchor = _alignment_per_anchor(kb, sigma) + _uniformity_per_anchor(kb)
    return _core.valid_anchor_mean(per_anchor, kb.anchor_ok, axis_name)


def _block_for(
    embeddings: Array, axis_name: str | tuple[str, ...] | None, block_size: int | None
) -> int | None:
    """Anchor rows per block for this call, or None for the dense path."""
    embeddings = _core.check_embeddings(embeddings)
    num_devices = _core.num_devices(axis_name)
    return blockwise.choose_block(block_size, embeddings.shape[0] * num_devices)


@_core.explicit_sharding
@_docs.shared_args
def conditional_alignment(
    embeddings: Array,
    metadata: Array,
    *,
    temperature: float | Array = 0.1,
    sigma: float | Array = 5.0,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
) -> Array:
    """Conditional alignment: minus the kernel-weighted mean similarity to the other rows.

    ::

      l_a = -(1/N_a) sum_{k in O(a)} (w_ak / Ẑ_a) S_ak = -sum_{k in O(a)} P_ak S_ak,

    averaged over valid anchors: the first term of Eq. (2), signed as a loss to
    minimise (1/tau included). ``y_aware_infonce = conditional_alignment +
    global_uniformity`` holds exactly on every batch.

    Args:
      embeddings: float [N, D] rows on this device (normalised inside).
      metadata: float [N] or [N, p] proxy labels; constant.
      temperature: tau > 0.
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      sigma: RBF bandwidth > 0.
      {axis_name}
      {valid}
      {block_size}

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> age = jnp.array([20.0, 22.0, 60.0, 61.0])
      >>> round(float(losses.conditional_alignment(z, age, temperature=0.5, sigma=5.0)), 4)
      -1.6

    References:
      Benoit Dufumier, Pietro Gori, Julie Victor, Antoine Grigis and Edouard
      Duchesnay (2021). Conditional Alignment and Uniformity for Contrastive
      Learning with Continuous Proxy Labels. Med-NeurIPS workshop,
      arXiv:2111.05643 (HAL hal-03523114), Eq. (2) (finite
      batch) and Eq. (3) (population form).
      BibTeX: ``dufumier2021conditional`` (docs/losses.md, "Citing the papers").
    """
    block = _block_for(embeddings, axis_name, block_size)
    if block is not None:
        return streamed.streamed_loss(
            "alignment", embeddings, metadata, temperature, sigma, valid, axis_name, block
        )
    kb = _kernel_batch(embeddings, metadata, temperature, sigma, valid, axis_name)
    return _core.valid_anchor_mean(_alignment_per_anchor(kb, sigma), kb.anchor_ok, axis_name)


@_core.explicit_sharding
@_docs.shared_args
def global_uniformity(
    embeddings: Array,
    *,
    temperature: float | Array = 0.1,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
) -> Array:
    """Global uniformity: per-anchor log of the mean exponentiated similarity to the others.

    ::

      l_a = log( (1/N_a) sum_{j in O(a)} e^{S_aj} ) = LSE_{j in O(a)} S_aj - log N_a,

    averaged over valid anchors (``N_a >= 1``): the second term of Eq. (2). The
    log sits per anchor, inside the mean, unlike the pooled Wang–Isola form. No
    metadata.

    Args:
      embeddings: float [N, D] rows on this device (normalised inside).
      temperature: tau > 0.
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      {axis_name}
      {valid}
      {block_size}

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> round(float(losses.global_uniformity(z, temperature=0.5)), 4)
      0.9316

    References:
      Benoit Dufumier, Pietro Gori, Julie Victor, Antoine Grigis and Edouard
      Duchesnay (2021). Conditional Alignment and Uniformity for Contrastive
      Learning with Continuous Proxy Labels. Med-NeurIPS workshop,
      arXiv:2111.05643 (HAL hal-03523114), Eq. (2).
      BibTeX: ``dufumier2021conditional`` (docs/losses.md, "Citing the papers").
    """
    block = _block_for(embeddings, axis_name, block_size)
    if block is not None:
        return streamed.streamed_loss(
            "uniformity", embeddings, None, temperature, None, valid, axis_name, block
        )
    kb = _kernel_batch(embeddings, None, temperature, None, valid, axis_name)
    return _core.valid_anchor_mean(_uniformity_per_anchor(kb), kb.anchor_ok, axis_name)


@_core.explicit_sharding
@_docs.shared_args
def conditional_uniformity(
    embeddings: Array,
    metadata: Array,
    *,
    temperature: float | Array = 0.1,
    sigma: float | Array = 5.0,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
) -> Array:
    """Conditional uniformity: log of the mean of ``e^{S_ij}`` weighted by metadata dissimilarity.

    ::

      L = log( sum_{i,j} Q_ij e^{S_ij} / sum_{i,j} Q_ij ),
      Q_ij = (||w||_inf - w_ij) / (||w||_inf - Ẑ_i),  ||w||_inf = 1,

    over all valid i, j of the global batch, diagonal included (its weight is
    0). ``Ẑ_i`` is the in-batch mean of ``w_ij`` with j = i included, so
    ``sum_j Q_ij = M`` on every kept row and this equals the paper's
    ``log (1/M²) sum Q e^S`` on a full batch; the self-normalised form stays
    exact when rows are padded or dropped (reading Ẑ as a mean over j != i
    rescales every Q by M / (M - 1) and leaves the value unchanged). Only pairs
    with different metadata repel; rows whose ``1 - Ẑ_i < UNIFORMITY_EPS`` are
    dropped, and with no row left (e.g. all metadata equal, or nothing valid)
    the loss is 0 with zero gradient.

    Not a mean over anchors but the log of one global weighted mean: under
    ``axis_name`` the numerator and the weight total are summed over devices
    before the log, with a global max-shift; streamed, the log-sum-exp over rows
    runs online over the blocks (``blockwise.stream_rows_logsumexp``). The
    paper's combined objective is ``conditional_alignment + lam *
    conditional_uniformity`` with lam = 1.

    Args:
      embeddings: float [N, D] rows on this device (normalised inside).
      metadata: float [N] or [N, p] proxy labels; constant.
      temperature: tau > 0.
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      sigma: RBF bandwidth > 0.
      {axis_name}
      {valid}
      {block_size}

    Returns:
      float32 scalar, identical on every device.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> z = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> age = jnp.array([20.0, 22.0, 60.0, 61.0])
      >>> round(float(losses.conditional_uniformity(z, age, temperature=0.5, sigma=5.0)), 4)
      0.3977

    References:
      Benoit Dufumier, Pietro Gori, Julie Victor, Antoine Grigis and Edouard
      Duchesnay (2021). Conditional Alignment and Uniformity for Contrastive
      Learning with Continuous Proxy Labels. Med-NeurIPS workshop,
      arXiv:2111.05643 (HAL hal-03523114), Eq. (4).
      BibTeX: ``dufumier2021conditional`` (docs/losses.md, "Citing the papers").
    """
    block = _block_for(embeddings, axis_name, block_size)
    if block is not None:
        return streamed.conditional_uniformity_streamed(
            embeddings, metadata, temperature, sigma, valid, axis_name, block
        )
    kb = _kernel_batch(embeddings, metadata, temperature, sigma, valid, axis_name)
    assert kb.sq_dist is not None  # built with metadata
    weights, _ = conditional_uniformity_weights(
        kb.sq_dist, kb.anchor_valid, kb.candidate_valid, sigma
    )
    positive = weights > 0
    log_terms = jnp.where(
        positive, kb.logits + jnp.log(jnp.where(positive, weights, 1.0)), -_core.BIG
    )
    shift = jax.lax.stop_gradient(jnp.max(log_terms))
    if axis_name is not None:
        shift = jax.lax.stop_gradient(jax.lax.pmax(shift, axis_name))
    total = _core.differentiable_psum(jnp.sum(jnp.exp(log_terms - shift)), axis_name)
    mass = _core.psum_if(jnp.sum(weights), axis_name)
    # total >= 1: the largest term is exp(0) (or, with no weight anywhere, every term is).
    value = shift + jnp.log(total) - jnp.log(jnp.maximum(mass, 1e-30))
    return jnp.where(mass > 0, value, 0.0)
