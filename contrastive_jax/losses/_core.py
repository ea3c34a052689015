"""Building blocks shared by every loss: input checks, normalisation, masked
log-sum-exp, the cross-device gather and the mean over valid anchors.

Every embedding loss of :mod:`contrastive_jax.losses` follows one contract:

* ``embeddings`` float [N, D] holds the rows on this device; rows are
  L2-normalised inside the loss.
* With ``axis_name=None`` the call sees the whole batch (works under
  ``jax.jit`` on global, possibly sharded, arrays).
* With ``axis_name`` the call sits inside ``jax.shard_map`` (or ``jax.pmap``)
  over that axis: embeddings and labels are all-gathered, the local rows are the
  anchors, they are scored against the gathered (global) batch with self masks at
  *global* indices, and the global mean over valid anchors is returned on every
  device. Value and gradient then equal a single-device call on the
  concatenated batch.
* ``valid`` bool [N] marks padded rows: they are neither anchors nor
  candidates (positives, negatives, denominators).
* Similarities and reductions run in float32; masks use finite large negatives
  and ``where`` so no NaN reaches a gradient.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

#: Finite stand-in for -inf in masked logits. ``exp(-BIG - max)`` is exactly
#: 0 in float32, and a fully masked row still has a finite log-sum-exp.
BIG = 1e9

Array = jax.Array


# --------------------------------------------------------------------------- checks


def check_embeddings(embeddings: Array, name: str = "embeddings") -> Array:
    """Checks a float [N, D] array with N >= 1 and returns it as float32."""
    if not hasattr(embeddings, "ndim") or not hasattr(embeddings, "dtype"):
        raise ValueError(f"`{name}` must be an array of shape [N, D], got {type(embeddings)!r}")
    if embeddings.ndim != 2:
        raise ValueError(
            f"`{name}` must have shape [N, D] (rank 2), got shape {tuple(embeddings.shape)}"
        )
    if not jnp.issubdtype(embeddings.dtype, jnp.floating):
        raise ValueError(
            f"`{name}` must be a floating-point array, got dtype {embeddings.dtype}"
        )
    if embeddings.shape[0] < 1 or embeddings.shape[1] < 1:
        raise ValueError(f"`{name}` must be non-empty, got shape {tuple(embeddings.shape)}")
    return embeddings.astype(jnp.float32)


def check_labels(labels: Array, n: int, name: str = "labels") -> Array:
    """Checks integer labels of shape [n] and returns them as int32."""
    if not hasattr(labels, "ndim") or not hasattr(labels, "dtype"):
        raise ValueError(f"`{name}` must be an integer array of shape [{n}], got {type(labels)!r}")
    if labels.ndim != 1:
        raise ValueError(f"`{name}` must have shape [N] (rank 1), got shape {tuple(labels.shape)}")
    if labels.shape[0] != n:
        raise ValueError(
            f"`{name}` has {labels.shape[0]} rows but `embeddings` has {n}; they must match"
        )
    if not (jnp.issubdtype(labels.dtype, jnp.integer) or labels.dtype == jnp.bool_):
        raise ValueError(f"`{name}` must be an integer array, got dtype {labels.dtype}")
    return labels.astype(jnp.int32)


def check_valid(valid: Array | None, n: int, name: str = "valid") -> Array:
    """Checks an optional bool [n] mask of real (non-padded) rows; None means all."""
    if valid is None:
        return jnp.ones((n,), dtype=bool)
    if not hasattr(valid, "ndim") or not hasattr(valid, "dtype"):
        raise ValueError(f"`{name}` must be a bool array of shape [{n}], got {type(valid)!r}")
    if valid.ndim != 1 or valid.shape[0] != n:
        raise ValueError(f"`{name}` must have shape [{n}], got shape {tuple(valid.shape)}")
    if valid.dtype != jnp.bool_:
        raise ValueError(f"`{name}` must have dtype bool, got dtype {valid.dtype}")
    return valid


def check_positive(value: float | Array, name: str) -> None:
    """Raises ValueError if a concrete hyperparameter is not finite and > 0.

    Traced values (inside ``jit`` with the hyperparameter as an argument) cannot
    be checked and are let through.
    """
    try:
        concrete = np.asarray(value, dtype=np.float64)
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return
    if concrete.ndim != 0:
        raise ValueError(f"`{name}` must be a scalar, got shape {concrete.shape}")
    if not np.isfinite(concrete) or concrete <= 0:
        raise ValueError(f"`{name}` must be finite and > 0, got {float(concrete)}")


def check_nonnegative(value: float | Array, name: str) -> None:
    """Raises ValueError if a concrete hyperparameter is not finite and >= 0."""
    try:
        concrete = np.asarray(value, dtype=np.float64)
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return
    if concrete.ndim != 0:
        raise ValueError(f"`{name}` must be a scalar, got shape {concrete.shape}")
    if not np.isfinite(concrete) or concrete < 0:
        raise ValueError(f"`{name}` must be finite and >= 0, got {float(concrete)}")


# --------------------------------------------------------------------------- numerics


def l2_normalize(x: Array, eps: float = 1e-6) -> Array:
    """Row-wise ``x / max(||x||, eps)`` in float32, [N, D] -> [N, D].

    A zero row maps to a zero row with a finite (1/eps-scaled) gradient.
    """
    x = x.astype(jnp.float32)
    sq = jnp.sum(x * x, axis=-1, keepdims=True)
    return x * jax.lax.rsqrt(jnp.maximum(sq, eps * eps))


def similarity_logits(anchors: Array, candidates: Array, temperature: float | Array) -> Array:
    """``anchors @ candidates.T / temperature`` in float32 at full precision.

    Shapes: [n, D] x [m, D] -> [n, m].
    """
    dots = jnp.matmul(
        anchors.astype(jnp.float32),
        candidates.astype(jnp.float32).T,
        precision=jax.lax.Precision.HIGHEST,
    )
    return dots / jnp.asarray(temperature, jnp.float32)


def masked_logsumexp(logits: Array, mask: Array, axis: int = -1) -> Array:
    """``log sum_{mask} exp(logits)`` along ``axis``; masked entries get -BIG.

    A fully masked slice returns about ``-BIG`` (finite), and masked entries get
    exactly zero gradient.
    """
    return jax.nn.logsumexp(jnp.where(mask, logits, -BIG), axis=axis)


def safe_divide(numerator: Array, denominator: Array) -> Array:
    """``numerator / denominator`` where ``denominator > 0``, else 0 (NaN-free grads)."""
    ok = denominator > 0
    return jnp.where(ok, numerator / jnp.where(ok, denominator, 1), 0)


# --------------------------------------------------------------------------- devices


def all_gather_rows(x: Array, axis_name: str | None) -> Array:
    """Concatenates the rows of ``x`` over the devices of ``axis_name``.

    [n, ...] -> [n * num_devices, ...] in device order; identity when
    ``axis_name`` is None. The gather is differentiable: its transpose
    reduce-scatters the cotangents back to the owning device.
    """
    if axis_name is None:
        return x
    return jax.lax.all_gather(x, axis_name, axis=0, tiled=True)


def local_row_offset(n_local: int, axis_name: str | None) -> Array:
    """Global index of this device's first row (0 without ``axis_name``)."""
    if axis_name is None:
        return jnp.zeros((), jnp.int32)
    return jax.lax.axis_index(axis_name).astype(jnp.int32) * n_local


def psum_if(x: Array, axis_name: str | None) -> Array:
    """``lax.psum`` over ``axis_name``, identity when it is None."""
    return x if axis_name is None else jax.lax.psum(x, axis_name)


def _varying_axes(x: Array) -> frozenset:
    """Mesh axes over which ``x`` is typed as varying inside ``shard_map``.

    Empty under ``jax.pmap`` and ``shard_map(check_vma=False)``. JAX has named
    this type field ``vma`` and, later, ``mat.varying``; both are read.
    """
    aval = jax.typeof(x)
    vma = getattr(aval, "vma", None)
    if vma is None:
        vma = getattr(getattr(aval, "mat", None), "varying", None)
    return frozenset(vma or ())


def differentiable_psum(x: Array, axis_name: str | None) -> Array:
    """Sum of ``x`` over the devices of ``axis_name`` whose gradient is right everywhere.

    Inside ``jax.shard_map`` with varying-axis tracking (the default),
    ``lax.psum`` transposes to a broadcast and is used as is. Under ``jax.pmap``
    (and ``shard_map(check_vma=False)``) ``psum`` transposes to another psum,
    which would multiply gradients by the number of devices; there the value is
    the psum but the gradient flows through the local term only. Either way each
    device's gradient is that of the global sum, because the cotangents of
    gathered rows return to their owners through the gather's transpose.

    Use it only for the final reduction of a loss (the value every device
    returns). An intermediate statistic that other devices' terms depend on
    (class sums, counts feeding later terms) must be computed from gathered
    rows instead: under ``pmap`` this function keeps only the local gradient.
    """
    if axis_name is None:
        return x
    if axis_name in _varying_axes(x):
        return jax.lax.psum(x, axis_name)
    return x + jax.lax.stop_gradient(jax.lax.psum(x, axis_name) - x)


def valid_anchor_mean(per_anchor: Array, anchor_ok: Array, axis_name: str | None) -> Array:
    """Mean of ``per_anchor`` [n] over anchors with ``anchor_ok`` [n], over all devices.

    ``sum_{ok} per_anchor / max(#ok, 1)`` with both sums taken over the global
    batch, so every device returns the same scalar; 0 (with zero gradient) when
    no anchor is valid.
    """
    total = differentiable_psum(jnp.sum(jnp.where(anchor_ok, per_anchor, 0.0)), axis_name)
    count = psum_if(jnp.sum(anchor_ok.astype(jnp.float32)), axis_name)
    return total / jnp.maximum(count, 1.0)


class ContrastBatch(NamedTuple):
    """Local anchors and the global set of candidates they are scored against.

    Attributes:
      anchors: float32 [n, D], L2-normalised local rows.
      candidates: float32 [m, D], L2-normalised rows of the whole batch
        (m = n * devices with ``axis_name``, else m = n).
      anchor_labels: [n, ...] labels (or metadata) of the anchors.
      candidate_labels: [m, ...] labels (or metadata) of the candidates.
      anchor_valid: bool [n].
      candidate_valid: bool [m].
      is_self: bool [n, m], True at (r, offset + r): an anchor's own column.
    """

    anchors: Array
    candidates: Array
    anchor_labels: Array
    candidate_labels: Array
    anchor_valid: Array
    candidate_valid: Array
    is_self: Array


def contrast_batch(
    embeddings: Array,
    labels: Array,
    valid: Array | None,
    axis_name: str | None,
) -> ContrastBatch:
    """Normalises, gathers and builds the global self mask. See :class:`ContrastBatch`.

    ``embeddings`` and ``valid`` must already be checked; ``labels`` may be any
    array with leading dimension N (class ids, instance ids or metadata).
    """
    n = embeddings.shape[0]
    valid = check_valid(valid, n)
    anchors = l2_normalize(embeddings)
    candidates = all_gather_rows(anchors, axis_name)
    m = candidates.shape[0]
    offset = local_row_offset(n, axis_name)
    is_self = (offset + jnp.arange(n))[:, None] == jnp.arange(m)[None, :]
    return ContrastBatch(
        anchors=anchors,
        candidates=candidates,
        anchor_labels=labels,
        candidate_labels=all_gather_rows(labels, axis_name),
        anchor_valid=valid,
        candidate_valid=all_gather_rows(valid, axis_name),
        is_self=is_self,
    )
