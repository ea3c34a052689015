"""Objective terms that are not losses of :mod:`contrastive_jax.losses`.

Each term follows the loss contract of the package (``fn(embeddings, second, *,
axis_name=None, valid=None, **hparams) -> float32 scalar``, the mean over the
global batch) and is selected by name in ``config.loss.name`` like a loss
(:mod:`contrastive_jax.train.objective`):

* ``align_uniform``: Wang & Isola's objective, alignment of the two views of
  each example plus the mean uniformity of each view.

:data:`TERMS` maps each name to ``(fn, second argument)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from contrastive_jax import metrics

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


#: name -> (function, the second argument it takes: a field of ``objective.Targets``).
TERMS = {"align_uniform": (align_uniform, "instance")}
