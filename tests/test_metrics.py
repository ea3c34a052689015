"""Metrics: alignment/uniformity (Wang & Isola 2020), class cosine statistics (the
matrices of SINCERE's Figs. 2-3, Feeney & Hughes 2023), Mixed-KSG (Gao et al. 2017) and
embedding statistics, each against a literal numpy reference."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special
from scipy.spatial.distance import pdist

from contrastive_jax import metrics
from tests.losses.multidevice import assert_multidevice_matches


def _jit(fn, *arrays, **kwargs):
    """``fn(*arrays, **kwargs)`` under ``jax.jit`` (much cheaper than eager dispatch)."""
    return jax.jit(lambda *a: fn(*a, **kwargs))(*arrays)


def _unit(z):
    z = np.asarray(z, np.float64)
    return z / np.linalg.norm(z, axis=1, keepdims=True)


# --------------------------------------------------------------------------- alignment, uniformity


@pytest.mark.parametrize("alpha", [2.0, 1.0, 3.5])
def test_alignment_matches_numpy(alpha):
    rng = np.random.default_rng(0)
    z1, z2 = rng.normal(size=(2, 24, 6)) * rng.uniform(0.5, 3.0, size=(2, 24, 1))
    expected = np.mean(np.linalg.norm(_unit(z1) - _unit(z2), axis=1) ** alpha)
    got = jax.jit(lambda a, b: metrics.alignment(a, b, alpha=alpha))(z1, z2)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_alignment_extremes_and_valid():
    z = np.random.default_rng(1).normal(size=(8, 5)).astype(np.float32)
    assert float(_jit(metrics.alignment, z, 3.0 * z)) == pytest.approx(0.0, abs=1e-6)
    assert float(_jit(metrics.alignment, z, -z, alpha=3.0)) == pytest.approx(8.0, rel=1e-5)
    junk = np.concatenate([z, 100 * np.ones((3, 5), np.float32)])
    valid = np.arange(11) < 8
    np.testing.assert_allclose(
        _jit(metrics.alignment, junk, -junk, valid=valid), _jit(metrics.alignment, z, -z),
        rtol=1e-6
    )


def test_alignment_gradient_finite_at_zero_distance():
    z = jnp.ones((4, 3))
    grad = jax.jit(jax.grad(lambda a: metrics.alignment(a, z, alpha=1.0)))(z)
    assert np.all(np.isfinite(grad)) and np.allclose(grad, 0.0)


@pytest.mark.parametrize("t", [2.0, 0.5])
def test_uniformity_matches_pdist(t):
    z = np.random.default_rng(2).normal(size=(30, 4)) * 2.0
    expected = np.log(np.mean(np.exp(-t * pdist(_unit(z)) ** 2)))
    got = jax.jit(lambda a: metrics.uniformity(a, t=t))(z)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_uniformity_circle_limit_and_extremes():
    # N evenly spaced points on S^1: the mean of exp(-t d^2) over all ordered pairs
    # (self included) is exactly A = exp(-2t) I_0(2t), so distinct pairs give
    # log((N A - 1) / (N - 1)); the large-N limit is -2t + log I_0(2t).
    n = 200
    angles = 2 * np.pi * np.arange(n) / n
    circle = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    a = math.exp(-4.0) * special.i0(4.0)
    expected = math.log((n * a - 1) / (n - 1))
    np.testing.assert_allclose(_jit(metrics.uniformity, circle, t=2.0), expected, rtol=1e-5)
    assert float(_jit(metrics.uniformity, np.ones((5, 3)))) == pytest.approx(0.0, abs=1e-6)
    antipodal = np.array([[1.0, 0.0], [-1.0, 0.0]])
    assert float(_jit(metrics.uniformity, antipodal, t=2.0)) == pytest.approx(-8.0, rel=1e-6)


@pytest.mark.slow
def test_uniformity_valid_mask_and_empty():
    z = np.random.default_rng(3).normal(size=(10, 4)).astype(np.float32)
    padded = np.concatenate([z, np.full((6, 4), 1e3, np.float32)])
    valid = np.arange(16) < 10
    np.testing.assert_allclose(
        _jit(metrics.uniformity, padded, valid=valid), _jit(metrics.uniformity, z), rtol=1e-6
    )
    one = np.arange(16) == 0
    value, grad = jax.jit(jax.value_and_grad(lambda a: metrics.uniformity(a, valid=one)))(padded)
    assert float(value) == 0.0 and np.all(grad == 0.0)


def test_alignment_from_labels_matches_pairs():
    rng = np.random.default_rng(4)
    z1, z2 = rng.normal(size=(2, 12, 5))
    flat = np.concatenate([z1, z2])
    ids = np.concatenate([np.arange(12), np.arange(12)])
    np.testing.assert_allclose(
        _jit(metrics.alignment_from_labels, flat, ids), _jit(metrics.alignment, z1, z2),
        rtol=1e-5
    )
    # Three views and a padded row: literal mean over ordered pairs i != j.
    z = rng.normal(size=(10, 4))
    labels = np.array([0, 0, 0, 1, 1, 2, 3, 3, 3, 3])
    valid = np.ones(10, bool)
    valid[7] = False
    u = _unit(z)
    values = [
        np.linalg.norm(u[i] - u[j]) ** 1.5
        for i in range(10)
        for j in range(10)
        if i != j and labels[i] == labels[j] and valid[i] and valid[j]
    ]
    got = _jit(metrics.alignment_from_labels, z, labels, alpha=1.5, valid=valid)
    np.testing.assert_allclose(got, np.mean(values), rtol=1e-5)
    assert float(_jit(metrics.alignment_from_labels, z, np.arange(10))) == 0.0


@pytest.mark.slow
def test_metrics_multidevice_match_single_device():
    rng = np.random.default_rng(5)
    z = rng.normal(size=(16, 4)).astype(np.float32)
    labels = np.repeat(np.arange(8), 2)
    rng.shuffle(labels)
    valid = np.ones(16, bool)
    valid[[3, 10]] = False
    assert_multidevice_matches(
        lambda x, _, **kw: metrics.uniformity(x, t=2.0, **kw), z, labels, valid=valid,
        num_devices=4,
    )
    assert_multidevice_matches(
        metrics.alignment_from_labels, z, labels, valid=valid, num_devices=4
    )
    assert_multidevice_matches(metrics.alignment, z, z[::-1], valid=valid, num_devices=4)


def test_bad_inputs_raise():
    z = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match="z1"):
        metrics.alignment(z, z[:3])
    with pytest.raises(ValueError, match="alpha"):
        metrics.alignment(z, z, alpha=0.0)
    with pytest.raises(ValueError, match="`t`"):
        metrics.uniformity(z, t=-1.0)
    with pytest.raises(ValueError, match="labels"):
        metrics.alignment_from_labels(z, np.zeros(3, int))
    with pytest.raises(ValueError, match="embeddings"):
        metrics.uniformity(np.zeros((4,), np.float32))


# --------------------------------------------------------------------------- embedding statistics


@pytest.mark.slow
def test_embedding_stats():
    rng = np.random.default_rng(6)
    z = rng.normal(size=(20, 6)) * rng.uniform(0.5, 2.0, size=(20, 1))
    valid = np.arange(23) < 20
    padded = np.concatenate([z, np.full((3, 6), 50.0)]).astype(np.float32)
    stats = jax.jit(lambda a: metrics.embedding_stats(a, valid=valid))(padded)
    u = _unit(z)
    cos = u @ u.T
    singular = np.linalg.svd(z, compute_uv=False)
    p = singular / singular.sum()
    np.testing.assert_allclose(stats["mean_norm"], np.linalg.norm(z, axis=1).mean(), rtol=1e-5)
    np.testing.assert_allclose(stats["mean_cosine"], cos[~np.eye(20, dtype=bool)].mean(),
                               atol=1e-6)
    np.testing.assert_allclose(stats["normalized_std"], u.std(axis=0).mean(), rtol=1e-5)
    np.testing.assert_allclose(stats["effective_rank"], np.exp(-(p * np.log(p)).sum()),
                               rtol=1e-5)
    # Three orthogonal directions with equal energy: rank 3; collapse: cosine 1, std 0.
    basis = np.repeat(np.eye(5)[:3] * 2.0, 4, axis=0)
    assert float(_jit(metrics.embedding_stats, basis)["effective_rank"]) == pytest.approx(3.0, 1e-5)
    collapsed = _jit(metrics.embedding_stats, np.tile([[1.0, 2.0, 2.0]], (7, 1)))
    assert float(collapsed["mean_cosine"]) == pytest.approx(1.0, 1e-6)
    assert float(collapsed["normalized_std"]) == pytest.approx(0.0, abs=1e-6)
    assert float(collapsed["mean_norm"]) == pytest.approx(3.0, 1e-6)


# --------------------------------------------------------------------------- class similarity


def _brute_class_matrix(z, labels, k):
    cos = _unit(z) @ _unit(z).T
    out = np.full((k, k), np.nan)
    for a in range(k):
        for b in range(k):
            vals = [cos[i, j] for i in range(len(z)) for j in range(len(z))
                    if i != j and labels[i] == a and labels[j] == b]
            if vals:
                out[a, b] = np.mean(vals)
    return out


def test_class_similarity_matrix_matches_brute_force():
    rng = np.random.default_rng(7)
    labels = np.array([0] * 9 + [1] * 14 + [3] * 1 + [4] * 6)  # class 2 absent, 3 a singleton
    rng.shuffle(labels)
    centres = rng.normal(size=(5, 8))
    z = (centres[labels] + 0.7 * rng.normal(size=(30, 8))) * rng.uniform(0.2, 5, (30, 1))
    got = metrics.class_similarity_matrix(z.astype(np.float32), labels, 5)
    expected = _brute_class_matrix(z, labels, 5)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert np.isnan(got[2]).all() and np.isnan(got[3, 3]) and np.isfinite(got[3, 0])
    summary = metrics.similarity_summary(got)
    diag = np.diag(expected)
    off = expected[~np.eye(5, dtype=bool)]
    assert summary["mean_within"] == pytest.approx(np.nanmean(diag), rel=1e-6)
    assert summary["mean_between"] == pytest.approx(np.nanmean(off), rel=1e-6)


def test_within_between_match_matrix():
    rng = np.random.default_rng(8)
    labels = rng.integers(0, 4, size=50)
    z = rng.normal(size=(50, 6)) + 2.0 * np.eye(6)[labels]
    within, between = metrics.within_between_similarities(z, labels, 2)
    n_a = int(np.sum(labels == 2))
    cos = _unit(z) @ _unit(z).T
    members = np.flatnonzero(labels == 2)
    others = np.flatnonzero(labels != 2)
    expected_within = [cos[i, j] for i in members for j in members if i < j]
    np.testing.assert_allclose(np.sort(within), np.sort(expected_within), rtol=1e-12)
    np.testing.assert_allclose(np.sort(between), np.sort(cos[np.ix_(members, others)].ravel()),
                               rtol=1e-12)
    assert within.shape == (n_a * (n_a - 1) // 2,) and between.shape == (n_a * (50 - n_a),)
    m = metrics.class_similarity_matrix(z, labels, 4)
    counts = np.bincount(labels, minlength=4)
    rest = [b for b in range(4) if b != 2]
    assert within.mean() == pytest.approx(m[2, 2], rel=1e-10)
    assert between.mean() == pytest.approx(np.average(m[2, rest], weights=counts[rest]), 1e-10)


def test_class_similarity_bad_inputs():
    z = np.ones((4, 2))
    with pytest.raises(ValueError, match="labels"):
        metrics.class_similarity_matrix(z, np.array([0, 1, 2, 3]), 3)
    with pytest.raises(ValueError, match="labels"):
        metrics.class_similarity_matrix(z, np.zeros(3, int), 3)
    with pytest.raises(ValueError, match="matrix"):
        metrics.similarity_summary(np.ones((2, 3)))


# --------------------------------------------------------------------------- Mixed-KSG


def _brute_mixed_ksg(x, y, k):
    """Literal O(N^2) Mixed-KSG (Gao et al. 2017): one sample at a time, l-inf distances.

    Returns the estimate and the number of samples with rho_i = 0.
    """
    x = np.asarray(x, np.float64).reshape(len(x), -1)
    y = np.asarray(y, np.float64).reshape(len(y), -1)
    n = len(x)
    k_tilde, n_x, n_y = np.zeros(n), np.zeros(n), np.zeros(n)
    for i in range(n):
        dx = np.max(np.abs(x - x[i]), axis=1)
        dy = np.max(np.abs(y - y[i]), axis=1)
        dxy = np.maximum(dx, dy)
        rho = np.sort(np.delete(dxy, i))[k - 1]
        if rho == 0:
            k_tilde[i], n_x[i], n_y[i] = np.sum(dxy == 0), np.sum(dx == 0), np.sum(dy == 0)
        else:
            k_tilde[i], n_x[i], n_y[i] = k, np.sum(dx < rho), np.sum(dy < rho)
    terms = special.digamma(k_tilde) + math.log(n) - special.digamma(n_x) - special.digamma(n_y)
    return float(np.mean(terms)), int(np.sum(k_tilde != k))


def _binary_gaussian(n, seed, dim=5):
    """The synthetic task of ProjNCE (Jeong & Hero 2025, arXiv:2506.09810): C ~ Ber(1/2),
    X | C ~ N(+-1, I_5); I(X; C) = 0.6587 nats (checked against Monte Carlo in
    tests/experiments/test_reproduce_synthetic.py)."""
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 2, size=n)
    x = rng.normal(size=(n, dim)) + (2.0 * c - 1.0)[:, None]
    return x, c


@pytest.mark.parametrize("k", [1, 3, 5])
def test_mixed_ksg_equals_brute_force(k):
    rng = np.random.default_rng(10 + k)
    n = 200
    labels = rng.integers(0, 3, size=n)
    continuous = rng.normal(size=(n, 3)) * 0.6 + labels[:, None]
    # Grid-valued x: exact distance ties at rho and at 1 (label distance).
    grid = np.round(rng.normal(size=(n, 2)) * 2) / 2
    # Mostly discrete with duplicated rows (rho = 0) and a continuous part.
    mixed = np.concatenate([rng.integers(0, 3, size=(n, 1)),
                            np.where(rng.random((n, 1)) < 0.7, 0.0, rng.normal(size=(n, 1)))],
                           axis=1)
    soft_y = np.round(rng.normal(size=(n, 2)), 1)
    tie_cases = 0
    for x, y in ((continuous, labels), (grid, labels), (mixed, labels), (grid, soft_y),
                 (continuous.astype(np.float32), labels)):
        expected, ties = _brute_mixed_ksg(x, y, k)
        assert metrics.mixed_ksg(x, y, k=k) == expected
        tie_cases += ties
    assert tie_cases > 0  # the rho = 0 branch was exercised


def test_mixed_ksg_independent_is_near_zero():
    rng = np.random.default_rng(20)
    z = rng.normal(size=(5000, 5))
    c = rng.integers(0, 2, size=5000)
    assert abs(metrics.mixed_ksg(z, c)) < 0.05


def test_mixed_ksg_binary_gaussian_matches_the_true_mi():
    x, c = _binary_gaussian(5000, seed=0)
    full = metrics.mixed_ksg(x, c, k=5)
    sufficient = metrics.mixed_ksg(x.sum(axis=1) / math.sqrt(5), c, k=5)
    assert abs(full - 0.6587) < 0.05 and abs(full - 0.639) < 0.03
    assert abs(sufficient - 0.6587) < 0.05 and abs(sufficient - 0.654) < 0.03


def test_mixed_ksg_deterministic_labels_give_entropy():
    rng = np.random.default_rng(30)
    probs = np.array([0.5, 0.25, 0.125, 0.125])
    c = rng.choice(4, size=4000, p=probs)
    x = 10.0 * np.eye(4)[c] + 0.05 * rng.normal(size=(4000, 4))
    entropy = -np.sum(probs * np.log(probs))
    assert metrics.mixed_ksg(x, c) == pytest.approx(entropy, abs=0.01)
    assert metrics.mixed_ksg(np.asarray(jnp.asarray(x, jnp.float32)), c) == pytest.approx(
        entropy, abs=0.01)


def test_mixed_ksg_discrete_data_is_plugin_estimate():
    # All points tie (rho = 0): X uniform on {0..3}, Y = X // 2, I = H(Y) = log 2.
    rng = np.random.default_rng(40)
    x = rng.integers(0, 4, size=3000)
    assert metrics.mixed_ksg(x, x // 2) == pytest.approx(math.log(2), abs=0.01)
    assert abs(metrics.mixed_ksg(x, rng.integers(0, 2, size=3000))) < 0.01


def test_mixed_ksg_bad_inputs():
    x = np.zeros((10, 2))
    with pytest.raises(ValueError, match="samples"):
        metrics.mixed_ksg(x, np.zeros(9))
    with pytest.raises(ValueError, match="`k`"):
        metrics.mixed_ksg(x, np.zeros(10), k=10)
    with pytest.raises(ValueError, match="`k`"):
        metrics.mixed_ksg(x, np.zeros(10), k=0)
    with pytest.raises(ValueError, match="`x`"):
        metrics.mixed_ksg(np.zeros((10, 2, 2)), np.zeros(10))
    with pytest.raises(ValueError, match="finite"):
        metrics.mixed_ksg(np.full((10, 2), np.nan), np.zeros(10))
