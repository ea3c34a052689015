"""Ridge probe (contrastive_jax.eval.ridge) against scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from contrastive_jax.eval import fit_ridge_probe, ridge_scores


def data(n=300, f=20, k=4, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    x = rng.normal(size=(k, f))[y] * 0.5 + rng.normal(size=(n, f)) * rng.uniform(0.1, 10, f)
    x[:, 3] = 2.5  # a constant feature: std 0, scaled by 1 as in StandardScaler
    return (x + 100.0).astype(np.float32), y


@pytest.mark.parametrize("alpha", [1e-3, 0.3])
def test_matches_sklearn_ridge(alpha):
    x, y = data()
    probe = fit_ridge_probe(x[:200], y[:200], num_classes=4, alpha=alpha)
    assert probe.lam == pytest.approx(alpha * 200)
    sk = make_pipeline(StandardScaler(), Ridge(alpha=probe.lam, fit_intercept=True))
    sk.fit(x[:200].astype(np.float64), np.eye(4)[y[:200]])
    np.testing.assert_allclose(ridge_scores(probe, x[200:]), sk.predict(x[200:].astype(np.float64)),
                               rtol=1e-6,
                               atol=1e-8)


def test_selection_matches_sklearn_on_documented_split():
    x, y = data(n=400, f=60, seed=3)
    probe = fit_ridge_probe(x, y, num_classes=4, val_fraction=0.25, seed=7)
    perm = np.random.default_rng(7).permutation(400)
    val, fit = np.sort(perm[:100]), np.sort(perm[100:])
    for a, acc in probe.val_accuracy.items():
        sk = make_pipeline(StandardScaler(), Ridge(alpha=a * len(fit)))
        sk.fit(x[fit].astype(np.float64), np.eye(4)[y[fit]])
        pred = np.argmax(sk.predict(x[val].astype(np.float64)), axis=1)
        assert acc == pytest.approx(np.mean(pred == y[val]))
    assert len(set(probe.val_accuracy.values())) > 1  # the grid matters on this problem
    best = max(probe.val_accuracy.values())
    assert probe.val_accuracy[probe.alpha] == best
    assert probe.alpha == max(a for a, acc in probe.val_accuracy.items() if acc == best)
    assert probe.lam == pytest.approx(probe.alpha * 400)


def test_rejects_bad_arguments():
    x, y = data()
    with pytest.raises(ValueError, match="penalties"):
        fit_ridge_probe(x, y, num_classes=4, alpha=0.0)
    with pytest.raises(ValueError, match="train_y"):
        fit_ridge_probe(x, y, num_classes=3)
    with pytest.raises(ValueError, match="val_fraction"):
        fit_ridge_probe(x, y, num_classes=4, val_fraction=1.0)


def test_ties_choose_the_larger_penalty():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 300)
    x = (20.0 * np.eye(3)[y] + rng.normal(size=(300, 3))).astype(np.float32)
    probe = fit_ridge_probe(x, y, num_classes=3, alphas=(1e-3, 1e-2, 1e-1))
    assert set(probe.val_accuracy.values()) == {1.0}
    assert probe.alpha == 1e-1


def test_matches_the_closed_form():
    """W = (X_s^T X_s + alpha N I)^{-1} X_s^T Y_c and b = mean(Y), in numpy."""
    x, y = data(n=200, f=12, k=3, seed=5)
    x = x.astype(np.float64)
    probe = fit_ridge_probe(x, y, num_classes=3, alpha=0.05)
    mean, std = x.mean(0), x.std(0)
    std = np.where(std > 0, std, 1.0)
    xs = (x - mean) / std
    onehot = np.eye(3)[y]
    w = np.linalg.solve(xs.T @ xs + 0.05 * 200 * np.eye(12), xs.T @ (onehot - onehot.mean(0)))
    np.testing.assert_allclose(probe.weight, w, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(probe.bias, np.bincount(y, minlength=3) / 200, atol=1e-9)
    np.testing.assert_allclose(probe.std, std, rtol=1e-12)
