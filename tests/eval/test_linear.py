"""Linear probe (contrastive_jax.eval.linear) against a numpy SGD reference and toy problems."""

from __future__ import annotations

import math

import jax
import numpy as np
import optax
import pytest

from contrastive_jax.eval import (
    normalize_features,
    predict_logits,
    topk_accuracy,
    train_linear_classifier,
    warmup_cosine_lr,
)


def gaussian_problem(n: int, f: int, k: int, seed: int, sep: float = 4.0):
    """K Gaussian classes with unit noise and means ``sep`` apart on random axes."""
    rng = np.random.default_rng(seed)
    means = sep * rng.normal(size=(k, f)) / math.sqrt(2.0)
    y = rng.integers(0, k, size=n)
    x = means[y] + rng.normal(size=(n, f))
    return x.astype(np.float32), y


def reference_sgd(x, y, k, *, epochs, batch_size, base_lr, warmup_from, warmup_epochs,
                  momentum, weight_decay, nesterov, seed):
    """Literal minibatch SGD in float64 numpy with the documented schedule and permutations."""
    n, f = x.shape
    steps = math.ceil(n / batch_size)
    total, warm = epochs * steps, warmup_epochs * steps
    w, b = np.zeros((f, k)), np.zeros(k)
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    t = 0
    key = jax.random.PRNGKey(seed)
    for e in range(epochs):
        perm = np.asarray(jax.random.permutation(jax.random.fold_in(key, e), n))
        for s in range(steps):
            idx = perm[s * batch_size:(s + 1) * batch_size]
            logits = x[idx] @ w + b
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            d = (p - np.eye(k)[y[idx]]) / len(idx)
            gw, gb = x[idx].T @ d + weight_decay * w, d.sum(axis=0) + weight_decay * b
            if t < warm:
                lr = warmup_from + (base_lr - warmup_from) * t / warm
            else:
                lr = warmup_from + (base_lr - warmup_from) * (
                    1 + math.cos(math.pi * (t - warm) / (total - warm))) / 2
            vw, vb = momentum * vw + gw, momentum * vb + gb
            if nesterov:
                w, b = w - lr * (gw + momentum * vw), b - lr * (gb + momentum * vb)
            else:
                w, b = w - lr * vw, b - lr * vb
            t += 1
    return w, b


@pytest.mark.parametrize(("warmup_steps", "total_steps"), [(10, 100), (0, 7), (3, 4)])
@pytest.mark.slow
def test_schedule_matches_optax(warmup_steps, total_steps):
    steps = np.arange(total_steps + 2)
    expected = optax.warmup_cosine_decay_schedule(0.05, 5.0, warmup_steps, total_steps, 0.01)
    lr = warmup_cosine_lr(steps, base_lr=5.0, warmup_from=0.05, end_lr=0.01,
                          warmup_steps=warmup_steps, total_steps=total_steps)
    np.testing.assert_allclose(lr, [expected(t) for t in steps], rtol=1e-5)


@pytest.mark.parametrize(
    ("batch_size", "weight_decay", "nesterov"), [(4, 0.0, False), (10, 0.0, False), (4, 0.1, True)]
)
@pytest.mark.slow
def test_matches_numpy_sgd_reference(batch_size, weight_decay, nesterov):
    # 10 rows in batches of 4 -> a masked partial batch of 2 each epoch.
    x, y = gaussian_problem(10, 3, 3, seed=1, sep=1.0)
    kwargs = dict(epochs=4, batch_size=batch_size, base_lr=0.5, warmup_from=0.05,
                  warmup_epochs=2, momentum=0.9, weight_decay=weight_decay,
                  nesterov=nesterov, seed=3)
    clf = train_linear_classifier(x, y, num_classes=3, feature_norm="none", **kwargs)
    w, b = reference_sgd(x.astype(np.float64), y, 3, **kwargs)
    np.testing.assert_allclose(clf.weight, w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(clf.bias, b, rtol=1e-4, atol=1e-5)
    assert clf.train_loss.shape == (4,)


@pytest.mark.parametrize("feature_norm", ["standardize", "l2"])
@pytest.mark.slow
def test_separable_gaussians_default_protocol(feature_norm):
    x, y = gaussian_problem(3000, 32, 5, seed=0)
    train, test = slice(0, 2000), slice(2000, None)
    clf = train_linear_classifier(x[train], y[train], num_classes=5, epochs=20, warmup_epochs=2,
                                  batch_size=256, feature_norm=feature_norm)
    assert topk_accuracy(predict_logits(clf, x[test]), y[test], 1) > 0.95
    assert np.all(np.isfinite(clf.train_loss)) and clf.train_loss[-1] < clf.train_loss[0]


# One problem shape and schedule length for the tests below, so they share one compilation.
SMALL = dict(num_classes=3, epochs=3, warmup_epochs=1, batch_size=64)


def test_deterministic_given_seed_and_seed_matters():
    x, y = gaussian_problem(600, 8, 3, seed=2, sep=1.0)
    kwargs = SMALL
    a = train_linear_classifier(x, y, seed=5, **kwargs)
    b = train_linear_classifier(x, y, seed=5, **kwargs)
    c = train_linear_classifier(x, y, seed=6, **kwargs)
    np.testing.assert_array_equal(a.weight, b.weight)
    np.testing.assert_array_equal(a.train_loss, b.train_loss)
    assert not np.allclose(a.weight, c.weight)


def test_standardize_statistics_and_affine_invariance():
    x, y = gaussian_problem(600, 8, 3, seed=4)
    kwargs = SMALL
    clf = train_linear_classifier(x, y, **kwargs)
    z = np.asarray(normalize_features(clf, x), np.float64)
    np.testing.assert_allclose(z.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(np.mean(np.sum(z * z, axis=1)), 1.0, rtol=1e-4)
    # Per-feature rescaling and shifting of the inputs does not change the standardised probe.
    scale, shift = np.geomspace(1e-3, 1e3, 8).astype(np.float32), np.float32(7.0)
    moved = train_linear_classifier(x * scale + shift, y, **kwargs)
    logits = predict_logits(clf, x)
    np.testing.assert_allclose(predict_logits(moved, x * scale + shift), logits,
                               atol=1e-4 * np.abs(logits).max())


def test_l2_normalises_rows():
    x, y = gaussian_problem(600, 8, 3, seed=6)
    clf = train_linear_classifier(x, y, feature_norm="l2", **SMALL)
    np.testing.assert_allclose(np.linalg.norm(normalize_features(clf, 3 * x), axis=1), 1.0,
                               rtol=1e-5)
    logits = predict_logits(clf, x)
    np.testing.assert_allclose(
        logits, np.asarray(normalize_features(clf, x)) @ clf.weight + clf.bias, rtol=1e-5,
        atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(warmup_epochs=5, epochs=5), "warmup_epochs"),
        (dict(feature_norm="pca"), "feature_norm"),
        (dict(num_classes=2), "train_y"),
    ],
)
def test_rejects_bad_arguments(kwargs, match):
    x, y = gaussian_problem(20, 3, 3, seed=0)
    kwargs = {"num_classes": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        train_linear_classifier(x, y, **kwargs)


def test_predict_rejects_wrong_feature_size():
    x, y = gaussian_problem(600, 8, 3, seed=0)
    clf = train_linear_classifier(x, y, **SMALL)
    with pytest.raises(ValueError, match="features"):
        predict_logits(clf, np.zeros((4, 5), np.float32))
