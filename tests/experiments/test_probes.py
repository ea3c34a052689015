"""experiments/reproduce/_probes.py: the logistic probe, few-shot rows and the
cross-validated binary probe the reproductions use."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from experiments.reproduce import _probes


def _blobs(n_per_class=30, k=3, d=4, spread=1.0, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, d)) * 4
    labels = np.repeat(np.arange(k), n_per_class)
    return centres[labels] + spread * rng.normal(size=(len(labels), d)), labels


def test_logistic_probe_scores_the_standardised_fit():
    features, labels = _blobs(n_per_class=60, spread=3.0)
    x, y, tx, ty = features[0::2], labels[0::2], features[1::2], labels[1::2]
    result = _probes.logistic_probe(x, y, tx, ty, resamples=200, seed=0)
    mean, std = x.mean(0), x.std(0)
    clf = LogisticRegression(max_iter=2000).fit((x - mean) / std, y)
    expected = np.mean(clf.predict((tx - mean) / std) == ty)
    assert result["accuracy"] == pytest.approx(expected)
    assert result["low"] <= result["accuracy"] <= result["high"]
    assert 0.4 < expected < 1.0  # overlapping blobs: neither chance nor perfect
    with pytest.raises(ValueError, match="at least two classes"):
        _probes.logistic_probe(x, np.zeros_like(y), tx, ty)
    with pytest.raises(ValueError, match="`test_y` must have shape"):
        _probes.logistic_probe(x, y, tx, ty[:-1])
    predicted = _probes.logistic_predict(x, y, tx)
    np.testing.assert_array_equal(predicted, clf.predict((tx - mean) / std))
    with pytest.raises(ValueError, match="`test_x` must have shape"):
        _probes.logistic_predict(x, y, tx[:, :2])


def test_few_shot_rows():
    _, y = _blobs(n_per_class=7, k=4)
    rows = _probes.few_shot_rows(y, 5, seed=0)
    assert np.bincount(y[rows]).tolist() == [5] * 4 and len(set(rows)) == 20
    np.testing.assert_array_equal(rows, _probes.few_shot_rows(y, 5, seed=0))
    assert not np.array_equal(rows, _probes.few_shot_rows(y, 5, seed=1))
    with pytest.raises(ValueError, match="fewer than shots=8"):
        _probes.few_shot_rows(y, 8, seed=0)


def test_cross_validated_binary_probe():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 60)
    signal = np.stack([y * 3.0 + rng.normal(size=120) * 0.1, rng.normal(size=120)], 1)
    noise = rng.normal(size=(120, 2))
    separable = _probes.cross_validated_binary_probe(signal, y, train_sizes=(10, 1000), seed=0)
    assert set(separable) == {10, 1000}
    assert separable[1000]["auc"] == 1.0 and separable[1000]["bacc"] == 1.0
    chance = _probes.cross_validated_binary_probe(noise, y, train_sizes=(96,), seed=0)
    assert abs(chance[96]["auc"] - 0.5) < 0.2
    with pytest.raises(ValueError, match="binary"):
        _probes.cross_validated_binary_probe(signal, y + 1, train_sizes=(10,))
