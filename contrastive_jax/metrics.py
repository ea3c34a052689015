"""Statistics of learned embeddings: alignment and uniformity, cosine-similarity
statistics per class, a mutual-information estimator, and cheap collapse checks.

Two kinds of function live here:

* Batch metrics in JAX (float32, ``jax.jit``-able, NaN-free gradients) that the
  trainer can log every step on the batch's projections: :func:`alignment`,
  :func:`alignment_from_labels`, :func:`uniformity`, :func:`embedding_stats`.
  The first three follow the loss contract of :mod:`contrastive_jax.losses`
  (``valid`` masks padded rows; with ``axis_name`` they run inside
  ``jax.shard_map``/``jax.pmap``, score local rows against the gathered batch
  and return the global value, with the gradient of the global value, on every
  device).
* Evaluation statistics in numpy/scipy (float64, not traceable) for whole test
  sets: :func:`class_similarity_matrix`, :func:`within_between_similarities`,
  :func:`similarity_summary` and :func:`mixed_ksg`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy import spatial, special

from contrastive_jax.losses import _core, alignment, alignment_from_labels, uniformity

Array = jax.Array

__all__ = [
    "alignment",
    "alignment_from_labels",
    "uniformity",
    "embedding_stats",
    "class_similarity_matrix",
    "within_between_similarities",
    "similarity_summary",
    "mixed_ksg",
]


# --------------------------------------------------------------------------- helpers


def _as_unit_rows_np(z: np.ndarray | Array, name: str = "z") -> np.ndarray:
    """Checks a float [N, D] array; returns float64 rows / max(norm, 1e-12)."""
    z = np.asarray(z)
    if z.ndim != 2 or z.shape[0] < 1 or z.shape[1] < 1:
        raise ValueError(f"`{name}` must have shape [N, D] with N, D >= 1, got {z.shape}")
    if not np.issubdtype(z.dtype, np.floating):
        raise ValueError(f"`{name}` must be a floating-point array, got dtype {z.dtype}")
    z = z.astype(np.float64)
    return z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)


def _int_labels_np(labels: np.ndarray | Array, n: int, name: str = "labels") -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(f"`{name}` must have shape [{n}], got {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"`{name}` must be an integer array, got dtype {labels.dtype}")
    return labels.astype(np.int64)


# --------------------------------------------------------------------------- embedding statistics


def embedding_stats(embeddings: Array, *, valid: Array | None = None) -> dict[str, Array]:
    """Cheap collapse diagnostics of a batch of embeddings (global arrays, jit-able).

    Over the valid rows ``z_1..z_n`` (n >= 1), with ``u_i = z_i / ||z_i||``:

    * ``mean_norm``: ``mean_i ||z_i||`` before normalisation.
    * ``mean_cosine``: ``(||sum_i u_i||^2 - sum_i ||u_i||^2) / (n (n - 1))``, the mean
      of ``u_i . u_j`` over ordered pairs i != j in O(N D) (0 when n < 2).
      About 0 for spread-out embeddings, 1 under complete collapse.
    * ``normalized_std``: ``mean_d std_i(u_id)`` (SimSiam, Chen & He 2021): about
      ``1/sqrt(D)`` for well-spread unit rows, 0 under complete collapse.
    * ``effective_rank``: ``exp(-sum_k p_k log p_k)`` with ``p_k = s_k / sum s``,
      ``s_k`` the singular values of the (un-normalised) valid rows (Roy & Vetterli
      2007; RankMe, Garrido et al. 2023). Between 1 and min(n, D); r for r equal
      non-zero singular values.

    Args:
      embeddings: float [N, D].
      valid: optional bool [N]; False rows are ignored.

    Returns:
      dict of float32 scalars with the four keys above.

    Examples:
      >>> import jax.numpy as jnp
      >>> from contrastive_jax import metrics
      >>> square = jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
      >>> stats = metrics.embedding_stats(square)
      >>> print(f"{float(stats['mean_cosine']):.4f} {float(stats['effective_rank']):.1f}")
      -0.3333 2.0
    """
    z = _core.check_embeddings(embeddings)
    valid = _core.check_valid(valid, z.shape[0])
    z = jnp.where(valid[:, None], z, 0.0)
    weight = valid.astype(jnp.float32)
    n = jnp.maximum(jnp.sum(weight), 1.0)
    norms = jnp.sqrt(jnp.sum(z * z, axis=1))
    u = _core.l2_normalize(z)
    total = jnp.sum(u, axis=0)
    pair_sum = jnp.sum(total * total) - jnp.sum(u * u)
    mean_cosine = _core.safe_divide(pair_sum, n * (n - 1.0))
    centred = jnp.where(valid[:, None], u - total / n, 0.0)
    normalized_std = jnp.mean(jnp.sqrt(jnp.sum(centred * centred, axis=0) / n))
    singular = jnp.linalg.svd(z, compute_uv=False)
    p = _core.safe_divide(singular, jnp.sum(singular))
    entropy = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0))
    return {
        "mean_norm": jnp.sum(norms * weight) / n,
        "mean_cosine": mean_cosine,
        "normalized_std": normalized_std,
        "effective_rank": jnp.exp(entropy),
    }


# --------------------------------------------------------------------------- class similarity


def class_similarity_matrix(
    embeddings: np.ndarray | Array, labels: np.ndarray | Array, num_classes: int
) -> np.ndarray:
    """Mean cosine similarity between and within classes (the matrix of SINCERE's Fig. 2).

    ``M_ab = mean{ cos(z_i, z_j) : c_i = a, c_j = b, i != j }``. With unit rows
    ``u_i`` and class sums ``s_a = sum_{c_i = a} u_i``, the pair sums are
    ``s_a . s_b`` off the diagonal and ``||s_a||^2 - sum_{c_i = a} ||u_i||^2`` on it
    (self pairs removed), over ``n_a n_b`` and ``n_a (n_a - 1)`` pairs. This is
    exact and costs O(N D + K^2 D) time and O(K D) memory: no N x N matrix, so a
    10,000 x 128 test set is cheap. Numpy, float64; not for use under ``jit``.

    Args:
      embeddings: float [N, D] (normalised inside; an all-zero row counts as
        cosine 0 with everything).
      labels: int [N] in ``[0, num_classes)``.
      num_classes: K.

    Returns:
      float64 [K, K], symmetric; NaN where a class has no pair (absent class, or
      a diagonal entry of a class with one member).

    Examples:
      >>> import numpy as np
      >>> from contrastive_jax import metrics
      >>> z = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
      >>> m = metrics.class_similarity_matrix(z, np.array([0, 0, 1, 1]), num_classes=2)
      >>> print(np.round(m, 2))
      [[1.  0.3]
       [0.3 0.8]]

    References:
      Feeney, P. and Hughes, M. C. (2023). SINCERE: Supervised Information
      Noise-Contrastive Estimation REvisited. arXiv:2309.14277, Fig. 2.
    """
    u = _as_unit_rows_np(embeddings, "embeddings")
    labels = _int_labels_np(labels, u.shape[0])
    if int(num_classes) != num_classes or num_classes < 1:
        raise ValueError(f"`num_classes` must be a positive integer, got {num_classes}")
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ValueError(
            f"`labels` must lie in [0, {num_classes}), got range [{labels.min()}, {labels.max()}]"
        )
    sums = np.zeros((num_classes, u.shape[1]))
    np.add.at(sums, labels, u)
    counts = np.bincount(labels, minlength=num_classes).astype(np.float64)
    self_terms = np.bincount(labels, weights=np.sum(u * u, axis=1), minlength=num_classes)
    pair_sums = sums @ sums.T - np.diag(self_terms)
    pair_counts = np.outer(counts, counts) - np.diag(counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pair_counts > 0, pair_sums / pair_counts, np.nan)


def within_between_similarities(
    embeddings: np.ndarray | Array, labels: np.ndarray | Array, cls: int
) -> tuple[np.ndarray, np.ndarray]:
    """Pair cosines of one class for histograms (SINCERE's Fig. 3: truck vs non-truck).

    Feeney & Hughes (2023), arXiv:2309.14277, Fig. 3 plots these two distributions for
    CIFAR-10's truck class.

    Args:
      embeddings: float [N, D] (normalised inside).
      labels: int [N].
      cls: the class ``a``.

    Returns:
      ``(within, between)``, float64 1-D arrays: ``within`` holds ``cos(z_i, z_j)``
      for the ``n_a (n_a - 1) / 2`` unordered pairs i < j with ``c_i = c_j = a``;
      ``between`` the ``n_a (N - n_a)`` values with ``c_i = a``, ``c_j != a``.
      ``mean(within) = M_aa`` and ``mean(between)`` is the ``n_b``-weighted mean of
      ``M_ab`` over b != a (:func:`class_similarity_matrix`). Memory is the size of
      the output (72 MB for one CIFAR-10 test class).
    """
    u = _as_unit_rows_np(embeddings, "embeddings")
    labels = _int_labels_np(labels, u.shape[0])
    members = labels == cls
    inside, outside = u[members], u[~members]
    gram = inside @ inside.T
    within = gram[np.triu_indices(inside.shape[0], k=1)]
    between = (inside @ outside.T).reshape(-1)
    return within, between


def similarity_summary(matrix: np.ndarray) -> dict[str, float]:
    """Means of the diagonal and of the off-diagonal entries of a class-similarity matrix.

    Args:
      matrix: float [K, K] from :func:`class_similarity_matrix`.

    Returns:
      ``{"mean_within": mean_a M_aa, "mean_between": mean_{a != b} M_ab}``, each
      over the finite entries only (NaN if there are none).

    Examples:
      >>> import numpy as np
      >>> from contrastive_jax import metrics
      >>> summary = metrics.similarity_summary(np.array([[1.0, 0.3], [0.3, 0.8]]))
      >>> print({k: round(v, 2) for k, v in summary.items()})
      {'mean_within': 0.9, 'mean_between': 0.3}
    """
    m = np.asarray(matrix, np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"`matrix` must be square [K, K], got shape {m.shape}")
    diagonal = np.eye(m.shape[0], dtype=bool)

    def finite_mean(values: np.ndarray) -> float:
        values = values[np.isfinite(values)]
        return float(values.mean()) if values.size else float("nan")

    return {"mean_within": finite_mean(m[diagonal]), "mean_between": finite_mean(m[~diagonal])}


# --------------------------------------------------------------------------- mutual information


def _as_samples(a: np.ndarray | Array, name: str) -> np.ndarray:
    """[N] or [N, d] numeric samples -> float64 [N, d]."""
    a = np.asarray(a)
    if a.ndim not in (1, 2) or a.shape[0] < 1 or (a.ndim == 2 and a.shape[1] < 1):
        raise ValueError(f"`{name}` must have shape [N] or [N, d], got {a.shape}")
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        raise ValueError(f"`{name}` must be numeric, got dtype {a.dtype}")
    a = a.astype(np.float64).reshape(a.shape[0], -1)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"`{name}` must be finite")
    return a


def mixed_ksg(x: np.ndarray | Array, y: np.ndarray | Array, *, k: int = 5) -> float:
    """Mixed-KSG estimate of I(X; Y) in nats (Gao, Kannan, Oh & Viswanath 2017).

    As the authors' reference code ``Mixed_KSG``. With the l-inf
    (Chebyshev) metric in the joint space (x, y), for each sample i:

    * ``rho_i``: distance to its k-th nearest neighbour, itself excluded.
    * If ``rho_i = 0``: ``k~_i``, ``n_x,i``, ``n_y,i`` count the samples at distance
      0 from i (itself included) in the joint space, in x and in y.
    * Else: ``k~_i = k``, ``n_x,i = #{j : ||x_j - x_i||_inf < rho_i}`` (itself
      included), and the same for ``n_y,i``.

    ``I = (1/N) sum_i [ psi(k~_i) + log N - psi(n_x,i) - psi(n_y,i) ]``, psi the
    digamma function. Works for continuous, discrete (ties) and mixed data; a
    discrete ``y`` (labels) is just a 1-d coordinate. The strict ``<`` is exact
    here (ball radius ``nextafter(rho_i, 0)``); Gao's code uses ``rho_i - 1e-15``,
    which differs only for distances within 1e-15 of ``rho_i``. The estimate can
    be slightly negative and has a small negative bias in higher dimensions
    (``tests/test_metrics.py`` measures it on a Gaussian mixture with known MI).
    Numpy/scipy (``cKDTree``), float64, O(N log N) for low-dimensional data.

    Args:
      x: [N] or [N, d_x] samples (e.g. normalised embeddings).
      y: [N] or [N, d_y] samples (e.g. integer class labels).
      k: number of neighbours, 1 <= k <= N - 1.

    Returns:
      The estimate in nats.

    Examples:
      >>> import numpy as np
      >>> from contrastive_jax import metrics
      >>> rng = np.random.default_rng(0)
      >>> y = rng.integers(0, 2, 2000)          # a fair coin: I(X; Y) <= log 2 = 0.693
      >>> x = y + 0.1 * rng.normal(size=2000)   # X reveals Y almost surely
      >>> print(f"{metrics.mixed_ksg(x, y):.2f}")
      0.69

    References:
      Gao, W., Kannan, S., Oh, S. and Viswanath, P. (2017). Estimating mutual information
      for discrete-continuous mixtures. NeurIPS 2017, arXiv:1709.06212.
    """
    xs, ys = _as_samples(x, "x"), _as_samples(y, "y")
    n = xs.shape[0]
    if ys.shape[0] != n:
        raise ValueError(f"`x` has {n} samples but `y` has {ys.shape[0]}; they must match")
    if isinstance(k, bool) or int(k) != k or not 1 <= k <= n - 1:
        raise ValueError(f"`k` must be an integer in [1, N - 1] = [1, {n - 1}], got {k}")
    k = int(k)
    joint = np.concatenate([xs, ys], axis=1)
    trees = [spatial.cKDTree(a) for a in (joint, xs, ys)]
    rho = trees[0].query(joint, k=k + 1, p=np.inf)[0][:, k]
    ties = rho == 0
    radius = np.where(ties, 0.0, np.nextafter(rho, 0.0))
    n_x = trees[1].query_ball_point(xs, radius, p=np.inf, return_length=True)
    n_y = trees[2].query_ball_point(ys, radius, p=np.inf, return_length=True)
    k_tilde = np.full(n, k)
    if np.any(ties):
        k_tilde[ties] = trees[0].query_ball_point(joint[ties], 0.0, p=np.inf, return_length=True)
    terms = special.digamma(k_tilde) + math.log(n) - special.digamma(n_x) - special.digamma(n_y)
    return float(np.mean(terms))
