"""Expected calibration error and reliability-diagram bins (Guo et al. 2017, arXiv:1706.04599).

The calibration measure of the soft-target experiments (Hugger & Uhlmann 2024, arXiv:2404.14076).

A classifier's *confidence* on an example is its largest predicted class probability and its
*prediction* that class (ties go to the lowest class index, like :func:`numpy.argmax` and
:func:`contrastive_jax.eval.topk_correct`). The confidences are put into ``M`` equal-width bins
on [0, 1]; bin ``m`` (1-based) is the right-closed interval

    B_m = ((m - 1) / M, m / M]        (a confidence of exactly 0 goes to B_1),

the convention of Guo et al. ("On calibration of modern neural networks", 2017). A confidence on
an interior edge ``m / M`` belongs to the lower bin ``B_m``. With ``n_m = |B_m|`` and N examples,

    ECE = sum_m (n_m / N) |acc(B_m) - conf(B_m)|,

``acc`` the fraction of correct predictions and ``conf`` the mean confidence of the bin (empty
bins contribute 0). ECE is in [0, 1] (the seed-002 paper reports it in %, with M = 15).

Everything here is numpy in and numpy/float out; nothing is traced.
"""

from __future__ import annotations

import numpy as np

#: Tolerance on ``|sum_k p[n, k] - 1|`` (float32 softmax outputs sum to 1 within ~1e-6).
ROW_SUM_ATOL = 1e-4


def _check_num_bins(num_bins: int) -> int:
    if isinstance(num_bins, bool) or not isinstance(num_bins, (int, np.integer)) or num_bins < 1:
        raise ValueError(f"`num_bins` must be an integer >= 1, got {num_bins!r}")
    return int(num_bins)


def _check_inputs(probabilities, labels) -> tuple[np.ndarray, np.ndarray]:
    """float64 [N, K] probability rows and int [N] labels in [0, K), validated."""
    p = np.asarray(probabilities)
    if p.ndim != 2 or p.shape[0] < 1 or p.shape[1] < 1:
        raise ValueError(f"`probabilities` must have shape [N, K] with N, K >= 1, got {p.shape}")
    if not np.issubdtype(p.dtype, np.floating):
        raise ValueError(f"`probabilities` must be floating point, got dtype {p.dtype}")
    p = p.astype(np.float64)
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError("`probabilities` must be finite and >= 0")
    sums = p.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1.0) > ROW_SUM_ATOL)
    if bad.size:
        raise ValueError(
            f"every row of `probabilities` must sum to 1 (atol {ROW_SUM_ATOL}); row {bad[0]} "
            f"sums to {sums[bad[0]]:.6g} ({bad.size} bad rows). Pass softmax outputs, not logits"
        )
    y = np.asarray(labels)
    if y.shape != (p.shape[0],):
        raise ValueError(f"`labels` must have shape [{p.shape[0]}], got {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"`labels` must be integers, got dtype {y.dtype}")
    if np.any(y < 0) or np.any(y >= p.shape[1]):
        raise ValueError(
            f"`labels` out of range: must be in [0, K={p.shape[1]}), got values in "
            f"[{y.min()}, {y.max()}]"
        )
    return p, y.astype(np.int64)


def bin_index(confidence: np.ndarray, num_bins: int) -> np.ndarray:
    """0-based bin of each confidence: float [N] in [0, 1] -> int [N] in [0, num_bins).

    Bin ``i`` is ``(i / M, (i + 1) / M]`` (right-closed; 0 goes to bin 0), see the module
    docstring. The edges are ``np.linspace(0, 1, M + 1)``, so a confidence equal to an edge
    as computed there falls in the lower bin.
    """
    num_bins = _check_num_bins(num_bins)
    edges = np.linspace(0.0, 1.0, num_bins + 1)
    # Number of interior edges strictly below the confidence = index of its right-closed bin.
    return np.searchsorted(edges[1:-1], np.asarray(confidence, np.float64), side="left")


def reliability_from_confidence(
    confidence: np.ndarray, correct: np.ndarray, num_bins: int = 15
) -> dict[str, np.ndarray]:
    """Reliability-diagram bins from per-example confidences and correctness.

    Args:
      confidence: float [N], the probability of the predicted class, in [0, 1].
      correct: bool [N], whether the prediction is the label.
      num_bins: M >= 1 equal-width bins.

    Returns:
      ``edges`` float [M + 1], ``count`` int [M], ``accuracy`` and ``confidence`` float [M]
      (per-bin means; NaN for empty bins).
    """
    num_bins = _check_num_bins(num_bins)
    conf = np.asarray(confidence, np.float64)
    hit = np.asarray(correct)
    if conf.ndim != 1 or conf.shape[0] < 1 or hit.shape != conf.shape:
        raise ValueError(
            f"`confidence` and `correct` must have the same shape [N], N >= 1, got "
            f"{conf.shape} and {hit.shape}"
        )
    if not np.all(np.isfinite(conf)) or np.any(conf < 0) or np.any(conf > 1):
        raise ValueError("`confidence` must be in [0, 1]")
    idx = bin_index(conf, num_bins)
    count = np.bincount(idx, minlength=num_bins)
    acc_sum = np.bincount(idx, weights=hit.astype(np.float64), minlength=num_bins)
    conf_sum = np.bincount(idx, weights=conf, minlength=num_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.where(count > 0, acc_sum / count, np.nan)
        mean_conf = np.where(count > 0, conf_sum / count, np.nan)
    return {
        "edges": np.linspace(0.0, 1.0, num_bins + 1),
        "count": count,
        "accuracy": accuracy,
        "confidence": mean_conf,
    }


def calibration_error_from_confidence(
    confidence: np.ndarray, correct: np.ndarray, num_bins: int = 15
) -> float:
    """ECE from per-example confidences float [N] and correctness bool [N] (see module doc)."""
    bins = reliability_from_confidence(confidence, correct, num_bins)
    filled = bins["count"] > 0
    gaps = np.abs(bins["accuracy"][filled] - bins["confidence"][filled])
    return float(np.sum(bins["count"][filled] * gaps) / bins["count"].sum())


def confidence_and_correct(probabilities, labels) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(max_k p[n, k] float [N], argmax_k p[n, k] == labels[n] bool [N])``."""
    p, y = _check_inputs(probabilities, labels)
    return p.max(axis=1), p.argmax(axis=1) == y


def reliability_bins(probabilities, labels, num_bins: int = 15) -> dict[str, np.ndarray]:
    """Reliability-diagram bins of a classifier (see :func:`reliability_from_confidence`).

    Args:
      probabilities: float [N, K], rows on the simplex (e.g. a softmax).
      labels: int [N] in [0, K).
      num_bins: M >= 1.

    Returns:
      ``edges`` [M + 1], ``count`` [M], ``accuracy`` [M], ``confidence`` [M] (NaN if empty).
    """
    num_bins = _check_num_bins(num_bins)
    return reliability_from_confidence(*confidence_and_correct(probabilities, labels), num_bins)


def expected_calibration_error(probabilities, labels, num_bins: int = 15) -> float:
    """Expected calibration error with ``num_bins`` equal-width, right-closed confidence bins.

    Args:
      probabilities: float [N, K] predicted class probabilities; every row must sum to 1
        (within ``ROW_SUM_ATOL``) and be >= 0.
      labels: int [N], the true classes, in [0, K).
      num_bins: M >= 1 (the seed-002 paper: 15).

    Returns:
      ECE in [0, 1]: ``sum_m (n_m / N) |acc(B_m) - conf(B_m)|``.

    Raises:
      ValueError: bad shapes or dtypes, rows not summing to 1, negative or non-finite
        probabilities, labels out of range, ``num_bins < 1``.
    """
    num_bins = _check_num_bins(num_bins)
    return calibration_error_from_confidence(
        *confidence_and_correct(probabilities, labels), num_bins
    )
