"""Objective terms that are not losses of :mod:`contrastive_jax.losses`.

Each term follows the loss contract of the package (``fn(embeddings, second, *,
axis_name=None, valid=None, **hparams) -> float32 scalar``, the mean over the
global batch) and is selected by name in ``config.loss.name`` like a loss
(:mod:`contrastive_jax.train.objective`):

* ``align_uniform``: Wang & Isola's objective, alignment of the two views of
  each example plus the mean uniformity of each view.
* ``label_cross_entropy`` and ``label_soft_target_infonce``: the supervised
  classifier objectives of Hugger & Uhlmann (2024) on class scores (the
  ``classifier`` head, ``config.model.head.name = "classifier"`` with
  ``num_classes``), with label-smoothed targets built from the class labels, or
  the soft targets float [B, K] of the training step's MixUp/CutMix stage
  (``config.loss.mixing``, :mod:`contrastive_jax.train.objective`).

:data:`TERMS` maps each name to ``(fn, second argument)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from contrastive_jax import losses, metrics
from contrastive_jax.data.mixing import smooth_labels

Array = jax.Array


def align_uniform(
    embeddings: Array,
    instance: Array,
    *,
    alpha: float = 2.0,
    t: float = 2.0,
    uniformity_weight: float = 1.0,
    axis_name: str | None = None,
    valid: Array | None = None,
) -> Array:
    """Wang & Isola's ``L_align + lambda (L_uniform(z1) + L_uniform(z2)) / 2`` of a two-view batch.

    ``L_align = mean_i ||z1_i - z2_i||^alpha`` over the example pairs (their
    Sec. 4.1, ``align_loss``; :func:`contrastive_jax.metrics.alignment_from_labels`
    with the instance ids) and ``L_uniform(z) = log mean_{i<j} exp(-t ||z_i - z_j||^2)``
    over the distinct pairs of each view (``uniform_loss``,
    :func:`contrastive_jax.metrics.uniformity`), rows L2-normalised.

    Args:
      embeddings: float [N, D], N even: the two views of each example on
        consecutive rows (``2i`` and ``2i + 1``), the layout of the training step's
        flat two-view batch (``config.data.num_views = 2``).
      instance: int [N], the example id of each row (pairs for the alignment).
      alpha: alignment exponent > 0 (the paper's 2).
      t: uniformity scale > 0 (the paper's 2).
      uniformity_weight: lambda (the paper's 1).
      axis_name: mesh/pmap axis; both parts then run over the global batch.
      valid: optional bool [N]; False rows are padding.

    Returns:
      float32 scalar.

    Examples:
      >>> import jax.numpy as jnp
      >>> z = jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
      >>> ids = jnp.array([0, 0, 1, 1])
      >>> round(float(align_uniform(z, ids)), 4)  # aligned; each view has one pair at |d|^2 = 2
      -4.0

    References:
      Tongzhou Wang and Phillip Isola (2020). Understanding Contrastive Representation
      Learning through Alignment and Uniformity on the Hypersphere. ICML 2020,
      arXiv:2005.10242, Sec. 4.1 (``align_loss``, ``uniform_loss``).
    """
    if embeddings.ndim != 2 or embeddings.shape[0] % 2:
        raise ValueError(
            f"`embeddings` must be [N, D] with N even (two views per example), got "
            f"{embeddings.shape}"
        )
    valid = jnp.ones(embeddings.shape[0], bool) if valid is None else valid
    align = metrics.alignment_from_labels(
        embeddings, instance, alpha=alpha, axis_name=axis_name, valid=valid
    )
    uniform = [
        metrics.uniformity(embeddings[v::2], t=t, axis_name=axis_name, valid=valid[v::2])
        for v in (0, 1)
    ]
    return align + uniformity_weight * (uniform[0] + uniform[1]) / 2


def _smoothed(logits: Array, label: Array, label_smoothing: float) -> Array:
    """float32 [B, K] targets for class scores [B, K].

    Int labels [B] give ``(1 - eps) onehot(y) + eps / K``; float soft targets [B, K]
    (already smoothed and mixed) are returned as they are, with eps = 0 required.
    """
    if logits.ndim != 2:
        raise ValueError(f"`logits` must have shape [B, K], got {logits.shape}")
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
        raise ValueError(f"`label` must be int [{logits.shape[0]}], got {label.shape}")
    return smooth_labels(label, logits.shape[1], float(label_smoothing))


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
    (:func:`contrastive_jax.losses.soft_target_cross_entropy` on those targets); eps = 0
    is the usual cross-entropy (NLL). Given soft targets instead of labels (the
    MixUp/CutMix stage, Eq. 2), the loss is Eq. 3 on them (STCE).

    Args:
      logits: float [B, K] class scores (the classifier head's output).
      label: int [B] class labels in [0, K), or float [B, K] soft targets (eps must be 0).
      label_smoothing: eps in [0, 1].
      temperature: tau > 0.
      axis_name, valid: as for every loss (global mean over valid rows).

    Returns:
      float32 scalar.

    Examples:
      >>> import jax.numpy as jnp
      >>> logits = jnp.array([[2.0, 0.0], [0.0, 1.0]])
      >>> round(float(label_cross_entropy(logits, jnp.array([0, 1]))), 4)
      0.2201

    References:
      Jan Hugger and Virginie Uhlmann (2024). Towards noise contrastive estimation with
      soft targets for conditional models. arXiv:2404.14076, Eq. (3).
    """
    targets = _smoothed(logits, label, label_smoothing)
    return losses.soft_target_cross_entropy(
        logits, targets, temperature=temperature, axis_name=axis_name, valid=valid
    )


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

    :func:`contrastive_jax.losses.soft_target_infonce` (Hugger & Uhlmann Eq. 12, the
    negatives being the other rows of the global batch) on
    ``t_a = (1 - eps) onehot(y_a) + eps / K``, or on the given soft targets float
    [B, K]; with one-hot targets (eps = 0) it is the hard InfoNCE of their Eq. 5.
    ``class_prior`` is eta float [K] (None: uniform; a tuple from a config is
    accepted). See :func:`label_cross_entropy` for the other arguments.

    References:
      Jan Hugger and Virginie Uhlmann (2024). Towards noise contrastive estimation with
      soft targets for conditional models. arXiv:2404.14076, Eq. (12).
    """
    targets = _smoothed(logits, label, label_smoothing)
    prior = None if class_prior is None else jnp.asarray(class_prior, jnp.float32)
    return losses.soft_target_infonce(
        logits, targets, temperature=temperature, class_prior=prior, axis_name=axis_name,
        valid=valid,
    )


#: name -> (function, the second argument it takes: a field of ``objective.Targets``; the label
#: terms take ``soft_label`` instead when ``config.loss.mixing`` is set).
TERMS = {
    "align_uniform": (align_uniform, "instance"),
    "label_cross_entropy": (label_cross_entropy, "label"),
    "label_soft_target_infonce": (label_soft_target_infonce, "label"),
}
