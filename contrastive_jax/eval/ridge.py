"""Closed-form ridge-regression probe on frozen features (one-hot targets, float64).

A fast, optimiser-free companion of the linear probe: regress one-hot labels ``Y`` [N, K] on
standardised features and classify by the largest regressed score. With the train mean
``mu``, standard deviation ``sigma`` (ddof 0; 1 where a feature is constant),
``X_s = (X - mu) / sigma`` and ``Y_c = Y - mean(Y)``::

    W = (X_s^T X_s + lambda I)^{-1} X_s^T Y_c        [F, K]
    b = mean(Y)                                      [K]   (X_s has zero mean)
    scores(x) = ((x - mu) / sigma) W + b

which is ``sklearn.linear_model.Ridge(alpha=lambda, fit_intercept=True)`` after
``StandardScaler()``. Everything runs in float64 numpy/scipy; the Gram matrix is accumulated
over row chunks, so memory is O(F^2 + chunk * F) beyond the features themselves.

Regularisation is chosen per sample: ``lambda = alpha * N`` with ``alpha`` from ``alphas``,
which keeps the strength of the penalty relative to the data term (``X_s^T X_s / N`` has unit
diagonal) when the fit is repeated on a different number of rows. Unless ``alpha`` is given,
``alpha`` maximises accuracy on a random held-out ``val_fraction`` of the training rows (fit
on the rest, one eigendecomposition for the whole grid; ties go to the larger ``alpha``), and
the probe is then refit on all training rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg

#: Default grid of per-sample penalties ``alpha = lambda / N``.
DEFAULT_ALPHAS: tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)

_ROWS_PER_CHUNK = 8192


@dataclass(frozen=True)
class RidgeProbe:
    """A fitted ridge probe.

    Attributes:
      weight: float64 [F, K], acting on standardised features.
      bias: float64 [K], the class frequencies of the training rows.
      mean: float64 [F], train feature mean.
      std: float64 [F], train feature standard deviation (1 for constant features).
      alpha: per-sample penalty used for the final fit.
      lam: absolute penalty ``alpha * N`` of the final fit (sklearn's ``alpha``).
      val_accuracy: held-out accuracy of each grid ``alpha`` ({} when ``alpha`` was given).
    """

    weight: np.ndarray
    bias: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    alpha: float
    lam: float
    val_accuracy: dict[float, float]


def _moments(
    x: np.ndarray, y: np.ndarray, num_classes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean, std, standardised Gram ``X_s^T X_s``, ``X_s^T Y_c`` and ``mean(Y)`` (float64)."""
    n, f = x.shape
    mean = np.zeros(f)
    for start in range(0, n, _ROWS_PER_CHUNK):
        mean += x[start : start + _ROWS_PER_CHUNK].sum(axis=0, dtype=np.float64)
    mean /= n
    y_mean = np.bincount(y, minlength=num_classes) / n
    gram = np.zeros((f, f))
    cross = np.zeros((f, num_classes))
    for start in range(0, n, _ROWS_PER_CHUNK):
        xc = x[start : start + _ROWS_PER_CHUNK].astype(np.float64) - mean
        yc = np.eye(num_classes)[y[start : start + _ROWS_PER_CHUNK]] - y_mean
        gram += xc.T @ xc
        cross += xc.T @ yc
    std = np.sqrt(np.diag(gram) / n)
    std = np.where(std > 0, std, 1.0)
    return mean, std, gram / np.outer(std, std), cross / std[:, None], y_mean


def fit_ridge_probe(
    train_x: np.ndarray,
    train_y: np.ndarray,
    *,
    num_classes: int,
    alpha: float | None = None,
    alphas: Sequence[float] = DEFAULT_ALPHAS,
    val_fraction: float = 0.1,
    seed: int = 0,
) -> RidgeProbe:
    """Fits the ridge probe ``W = (X_s^T X_s + alpha N I)^{-1} X_s^T Y_c`` (module docstring).

    Args:
      train_x: float [N, F] features.
      train_y: int [N] labels in ``[0, num_classes)``.
      num_classes: K.
      alpha: fixed per-sample penalty; ``None`` selects it from ``alphas`` on a held-out split.
      alphas: grid of per-sample penalties (all > 0).
      val_fraction: fraction of training rows held out for the selection: the first
        ``round(val_fraction * N)`` entries of ``np.random.default_rng(seed).permutation(N)``.
      seed: seed of the held-out split.

    Returns:
      A :class:`RidgeProbe`; use :func:`ridge_scores` on test features.
    """
    train_x = np.asarray(train_x)
    train_y = np.asarray(train_y)
    if train_x.ndim != 2 or not np.issubdtype(train_x.dtype, np.floating):
        raise ValueError(f"`train_x` must be a float array of shape [N, F], got {train_x.shape}")
    n = train_x.shape[0]
    if train_y.shape != (n,) or not np.issubdtype(train_y.dtype, np.integer):
        raise ValueError(f"`train_y` must be an integer array of shape [{n}]")
    if train_y.min() < 0 or train_y.max() >= num_classes:
        raise ValueError(f"`train_y` must lie in [0, {num_classes})")
    grid = (alpha,) if alpha is not None else tuple(alphas)
    if not grid or min(grid) <= 0:
        raise ValueError(f"penalties must be > 0, got alpha={alpha}, alphas={tuple(alphas)}")

    val_accuracy: dict[float, float] = {}
    if alpha is None:
        if not 0.0 < val_fraction < 1.0 or not 1 <= round(val_fraction * n) < n:
            raise ValueError(f"`val_fraction` must leave rows on both sides, got {val_fraction}")
        perm = np.random.default_rng(seed).permutation(n)
        n_val = round(val_fraction * n)
        val, fit = np.sort(perm[:n_val]), np.sort(perm[n_val:])
        mean, std, gram, cross, y_mean = _moments(train_x[fit], train_y[fit], num_classes)
        evals, evecs = scipy.linalg.eigh(gram)
        proj = evecs.T @ cross
        z = ((train_x[val].astype(np.float64) - mean) / std) @ evecs
        for a in grid:
            pred = np.argmax(z @ (proj / (evals + a * len(fit))[:, None]) + y_mean, axis=1)
            val_accuracy[float(a)] = float(np.mean(pred == train_y[val]))
        alpha = max(grid, key=lambda a: (val_accuracy[float(a)], a))

    mean, std, gram, cross, y_mean = _moments(train_x, train_y, num_classes)
    lam = float(alpha) * n
    weight = scipy.linalg.solve(gram + lam * np.eye(gram.shape[0]), cross, assume_a="pos")
    return RidgeProbe(weight, y_mean, mean, std, float(alpha), lam, val_accuracy)


def ridge_scores(probe: RidgeProbe, x: np.ndarray) -> np.ndarray:
    """Regressed class scores ``((x - mu) / sigma) W + b``: features [N, F] -> float64 [N, K]."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] != probe.weight.shape[0]:
        raise ValueError(f"`x` must have shape [N, {probe.weight.shape[0]}], got {x.shape}")
    return ((x.astype(np.float64) - probe.mean) / probe.std) @ probe.weight + probe.bias
