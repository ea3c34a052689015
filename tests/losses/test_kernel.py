"""y-Aware InfoNCE, conditional alignment, global and conditional uniformity (Dufumier et al.
2021, arXiv:2111.05643, Eqs. 1, 2 and 4) and their checkable properties (docs/losses.md)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

from contrastive_jax.losses._kernel import (
    conditional_alignment,
    conditional_uniformity,
    global_uniformity,
    y_aware_infonce,
)
from contrastive_jax.losses._metadata_kernel import (
    conditional_uniformity_weights,
    kernel_targets,
    squared_distances,
)
from contrastive_jax.losses._nce import nt_xent, supcon
from tests.losses.multidevice import assert_multidevice_matches


def _global_uniformity(z, _unused, *, sigma=None, **kwargs):
    """global_uniformity in the (embeddings, metadata, sigma=...) calling convention."""
    del sigma
    return global_uniformity(z, **kwargs)


LOSSES = {
    "y_aware_infonce": y_aware_infonce,
    "conditional_alignment": conditional_alignment,
    "global_uniformity": _global_uniformity,
    "conditional_uniformity": conditional_uniformity,
}

# ----------------------------------------------------------------- numpy reference


def _unit(z):
    z = np.asarray(z, np.float64)
    return z / np.linalg.norm(z, axis=1, keepdims=True)


def _rows(y):
    y = np.asarray(y, np.float64)
    return y.reshape(len(y), -1)


def _rbf(ya, yb, sigma):
    return np.exp(-np.sum((ya - yb) ** 2) / (2.0 * sigma**2))


def reference_eq1_terms(z, y, tau, sigma, valid=None):
    """Literal Eqs. (1) and (2), one anchor at a time (float64).

    Returns the means over valid anchors of (y-Aware InfoNCE, conditional
    alignment, global uniformity); an anchor is valid when it is not padded and
    has N >= 1 other valid rows.
    """
    u, y = _unit(z), _rows(y)
    n = len(u)
    valid = np.ones(n, bool) if valid is None else np.asarray(valid)
    per_anchor = []
    for a in range(n):
        others = [k for k in range(n) if k != a and valid[k]]
        if not valid[a] or not others:
            continue
        big_n = len(others)
        w = np.array([_rbf(y[a], y[k], sigma) for k in others])
        z_hat = w.sum() / big_n
        f = np.array([u[a] @ u[k] / tau for k in others])
        mean_exp = np.sum(np.exp(f)) / big_n
        y_aware = -np.sum(w / z_hat * np.log(np.exp(f) / mean_exp)) / big_n
        align = -np.sum(w / z_hat * f) / big_n
        per_anchor.append((y_aware, align, np.log(mean_exp)))
    return np.mean(per_anchor, axis=0) if per_anchor else np.zeros(3)


def reference_conditional_uniformity(z, y, tau, sigma, valid=None, eps=1e-6):
    """Literal estimator of Eq. (4): log sum_ij Q_ij e^{S_ij} / sum_ij Q_ij (float64),
    Q_ij = (1 - w_ij) / (1 - Ẑ_i), Ẑ_i = (1/M) sum_j w_ij over the M valid rows."""
    u, y = _unit(z), _rows(y)
    rows = [i for i in range(len(u)) if valid is None or valid[i]]
    m = len(rows)
    numerator = mass = 0.0
    for i in rows:
        z_hat = sum(_rbf(y[i], y[j], sigma) for j in rows) / m
        if 1.0 - z_hat < eps:
            continue
        for j in rows:
            q = (1.0 - _rbf(y[i], y[j], sigma)) / (1.0 - z_hat)
            numerator += q * np.exp(u[i] @ u[j] / tau)
            mass += q
    return float(np.log(numerator / mass)) if mass > 0 else 0.0


def reference(name, z, y, tau, sigma, valid=None):
    if name == "conditional_uniformity":
        return reference_conditional_uniformity(z, y, tau, sigma, valid)
    index = ("y_aware_infonce", "conditional_alignment", "global_uniformity").index(name)
    return reference_eq1_terms(z, y, tau, sigma, valid)[index]


def two_view_batch(seed, b=6, d=5, p=1, spread=(20.0, 80.0)):
    """Both views of image a are rows a and a + b and share its metadata [2b, p]."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(2 * b, d)).astype(np.float32)
    meta = rng.uniform(*spread, size=(b, p)).astype(np.float32)
    meta = np.concatenate([meta, meta])
    return z, (meta[:, 0] if p == 1 else meta)


def _call(name, z, y, **kwargs):
    return LOSSES[name](jnp.asarray(z), jnp.asarray(y), **kwargs)


# -------------------------------------------------------- A9.1 literal reference


@pytest.mark.parametrize("name", list(LOSSES))
@pytest.mark.parametrize(
    ("p", "padded", "tau", "sigma"), [(1, False, 0.1, 5.0), (2, True, 0.5, 12.0)]
)
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_literal_numpy_reference(name, p, padded, tau, sigma, seed):
    z, y = two_view_batch(seed, p=p)
    valid = np.random.default_rng(seed + 50).random(len(z)) > 0.25 if padded else None
    value = _call(name, z, y, temperature=tau, sigma=sigma,
                  valid=None if valid is None else jnp.asarray(valid))
    np.testing.assert_allclose(value, reference(name, z, y, tau, sigma, valid), rtol=1e-5)


@pytest.mark.slow
def test_conditional_uniformity_equals_paper_one_over_n_squared_form():
    """On a full batch sum Q = M², so the estimator is log (1/M²) sum_ij Q_ij e^{S_ij}."""
    z, y = two_view_batch(2, b=5)
    tau, sigma = 0.1, 8.0
    u = _unit(z)
    m = len(u)
    w = np.array([[_rbf(y[i], y[j], sigma) for j in range(m)] for i in range(m)])
    z_hat = w.mean(axis=1, keepdims=True)
    q = (1.0 - w) / (1.0 - z_hat)
    expected = np.log(np.sum(q * np.exp(u @ u.T / tau)) / m**2)
    value = conditional_uniformity(jnp.asarray(z), jnp.asarray(y), temperature=tau, sigma=sigma)
    np.testing.assert_allclose(value, expected, rtol=1e-5)


# ------------------------------------------------------ A9.2 exact decomposition


@pytest.mark.parametrize("sigma", [1.0, 5.0, 50.0])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.slow
def test_y_aware_equals_conditional_alignment_plus_global_uniformity(sigma, padded):
    z, y = two_view_batch(3, b=7, p=2)
    valid = jnp.asarray(np.arange(len(z)) % 5 != 2) if padded else None
    z, y = jnp.asarray(z), jnp.asarray(y)

    def decomposed(x):
        return (conditional_alignment(x, y, sigma=sigma, valid=valid)
                + global_uniformity(x, valid=valid))

    value, grad = jax.value_and_grad(lambda x: y_aware_infonce(x, y, sigma=sigma, valid=valid))(z)
    expected_value, expected_grad = jax.value_and_grad(decomposed)(z)
    np.testing.assert_allclose(value, expected_value, rtol=1e-6, atol=1e-6)
    # The two forms sum the same 2b-term gradients in other orders: an entry near zero is
    # held to the worst-case rounding of such a sum at the gradient's scale (N eps max|g|).
    atol = len(z) * float(np.finfo(np.float32).eps) * float(np.max(np.abs(expected_grad)))
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=atol)


# ------------------------------------------------------------ A9.3 / A9.4 limits


@pytest.mark.parametrize("sigma", [0.1, 1e-3, 1e-6])
@pytest.mark.slow
def test_sigma_to_zero_with_distinct_metadata_is_nt_xent(sigma):
    """Distinct integer ages per image (views share them): L + log(M - 1) = NT-Xent."""
    b = 6
    rng = np.random.default_rng(4)
    z = jnp.asarray(rng.normal(size=(2 * b, 5)).astype(np.float32))
    ages = rng.choice(np.arange(20, 81), size=b, replace=False).astype(np.float32)
    y = jnp.asarray(np.concatenate([ages, ages]))
    ids = jnp.asarray(np.concatenate([np.arange(b), np.arange(b)]))
    value, grad = jax.value_and_grad(lambda x: y_aware_infonce(x, y, sigma=sigma))(z)
    expected, expected_grad = jax.value_and_grad(lambda x: nt_xent(x, ids))(z)
    np.testing.assert_allclose(value + np.log(2 * b - 1), expected, rtol=1e-6)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sigma", [1e-3, 1e-6])
@pytest.mark.slow
def test_sigma_to_zero_with_tied_metadata_is_supcon_over_tie_groups(sigma):
    rng = np.random.default_rng(5)
    ages = rng.choice([30, 40, 50, 60], size=7)
    ages = np.concatenate([ages, ages])
    z = jnp.asarray(rng.normal(size=(14, 4)).astype(np.float32))
    value = y_aware_infonce(z, jnp.asarray(ages, jnp.float32), sigma=sigma)
    np.testing.assert_allclose(value + np.log(13), supcon(z, jnp.asarray(ages)), rtol=1e-6)


def test_delta_kernel_on_one_hot_metadata_is_supcon():
    """Rank-2 metadata: one-hot class vectors with sigma -> 0 are the δ kernel. Every
    class has >= 2 rows (a singleton is a valid y-Aware anchor but not a SupCon one)."""
    rng = np.random.default_rng(6)
    labels = rng.permutation(np.array([0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3]))
    z = jnp.asarray(rng.normal(size=(12, 6)).astype(np.float32))
    one_hot = jnp.asarray(np.eye(4, dtype=np.float32)[labels])
    value = y_aware_infonce(z, one_hot, temperature=0.2, sigma=1e-3)
    expected = supcon(z, jnp.asarray(labels), temperature=0.2)
    np.testing.assert_allclose(value + np.log(11), expected, rtol=1e-6)


# ------------------------------------------------------- A9.5 entropy lower bound


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_entropy_lower_bound(seed):
    """L ≥ mean_a H(P_a) - log N, strictly on random data."""
    z, y = two_view_batch(seed)
    sigma = 10.0
    rows = _rows(y)
    m = len(rows)
    entropies = []
    for a in range(m):
        w = np.array([_rbf(rows[a], rows[b], sigma) for b in range(m) if b != a])
        prob = w / w.sum()
        entropies.append(-np.sum(prob * np.log(prob)))
    bound = np.mean(entropies) - np.log(m - 1)
    value = float(y_aware_infonce(jnp.asarray(z), jnp.asarray(y), sigma=sigma))
    assert value > bound + 1e-3


def test_large_sigma_is_nonnegative_and_zero_at_collapse():
    z, y = two_view_batch(10)
    assert float(y_aware_infonce(jnp.asarray(z), jnp.asarray(y), sigma=1e4)) > 0.1
    collapsed = jnp.asarray(np.tile(z[:1], (len(z), 1)))
    np.testing.assert_allclose(y_aware_infonce(collapsed, jnp.asarray(y), sigma=1e4), 0.0,
                               atol=1e-5)


# ----------------------------------------------------- A9.6 targets, invariances


@pytest.mark.parametrize("sigma", [0.5, 5.0, 1e3])
def test_kernel_targets_are_row_stochastic_kernel_ratios(sigma):
    _, y = two_view_batch(11, p=2)
    valid = np.arange(len(y)) != 4
    meta = jnp.asarray(y)
    others = ~np.eye(len(y), dtype=bool) & valid[None, :]
    targets = np.asarray(kernel_targets(squared_distances(meta, meta), jnp.asarray(others),
                                        sigma))
    rows = _rows(y)
    expected = np.zeros_like(targets, dtype=np.float64)
    for a in range(len(y)):
        w = np.array([_rbf(rows[a], rows[b], sigma) if others[a, b] else 0.0
                      for b in range(len(y))])
        expected[a] = w / w.sum()
    np.testing.assert_allclose(targets, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(targets.sum(axis=1), 1.0, rtol=1e-6)
    assert np.all(targets >= 0) and np.all(np.diag(targets) == 0) and np.all(targets[:, 4] == 0)


@pytest.mark.parametrize("name", ["y_aware_infonce", "conditional_alignment",
                                  "conditional_uniformity"])
def test_metadata_scale_and_translation_invariance(name):
    """w_σ(c·y, c·y') = w_{σ/c}(y, y'); y -> y + const changes nothing. Metadata on a
    dyadic grid so the scaled and shifted copies are exact in float32."""
    b = 6
    rng = np.random.default_rng(12)
    z = rng.normal(size=(2 * b, 5)).astype(np.float32)
    meta = rng.integers(80, 320, size=(b, 2)).astype(np.float32) / 4
    y = np.concatenate([meta, meta])
    base = _call(name, z, y, sigma=6.0)
    np.testing.assert_allclose(_call(name, z, 4.0 * y, sigma=24.0), base, rtol=1e-5)
    np.testing.assert_allclose(_call(name, z, y + 64.0, sigma=6.0), base, rtol=1e-5)


# ------------------------------------------------ A9.7 conditional uniformity weights


@pytest.mark.parametrize("sigma", [5.0, 20.0])
def test_conditional_uniformity_weight_properties(sigma):
    b = 7
    rng = np.random.default_rng(13)
    ages = rng.choice(np.arange(20, 80, 3), size=b).astype(np.float32)
    ages[1] = ages[0]  # a tie between different images
    y = np.concatenate([ages, ages])
    m = 2 * b
    meta = jnp.asarray(y)[:, None]
    all_rows = jnp.ones(m, bool)
    weights, kept = conditional_uniformity_weights(squared_distances(meta, meta), all_rows,
                                                   all_rows, sigma)
    weights = np.asarray(weights)
    assert np.all(kept)
    assert np.all(weights >= 0)
    np.testing.assert_allclose(weights.sum() / m**2, 1.0, rtol=1e-6)
    partner = (np.arange(m) + b) % m
    assert np.all(np.diag(weights) == 0) and np.all(weights[np.arange(m), partner] == 0)
    assert np.all(weights[y[:, None] == y[None, :]] == 0)
    w = np.exp(-((y[:, None] - y[None, :]) ** 2) / (2 * sigma**2))
    expected = (1 - w) / (1 - w.mean(axis=1, keepdims=True))
    np.testing.assert_allclose(weights, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("sigma", [1e-3, 5.0, 1e3])
@pytest.mark.slow
def test_conditional_uniformity_gradient_is_finite(sigma):
    z, y = two_view_batch(14)
    value, grad = jax.value_and_grad(
        lambda x: conditional_uniformity(x, jnp.asarray(y), sigma=sigma))(jnp.asarray(z))
    assert np.isfinite(value) and np.all(np.isfinite(grad)) and np.any(grad)
    np.testing.assert_allclose(value, reference_conditional_uniformity(z, y, 0.1, sigma),
                               rtol=1e-4)


def test_conditional_uniformity_with_all_metadata_equal_is_zero():
    z, _ = two_view_batch(15)
    y = jnp.full((len(z),), 42.0)
    value, grad = jax.value_and_grad(lambda x: conditional_uniformity(x, y))(jnp.asarray(z))
    assert float(value) == 0.0 and np.all(np.isfinite(grad)) and not np.any(grad)


# ------------------------------------------------------------ A9.8 / A9.9 relations


@pytest.mark.parametrize("tau", [0.25, 0.5])
def test_conditional_uniformity_to_wang_isola(tau):
    """Single view, distinct metadata, σ -> 0: L^y_unif - 1/τ = log mean_{i<j} e^{-t‖ẑi-ẑj‖²},
    t = 1/(2τ)."""
    rng = np.random.default_rng(16)
    z = rng.normal(size=(10, 4)).astype(np.float32)
    ages = rng.choice(np.arange(20, 81), size=10, replace=False).astype(np.float32)
    u = _unit(z)
    t = 1.0 / (2.0 * tau)
    pairs = [np.exp(-t * np.sum((u[i] - u[j]) ** 2)) for i in range(10) for j in range(i + 1, 10)]
    value = conditional_uniformity(jnp.asarray(z), jnp.asarray(ages), temperature=tau,
                                   sigma=1e-3)
    np.testing.assert_allclose(value - 1.0 / tau, np.log(np.mean(pairs)), rtol=1e-5)


@pytest.mark.parametrize("seed", [17, 18])
def test_jensen_global_uniformity_below_pooled_log_mean(seed):
    z, _ = two_view_batch(seed)
    u = _unit(z)
    s = u @ u.T / 0.1
    pooled = np.log(np.mean(np.exp(s[~np.eye(len(u), dtype=bool)])))
    assert float(global_uniformity(jnp.asarray(z))) < pooled


# ------------------------------------------------------------ A9.10 Lemma 1


def _monte_carlo(fn, n, num_batches, seed, s):
    """Each batch: N + 1 i.i.d. draws y ~ N(0, s²), ẑ = (cos y, sin y); every draw is an
    anchor against the other N. Returns the per-batch values."""
    y = jax.random.normal(jax.random.key(seed), (num_batches, n + 1)) * s

    def one(yb):
        return fn(jnp.stack([jnp.cos(yb), jnp.sin(yb)], axis=1), yb)

    return np.asarray(jax.jit(lambda ys: jax.lax.map(one, ys))(y))


@pytest.mark.slow
def test_lemma1_asymptotics():
    s, sigma, tau = 1.0, 0.5, 0.5
    a = sigma**2 / (s**2 + sigma**2)
    v = sigma**2 * s**2 / (s**2 + sigma**2)
    align_inf = -np.exp(-(a * a * s * s + v) / 2) / tau
    nodes, node_weights = np.polynomial.hermite_e.hermegauss(200)
    orders = np.arange(1, 61)
    kappa = 1.0 / tau
    g = special.iv(0, kappa) + 2 * np.sum(
        special.iv(orders, kappa)[None] * np.cos(np.outer(nodes * s, orders))
        * np.exp(-(orders**2) * s**2 / 2)[None],
        axis=1,
    )
    unif_inf = np.sum(node_weights * np.log(g)) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose([align_inf, unif_inf], [-1.773841, 1.187700], atol=1e-6)

    def align(z, y):
        return conditional_alignment(z, y, temperature=tau, sigma=sigma)

    errors = [abs(_monte_carlo(align, n, 40000 // n, n, s).mean() - align_inf)
              for n in (16, 64, 1024)]
    assert errors[0] > errors[1] > errors[2] and errors[2] < 2e-3

    unif = _monte_carlo(lambda z, _y: global_uniformity(z, temperature=tau), 4096, 10, 1, s)
    std_error = unif.std(ddof=1) / np.sqrt(len(unif))
    assert abs(unif.mean() - unif_inf) < 5 * std_error


# ------------------------------------------------------------ A9.12 devices


@pytest.mark.parametrize(("name", "p"), [
    ("y_aware_infonce", 1),
    ("conditional_alignment", 2),
    ("global_uniformity", 1),
    ("conditional_uniformity", 2),
])
@pytest.mark.matrix
def test_multidevice_matches_single_device(name, p):
    rng = np.random.default_rng(19)
    b = 16
    z = rng.normal(size=(2 * b, 5)).astype(np.float32)
    meta = rng.choice(np.arange(20, 80, 2), size=(b, p)).astype(np.float32)
    y = np.concatenate([meta, meta])
    order = rng.permutation(2 * b)  # views of one image land on different devices
    z, y = z[order], y[order]
    if p == 1:
        y = y[:, 0]
    valid = np.ones(2 * b, bool)
    valid[[0, 1, 2, 13, 27]] = False  # device 0 has a single valid row
    assert_multidevice_matches(LOSSES[name], z, y, valid=valid, temperature=0.1, sigma=5.0)


# --------------------------------------------------------------- robustness


def _robust_cases():
    rng = np.random.default_rng(20)
    z = rng.normal(size=(8, 8)).astype(np.float32)
    ages = np.array([30.0, 41.0, 52.0, 63.0, 30.0, 41.0, 52.0, 63.0], np.float32)
    zero_row = z.copy()
    zero_row[3] = 0.0
    return {
        "collapsed": (np.tile(z[:1], (8, 1)), ages, None, 0.1),
        "orthogonal": (np.eye(8, dtype=np.float32), ages, None, 0.1),
        "zero row": (zero_row, ages, None, 0.1),
        "temperature 0.01": (z, ages, None, 0.01),
        "orthogonal at temperature 0.01": (np.eye(8, dtype=np.float32), ages, None, 0.01),
        "every metadata distinct": (z, np.arange(8, dtype=np.float32) * 7, None, 0.1),
        "singleton group": (z, np.array([30, 30, 30, 30, 50, 50, 50, 90], np.float32), None, 0.1),
        "one valid row": (z, ages, np.arange(8) == 5, 0.1),
        "all invalid": (z, ages, np.zeros(8, bool), 0.1),
    }


@pytest.mark.parametrize("name", list(LOSSES))
def test_finite_value_and_gradient(name):
    fn = LOSSES[name]
    run = jax.jit(jax.value_and_grad(
        lambda x, y, v, t: fn(x, y, temperature=t, sigma=5.0, valid=v)))
    for case, (z, y, valid, tau) in _robust_cases().items():
        mask = np.ones(len(z), bool) if valid is None else valid
        value, grad = run(jnp.asarray(z), jnp.asarray(y), jnp.asarray(mask), tau)
        assert value.dtype == jnp.float32, case
        assert np.isfinite(value) and np.all(np.isfinite(grad)), case
        if case in ("one valid row", "all invalid"):
            assert float(value) == 0.0 and not np.any(grad), case
        elif case != "zero row":  # the literal reference cannot normalise a zero row
            np.testing.assert_allclose(value, reference(name, z, y, tau, 5.0, valid),
                                       rtol=1e-4, atol=1e-5, err_msg=case)


@pytest.mark.parametrize("name", list(LOSSES))
def test_bfloat16_input_reduces_in_float32(name):
    z, y = two_view_batch(21)
    z16 = jnp.asarray(z, jnp.bfloat16)
    value = LOSSES[name](z16, jnp.asarray(y, jnp.bfloat16))
    assert value.dtype == jnp.float32
    y_rounded = np.asarray(jnp.asarray(y, jnp.bfloat16).astype(jnp.float32))
    expected = reference(name, np.asarray(z16.astype(jnp.float32)), y_rounded, 0.1, 5.0)
    np.testing.assert_allclose(value, expected, rtol=1e-5)


@pytest.mark.parametrize("name", list(LOSSES))
def test_jit_with_traced_temperature_and_sigma(name):
    z, y = two_view_batch(22)
    fn = jax.jit(lambda x, t, s: LOSSES[name](x, jnp.asarray(y), temperature=t, sigma=s))
    np.testing.assert_allclose(fn(jnp.asarray(z), 0.3, 9.0), reference(name, z, y, 0.3, 9.0),
                               rtol=1e-5)


# ------------------------------------------------------------------ ValueErrors


_BAD_INPUTS = [
    (dict(embeddings=np.zeros(8, np.float32)), "embeddings"),
    (dict(embeddings=np.zeros((8, 3), np.int32)), "embeddings"),
    (dict(metadata=np.zeros(8, np.int32)), "metadata"),
    (dict(metadata=np.zeros((8, 2, 1), np.float32)), "metadata"),
    (dict(metadata=np.zeros(7, np.float32)), "metadata"),
    (dict(metadata=[0.0] * 8), "metadata"),
    (dict(temperature=0.0), "temperature"),
    (dict(temperature=-1.0), "temperature"),
    (dict(sigma=0.0), "sigma"),
    (dict(sigma=-2.0), "sigma"),
    (dict(valid=np.ones(8, np.int32)), "valid"),
]


@pytest.mark.parametrize(("kwargs", "match"), _BAD_INPUTS)
@pytest.mark.parametrize("name", ["y_aware_infonce", "conditional_alignment",
                                  "conditional_uniformity"])
def test_bad_input_raises_value_error(name, kwargs, match):
    args = dict(embeddings=np.ones((8, 3), np.float32), metadata=np.zeros(8, np.float32))
    args.update(kwargs)
    emb, meta = jnp.asarray(args.pop("embeddings")), args.pop("metadata")
    meta = meta if isinstance(meta, list) else jnp.asarray(meta)
    if "valid" in args:
        args["valid"] = jnp.asarray(args["valid"])
    with pytest.raises(ValueError, match=match):
        LOSSES[name](emb, meta, **args)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [(dict(embeddings=np.zeros((2, 3, 4), np.float32)), "embeddings"),
     (dict(temperature=0.0), "temperature"),
     (dict(valid=np.ones(7, bool)), "valid")],
)
def test_global_uniformity_bad_input_raises_value_error(kwargs, match):
    args = dict(embeddings=np.ones((8, 3), np.float32))
    args.update(kwargs)
    emb = jnp.asarray(args.pop("embeddings"))
    if "valid" in args:
        args["valid"] = jnp.asarray(args["valid"])
    with pytest.raises(ValueError, match=match):
        global_uniformity(emb, **args)
