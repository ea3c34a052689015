"""ProjNCE and its Nadaraya–Watson and median variants (seed 001, Jeong & Hero,
"Generalizing Supervised Contrastive Learning: A Projection Perspective").

Notation (spec/projnce.md §0): rows are L2-normalised, ``S_ik = z_i . z_k / tau``,
``P⁻(i)`` the other rows with the anchor's label, ``n_c`` the number of valid rows
of class c in the global batch and ``m_ic = n_c - 1[c = c_i]``. A projection
``g(c)`` maps a class to a vector built from the batch (class mean, NW
projection or coordinate-wise median), never renormalised (spec §5 A12).

Two loss shapes share these projections (spec §1.13):

* SupCon type (ProjNCE, SoftSupCon, MedSupCon): ``g₋ = f``, the SupCon
  denominator ``log sum_{k != i} e^{S_ik}``, plus the adjustment term of Eq. (10)
  ``R_i = sum_{k != i} e^{z_i . g₊(c_k) / tau} / sum_{k != i} e^{S_ik}``
  (leave-one-out over rows, spec §5 A3), computed in log space and averaged over
  the same anchors as the rest of the loss.
* NCE type (SoftNCE, MedNCE): ``g₊ = g₋ = g``, so ``R ≡ 1`` and there is no R;
  the denominator runs over every valid row j, the anchor included:
  ``log sum_j e^{z_i . g(c_j) / tau} = log sum_c n_c e^{z_i . g(c) / tau}``.

The number of classes is not an argument: labels are mapped to dense indices
among the distinct labels of the global batch (at most m of them), class
statistics are segment sums over those indices, and the sums over k in R and
in the NCE denominator run over the columns (rows of the global batch), each
column carrying its class's prototype. Every anchor needs ``|P⁻(i)| >= 1``
(spec §1.14 item 1, also for the class-level prototypes). Under ``axis_name``
embeddings and labels are all-gathered and every class statistic is computed
from the gathered global batch, with gradients flowing into remote rows through
the gather.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from contrastive_jax.losses import _core
from contrastive_jax.losses.nce import supcon_per_anchor

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
    axis_name: str | None,
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
    """``t_jl² = (d(z_j, z_l) / h)²`` for unit rows z [m, D] -> [m, m] (spec §1.7).

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
    """Coordinate-wise class median over the valid rows, self included (§1.10): [m, D].

    Each coordinate is sorted once by (class index, value), padded rows last, so
    class c occupies the segment starting at ``sum_{c' < c} n_c'``; ``lower``
    takes its element ``(n_c - 1) // 2``, ``average`` the mean of elements
    ``(n_c - 1) // 2`` and ``n_c // 2``. The sort only yields indices; values
    are gathered from the embeddings, so gradients reach the selected rows.
    Rows of absent class indices are 0.
    """
    z = lb.batch.candidates
    m, d = z.shape
    key = jnp.where(lb.batch.candidate_valid, lb.class_ids, m)
    keys = jnp.broadcast_to(key[None, :], (d, m))
    rows = jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32)[None, :], (d, m))
    _, _, order = jax.lax.sort(
        (keys, jax.lax.stop_gradient(z.T), rows), dimension=1, num_keys=2
    )
    ordered = jnp.take_along_axis(z.T, order, axis=1)
    counts = lb.class_counts.astype(jnp.int32)
    start = jnp.cumsum(counts) - counts

    def pick(position: Array) -> Array:
        return ordered[:, jnp.clip(start + position, 0, m - 1)].T

    median = pick((counts - 1) // 2)
    if median_mode == "average":
        median = 0.5 * (median + pick(counts // 2))
    return jnp.where(counts[:, None] > 0, median, 0.0)


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


# --------------------------------------------------------------------------- losses


def projnce(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.07,
    beta: float | Array = 1.0,
    axis_name: str | None = None,
    valid: Array | None = None,
) -> Array:
    """ProjNCE, β-weighted (seed 001 Def. 2.3 / Eq. 12 with Eq. 10's R; spec §1.6).

    ``l_i = -z_i . c̄_i / tau + log sum_{k != i} e^{S_ik} + beta R_i``
    ``R_i = sum_{k != i} e^{z_i . mu_{c_k} / tau} / sum_{k != i} e^{S_ik}``
    ``    = sum_c m_ic e^{z_i . mu_c / tau} / sum_{k != i} e^{S_ik}``,

    averaged over valid anchors (``|P⁻(i)| >= 1``). The alignment uses the
    leave-self-out centroid ``c̄_i = mean_{p in P⁻(i)} z_p`` (Khosla's SupCon,
    spec §5 A1), so ``beta = 0`` is SupCon exactly; R's numerator uses the class
    mean ``mu_c`` over all valid rows of class c, self included, not renormalised
    (spec §5 A2), and R is leave-one-out over rows, ``k != i`` (Eq. 10, §5 A3).
    Gradients flow through the class means.

    Args:
      embeddings: float [N, D] rows on this device (normalised inside).
      labels: int [N] class labels.
      temperature: tau > 0 (0.07 in the paper).
      beta: weight of R, >= 0 (1 is ProjNCE; the paper also shows 5 and 10).
      axis_name: mesh/pmap axis to gather the batch over (see ``_core``).
      valid: optional bool [N]; False rows are padding.

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.
    """
    _core.check_nonnegative(beta, "beta")
    lb = _labelled_batch(embeddings, labels, temperature, valid, axis_name)
    supcon = supcon_per_anchor(lb.logits, lb.positives, lb.others)
    per_anchor = supcon + jnp.asarray(beta, jnp.float32) * _adjustment(
        lb, _class_means(lb), temperature
    )
    return _core.valid_anchor_mean(per_anchor, lb.anchor_ok, axis_name)


def soft_supcon(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.07,
    bandwidth: float | Array = 0.6,
    distance: str = "l1",
    axis_name: str | None = None,
    valid: Array | None = None,
) -> Array:
    """SoftSupCon (seed 001 Def. 3.1, Eq. 14; spec §1.7–1.8): ``g₊ = f̂``, ``g₋ = f``, with R.

    ``l_i = -z_i . f̂(c_i) / tau + log sum_{k != i} e^{S_ik} + R_i``,
    ``R_i = sum_{k != i} e^{z_i . f̂(c_k) / tau} / sum_{k != i} e^{S_ik}``,

    ``f̂(c) = sum_j NW(c; z_j) z_j / sum_j NW(c; z_j)`` (Eq. 18) with the
    Nadaraya–Watson soft labels of Eq. (17), kernel ``K(t) = max(0, 1 - t²)``,
    ``t = d(z_j, z_l) / h`` and reference set D = the valid rows of the global
    batch, self included (spec §5 A11; gradients flow through the soft labels).
    The first denominator excludes k = i, as SupCon (spec §5 A6; Eq. 14 prints
    j = 1..N). With ``h`` below every pairwise distance, ``f̂(c)`` is the class
    mean. Cost: O(m² D) time and, for ``l1``, O(m² D) memory.

    Args:
      embeddings: float [N, D] rows on this device (normalised inside).
      labels: int [N] class labels.
      temperature: tau > 0 (0.07 in the paper).
      bandwidth: kernel bandwidth h > 0 (0.6 in the paper).
      distance: ``"l1"`` (paper default), ``"l2"`` or ``"cosine"`` (``1/2 - 1/2 cos``).
      axis_name: mesh/pmap axis to gather the batch over.
      valid: optional bool [N]; False rows are padding (not in D either).

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.
    """
    _check_choice(distance, _DISTANCES, "distance")
    _core.check_positive(bandwidth, "bandwidth")
    lb = _labelled_batch(embeddings, labels, temperature, valid, axis_name)
    prototypes = _nw_prototypes(_nw_soft_labels(lb, bandwidth, distance), lb)
    per_anchor = _supcon_type(lb, prototypes, temperature)
    return _core.valid_anchor_mean(per_anchor, lb.anchor_ok, axis_name)


def soft_nce(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.07,
    bandwidth: float | Array = 0.6,
    distance: str = "l1",
    axis_name: str | None = None,
    valid: Array | None = None,
) -> Array:
    """SoftNCE (seed 001 Def. 3.2, Eq. 15; spec §1.9): ``g₊ = g₋ = f̂``, no R (R ≡ 1).

    ``l_i = -z_i . f̂(c_i) / tau + log sum_{j=1}^{N} e^{z_i . f̂(c_j) / tau}``
    ``    = -T_{i,c_i} + log sum_c n_c e^{T_ic}``, ``T_ic = z_i . f̂(c) / tau``,

    i.e. cross-entropy with logits ``T_ic + log n_c`` over the classes present
    plus the constant ``log n_{c_i}`` (so ``l_i >= log n_{c_i}``; spec T11 omits
    the constant). The sum over j includes j = i, as Eq. (15).
    ``f̂`` as in :func:`soft_supcon`. Anchors without another row of their class
    are not scored (spec §1.14 item 1).

    Args:
      embeddings: float [N, D] rows on this device (normalised inside).
      labels: int [N] class labels.
      temperature: tau > 0 (0.07 in the paper).
      bandwidth: kernel bandwidth h > 0 (0.6 in the paper).
      distance: ``"l1"`` (paper default), ``"l2"`` or ``"cosine"``.
      axis_name: mesh/pmap axis to gather the batch over.
      valid: optional bool [N]; False rows are padding.

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.
    """
    _check_choice(distance, _DISTANCES, "distance")
    _core.check_positive(bandwidth, "bandwidth")
    lb = _labelled_batch(embeddings, labels, temperature, valid, axis_name)
    prototypes = _nw_prototypes(_nw_soft_labels(lb, bandwidth, distance), lb)
    per_anchor = _nce_type(lb, prototypes, temperature)
    return _core.valid_anchor_mean(per_anchor, lb.anchor_ok, axis_name)


def med_supcon(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.07,
    median_mode: str = "lower",
    axis_name: str | None = None,
    valid: Array | None = None,
) -> Array:
    """MedSupCon (seed 001 §3.3, App. C Eq. 33 with f̄ -> f_med; spec §1.10): SoftSupCon
    with ``f̂`` replaced by the coordinate-wise class median.

    ``l_i = -z_i . f_med(c_i) / tau + log sum_{k != i} e^{S_ik} + R_i``,
    ``R_i = sum_{k != i} e^{z_i . f_med(c_k) / tau} / sum_{k != i} e^{S_ik}``,

    ``f_med(c)`` = per-coordinate median of the valid rows of class c, self
    included, not renormalised (its norm may exceed 1). ``lower`` takes the lower
    middle element for even counts (PyTorch's ``median``; spec §5 A5 default),
    ``average`` the mean of the two middle ones (numpy). Gradients reach the
    selected rows only.

    Args:
      embeddings: float [N, D] rows on this device (normalised inside).
      labels: int [N] class labels.
      temperature: tau > 0 (0.07 in the paper).
      median_mode: ``"lower"`` or ``"average"``.
      axis_name: mesh/pmap axis to gather the batch over.
      valid: optional bool [N]; False rows are padding.

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.
    """
    _check_choice(median_mode, _MEDIAN_MODES, "median_mode")
    lb = _labelled_batch(embeddings, labels, temperature, valid, axis_name)
    per_anchor = _supcon_type(lb, _median_prototypes(lb, median_mode), temperature)
    return _core.valid_anchor_mean(per_anchor, lb.anchor_ok, axis_name)


def med_nce(
    embeddings: Array,
    labels: Array,
    *,
    temperature: float | Array = 0.07,
    median_mode: str = "lower",
    axis_name: str | None = None,
    valid: Array | None = None,
) -> Array:
    """MedNCE (seed 001 §3.3, App. C Eq. 34 with f̄ -> f_med; spec §1.10): SoftNCE with
    ``f̂`` replaced by the coordinate-wise class median, no R.

    ``l_i = -z_i . f_med(c_i) / tau + log sum_{j=1}^{N} e^{z_i . f_med(c_j) / tau}``
    ``    = -T_{i,c_i} + log sum_c n_c e^{T_ic}``, ``T_ic = z_i . f_med(c) / tau``,

    with ``f_med`` as in :func:`med_supcon` and j = i included.

    Args:
      embeddings: float [N, D] rows on this device (normalised inside).
      labels: int [N] class labels.
      temperature: tau > 0 (0.07 in the paper).
      median_mode: ``"lower"`` or ``"average"``.
      axis_name: mesh/pmap axis to gather the batch over.
      valid: optional bool [N]; False rows are padding.

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.
    """
    _check_choice(median_mode, _MEDIAN_MODES, "median_mode")
    lb = _labelled_batch(embeddings, labels, temperature, valid, axis_name)
    per_anchor = _nce_type(lb, _median_prototypes(lb, median_mode), temperature)
    return _core.valid_anchor_mean(per_anchor, lb.anchor_ok, axis_name)
