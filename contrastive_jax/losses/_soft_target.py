"""Soft-target InfoNCE and soft-target cross-entropy.

From Hugger & Uhlmann (2024), "Towards noise contrastive estimation with soft
targets for conditional models", arXiv:2404.14076. Both losses take class scores
``logits`` float [B, K] (the classifier's output, ``L[a, k] = z_a . y_k`` for
label embeddings ``y_k``) and soft targets ``targets`` float [B, K] (label
smoothing, MixUp/CutMix mixtures or one-hot rows; each row on the simplex)
instead of embeddings.

Row conventions shared by both losses: a row is an anchor iff it is valid
(``valid``) and carries target mass (``sum_k t[a, k] > 0``). A row without
target mass has no positive, so, like a padded row, it is neither an anchor nor
(for soft-target InfoNCE) a negative. That rows sum to 1 is documented, not
checked: traced values cannot be inspected under ``jit``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from contrastive_jax.losses import _core, _docs, blockwise

Array = jax.Array


def _check_logits_and_targets(logits: Array, targets: Array) -> tuple[Array, Array]:
    """float [B, K] logits and targets of the same shape, returned as float32."""
    logits = _core.check_embeddings(logits, "logits")
    if not hasattr(targets, "ndim") or not hasattr(targets, "dtype"):
        raise ValueError(f"`targets` must be an array of shape [B, K], got {type(targets)!r}")
    if tuple(targets.shape) != tuple(logits.shape):
        raise ValueError(
            f"`targets` must have the shape of `logits` {tuple(logits.shape)}, "
            f"got {tuple(targets.shape)}"
        )
    return logits, _core.check_embeddings(targets, "targets")


def _log_class_prior(class_prior: Array | None, num_classes: int) -> Array:
    """``log eta`` float32 [K] with ``log 0 := 0``; zeros when None."""
    if class_prior is None:
        return jnp.zeros((num_classes,), jnp.float32)
    if not hasattr(class_prior, "ndim") or not hasattr(class_prior, "dtype"):
        raise ValueError(
            f"`class_prior` must be a float array of shape [{num_classes}], "
            f"got {type(class_prior)!r}"
        )
    if class_prior.ndim != 1 or class_prior.shape[0] != num_classes:
        raise ValueError(
            f"`class_prior` must have shape [{num_classes}] (one entry per class), "
            f"got shape {tuple(class_prior.shape)}"
        )
    if not jnp.issubdtype(class_prior.dtype, jnp.floating):
        raise ValueError(
            f"`class_prior` must be a floating-point array, got dtype {class_prior.dtype}"
        )
    _check_prior_values(class_prior)
    prior = class_prior.astype(jnp.float32)
    positive = prior > 0
    return jnp.where(positive, jnp.log(jnp.where(positive, prior, 1.0)), 0.0)


def _check_prior_values(class_prior: Array) -> None:
    """Concrete priors must be finite, >= 0 and not all zero; traced ones pass."""
    try:
        values = np.asarray(class_prior, dtype=np.float64)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return
    if not np.all(np.isfinite(values)) or np.any(values < 0) or not np.any(values > 0):
        raise ValueError(
            f"`class_prior` must be finite, >= 0 and not all zero, got {values.tolist()}"
        )


def _anchor_rows(targets: Array, valid: Array | None) -> Array:
    """bool [B]: valid rows with target mass."""
    return _core.check_valid(valid, targets.shape[0]) & (jnp.sum(targets, axis=1) > 0)


@_core.explicit_sharding
@_docs.shared_args(rows="B")
def soft_target_infonce(
    logits: Array,
    targets: Array,
    *,
    temperature: float | Array = 1.0,
    class_prior: Array | None = None,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
    block_size: int | None = None,
) -> Array:
    """Soft-target InfoNCE, Hugger & Uhlmann (2024) Eq. (12), in matrix form.

    With ``S = L / tau - log eta`` [B, K] and the global targets ``T_g`` [B_g, K],
    ``M = S T_g^T`` [B, B_g], i.e. ``M[a, b] = sum_j t_b[j] (L[a, j]/tau - log eta_j)``, and

    ``l_a = -log( exp(M[a, a]) / sum_b exp(M[a, b]) ) = logsumexp_b M[a, b] - M[a, a]``,

    the sum running over every anchor row b of the global batch, the sample itself
    and rows with the same (or an identical) target included: the negatives are the
    other samples' soft targets and nothing is masked, as in the paper's Figure 2
    code (``docs/conventions.md``, "Soft targets"). Only the
    targets are gathered across devices; logits stay local, so ``l_a`` depends on
    ``L[a]`` only. With one-hot targets this is hard InfoNCE with in-batch label
    negatives (Eq. 5); the max shift of the paper's Figure 2 is implicit in
    ``logsumexp``. ``M`` is an einsum at HIGHEST precision in float32, never the
    (B, B_g, K) broadcast of Figure 2.

    Defaults follow the paper: ``tau = 1`` (divided once), and ``class_prior=None``
    means uniform noise ``eta = 1/K``, whose ``log eta`` term cancels because the
    rows of ``T`` sum to 1. For the paper's runs pass the empirical class
    frequencies of the whole training set. A positive rescaling of ``eta`` cancels
    too. Classes with ``eta_k = 0`` get ``log eta_k := 0``;
    targets must carry no mass on them (not checkable under ``jit``).

    Rows without target mass and padded rows are neither anchors nor negatives. A
    global batch with a single anchor has only itself in the sum and gives 0.
    Gradients flow into ``logits`` and ``targets``.

    Args:
      logits: float [B, K] class scores of the local rows ("not true logits").
      targets: float [B, K] soft targets; rows should lie on the simplex.
      temperature: tau > 0 (may be traced).
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      class_prior: optional float [K] noise distribution eta (>= 0).
      {axis_name}
      {valid}
      {block_size}
        ``M`` is ``scores`` against the gathered targets, the same row-block product
        as the embedding losses.

    Returns:
      float32 scalar, the mean of ``l_a`` over anchor rows of the global batch.

    Raises:
      ValueError: an argument has the wrong rank, shape or dtype, ``temperature`` is not
        positive, or a concrete ``class_prior`` is negative, non-finite or all zero.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> logits = jnp.array([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]])
      >>> onehot = jnp.eye(3)
      >>> print(f"{float(losses.soft_target_infonce(logits, onehot)):.4f}")
      0.2395
      >>> smoothed = 0.9 * onehot + 0.1 / 3  # label smoothing, rows still sum to 1
      >>> print(f"{float(losses.soft_target_infonce(logits, smoothed)):.4f}")
      0.2856

    References:
      Hugger, J. and Uhlmann, V. (2024). Towards noise contrastive estimation with soft
      targets for conditional models. arXiv:2404.14076. Eq. (12) (the loss), Eq. (5)
      (hard InfoNCE), Figure 2 (the reference implementation on class scores).
      BibTeX: ``hugger2024softtarget`` (docs/losses.md, "Citing the papers").
    """
    logits, targets = _check_logits_and_targets(logits, targets)
    temperature = _core.check_positive(temperature, "temperature")
    log_prior = _log_class_prior(class_prior, logits.shape[1])
    anchor_ok = _anchor_rows(targets, valid)

    scores = logits / jnp.asarray(temperature, jnp.float32) - log_prior[None, :]
    global_targets = _core.all_gather_rows(targets, axis_name)
    candidate_ok = _core.all_gather_rows(anchor_ok, axis_name)
    offset = _core.local_row_offset(logits.shape[0], axis_name)
    block = blockwise.choose_block(block_size, global_targets.shape[0])
    if block is not None:
        total, _ = blockwise.stream_rows(
            _soft_target_block,
            scores,
            global_targets,
            (),
            (offset + jnp.arange(logits.shape[0]), anchor_ok),
            candidate_ok,
            block,
        )
        return blockwise.global_mean(total, anchor_ok, axis_name)
    m = jnp.einsum(
        "ak,bk->ab", scores, global_targets, precision=jax.lax.Precision.HIGHEST
    )
    is_self = (offset + jnp.arange(m.shape[0]))[:, None] == jnp.arange(m.shape[1])[None, :]
    positive = jnp.sum(jnp.where(is_self, m, 0.0), axis=1)
    per_anchor = _core.masked_logsumexp(m, candidate_ok[None, :], axis=1) - positive
    return _core.valid_anchor_mean(per_anchor, anchor_ok, axis_name)


def _soft_target_block(m, params, rows, candidate_ok):
    """Row-block function of soft-target InfoNCE for :func:`blockwise.stream_rows`.

    ``(M [b, B_g], (), (global index, anchor_ok) [b], candidate_ok [B_g])`` ->
    (``l_a`` of anchor rows, 0 elsewhere [b]; None).
    """
    index, anchor_ok = rows
    is_self = index[:, None] == jnp.arange(m.shape[1])[None, :]
    positive = jnp.sum(jnp.where(is_self, m, 0.0), axis=1)
    per_anchor = _core.masked_logsumexp(m, candidate_ok[None, :], axis=1) - positive
    return jnp.where(anchor_ok, per_anchor, 0.0), None


@_core.explicit_sharding
@_docs.shared_args(rows="B")
def soft_target_cross_entropy(
    logits: Array,
    targets: Array,
    *,
    temperature: float | Array = 1.0,
    axis_name: str | tuple[str, ...] | None = None,
    valid: Array | None = None,
) -> Array:
    """Soft-target cross-entropy, Hugger & Uhlmann (2024) Eq. (3).

    ``l_a = -sum_k t_a[k] log softmax(L[a] / tau)[k]``; with one-hot targets this is
    the standard cross-entropy (NLL, Eq. 1, at tau = 1). Default ``tau = 1`` as in
    the paper's baseline. Rows are independent: no gather, only the global mean
    over anchor rows (valid and with target mass) under ``axis_name``. Per row this
    is ``optax.softmax_cross_entropy(logits / tau, targets)`` (tested against it);
    it is written in ``jax.numpy`` so that the losses need only the core install.

    Args:
      logits: float [B, K] class scores of the local rows.
      targets: float [B, K] soft targets; rows should lie on the simplex.
      temperature: tau > 0 (may be traced).
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      {axis_name_split}
      {valid}

    Returns:
      float32 scalar, the mean of ``l_a`` over anchor rows of the global batch.

    Raises:
      ValueError: an argument has the wrong rank, shape or dtype, or ``temperature`` is
        not positive.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> logits = jnp.array([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
      >>> targets = jnp.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]])  # a MixUp pair
      >>> print(f"{float(losses.soft_target_cross_entropy(logits, targets)):.4f}")
      0.7395

    References:
      Hugger, J. and Uhlmann, V. (2024). Towards noise contrastive estimation with soft
      targets for conditional models. arXiv:2404.14076. Eq. (3) (soft-target NLL),
      Eq. (1) (NLL).
      BibTeX: ``hugger2024softtarget`` (docs/losses.md, "Citing the papers").
    """
    logits, targets = _check_logits_and_targets(logits, targets)
    temperature = _core.check_positive(temperature, "temperature")
    anchor_ok = _anchor_rows(targets, valid)
    log_q = jax.nn.log_softmax(logits / jnp.asarray(temperature, jnp.float32), axis=1)
    per_anchor = -jnp.sum(targets * log_q, axis=1)
    return _core.valid_anchor_mean(per_anchor, anchor_ok, axis_name)


# --------------------------------------------------------------------------- class labels


def smooth_labels(labels: Array, num_classes: int, epsilon: float = 0.1) -> Array:
    """Label-smoothed one-hot targets.

    Args:
      labels: int [B].
      num_classes: K.
      epsilon: smoothing in [0, 1]; 0 gives one-hot, 1 uniform.

    Returns:
      float32 [B, K]: ``1 - eps + eps / K`` at the label, ``eps / K`` elsewhere.
    """
    off = epsilon / num_classes
    return jax.nn.one_hot(labels, num_classes, dtype=jnp.float32) * (1.0 - epsilon) + off


def _smoothed(logits: Array, label: Array, label_smoothing: float) -> Array:
    """float32 [B, K] targets for class scores [B, K].

    Int labels [B] give ``(1 - eps) onehot(y) + eps / K``; float soft targets [B, K]
    (already smoothed and mixed) are returned as they are, with eps = 0 required.
    """
    logits = _core.check_embeddings(logits, "logits")
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise ValueError(f"`label_smoothing` must be in [0, 1], got {label_smoothing}")
    if jnp.issubdtype(label.dtype, jnp.floating):
        if label.shape != logits.shape:
            raise ValueError(
                f"soft targets must have the shape of `logits` {logits.shape}, got {label.shape}"
            )
        if label_smoothing:
            raise ValueError(
                "`label_smoothing` must be 0 with soft targets (they are smoothed already)"
            )
        return label.astype(jnp.float32)
    if label.shape != logits.shape[:1]:
        raise ValueError(
            f"`label` must have shape [{logits.shape[0]}] (int class labels) or "
            f"{tuple(logits.shape)} (soft targets), got {tuple(label.shape)}"
        )
    return smooth_labels(label, logits.shape[1], float(label_smoothing))


@_core.explicit_sharding
@_docs.shared_args(rows="B")
def label_cross_entropy(
    logits: Array,
    label: Array,
    *,
    label_smoothing: float = 0.0,
    temperature: float = 1.0,
    axis_name: str | None = None,
    valid: Array | None = None,
) -> Array:
    """Cross-entropy of class scores against label-smoothed targets (Hugger & Uhlmann Eq. 3).

    ``l_a = -sum_k t_a[k] log softmax(L[a] / tau)[k]`` with
    ``t_a = (1 - eps) onehot(y_a) + eps / K``
    (:func:`soft_target_cross_entropy` on those targets); eps = 0
    is the usual cross-entropy (NLL). Given soft targets instead of labels (the
    MixUp/CutMix stage, Eq. 2), the loss is Eq. 3 on them (STCE).

    Args:
      logits: float [B, K] class scores (the classifier head's output).
      label: int [B] class labels in [0, K), or float [B, K] soft targets (eps must be 0).
      label_smoothing: eps in [0, 1].
      temperature: tau > 0.
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      {axis_name_split}
      {valid}

    Returns:
      float32 scalar.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> logits = jnp.array([[2.0, 0.0], [0.0, 1.0]])
      >>> round(float(losses.label_cross_entropy(logits, jnp.array([0, 1]))), 4)
      0.2201

    References:
      Jan Hugger and Virginie Uhlmann (2024). Towards noise contrastive estimation with
      soft targets for conditional models. arXiv:2404.14076, Eq. (3).
      BibTeX: ``hugger2024softtarget`` (docs/losses.md, "Citing the papers").
    """
    targets = _smoothed(logits, label, label_smoothing)
    return soft_target_cross_entropy(
        logits, targets, temperature=temperature, axis_name=axis_name, valid=valid
    )


@_core.explicit_sharding
@_docs.shared_args(rows="B")
def label_soft_target_infonce(
    logits: Array,
    label: Array,
    *,
    label_smoothing: float = 0.0,
    temperature: float = 1.0,
    class_prior: Array | tuple[float, ...] | None = None,
    axis_name: str | None = None,
    valid: Array | None = None,
) -> Array:
    """Soft-target InfoNCE of class scores against label-smoothed (or mixed) targets.

    :func:`soft_target_infonce` (Hugger & Uhlmann Eq. 12, the
    negatives being the other rows of the global batch) on
    ``t_a = (1 - eps) onehot(y_a) + eps / K``, or on the given soft targets float
    [B, K]; with one-hot targets (eps = 0) it is the hard InfoNCE of their Eq. 5.
    ``class_prior`` is eta float [K] (None: uniform; a tuple from a config is
    accepted).

    Args:
      logits: float [B, K] class scores (the classifier head's output).
      label: int [B] class labels in [0, K), or float [B, K] soft targets (eps must be 0).
      label_smoothing: eps in [0, 1].
      temperature: tau > 0.
        Traced, a value that is not (or not finite) gives a NaN loss: see ``_core``.
      class_prior: eta, float [K] or a tuple of K floats; None: uniform.
      {axis_name}
      {valid}

    Returns:
      float32 scalar.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import losses
      >>> logits = jnp.array([[2.0, 0.0], [0.0, 1.0]])
      >>> # each class once in the batch: the softmax over the classes present, as the CE
      >>> round(float(losses.label_soft_target_infonce(logits, jnp.array([0, 1]))), 4)
      0.2201

    References:
      Jan Hugger and Virginie Uhlmann (2024). Towards noise contrastive estimation with
      soft targets for conditional models. arXiv:2404.14076, Eq. (12).
      BibTeX: ``hugger2024softtarget`` (docs/losses.md, "Citing the papers").
    """
    targets = _smoothed(logits, label, label_smoothing)
    prior = None if class_prior is None else jnp.asarray(class_prior, jnp.float32)
    return soft_target_infonce(
        logits, targets, temperature=temperature, class_prior=prior, axis_name=axis_name,
        valid=valid,
    )
