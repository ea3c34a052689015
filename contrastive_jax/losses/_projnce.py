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
custom VJP (:func:`~contrastive_jax.losses._projection.nw_projection`), so no [N, N] or [N, N, D] array exists.
Without ``num_classes`` the streamed path is compiled for a few class-slot counts
and runs the smallest that holds the batch's distinct labels
(:func:`~contrastive_jax.losses._projnce_streamed.class_slot_sizes`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from contrastive_jax.losses import _core, _docs, blockwise
from contrastive_jax.losses import _projection as projection
from contrastive_jax.losses import _projnce_streamed as streamed
from contrastive_jax.losses._nce import supcon_per_anchor
from contrastive_jax.losses._projection import LabelledBatch

Array = jax.Array

_DISTANCES = ("l1", "l2", "cosine")
_MEDIAN_MODES = ("lower", "average")


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


def _own_logit(lb: LabelledBatch, prototypes: Array, temperature: float | Array) -> Array:
    """``z_i . g(c_i) / tau`` for each local anchor: [n]."""
    own = prototypes[lb.anchor_class_ids]
    return jnp.sum(lb.batch.anchors * own, axis=1) / jnp.asarray(temperature, jnp.float32)


def _adjustment(lb: LabelledBatch, prototypes: Array, temperature: float | Array) -> Array:
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


def _supcon_type(lb: LabelledBatch, prototypes: Array, temperature: float | Array) -> Array:
    """``-z_i . g(c_i)/tau + log sum_{k != i} e^{S_ik} + R_i`` (Eq. 14 with j != i): [n]."""
    uniformity = _core.masked_logsumexp(lb.logits, lb.others, axis=1)
    return uniformity - _own_logit(lb, prototypes, temperature) + _adjustment(
        lb, prototypes, temperature
    )


def _nce_type(lb: LabelledBatch, prototypes: Array, temperature: float | Array) -> Array:
    """``-z_i . g(c_i)/tau + log sum_j e^{z_i . g(c_j)/tau}``, j over all valid rows (Eq. 15): [n]."""
    logits = _core.similarity_logits(lb.batch.anchors, prototypes[lb.class_ids], temperature)
    return _core.masked_logsumexp(logits, lb.live, axis=1) - _own_logit(
        lb, prototypes, temperature
    )


def _check_choice(value: str, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}, got {value!r}")


# --------------------------------------------------------------------------- dense or streamed


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
        beta = _core.check_nonnegative(beta, "beta")
    elif kind.startswith("soft"):
        _check_choice(distance, _DISTANCES, "distance")
        bandwidth = _core.check_positive(bandwidth, "bandwidth")
    else:
        _check_choice(median_mode, _MEDIAN_MODES, "median_mode")
    embeddings = _core.check_embeddings(embeddings)
    labels = _core.check_labels(labels, embeddings.shape[0])
    temperature = _core.check_positive(temperature, "temperature")
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
        total, anchor_ok = streamed.streamed_total(
            kind, num_classes, rows, anchor_rows, rows.candidate_data, temperature, n,
            axis_name, block, **hparams,
        )
        return blockwise.global_mean(total, anchor_ok, axis_name)
    m = rows.candidates.shape[0]
    _, class_ids = jnp.unique(rows.candidate_data, return_inverse=True, size=m)
    class_ids = class_ids.reshape(m).astype(jnp.int32)
    sizes = streamed.class_slot_sizes(m)

    def branch(k: int):
        return lambda ids: streamed.streamed_total(
            kind, k, rows, anchor_rows, ids, temperature, n, axis_name, block, **hparams
        )

    branches = [branch(k) for k in sizes]
    if len(branches) == 1:
        total, anchor_ok = branches[0](class_ids)
    else:
        # Dense ids lie in [0, number of distinct labels): the smallest size that holds them.
        which = jnp.searchsorted(jnp.asarray(sizes), jnp.max(class_ids) + 1)
        total, anchor_ok = jax.lax.switch(which, branches, class_ids)
    return blockwise.global_mean(total, anchor_ok, axis_name)


def _dense_loss(kind, embeddings, labels, temperature, valid, axis_name, beta, bandwidth,
                distance, median_mode) -> Array:
    """The [n, m] form of :func:`_projection_loss`."""
    lb = projection.labelled_batch(embeddings, labels, temperature, valid, axis_name)
    if kind == "projnce":
        supcon = supcon_per_anchor(lb.logits, lb.positives, lb.others)
        per_anchor = supcon + jnp.asarray(beta, jnp.float32) * _adjustment(
            lb, projection.class_means(lb), temperature
        )
        return _core.valid_anchor_mean(per_anchor, lb.anchor_ok, axis_name)
    if kind.startswith("soft"):
        m = lb.class_ids.shape[0]
        prototypes = projection.nw_prototypes_of(
            lb.batch.candidates, lb.batch.candidate_valid, lb.class_ids, m, bandwidth, distance
        )
    else:
        prototypes = projection.median_prototypes(lb, median_mode)
    term = _nce_type if kind.endswith("_nce") else _supcon_type
    return _core.valid_anchor_mean(term(lb, prototypes, temperature), lb.anchor_ok, axis_name)


# --------------------------------------------------------------------------- losses


@_core.explicit_sharding
@_docs.shared_args
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
      {class_embeddings}
      {class_labels}
      {projnce_temperature}
      beta: weight of R, >= 0 (1 is ProjNCE; the paper also shows 5 and 10).
      {axis_name}
      {projnce_valid}
      {block_size}
      {num_classes}

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.

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
      BibTeX: ``jeong2025projnce`` (docs/losses.md, "Citing the papers").
    """
    return _projection_loss("projnce", embeddings, labels, temperature, valid, axis_name,
                            block_size, num_classes, beta=beta)


@_core.explicit_sharding
@_docs.shared_args
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
      {class_embeddings}
      {class_labels}
      {projnce_temperature}
      bandwidth: kernel bandwidth h > 0 (0.6 in the paper).
      distance: ``"l1"`` (the paper's default), ``"l2"`` or ``"cosine"``
        (``1/2 - 1/2 cos``).
      {axis_name}
      {projnce_valid}
      {block_size}
      {num_classes}

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.

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
      BibTeX: ``jeong2025projnce`` (docs/losses.md, "Citing the papers").
    """
    return _projection_loss("soft_supcon", embeddings, labels, temperature, valid, axis_name,
                            block_size, num_classes, bandwidth=bandwidth, distance=distance)


@_core.explicit_sharding
@_docs.shared_args
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
      {class_embeddings}
      {class_labels}
      {projnce_temperature}
      bandwidth: kernel bandwidth h > 0 (0.6 in the paper).
      distance: ``"l1"`` (the paper's default), ``"l2"`` or ``"cosine"``.
      {axis_name}
      {projnce_valid}
      {block_size}
      {num_classes}

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.

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
      BibTeX: ``jeong2025projnce`` (docs/losses.md, "Citing the papers").
    """
    return _projection_loss("soft_nce", embeddings, labels, temperature, valid, axis_name,
                            block_size, num_classes, bandwidth=bandwidth, distance=distance)


@_core.explicit_sharding
@_docs.shared_args
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
      {class_embeddings}
      {class_labels}
      {projnce_temperature}
      median_mode: ``"lower"`` or ``"average"``.
      {axis_name}
      {projnce_valid}
      {block_size}
      {num_classes}

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.

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
      BibTeX: ``jeong2025projnce`` (docs/losses.md, "Citing the papers").
    """
    return _projection_loss("med_supcon", embeddings, labels, temperature, valid, axis_name,
                            block_size, num_classes, median_mode=median_mode)


@_core.explicit_sharding
@_docs.shared_args
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
      {class_embeddings}
      {class_labels}
      {projnce_temperature}
      median_mode: ``"lower"`` or ``"average"``.
      {axis_name}
      {projnce_valid}
      {block_size}
      {num_classes}

    Returns:
      float32 scalar, the mean over valid anchors of the global batch.

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
      BibTeX: ``jeong2025projnce`` (docs/losses.md, "Citing the papers").
    """
    return _projection_loss("med_nce", embeddings, labels, temperature, valid, axis_name,
                            block_size, num_classes, median_mode=median_mode)
