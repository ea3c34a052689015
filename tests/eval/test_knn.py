"""Weighted kNN (contrastive_jax.eval.knn) against a brute-force numpy implementation."""

from __future__ import annotations

import numpy as np
import pytest

from contrastive_jax.eval import knn_scores, topk_accuracy


def brute_force_knn(train_x, train_y, test_x, num_classes, k, temperature):
    """Wu et al. (2018) weighted vote, one query at a time, float64, literal exp(s / tau)."""
    bank = train_x / np.linalg.norm(train_x, axis=1, keepdims=True)
    out = np.zeros((len(test_x), num_classes))
    for q, query in enumerate(test_x):
        sims = bank @ (query / np.linalg.norm(query))
        for i in np.argsort(-sims, kind="stable")[:k]:
            out[q, train_y[i]] += np.exp(sims[i] / temperature)
    return out / out.sum(axis=1, keepdims=True)


def data(m=200, n=37, f=8, k=5, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, f))
    train_y, test_y = rng.integers(0, k, m), rng.integers(0, k, n)
    train_x = centres[train_y] + rng.normal(size=(m, f))
    test_x = centres[test_y] + rng.normal(size=(n, f))
    return train_x.astype(np.float32), train_y, test_x.astype(np.float32), test_y


@pytest.mark.parametrize(("k", "temperature", "chunk_size"), [(20, 0.07, 16), (5, 0.5, 1024)])
def test_matches_brute_force(k, temperature, chunk_size):
    train_x, train_y, test_x, _ = data()
    got = knn_scores(train_x, train_y, test_x, num_classes=5, k=k, temperature=temperature,
                     chunk_size=chunk_size)
    want = brute_force_knn(train_x.astype(np.float64), train_y, test_x.astype(np.float64), 5, k,
                           temperature)
    assert got.shape == (37, 5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_k1_is_nearest_neighbour_and_scale_free():
    train_x, train_y, test_x, _ = data(seed=1)
    scores = knn_scores(train_x, train_y, 3.0 * test_x, num_classes=5, k=1)
    cos = (test_x / np.linalg.norm(test_x, axis=1, keepdims=True)) @ (
        train_x / np.linalg.norm(train_x, axis=1, keepdims=True)).T
    np.testing.assert_array_equal(scores, np.eye(5)[train_y[np.argmax(cos, axis=1)]])


def test_small_temperature_does_not_overflow():
    train_x, train_y, test_x, test_y = data(seed=2)
    scores = knn_scores(train_x, train_y, test_x, num_classes=5, temperature=1e-3)
    assert np.all(np.isfinite(scores))
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, rtol=1e-5)
    assert topk_accuracy(scores, test_y, 1) > 0.5


def test_rejects_bad_arguments():
    train_x, train_y, test_x, _ = data()
    with pytest.raises(ValueError, match="k"):
        knn_scores(train_x, train_y, test_x, num_classes=5, k=201)
    with pytest.raises(ValueError, match="feature size"):
        knn_scores(train_x, train_y, test_x[:, :4], num_classes=5)
