"""MIO (Manna et al. 2021, arXiv:2111.12664): Eqs. (4)-(5), the L2 term of Eq. (39), and the
paper's checkable claims (its Section 2.4 gradients)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from contrastive_jax.losses._mio import mio
from tests.losses.multidevice import assert_multidevice_matches

# ----------------------------------------------------------------- numpy reference


def _unit(z):
    z = np.asarray(z, np.float64)
    return z / np.linalg.norm(z, axis=1, keepdims=True)


def _log_sigmoid(x):
    return np.log(1.0 / (1.0 + np.exp(-x)))


def reference_mio(z, labels, tau, l2_weight=0.0, valid=None):
    """Eq. (4) over ordered pairs, one pair at a time, plus the official-scale L2 (float64).

    ``-log σ(x) = log(1 + e^-x)`` and ``-log(1 - σ(x)) = log(1 + e^x)`` are taken
    with ``np.logaddexp`` so that τ = 0.01 does not overflow the reference.
    """
    u = _unit(z)
    n, d = u.shape
    valid = np.ones(n, bool) if valid is None else np.asarray(valid)
    pos_terms, neg_terms, l2_terms = [], [], []
    for a in range(n):
        pos = [b for b in range(n) if b != a and valid[b] and labels[b] == labels[a]]
        if not valid[a] or not pos:
            continue
        for b in range(n):
            if b == a or not valid[b]:
                continue
            c = u[a] @ u[b]
            if labels[b] == labels[a]:
                pos_terms.append(np.logaddexp(0.0, -c / tau))
                l2_terms.append(np.sum((u[a] - u[b]) ** 2))
            else:
                neg_terms.append(np.logaddexp(0.0, c / tau))
    if not pos_terms:
        return 0.0
    neg = np.mean(neg_terms) if neg_terms else 0.0
    return float(np.mean(pos_terms) + neg + l2_weight * np.mean(l2_terms) / d)


def two_view_batch(seed, b=5, d=6):
    """Views stacked view-major: rows a and (a + b) mod 2b are the two views of image a."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(2 * b, d)).astype(np.float32)
    return z, np.concatenate([np.arange(b), np.arange(b)])


def _softplus(x):
    return np.log1p(np.exp(x))


# ------------------------------------------------------- B11.2 literal reference


@pytest.mark.parametrize("tau", [0.2, 0.5, 1.0])
@pytest.mark.parametrize("l2_weight", [0.0, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_literal_numpy_reference_uneven_groups_and_padding(tau, l2_weight, seed):
    """A class of three, a singleton, and padded rows that leave two more singletons: the
    anchors have different numbers of positives and negatives, so a mean over pairs
    differs from a mean over anchors."""
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.array([0, 0, 1, 1, 1, 2, 2, 3, 4, 4, 5, 5, 6, 6]))
    z = rng.normal(size=(len(labels), 5)).astype(np.float32)
    valid = np.ones(len(labels), bool)
    valid[[np.flatnonzero(labels == 5)[0], np.flatnonzero(labels == 6)[1]]] = False
    value = mio(jnp.asarray(z), jnp.asarray(labels), temperature=tau, l2_weight=l2_weight,
                valid=jnp.asarray(valid))
    expected = reference_mio(z, labels, tau, l2_weight, valid)
    np.testing.assert_allclose(value, expected, rtol=1e-5)


# ---------------------------------------------------- B11.1 the two lines of Eq. 5


@pytest.mark.parametrize("tau", [0.5, 1.0])
@pytest.mark.parametrize("seed", [2, 3])
def test_pair_form_equals_per_anchor_form_of_eq5(tau, seed):
    """-(1/T_P) sum_j [log σ(C_jk/τ) + (1/(T_P-2)) sum_{i≠j,k} log(1-σ(C_ji/τ))], k = p(j)."""
    b = 5
    z, ids = two_view_batch(seed, b=b)
    u = _unit(z)
    t_p = 2 * b
    total = 0.0
    for j in range(t_p):
        k = (j + b) % t_p
        neg = sum(np.log(1.0 - 1.0 / (1.0 + np.exp(-u[j] @ u[i] / tau)))
                  for i in range(t_p) if i not in (j, k))
        total += _log_sigmoid(u[j] @ u[k] / tau) + neg / (t_p - 2)
    np.testing.assert_allclose(mio(jnp.asarray(z), jnp.asarray(ids), temperature=tau),
                               -total / t_p, rtol=1e-5)


def test_negative_pair_count_is_t_p_squared_minus_2_t_p():
    """B = 128: T_P = 256, T_N = 65,024 = T_P² - 2 T_P. The first K images share a
    component (pairwise cosine c), all others are orthogonal, both views coincide."""
    b, k, c, tau = 128, 64, 0.6, 0.5
    t_p, t_n = 2 * b, 4 * b * b - 4 * b
    assert t_n == t_p**2 - 2 * t_p == 65_024
    images = np.zeros((b, b + 1))
    images[np.arange(b), np.arange(b) + 1] = 1.0
    images[:k, 0] = np.sqrt(c)
    images[:k, 1 : k + 1] *= np.sqrt(1.0 - c)
    z = np.concatenate([images, images]).astype(np.float32)
    ids = np.concatenate([np.arange(b), np.arange(b)])
    correlated = 2 * k * (2 * k - 2)  # ordered negative pairs with cosine c
    expected = _softplus(-1 / tau) + (
        (t_n - correlated) * np.log(2.0) + correlated * _softplus(c / tau)
    ) / t_n
    # A float32 mean over 65,024 negative pairs: its rounding depends on XLA's reduction
    # order (rtol 1.4e-6 under jax 0.8.0, `make test-min`; below 1e-6 under newer releases).
    np.testing.assert_allclose(mio(jnp.asarray(z), jnp.asarray(ids), temperature=tau),
                               expected, rtol=1e-5)


# ------------------------------------------------------------- B11.2 optax BCE


@pytest.mark.parametrize("seed", [4, 5])
def test_equals_class_balanced_optax_sigmoid_bce(seed):
    z, ids = two_view_batch(seed, b=6, d=8)
    tau = 0.5
    u = jnp.asarray(_unit(z), jnp.float32)
    logits = u @ u.T / tau
    same = ids[:, None] == ids[None, :]
    eye = np.eye(len(ids), dtype=bool)
    pos, neg = same & ~eye, ~same
    bce_pos = optax.sigmoid_binary_cross_entropy(logits, jnp.ones_like(logits))
    bce_neg = optax.sigmoid_binary_cross_entropy(logits, jnp.zeros_like(logits))
    expected = jnp.sum(jnp.where(pos, bce_pos, 0)) / pos.sum() + jnp.sum(
        jnp.where(neg, bce_neg, 0)) / neg.sum()
    np.testing.assert_allclose(mio(jnp.asarray(z), jnp.asarray(ids), temperature=tau),
                               expected, rtol=1e-5)


# ---------------------------------------------------------- B11.3 reference values


def _basis(rows, dim):
    return np.eye(dim, dtype=np.float32)[rows]


@pytest.mark.parametrize(
    ("name", "z", "expected"),
    [
        ("collapse", np.tile(np.array([[0.3, -1.2, 0.5]], np.float32), (8, 1)), 2.253856),
        ("perfect positives, orthogonal negatives",
         _basis(np.array([0, 1, 2, 3, 0, 1, 2, 3]), 4), 0.820075),
        ("everything orthogonal", _basis(np.arange(8), 8), 1.386294),
    ],
)
@pytest.mark.matrix
def test_reference_values_at_tau_one_half(name, z, expected):
    ids = jnp.array([0, 1, 2, 3, 0, 1, 2, 3])
    np.testing.assert_allclose(mio(jnp.asarray(z), ids), expected, rtol=1e-6, err_msg=name)


# ----------------------------------------------------------- B11.4 Eq. 11 bound


@pytest.mark.parametrize("seed", range(4))
def test_eq11_lower_bound(seed):
    """L_O > -mean_pos(C/τ) + mean_neg(C/τ) (softplus(x) > x)."""
    z, ids = two_view_batch(seed, b=6, d=4)
    tau = 0.5
    u = _unit(z)
    c = u @ u.T / tau
    same = ids[:, None] == ids[None, :]
    eye = np.eye(len(ids), dtype=bool)
    bound = -c[same & ~eye].mean() + c[~same].mean()
    assert float(mio(jnp.asarray(z), jnp.asarray(ids), temperature=tau)) > bound


# -------------------------------------------------------- B11.6 gradient claims


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _g3_unit(u, b, tau):
    """G3: ∂L_O/∂ẑ_o = (2/(τT_P)) [-(1-σ(C_oo'/τ)) ẑ_o' + (1/(T_P-2)) Σ_{i∉{o,o'}} σ(C_oi/τ) ẑ_i].
    """
    t_p = 2 * b
    c = u @ u.T
    out = np.zeros_like(u)
    for o in range(t_p):
        p = (o + b) % t_p
        push = sum(_sigmoid(c[o, i] / tau) * u[i] for i in range(t_p) if i not in (o, p))
        out[o] = 2.0 / (tau * t_p) * (-(1.0 - _sigmoid(c[o, p] / tau)) * u[p] + push / (t_p - 2))
    return out


def _eq23_unit(u, b, tau):
    """Eq. (23) as printed, with σ(C/τ): -(1/T_P)[ẑ_o'(1-p₊(o,o')) - (1/(T_P-2)) Σ ẑ_i p₊(o,i)]."""
    t_p = 2 * b
    c = u @ u.T
    out = np.zeros_like(u)
    for o in range(t_p):
        p = (o + b) % t_p
        push = sum(_sigmoid(c[o, i] / tau) * u[i] for i in range(t_p) if i not in (o, p))
        out[o] = -(u[p] * (1.0 - _sigmoid(c[o, p] / tau)) - push / (t_p - 2)) / t_p
    return out


def _through_normalisation(z, grad_unit):
    """∂L/∂z̃ = (I - ẑẑᵀ)(∂L/∂ẑ)/‖z̃‖ row by row (MIO Sec. 2.4.1, normalised case)."""
    z = np.asarray(z, np.float64)
    norm = np.linalg.norm(z, axis=1, keepdims=True)
    u = z / norm
    return (grad_unit - np.sum(grad_unit * u, axis=1, keepdims=True) * u) / norm


@pytest.mark.parametrize("tau", [1.0, 0.5])
@pytest.mark.slow
def test_g3_embedding_gradient(tau):
    b = 5
    z, ids = two_view_batch(6, b=b, d=4)
    grad = jax.grad(lambda x: mio(x, jnp.asarray(ids), temperature=tau))(jnp.asarray(z))
    expected = _through_normalisation(z, _g3_unit(_unit(z), b, tau))
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_g4_printed_eq23_is_half_the_gradient(tau):
    """jax.grad[o] = 2·eq23(o)/τ; the printed eq. (23) alone does not match."""
    b = 5
    z, ids = two_view_batch(7, b=b, d=4)
    grad = np.asarray(jax.grad(lambda x: mio(x, jnp.asarray(ids), temperature=tau))(
        jnp.asarray(z)))
    eq23 = _eq23_unit(_unit(z), b, tau)
    np.testing.assert_allclose(grad, _through_normalisation(z, 2.0 * eq23 / tau),
                               rtol=1e-4, atol=1e-6)
    assert not np.allclose(grad, _through_normalisation(z, eq23), rtol=1e-2, atol=1e-4)


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_g2_column_summed_projector_gradient(tau):
    """g = 1_Fᵀ ∇_W L for z = hW (linear projector, h = |N(0, 1)| >= 0, F = 7, D = 4)
    equals Σ_o s_o ∂L/∂z_o with s_o = Σ_u h_ou; the printed eq. (19), which lacks
    the 1/τ, agrees only at τ = 1."""
    b, f, d = 5, 7, 4
    rng = np.random.default_rng(8)
    h = np.abs(rng.normal(size=(2 * b, f)))
    w = 0.3 * rng.normal(size=(f, d))
    ids = jnp.asarray(np.concatenate([np.arange(b), np.arange(b)]))
    h32 = jnp.asarray(h, jnp.float32)
    grad_w = jax.grad(lambda w_: mio(h32 @ w_, ids, temperature=tau))(jnp.asarray(w, jnp.float32))
    g = np.asarray(grad_w).sum(axis=0)
    z = h @ w
    per_row = _through_normalisation(z, _g3_unit(_unit(z), b, tau))
    expected = (h.sum(axis=1)[:, None] * per_row).sum(axis=0)
    np.testing.assert_allclose(g, expected, rtol=1e-4, atol=1e-6)
    printed_eq19 = tau * expected
    assert np.allclose(g, printed_eq19, rtol=1e-4, atol=1e-6) == (tau == 1.0)


# ----------------------------------------------------------------- B11.7 L2 term


@pytest.mark.parametrize("seed", [9, 10])
def test_l2_term_is_official_mse_on_normalised_views(seed):
    b, d, lam = 6, 8, 0.7
    z, ids = two_view_batch(seed, b=b, d=d)
    u = _unit(z)
    mse = np.sum((u[:b] - u[b:]) ** 2) / (b * d)  # torch mse_loss(ẑ¹, ẑ²), mean reduction
    cos_pos = np.sum(u[:b] * u[b:], axis=1)
    np.testing.assert_allclose(mse, np.mean(2 - 2 * cos_pos) / d, rtol=1e-12)
    z, ids = jnp.asarray(z), jnp.asarray(ids)
    diff = mio(z, ids, l2_weight=lam) - mio(z, ids)
    np.testing.assert_allclose(diff, lam * mse, rtol=1e-4, atol=1e-7)


def test_l2_term_is_zero_when_views_coincide():
    rng = np.random.default_rng(11)
    z1 = rng.normal(size=(6, 5)).astype(np.float32)
    z = jnp.asarray(np.concatenate([z1, 2.5 * z1]))
    ids = jnp.asarray(np.concatenate([np.arange(6), np.arange(6)]))
    np.testing.assert_allclose(mio(z, ids, l2_weight=1.0), mio(z, ids), rtol=1e-6)


@pytest.mark.slow
def test_l2_term_gradient():
    """∂R/∂ẑ¹_b = 2(ẑ¹_b - ẑ²_b)/(B·D); inputs are unit rows so ∂R/∂z = (I - ẑẑᵀ)∂R/∂ẑ."""
    b, d = 6, 5
    z, ids = two_view_batch(12, b=b, d=d)
    u = _unit(z).astype(np.float32)
    ids = jnp.asarray(ids)
    grad = jax.grad(lambda x: mio(x, ids, l2_weight=1.0) - mio(x, ids))(jnp.asarray(u))
    partner = np.concatenate([u[b:], u[:b]])
    expected = _through_normalisation(u, 2.0 * (u - partner) / (b * d))
    np.testing.assert_allclose(grad, expected, rtol=1e-3, atol=1e-6)


# ------------------------------------------------------------- B11.9 invariances


def test_invariances():
    b = 6
    z, ids = two_view_batch(13, b=b, d=5)
    ids = jnp.asarray(ids)
    base = mio(jnp.asarray(z), ids, l2_weight=1.0)
    perm = np.random.default_rng(0).permutation(b)
    permuted = np.concatenate([z[:b][perm], z[b:][perm]])
    swapped = np.concatenate([z[b:], z[:b]])
    scales = np.random.default_rng(1).uniform(0.1, 10.0, size=(2 * b, 1)).astype(np.float32)
    for name, other in (("permute samples", permuted), ("swap views", swapped),
                        ("rescale rows", z * scales)):
        np.testing.assert_allclose(mio(jnp.asarray(other), ids, l2_weight=1.0), base,
                                   rtol=1e-5, err_msg=name)


# --------------------------------------------------------------- B11.8 devices


@pytest.mark.parametrize("l2_weight", [0.0, 1.0])
@pytest.mark.matrix
def test_multidevice_matches_single_device(l2_weight):
    rng = np.random.default_rng(14)
    labels = np.concatenate([np.repeat(np.arange(13), 2), [13, 13, 13], [14, 15, 15]])
    rng.shuffle(labels)
    z = rng.normal(size=(32, 6)).astype(np.float32)
    valid = np.ones(32, bool)
    valid[[3, 17, 30]] = False
    assert_multidevice_matches(mio, z, labels, valid=valid, temperature=0.5,
                               l2_weight=l2_weight)


# ----------------------------------------------------------------- robustness


def _robust_cases():
    rng = np.random.default_rng(15)
    z = rng.normal(size=(8, 8)).astype(np.float32)
    ids = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    zero_row = z.copy()
    zero_row[2] = 0.0
    return {
        "collapsed": (np.tile(z[:1], (8, 1)), ids, None, 0.5),
        "orthogonal": (np.eye(8, dtype=np.float32), ids, None, 0.5),
        "zero row": (zero_row, ids, None, 0.5),
        "temperature 0.01": (z, ids, None, 0.01),
        "every label distinct": (z, np.arange(8), None, 0.5),
        "singleton class": (z, np.array([0, 1, 2, 3, 0, 1, 2, 9]), None, 0.5),
        "single image": (z[:2], np.array([0, 0]), None, 0.5),
        "all invalid": (z, ids, np.zeros(8, bool), 0.5),
    }


def test_finite_value_and_gradient():
    run = jax.jit(jax.value_and_grad(
        lambda x, y, v, t: mio(x, y, temperature=t, l2_weight=1.0, valid=v)))
    for case, (z, labels, valid, tau) in _robust_cases().items():
        mask = np.ones(len(z), bool) if valid is None else valid
        value, grad = run(jnp.asarray(z), jnp.asarray(labels), jnp.asarray(mask), tau)
        assert value.dtype == jnp.float32, case
        assert np.isfinite(value) and np.all(np.isfinite(grad)), case
        if case in ("every label distinct", "all invalid"):
            assert float(value) == 0.0 and not np.any(grad), case
        elif case != "zero row":  # the zero row has its own reference test below
            np.testing.assert_allclose(value, reference_mio(z, labels, tau, 1.0), rtol=1e-4,
                                       err_msg=case)


def test_zero_row_is_scored_as_the_zero_vector():
    """A zero row normalises to 0: cosine 0 with everything, ‖0 - ẑ_p‖² = 1 in the L2 term."""
    z, ids = two_view_batch(16, b=4, d=5)
    z[1] = 0.0
    value = mio(jnp.asarray(z), jnp.asarray(ids), l2_weight=1.0)
    u = _unit(np.where(np.arange(8)[:, None] == 1, 1.0, z))
    u[1] = 0.0
    c = u @ u.T / 0.5
    same = ids[:, None] == ids[None, :]
    eye = np.eye(8, dtype=bool)
    sq = np.sum((u[:, None] - u[None]) ** 2, axis=-1)
    expected = (_softplus(-c[same & ~eye]).mean() + _softplus(c[~same]).mean()
                + sq[same & ~eye].mean() / 5)
    np.testing.assert_allclose(value, expected, rtol=1e-5)


def test_bfloat16_input_reduces_in_float32():
    z, ids = two_view_batch(17, b=4, d=6)
    value = mio(jnp.asarray(z, jnp.bfloat16), jnp.asarray(ids))
    assert value.dtype == jnp.float32
    z16 = np.asarray(jnp.asarray(z, jnp.bfloat16).astype(jnp.float32))
    np.testing.assert_allclose(value, reference_mio(z16, ids, 0.5), rtol=1e-5)


def test_jit_with_traced_hyperparameters():
    z, ids = two_view_batch(18, b=4, d=6)
    fn = jax.jit(lambda x, t, lam: mio(x, jnp.asarray(ids), temperature=t, l2_weight=lam))
    np.testing.assert_allclose(fn(jnp.asarray(z), 0.3, 0.5), reference_mio(z, ids, 0.3, 0.5),
                               rtol=1e-5)


# ------------------------------------------------------------------ ValueErrors


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(embeddings=np.zeros(8, np.float32)), "embeddings"),
        (dict(embeddings=np.zeros((8, 3), np.int32)), "embeddings"),
        (dict(labels=np.zeros(8, np.float32)), "labels"),
        (dict(labels=np.zeros(7, np.int32)), "labels"),
        (dict(labels=np.zeros((8, 1), np.int32)), "labels"),
        (dict(temperature=0.0), "temperature"),
        (dict(temperature=-0.5), "temperature"),
        (dict(l2_weight=-1.0), "l2_weight"),
        (dict(valid=np.ones(8, np.int32)), "valid"),
        (dict(valid=np.ones(7, bool)), "valid"),
    ],
)
def test_bad_input_raises_value_error(kwargs, match):
    args = dict(embeddings=np.ones((8, 3), np.float32), labels=np.zeros(8, np.int32))
    args.update(kwargs)
    emb, labels = jnp.asarray(args.pop("embeddings")), jnp.asarray(args.pop("labels"))
    if "valid" in args:
        args["valid"] = jnp.asarray(args["valid"])
    with pytest.raises(ValueError, match=match):
        mio(emb, labels, **args)
