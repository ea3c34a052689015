"""Top-k accuracy and the test-set bootstrap of SINCERE (Feeney & Hughes 2023, arXiv:2309.14277).

SINCERE (Feeney & Hughes 2023, Section 4.2) reports "the mean of 1,000 iterations of test set
bootstrapping" and calls two accuracies different only when a 95 % bootstrap interval says so
(Foody 2009). Our default is the **paired percentile bootstrap**: both models'
per-example correctness is resampled with the *same* indices, and the difference is
significant when the 95 % percentile interval of the per-resample accuracy differences
excludes 0. The bootstrap captures test-set sampling variability only, not seed-to-seed
variation of training. Both are ``scipy.stats.bootstrap`` with ``method="percentile"``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import stats as scipy_stats

#: Indices drawn per chunk of resamples (bounds memory at ~16 bytes per element).
_CHUNK_ELEMENTS = 1 << 22


def topk_correct(logits: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Whether the true label is among the ``k`` highest scores: [N, K], [N] -> bool [N].

    Ties are broken towards the lower class index (the order of ``lax.top_k`` and of a stable
    descending sort): the rank of label ``y`` is
    ``#{j : s_j > s_y} + #{j < y : s_j = s_y}`` and the example is correct when rank < k.
    """
    logits = np.asarray(logits)
    labels = np.asarray(labels)
    if logits.ndim != 2:
        raise ValueError(f"`logits` must have shape [N, K], got {logits.shape}")
    if labels.shape != (logits.shape[0],):
        raise ValueError(f"`labels` must have shape [{logits.shape[0]}], got {labels.shape}")
    if not 1 <= k <= logits.shape[1]:
        raise ValueError(f"`k` must be in [1, K={logits.shape[1]}], got {k}")
    true = np.take_along_axis(logits, labels[:, None], axis=1)
    lower = np.arange(logits.shape[1])[None, :] < labels[:, None]
    rank = np.sum(logits > true, axis=1) + np.sum((logits == true) & lower, axis=1)
    return rank < k


def topk_accuracy(logits: np.ndarray, labels: np.ndarray, k: int = 1) -> float:
    """Fraction of examples whose label is in the top ``k`` scores (see :func:`topk_correct`)."""
    return float(np.mean(topk_correct(logits, labels, k)))


def _check_correct(correct: np.ndarray, name: str) -> np.ndarray:
    correct = np.asarray(correct)
    if correct.ndim != 1 or correct.shape[0] < 2:
        raise ValueError(f"`{name}` must have shape [N] with N >= 2, got {correct.shape}")
    return correct.astype(np.float64)


def _bootstrap(
    samples: tuple[np.ndarray, ...],
    statistic: Callable[..., np.ndarray],
    resamples: int,
    seed: int,
    confidence: float,
) -> tuple[np.ndarray, float, float]:
    """``scipy.stats.bootstrap`` of ``statistic`` over ``samples`` (paired: the same N indices
    for every sample): (the B resampled statistics, low, high of the percentile interval).

    The indices depend only on ``(N, resamples, seed)``, so two calls with the same seed and N
    resample the same examples (the pairing of :func:`paired_bootstrap_difference`); they are
    drawn in batches of at most :data:`_CHUNK_ELEMENTS` indices, which bounds memory and does
    not change them.
    """
    if resamples < 1:
        raise ValueError(f"`resamples` must be >= 1, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"`confidence` must be in (0, 1), got {confidence}")
    result = scipy_stats.bootstrap(
        samples, statistic, n_resamples=resamples, batch=max(1, _CHUNK_ELEMENTS // len(samples[0])),
        vectorized=True, paired=len(samples) > 1, confidence_level=confidence,
        method="percentile", rng=np.random.default_rng(seed),
    )
    interval = result.confidence_interval
    return result.bootstrap_distribution, float(interval.low), float(interval.high)


def bootstrap_accuracy(
    correct: np.ndarray, *, resamples: int = 1000, seed: int = 0, confidence: float = 0.95
) -> dict[str, float]:
    """Percentile bootstrap of an accuracy over the test set.

    Args:
      correct: bool [N], per-example correctness (e.g. :func:`topk_correct`).
      resamples: bootstrap iterations B (SINCERE: 1,000).
      seed: seed of the resample indices.
      confidence: coverage of the percentile interval.

    Returns:
      ``accuracy`` (plain mean of ``correct``), ``mean`` (mean over the B resampled accuracies,
      the number SINCERE reports), ``low``/``high`` (the ``(1 - confidence)/2`` and
      ``(1 + confidence)/2`` percentiles) and ``std`` (bootstrap standard error).
    """
    values = _check_correct(correct, "correct")
    stats, low, high = _bootstrap((values,), np.mean, resamples, seed, confidence)
    return {
        "accuracy": float(values.mean()),
        "mean": float(stats.mean()),
        "low": low,
        "high": high,
        "std": float(stats.std(ddof=1)) if resamples > 1 else 0.0,
    }


def paired_bootstrap_difference(
    correct_a: np.ndarray,
    correct_b: np.ndarray,
    *,
    resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, float | bool]:
    """Paired percentile bootstrap of ``acc(a) - acc(b)`` on the same test set.

    Each resample draws N test indices once and evaluates both models on them, so the
    interval reflects the variability of the *difference*, which is much smaller than that of
    either accuracy when the models agree on most examples.

    Args:
      correct_a: bool [N], model a's per-example correctness.
      correct_b: bool [N], model b's, on the same N test examples in the same order.
      resamples: bootstrap iterations B.
      seed: seed of the shared resample indices.
      confidence: coverage of the percentile interval.

    Returns:
      ``diff`` (plain accuracy difference), ``mean_diff`` (mean over resamples), ``low``,
      ``high`` and ``significant`` (True when the interval excludes 0).
    """
    a = _check_correct(correct_a, "correct_a")
    b = _check_correct(correct_b, "correct_b")
    if a.shape != b.shape:
        raise ValueError(
            f"`correct_a` and `correct_b` must have the same shape, got {a.shape} and {b.shape}"
        )
    stats, low, high = _bootstrap(
        (a, b), lambda x, y, axis: np.mean(x, axis) - np.mean(y, axis), resamples, seed,
        confidence)
    return {
        "diff": float(np.mean(a - b)),
        "mean_diff": float(stats.mean()),
        "low": low,
        "high": high,
        "significant": bool(low > 0.0 or high < 0.0),
    }
