"""Expected calibration error and reliability bins of contrastive_jax.eval.calibration."""

from __future__ import annotations

import numpy as np
import pytest

from contrastive_jax.eval import (
    calibration_error_from_confidence,
    expected_calibration_error,
    reliability_bins,
)
from contrastive_jax.eval.calibration import bin_index


def _rows(confidences, predicted, num_classes):
    """Probability rows with ``confidences[n]`` on ``predicted[n]``, the rest spread evenly."""
    conf = np.asarray(confidences, np.float64)
    p = np.repeat(((1 - conf) / (num_classes - 1))[:, None], num_classes, axis=1)
    p[np.arange(len(conf)), predicted] = conf
    return p


def test_hand_computed_example():
    # 3 bins: (0, 1/3], (1/3, 2/3], (2/3, 1].
    p = np.array([
        [0.9, 0.1],   # bin 3, predicts 0, label 0: correct
        [0.2, 0.8],   # bin 3, predicts 1, label 0: wrong
        [0.6, 0.4],   # bin 2, predicts 0, label 0: correct
        [0.45, 0.55], # bin 2, predicts 1, label 0: wrong
        [0.5, 0.5],   # bin 2, tie -> class 0, label 1: wrong
    ])
    labels = np.array([0, 0, 0, 0, 1])
    # bin 2: acc 1/3, conf (0.6 + 0.55 + 0.5)/3 = 0.55; bin 3: acc 1/2, conf 0.85.
    expected = 3 / 5 * abs(1 / 3 - 0.55) + 2 / 5 * abs(0.5 - 0.85)
    assert expected_calibration_error(p, labels, num_bins=3) == pytest.approx(expected, abs=1e-12)
    bins = reliability_bins(p, labels, num_bins=3)
    np.testing.assert_array_equal(bins["count"], [0, 3, 2])
    np.testing.assert_allclose(bins["accuracy"][1:], [1 / 3, 0.5])
    np.testing.assert_allclose(bins["confidence"][1:], [0.55, 0.85])
    assert np.isnan(bins["accuracy"][0]) and np.isnan(bins["confidence"][0])
    np.testing.assert_allclose(bins["edges"], [0, 1 / 3, 2 / 3, 1])
    # One bin: |overall accuracy - mean confidence|.
    one = expected_calibration_error(p, labels, num_bins=1)
    assert one == pytest.approx(abs(2 / 5 - np.mean([0.9, 0.8, 0.6, 0.55, 0.5])), abs=1e-12)


def test_bins_are_right_closed():
    edges = np.linspace(0, 1, 16)
    np.testing.assert_array_equal(bin_index(edges, 15), [0, *range(15)])
    np.testing.assert_array_equal(bin_index(edges[1:] - 1e-9, 15), range(15))
    np.testing.assert_array_equal(bin_index(edges[1:-1] + 1e-9, 15), range(1, 15))
    np.testing.assert_array_equal(bin_index(np.array([0.0, 0.5, 1.0]), 1), [0, 0, 0])


def test_perfectly_calibrated_is_zero():
    # In every confidence level exactly that fraction of the predictions is right.
    confidences, correct = [], []
    for conf, n in ((0.25, 4), (0.5, 10), (0.75, 8), (0.9, 10), (1.0, 3)):
        hits = round(conf * n)
        confidences += [conf] * n
        correct += [True] * hits + [False] * (n - hits)
    confidences = np.array(confidences)
    predicted = np.zeros(len(confidences), int)
    labels = np.where(correct, 0, 3)
    p = _rows(confidences, predicted, num_classes=4)
    assert expected_calibration_error(p, labels) == pytest.approx(0.0, abs=1e-12)


def test_sampled_calibrated_model_is_near_zero():
    rng = np.random.default_rng(0)
    n, k = 200_000, 10
    logits = rng.normal(size=(n, k)) * 2
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    labels = (rng.random(n)[:, None] > np.cumsum(p, 1)).sum(1)  # y ~ p(. | x)
    assert expected_calibration_error(p, labels) < 0.01
    # Sharpening the same probabilities makes the model over-confident.
    sharp = p**3 / (p**3).sum(1, keepdims=True)
    assert expected_calibration_error(sharp, labels) > 0.05


def test_always_confident_and_wrong_equals_mean_confidence():
    rng = np.random.default_rng(1)
    conf = rng.uniform(0.5, 1.0, 50)
    p = _rows(conf, np.zeros(50, int), num_classes=3)
    labels = np.full(50, 2)
    assert expected_calibration_error(p, labels) == pytest.approx(conf.mean(), abs=1e-12)
    p = _rows(np.full(7, 0.9), np.ones(7, int), num_classes=2)
    assert expected_calibration_error(p, np.zeros(7, int)) == pytest.approx(0.9)


def test_invariant_to_row_order_and_matches_confidence_form():
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(5) * 0.5, size=300)
    labels = rng.integers(0, 5, 300)
    perm = rng.permutation(300)
    ece = expected_calibration_error(p, labels)
    assert expected_calibration_error(p[perm], labels[perm]) == pytest.approx(ece, abs=1e-12)
    direct = calibration_error_from_confidence(p.max(1), p.argmax(1) == labels)
    assert direct == pytest.approx(ece, abs=1e-12)
    assert 0.0 <= ece <= 1.0
    # float32 softmax rows are accepted.
    assert expected_calibration_error(p.astype(np.float32), labels) == pytest.approx(ece, abs=1e-6)


@pytest.mark.parametrize(
    ("probabilities", "labels", "num_bins", "match"),
    [
        (np.full((3,), 1 / 3), np.zeros(3, int), 15, "shape"),
        (np.full((0, 3), 1 / 3), np.zeros(0, int), 15, "shape"),
        (np.full((2, 3), 1 / 3), np.zeros(3, int), 15, "labels"),
        (np.full((2, 3), 1 / 3), np.zeros(2), 15, "integers"),
        (np.full((2, 3), 1 / 3), np.array([0, 3]), 15, "range"),
        (np.full((2, 3), 1 / 3), np.array([-1, 0]), 15, "range"),
        (np.array([[0.5, 0.6], [0.5, 0.5]]), np.array([0, 1]), 15, "sum to 1"),
        (np.array([[2.0, -1.0], [0.5, 0.5]]), np.array([0, 1]), 15, ">= 0"),
        (np.array([[np.nan, 1.0], [0.5, 0.5]]), np.array([0, 1]), 15, "finite"),
        (np.ones((2, 2), int), np.array([0, 1]), 15, "floating"),
        (np.full((2, 2), 0.5), np.array([0, 1]), 0, "num_bins"),
        (np.full((2, 2), 0.5), np.array([0, 1]), 2.5, "num_bins"),
    ],
)
def test_errors(probabilities, labels, num_bins, match):
    with pytest.raises(ValueError, match=match):
        expected_calibration_error(probabilities, labels, num_bins=num_bins)


def test_confidence_form_errors():
    with pytest.raises(ValueError, match="same shape"):
        calibration_error_from_confidence(np.ones(3), np.ones(2, bool))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        calibration_error_from_confidence(np.array([1.5]), np.ones(1, bool))
