"""Top-k accuracy and the (paired) percentile bootstrap of contrastive_jax.eval.bootstrap."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from contrastive_jax.eval import (
    bootstrap,
    bootstrap_accuracy,
    paired_bootstrap_difference,
    topk_accuracy,
    topk_correct,
)


def test_topk_hand_example():
    logits = np.array([
        [0.1, 0.5, 0.2, 0.9],   # label 3 is top-1
        [0.8, 0.1, 0.7, 0.3],   # label 2 is second
        [0.3, 0.3, 0.3, 0.1],   # label 2 ties with 0 and 1: rank 2 (lower indices first)
        [0.4, 0.3, 0.2, 0.1],   # label 3 is last
    ])
    labels = np.array([3, 2, 2, 3])
    np.testing.assert_array_equal(topk_correct(logits, labels, 1), [True, False, False, False])
    np.testing.assert_array_equal(topk_correct(logits, labels, 2), [True, True, False, False])
    np.testing.assert_array_equal(topk_correct(logits, labels, 3), [True, True, True, False])
    assert topk_accuracy(logits, labels, 1) == 0.25
    assert topk_accuracy(logits, labels, 4) == 1.0


def test_topk_agrees_with_lax_top_k_under_ties():
    rng = np.random.default_rng(0)
    logits = rng.integers(0, 4, size=(500, 10)).astype(np.float32)  # many ties
    labels = rng.integers(0, 10, size=500)
    for k in (1, 5):
        top = np.asarray(jax.lax.top_k(logits, k)[1])
        np.testing.assert_array_equal(topk_correct(logits, labels, k),
                                      np.any(top == labels[:, None], axis=1))


def test_topk_rejects_bad_k():
    with pytest.raises(ValueError, match="k"):
        topk_correct(np.zeros((2, 3)), np.zeros(2, int), 4)


def test_bootstrap_mean_interval_and_normal_width():
    correct = np.random.default_rng(1).random(5000) < 0.8
    acc = correct.mean()
    out = bootstrap_accuracy(correct)
    assert out["accuracy"] == acc
    assert abs(out["mean"] - acc) < 0.002
    assert out["low"] < acc < out["high"]
    normal_width = 2 * 1.96 * np.sqrt(acc * (1 - acc) / correct.size)
    assert out["high"] - out["low"] == pytest.approx(normal_width, rel=0.15)
    assert out["std"] == pytest.approx(np.sqrt(acc * (1 - acc) / correct.size), rel=0.1)


def test_bootstrap_width_shrinks_with_n():
    rng = np.random.default_rng(2)
    small, large = bootstrap_accuracy(rng.random(200) < 0.7), bootstrap_accuracy(
        rng.random(20000) < 0.7)
    # The width scales as 1 / sqrt(N): a 100x larger test set is ~10x narrower.
    ratio = (small["high"] - small["low"]) / (large["high"] - large["low"])
    assert 7 < ratio < 14


def test_bootstrap_reproducible_and_chunking_invariant(monkeypatch):
    correct = np.random.default_rng(3).random(300) < 0.6
    a = bootstrap_accuracy(correct, seed=4)
    assert a == bootstrap_accuracy(correct, seed=4)
    assert a != bootstrap_accuracy(correct, seed=5)
    monkeypatch.setattr(bootstrap, "_CHUNK_ELEMENTS", 1000)  # 3 resamples per chunk
    assert a == bootstrap_accuracy(correct, seed=4)


def test_paired_flags_a_clear_difference():
    rng = np.random.default_rng(5)
    a = rng.random(10000) < 0.9
    b = a & (rng.random(10000) > 0.05)  # b loses ~4.5 points, never gains
    out = paired_bootstrap_difference(a, b)
    assert out["significant"]
    assert 0 < out["low"] < out["diff"] < out["high"]
    assert out["diff"] == pytest.approx(a.mean() - b.mean())
    swapped = paired_bootstrap_difference(b, a)
    assert swapped["significant"] and swapped["high"] < 0


def test_paired_not_significant_for_identical_or_equally_good_models():
    rng = np.random.default_rng(6)
    a = rng.random(2000) < 0.9
    same = paired_bootstrap_difference(a, a.copy())
    assert not same["significant"]
    assert same["diff"] == same["mean_diff"] == same["low"] == same["high"] == 0.0
    # Same accuracy, different errors (a random permutation): no significant difference.
    shuffled = paired_bootstrap_difference(a, rng.permutation(a))
    assert shuffled["diff"] == 0.0
    assert not shuffled["significant"] and shuffled["low"] < 0 < shuffled["high"]


def test_paired_uses_the_same_resamples_as_the_single_bootstrap():
    rng = np.random.default_rng(7)
    a, b = rng.random(1000) < 0.7, rng.random(1000) < 0.75
    paired = paired_bootstrap_difference(a, b, seed=11)
    single = bootstrap_accuracy(a, seed=11)["mean"] - bootstrap_accuracy(b, seed=11)["mean"]
    assert paired["mean_diff"] == pytest.approx(single, abs=1e-12)
    # For independent errors the interval of the difference is about sqrt(2) wider than
    # either accuracy's ...
    width = paired["high"] - paired["low"]
    single_width = bootstrap_accuracy(a)["high"] - bootstrap_accuracy(a)["low"]
    assert width > single_width
    # ... while pairing makes it much narrower for models that agree on most examples.
    c = a ^ (rng.random(1000) < 0.02)
    close = paired_bootstrap_difference(a, c)
    assert close["high"] - close["low"] < 0.5 * single_width


def test_paired_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="same shape"):
        paired_bootstrap_difference(np.ones(3, bool), np.ones(4, bool))


def test_bootstrap_is_the_percentile_interval_of_resampled_means():
    """The definition, written out: B draws of N indices from ``default_rng(seed)``, the mean
    of each, and the percentiles of those B means."""
    correct = np.random.default_rng(8).random(500) < 0.8
    out = bootstrap_accuracy(correct, resamples=200, seed=9, confidence=0.9)
    draws = np.random.default_rng(9).integers(0, 500, size=(200, 500))
    means = correct[draws].mean(axis=1)
    assert out["mean"] == pytest.approx(means.mean(), abs=1e-12)
    assert (out["low"], out["high"]) == pytest.approx(tuple(np.percentile(means, [5, 95])),
                                                      abs=1e-12)
    assert out["std"] == pytest.approx(means.std(ddof=1), abs=1e-12)
