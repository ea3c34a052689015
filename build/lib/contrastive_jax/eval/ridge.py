"""Closed-form ridge-regression probe on frozen features (one-hot targets, float64).

A fast, optimiser-free companion of the linear probe: regress one-hot labels ``Y`` [N, K] on
standardised features and classify by the largest regressed score. With the train mean
``mu``, standard deviation ``sigma`` (ddof 0; 1 where a feature is constant),
``X_s = (X - mu) / sigma`` and ``Y_c = Y - mean(Y)``::

    W = (X_s^T X_s + lambda I)^{-1} X_s^T Y_c        [F, K]
    b = mean(Y)                                      [K]   (X_s has zero mean)
    scores(x) = ((x - mu) / sigma) W + b

The fit is scikit-learn's: ``StandardScaler()`` then ``Ridge(alpha=lambda,
fit_intercept=True)``, in float64 (memory: the features as float64 plus the F x F Gram).

Regularisation is chosen per sample: ``lambda = alpha * N`` with ``alpha`` from ``alphas``,
which keeps the strength of the penalty relative to the data term (``X_s^T X_s / N`` has unit
diagonal) when the fit is repeated on a different number of rows. Unless ``alpha`` is given,
``alpha`` maximises accuracy on a random held-out ``val_fraction`` of the training rows (fit
on the rest; ties go to the larger ``alpha``), and the probe is then refit on all training rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.linear_model import Ridge
from sklearn.preprocessing import StandardScaler

#: Default grid of per-sample penalties ``alpha = lambda / N``.
DEFAULT_ALPHAS: tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)


@dataclass(frozen=True)
class RidgeProbe:
    """A fitted ridge probe.

    Attributes:
      weight: float64 [F, K], acting on standardised features.
      bias: float64 [K], the intercept: the class frequencies of the training rows.
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


def _fit(
    scaled: np.ndarray, y: np.ndarray, num_classes: int, alpha: float
) -> Ridge:
    """``Ridge(alpha * N)`` on standardised features [N, F] and one-hot targets of ``y``."""
    return Ridge(alpha=alpha * scaled.shape[0], fit_intercept=True).fit(
        scaled, np.eye(num_classes)[y]
    )


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
    """Fits the ridge probe ``W = (X_s^T X_s + alpha N I)^{-1} X_s^T Y_c`` with scikit-learn.

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
        scaler = StandardScaler().fit(train_x[fit].astype(np.float64))
        fit_x = scaler.transform(train_x[fit].astype(np.float64))
        val_x = scaler.transform(train_x[val].astype(np.float64))
        for a in grid:
            pred = np.argmax(_fit(fit_x, train_y[fit], num_classes, a).predict(val_x), axis=1)
            val_accuracy[float(a)] = float(np.mean(pred == train_y[val]))
        alpha = max(grid, key=lambda a: (val_accuracy[float(a)], a))

    scaler = StandardScaler().fit(train_x.astype(np.float64))
    model = _fit(scaler.transform(train_x.astype(np.float64)), train_y, num_classes, alpha)
    return RidgeProbe(
        weight=model.coef_.T,
        bias=model.intercept_,
        mean=scaler.mean_,
        std=scaler.scale_,
        alpha=float(alpha),
        lam=float(alpha) * n,
        val_accuracy=val_accuracy,
    )


def ridge_scores(probe: RidgeProbe, x: np.ndarray) -> np.ndarray:
    """Regressed class scores ``((x - mu) / sigma) W + b``: features [N, F] -> float64 [N, K]."""
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] != probe.weight.shape[0]:
        raise ValueError(f"`x` must have shape [N, {probe.weight.shape[0]}], got {x.shape}")
    return ((x.astype(np.float64) - probe.mean) / probe.std) @ probe.weight + probe.bias
