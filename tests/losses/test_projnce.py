"""Tests of the ProjNCE family (Jeong & Hero 2025, arXiv:2506.09810; docs/losses.md).

Values are checked against a float64 numpy reference that writes each formula
literally (loops over anchors, prototypes rebuilt from their definitions).
T4/T5/T10/T14/T15 are experiment-level and tested elsewhere. To keep the file
fast, numeric hyperparameters are traced so one compilation per loss and
string option serves every test on the standard 12-row batch.
"""

from __future__ import annotations

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from contrastive_jax.losses import _core
from contrastive_jax.losses._nce import nt_xent, supcon, supcon_per_anchor
from tests.losses import references
from tests.losses.multidevice import AXIS, assert_multidevice_matches, device_mesh

# The module, not the function `contrastive_jax.losses._projnce` that shadows it.
pn = importlib.import_module("contrastive_jax.losses._projnce")
proj = importlib.import_module("contrastive_jax.losses._projection")

LOSSES = {
    "projnce": pn.projnce,
    "soft_supcon": pn.soft_supcon,
    "soft_nce": pn.soft_nce,
    "med_supcon": pn.med_supcon,
    "med_nce": pn.med_nce,
}
_NUMERIC_DEFAULTS = {
    "projnce": {"beta": 1.0},
    "soft_supcon": {"bandwidth": 0.6},
    "soft_nce": {"bandwidth": 0.6},
    "med_supcon": {},
    "med_nce": {},
}

# (loss, hyperparameters) swept by the value, invariance and robustness tests.
CONFIGS = [
    ("projnce", {}),
    ("projnce", {"beta": 2.5}),
    ("soft_supcon", {"distance": "l1", "bandwidth": 0.6}),
    ("soft_supcon", {"distance": "l2", "bandwidth": 0.8}),
    ("soft_supcon", {"distance": "cosine", "bandwidth": 0.3}),
    ("soft_nce", {"distance": "l1", "bandwidth": 0.6}),
    ("soft_nce", {"distance": "cosine", "bandwidth": 0.3}),
    ("med_supcon", {"median_mode": "lower"}),
    ("med_supcon", {"median_mode": "average"}),
    ("med_nce", {"median_mode": "lower"}),
    ("med_nce", {"median_mode": "average"}),
]
CONFIG_IDS = [name + "-" + "-".join(str(v) for v in hp.values()) for name, hp in CONFIGS]


@functools.cache
def _jitted(name: str, static: tuple) -> callable:
    """jit(value_and_grad) of a loss; string options static, numbers traced."""
    fn = functools.partial(LOSSES[name], **dict(static))

    def loss(z, labels, valid, temperature, numeric):
        return fn(z, labels, valid=valid, temperature=temperature, **numeric)

    return jax.jit(jax.value_and_grad(loss))


def _run(name, hp, z, labels, valid=None, temperature=0.07):
    """(value, gradient) of ``LOSSES[name]`` as numpy."""
    if valid is None:
        valid = np.ones(len(labels), bool)
    static = tuple(sorted((k, v) for k, v in hp.items() if isinstance(v, str)))
    numeric = dict(_NUMERIC_DEFAULTS[name])
    numeric.update({k: v for k, v in hp.items() if not isinstance(v, str)})
    numeric = {k: jnp.float32(v) for k, v in numeric.items()}
    value, grad = _jitted(name, static)(
        jnp.asarray(z, jnp.float32), jnp.asarray(labels), jnp.asarray(valid),
        jnp.float32(temperature), numeric,
    )
    return float(value), np.asarray(grad)


# --------------------------------------------------------------------------- numpy reference


def _ref_unit(z):
    z = np.asarray(z, np.float64)
    return z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-6)


def _ref_distance(u, v, distance):
    if distance == "l1":
        return np.sum(np.abs(u - v))
    if distance == "l2":
        return np.sqrt(np.sum((u - v) ** 2))
    return 0.5 - 0.5 * (u @ v) / (np.linalg.norm(u) * np.linalg.norm(v))


def _ref_soft_label(z, labels, pool, j, c, bandwidth, distance):
    """NW_h(c; z_j, D = pool), Eq. (17), K(t) = 1 - t² on [0, 1]."""
    weights = [
        max(0.0, 1.0 - (_ref_distance(z[j], z[k], distance) / bandwidth) ** 2) for k in pool
    ]
    return sum(w for w, k in zip(weights, pool, strict=True) if labels[k] == c) / sum(weights)


def _ref_prototype(kind, z, labels, pool, c, hp):
    """g(c) from the rows in ``pool``: class mean, NW projection (Eq. 18) or median."""
    members = [k for k in pool if labels[k] == c]
    if not members:
        return np.zeros(z.shape[1])
    if kind == "mean":
        return np.mean(z[members], axis=0)
    if kind == "median":
        if hp.get("median_mode", "lower") == "average":
            return np.median(z[members], axis=0)
        return np.sort(z[members], axis=0)[(len(members) - 1) // 2]
    soft = np.array(
        [
            _ref_soft_label(z, labels, pool, j, c, hp.get("bandwidth", 0.6), hp.get("distance", "l1"))
            for j in pool
        ]
    )
    return (soft @ z[pool]) / soft.sum()


_KIND = {
    "projnce": "mean",
    "soft_supcon": "nw",
    "soft_nce": "nw",
    "med_supcon": "median",
    "med_nce": "median",
}


def ref_per_anchor(name, z, labels, valid=None, temperature=0.07, shards=None, **hp):
    """{anchor: loss} of one loss, written literally (float64).

    ``shards`` (optional int [N]) restricts the class statistics of anchor i to
    the rows of i's shard: the per-shard-statistics implementation that T13's
    negative control must tell apart from the global one.
    """
    z = _ref_unit(z)
    labels = np.asarray(labels)
    n = len(labels)
    valid = np.ones(n, bool) if valid is None else np.asarray(valid)
    rows = [k for k in range(n) if valid[k]]
    tau = temperature
    cache = {}

    def proto(i, c):
        pool = rows if shards is None else [k for k in rows if shards[k] == shards[i]]
        key = (tuple(pool), c)
        if key not in cache:
            cache[key] = _ref_prototype(_KIND[name], z, labels, pool, c, hp)
        return cache[key]

    out = {}
    for i in rows:
        positives = [p for p in rows if p != i and labels[p] == labels[i]]
        if not positives:
            continue
        others = [k for k in rows if k != i]
        den = sum(np.exp(z[i] @ z[k] / tau) for k in others)
        ratio = sum(np.exp(z[i] @ proto(i, labels[k]) / tau) for k in others) / den
        if name == "projnce":
            supcon_i = -np.mean([np.log(np.exp(z[i] @ z[p] / tau) / den) for p in positives])
            out[i] = supcon_i + hp.get("beta", 1.0) * ratio
        elif name in ("soft_supcon", "med_supcon"):
            out[i] = -z[i] @ proto(i, labels[i]) / tau + np.log(den) + ratio
        else:
            nce_den = sum(np.exp(z[i] @ proto(i, labels[j]) / tau) for j in rows)
            out[i] = -z[i] @ proto(i, labels[i]) / tau + np.log(nce_den)
    return out


def ref_loss(name, z, labels, valid=None, temperature=0.07, shards=None, **hp):
    per_anchor = ref_per_anchor(name, z, labels, valid, temperature, shards, **hp)
    return float(np.mean(list(per_anchor.values()))) if per_anchor else 0.0


# --------------------------------------------------------------------------- data


def _clustered(rng, labels, dim=3, noise=0.35):
    """Rows near one random unit centre per class, so NW kernels see neighbours."""
    labels = np.asarray(labels)
    centres = rng.normal(size=(labels.max() + 1, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    return (centres[labels] + noise * rng.normal(size=(len(labels), dim))).astype(np.float32)


def _small_batch(seed=0):
    """N = 12 with uneven classes (5, 3, 2, a singleton) and one padded row."""
    rng = np.random.default_rng(seed)
    labels = np.array([0] * 5 + [1] * 3 + [2] * 2 + [3, 4])
    valid = np.ones(12, bool)
    valid[-1] = False
    order = rng.permutation(12)
    labels, valid = labels[order], valid[order]
    return _clustered(rng, labels, noise=0.7), labels, valid


def _sharded_batch(seed=0, n=32):
    """N = 32 (8 devices x 4) with class counts 9, 7, 6, 4, 3, 2, 1 and 3 padded rows."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(7), [9, 7, 6, 4, 3, 2, 1])
    order = rng.permutation(n)
    labels = labels[order]
    valid = np.ones(n, bool)
    valid[[3, 17, 30]] = False
    return _clustered(rng, labels, dim=4), labels, valid


# --------------------------------------------------------------------------- reference values


@pytest.mark.parametrize(("name", "hp"), CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("temperature", [0.07, 0.5])
@pytest.mark.matrix
def test_matches_numpy_reference(name, hp, temperature):
    z, labels, valid = _small_batch()
    value, _ = _run(name, hp, z, labels, valid, temperature)
    expected = ref_loss(name, z, labels, valid, temperature, **hp)
    np.testing.assert_allclose(value, expected, rtol=1e-5)


def test_reference_batch_exercises_soft_labels_and_even_medians():
    """The standard batch has fractional NW labels for every distance and even class
    counts, so the NW and median-mode comparisons are not vacuous."""
    z, labels, valid = _small_batch()
    z = _ref_unit(z)
    rows = list(np.flatnonzero(valid))
    for distance, bandwidth in (("l1", 0.6), ("l2", 0.8), ("cosine", 0.3)):
        soft = [_ref_soft_label(z, labels, rows, j, labels[j], bandwidth, distance) for j in rows]
        assert sum(0.01 < s < 0.99 for s in soft) > 0, distance
    lower = ref_loss("med_supcon", z, labels, valid, median_mode="lower")
    average = ref_loss("med_supcon", z, labels, valid, median_mode="average")
    assert abs(lower - average) > 1e-3


@pytest.mark.parametrize(
    ("name", "hp"),
    [
        ("projnce", {}),
        ("soft_supcon", {"distance": "l1", "bandwidth": 0.8}),
        ("soft_nce", {"distance": "cosine", "bandwidth": 0.3}),
        ("med_supcon", {"median_mode": "average"}),
        ("med_nce", {"median_mode": "lower"}),
    ],
)
def test_gradient_matches_finite_differences_of_reference(name, hp):
    """jax.grad flows through the prototypes (class means, NW labels, medians)."""
    z, labels, valid = _small_batch(seed=3)
    _, grad = _run(name, hp, z, labels, valid, temperature=0.5)
    eps = 1e-6
    z64 = z.astype(np.float64)
    numeric = np.zeros(z.shape)
    for idx in np.ndindex(z.shape):
        step = np.zeros(z.shape)
        step[idx] = eps
        numeric[idx] = (
            ref_loss(name, z64 + step, labels, valid, temperature=0.5, **hp)
            - ref_loss(name, z64 - step, labels, valid, temperature=0.5, **hp)
        ) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, rtol=2e-3, atol=2e-4 * np.abs(numeric).max())


# --------------------------------------------------------------------------- T1, T2, T8


def test_t1_alignment_uses_leave_self_out_centroid():
    """T1: SupCon's pairwise form equals the centroid form with c̄_i (P⁻(i)); ProjNCE
    with beta = 0 is that, and not the self-inclusive-centroid version."""
    z, labels, valid = _small_batch(seed=1)
    tau = 0.07
    value, _ = _run("projnce", {"beta": 0.0}, z, labels, valid, tau)
    u = _ref_unit(z)
    rows = list(np.flatnonzero(valid))
    pairwise, centroid, self_inclusive = [], [], []
    for i in rows:
        pos = [p for p in rows if p != i and labels[p] == labels[i]]
        if not pos:
            continue
        lse = np.log(sum(np.exp(u[i] @ u[a] / tau) for a in rows if a != i))
        pairwise.append(-np.mean([u[i] @ u[p] / tau - lse for p in pos]))
        centroid.append(-u[i] @ np.mean(u[pos], axis=0) / tau + lse)
        self_inclusive.append(-u[i] @ np.mean(u[pos + [i]], axis=0) / tau + lse)
    np.testing.assert_allclose(np.mean(centroid), np.mean(pairwise), rtol=1e-12)
    np.testing.assert_allclose(value, np.mean(pairwise), rtol=1e-5)
    assert abs(value - np.mean(self_inclusive)) > 1e-2


def test_t2_two_views_with_instance_ids():
    """T2: with unique instance ids and two views, ProjNCE(beta=0) is NT-Xent; for
    pairs the average-mode median is the pair mean, which is also the NW projection
    when h is below every distance (one-hot labels)."""
    rng = np.random.default_rng(2)
    ids = np.repeat(np.arange(6), 2)
    z = _clustered(rng, ids, noise=0.4)
    value, _ = _run("projnce", {"beta": 0.0}, z, ids, temperature=0.1)
    simclr = jax.jit(functools.partial(nt_xent, temperature=0.1))(jnp.asarray(z), ids)
    np.testing.assert_allclose(value, simclr, rtol=1e-6)
    tiny_h = {"distance": "l1", "bandwidth": 1e-4}
    for med, soft in (("med_supcon", "soft_supcon"), ("med_nce", "soft_nce")):
        med_value, _ = _run(med, {"median_mode": "average"}, z, ids)
        soft_value, _ = _run(soft, tiny_h, z, ids)
        np.testing.assert_allclose(med_value, soft_value, rtol=1e-5)
        lower_value, _ = _run(med, {"median_mode": "lower"}, z, ids)
        assert abs(lower_value - med_value) > 1e-3


def test_t8_beta_zero_is_supcon_and_loss_is_linear_in_beta():
    z, labels, valid = _small_batch(seed=4)
    value0, grad0 = _run("projnce", {"beta": 0.0}, z, labels, valid)
    ref_value, ref_grad = jax.jit(
        jax.value_and_grad(lambda x, v: supcon(x, labels, temperature=0.07, valid=v))
    )(jnp.asarray(z), jnp.asarray(valid))
    np.testing.assert_allclose(value0, ref_value, rtol=1e-6)
    np.testing.assert_allclose(grad0, ref_grad, rtol=1e-5, atol=1e-6)
    value1, grad1 = _run("projnce", {"beta": 1.0}, z, labels, valid)
    assert value1 > value0 + 1e-3
    for beta in (5.0, 10.0):
        value, grad = _run("projnce", {"beta": beta}, z, labels, valid)
        np.testing.assert_allclose(value, value0 + beta * (value1 - value0), rtol=1e-5)
        np.testing.assert_allclose(grad, grad0 + beta * (grad1 - grad0), rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- R: T3, T6, T7


def _unit_rows(rng, n, d):
    x = rng.normal(size=(n, d))
    return jnp.asarray(x / np.linalg.norm(x, axis=1, keepdims=True), jnp.float32)


_log_adjustment = jax.jit(pn._log_adjustment)


@jax.jit
def _coinciding_projections(anchors, protos, columns):
    """log R and its gradient with g₊ = g₋ = protos, and log R with g₊ = 1.5 g₋."""

    def ratio_sum(a, g):
        return jnp.sum(jnp.exp(pn._log_adjustment(a, g, g, columns, 0.07)))

    same = pn._log_adjustment(anchors, protos, protos, columns, 0.07)
    grads = jax.grad(ratio_sum, argnums=(0, 1))(anchors, protos)
    scaled = pn._log_adjustment(anchors, 1.5 * protos, protos, columns, 0.07)
    return same, grads, scaled


@pytest.mark.parametrize("form", ["leave_one_out", "full_sum"])
def test_t3_adjustment_is_one_when_projections_coincide(form):
    """T3: g₊ = g₋ gives R_i = 1 and zero gradient, for any prototypes (norms up to 3),
    in the leave-one-out and the full-sum form."""
    rng = np.random.default_rng(5)
    anchors = _unit_rows(rng, 10, 4)
    protos = jnp.asarray(rng.normal(size=(10, 4)) * rng.uniform(0.1, 3.0, size=(10, 1)))
    columns = ~np.eye(10, dtype=bool) if form == "leave_one_out" else np.ones((10, 10), bool)
    same, grads, scaled = _coinciding_projections(anchors, protos, jnp.asarray(columns))
    np.testing.assert_allclose(same, 0.0, atol=1e-6)
    for g in grads:
        np.testing.assert_allclose(g, 0.0, atol=1e-4)
    assert np.all(np.abs(scaled) > 1e-3)


def _class_mean_columns(z, labels):
    z = np.asarray(z, np.float64)
    return jnp.asarray(
        np.stack([z[labels == labels[k]].mean(axis=0) for k in range(len(labels))]), jnp.float32
    )


def test_t6_full_sum_adjustment_jensen_bound():
    """T6: full-sum R with g₊(c) = mu_c (self included) and g₋ = f is <= 1, and = 1
    when every class is collapsed to a point."""
    rng = np.random.default_rng(6)
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 3])
    full = jnp.ones((10, 10), bool)
    for tau in (0.07, 0.5):
        z = _unit_rows(rng, 10, 5)
        log_r = np.asarray(_log_adjustment(z, _class_mean_columns(z, labels), z, full, tau))
        assert np.all(log_r <= 1e-5)
        assert np.any(log_r < -1e-2)
        collapsed = _unit_rows(rng, 4, 5)[labels]
        log_r = _log_adjustment(collapsed, _class_mean_columns(collapsed, labels), collapsed,
                                full, tau)
        np.testing.assert_allclose(log_r, 0.0, atol=1e-5)


@jax.jit
def _ratio_jacobians(z, g_plus, columns, temperature):
    def ratio(g_p, g_m):
        return jnp.exp(pn._log_adjustment(z, g_p, g_m, columns, temperature))

    return jax.jacobian(ratio, argnums=(0, 1))(g_plus, z)


def test_t7_adjustment_gradient_identity_and_signs():
    """T7: dR_i/dS_ik = -R_i softmax_{k != i}(S_i.)_k with the centroid logits held
    fixed, and dR_i/dU_ik = e^{U_ik} / sum_{k != i} e^{S_ik} > 0 (R rises with the
    positive-side critic and falls with the negative-side one)."""
    rng = np.random.default_rng(7)
    n, tau = 8, 0.5
    z = _unit_rows(rng, n, 4)
    g_plus = jnp.asarray(rng.normal(size=(n, 4)) * 0.5, jnp.float32)
    off = ~np.eye(n, dtype=bool)
    jac_plus, jac_minus = _ratio_jacobians(z, g_plus, jnp.asarray(off), tau)
    # R depends on g_k only through z_i . g_k / tau, so dR_i/dlogit_ik = tau * jac[i, k] . z_i.
    d_minus = tau * np.einsum("ikd,id->ik", jac_minus, z)
    d_plus = tau * np.einsum("ikd,id->ik", jac_plus, z)
    zz = np.asarray(z, np.float64)
    s = zz @ zz.T / tau
    u = zz @ np.asarray(g_plus, np.float64).T / tau
    den = np.where(off, np.exp(s), 0).sum(1, keepdims=True)
    r = np.where(off, np.exp(u), 0).sum(1, keepdims=True) / den
    softmax = np.where(off, np.exp(s), 0) / den
    # The diagonal of jac_minus also holds the anchor's own row, which is not in R.
    np.testing.assert_allclose(d_minus[off], (-r * softmax)[off], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(d_plus[off], (np.exp(u) / den)[off], rtol=1e-4, atol=1e-6)
    assert np.all(d_plus[off] > 0) and np.all(d_minus[off] < 0)
    np.testing.assert_allclose(d_plus[~off], 0.0, atol=1e-7)


# --------------------------------------------------------------------------- T9 NW


def _lb(z, labels, valid=None):
    return proj.labelled_batch(jnp.asarray(z, jnp.float32), jnp.asarray(labels), 0.07, valid, None)


@functools.cache
def _nw(distance: str) -> callable:
    """jit: (z, labels, valid, h) -> (soft labels [m, m], f̂ [m, D], class ids [m])."""

    def run(z, labels, valid, bandwidth):
        lb = _lb(z, labels, valid)
        soft = references.nw_soft_labels(lb, bandwidth, distance)
        return soft, references.nw_prototypes(soft, lb), lb.class_ids

    return jax.jit(run)


@pytest.mark.parametrize("distance", ["l1", "l2", "cosine"])
def test_t9a_soft_labels_are_distributions(distance):
    """(a) Rows sum to 1 and are >= 0 (padded rows are 0), and equal Eq. (17)."""
    z, labels, valid = _small_batch(seed=8)
    soft, _, ids = (np.asarray(a) for a in _nw(distance)(z, labels, valid, 0.6))
    assert np.all(soft >= 0)
    np.testing.assert_allclose(soft[valid].sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(soft[~valid], 0.0)
    u, rows = _ref_unit(z), list(np.flatnonzero(valid))
    for j in rows:
        for k in rows:
            expected = _ref_soft_label(u, labels, rows, j, labels[k], 0.6, distance)
            np.testing.assert_allclose(soft[j, ids[k]], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("distance", ["l1", "l2", "cosine"])
def test_t9b_small_bandwidth_gives_one_hot_labels_and_class_means(distance):
    """(b) h below every distance: one-hot labels, f̂(c) = mu_c (self included), and
    SoftSupCon = ProjNCE with the self-inclusive centroid in the alignment."""
    z, labels, valid = _small_batch(seed=9)
    u, rows = _ref_unit(z), np.flatnonzero(valid)
    h = 0.5 * min(_ref_distance(u[j], u[k], distance) for j in rows for k in rows if j < k)
    soft, protos, ids = (np.asarray(a) for a in _nw(distance)(z, labels, valid, h))
    np.testing.assert_allclose(soft[rows], np.eye(len(labels))[ids[rows]], atol=1e-6)
    means = np.stack([u[rows][labels[rows] == labels[k]].mean(0) for k in rows])
    np.testing.assert_allclose(protos[ids[rows]], means, rtol=1e-5, atol=1e-6)
    value, _ = _run("soft_supcon", {"distance": distance, "bandwidth": h}, z, labels, valid)
    shift = [
        (u[i] @ u[[p for p in rows if p != i and labels[p] == labels[i]]].mean(0)
         - u[i] @ u[rows][labels[rows] == labels[i]].mean(0)) / 0.07
        for i in rows
        if np.sum(labels[rows] == labels[i]) > 1
    ]
    expected = ref_loss("projnce", z, labels, valid) + np.mean(shift)
    np.testing.assert_allclose(value, expected, rtol=1e-5)


@pytest.mark.parametrize("distance", ["l1", "l2", "cosine"])
def test_t9c_large_bandwidth_gives_class_frequencies_and_batch_mean(distance):
    """(c) h -> infinity: every row's soft labels are n_c / N, every f̂(c) the batch mean."""
    z, labels, valid = _small_batch(seed=10)
    soft, protos, ids = (np.asarray(a) for a in _nw(distance)(z, labels, valid, 1e4))
    rows = np.flatnonzero(valid)
    freq = np.bincount(ids[rows], minlength=len(labels)) / len(rows)
    np.testing.assert_allclose(soft[rows], np.broadcast_to(freq, soft[rows].shape), atol=1e-6)
    present = protos[np.unique(ids[rows])]
    batch_mean = _ref_unit(z)[rows].mean(0)
    np.testing.assert_allclose(present, np.broadcast_to(batch_mean, present.shape), atol=1e-5)


@pytest.mark.parametrize("name", ["soft_supcon", "soft_nce"])
@pytest.mark.parametrize("distance", ["l1", "l2", "cosine"])
@pytest.mark.matrix
def test_t9d_no_nan_with_duplicated_embeddings(name, distance):
    """(d) Finite values and gradients with duplicated rows inside each other's kernel."""
    z, labels, _ = _small_batch(seed=11)
    z[1] = z[0]
    z[3] = z[2]
    z[4] = z[2]
    z[7] = z[0]
    value, grad = _run(name, {"distance": distance, "bandwidth": 0.9}, z, labels)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    np.testing.assert_allclose(
        value, ref_loss(name, z, labels, distance=distance, bandwidth=0.9), rtol=1e-5
    )


# --------------------------------------------------------------------------- T11


@functools.cache
def _nce_per_anchor(name: str) -> callable:
    """jit: (z, labels, valid) -> (per-anchor loss, anchor_ok, n_{c_i}) of SoftNCE/MedNCE."""

    def run(z, labels, valid):
        lb = _lb(z, labels, valid)
        if name == "soft_nce":
            g = references.nw_prototypes(references.nw_soft_labels(lb, 0.6, "l1"), lb)
        else:
            g = proj.median_prototypes(lb, "lower")
        counts = lb.class_counts[lb.anchor_class_ids]
        return pn._nce_type(lb, g, 0.07), lb.anchor_ok, counts

    return jax.jit(run)


@pytest.mark.parametrize(
    ("name", "hp"),
    [("soft_nce", {"distance": "l1", "bandwidth": 0.6}), ("med_nce", {"median_mode": "lower"})],
)
def test_t11_nce_type_is_logit_adjusted_cross_entropy(name, hp):
    """SoftNCE/MedNCE per anchor = CE(z_i . g(c)/tau + log n_c, c_i) + log n_{c_i} over
    the classes present, hence l_i >= log n_{c_i}. (Stated without the constant, the identity would be wrong:
    -T_{i,c_i} + log sum_c n_c e^{T_ic} = CE + log n_{c_i}.)"""
    z, labels, valid = _small_batch(seed=12)
    tau = 0.07
    u, rows = _ref_unit(z), list(np.flatnonzero(valid))
    classes = sorted({labels[k] for k in rows})
    counts = np.array([sum(labels[k] == c for k in rows) for c in classes])
    g = np.stack([_ref_prototype(_KIND[name], u, labels, rows, c, hp) for c in classes])
    expected = {}
    for i in rows:
        if sum(labels[k] == labels[i] for k in rows) < 2:
            continue
        logits = u[i] @ g.T / tau + np.log(counts)
        target = classes.index(labels[i])
        cross_entropy = -logits[target] + np.log(np.sum(np.exp(logits)))
        expected[i] = cross_entropy + np.log(counts[target])
    value, _ = _run(name, hp, z, labels, valid)
    np.testing.assert_allclose(value, np.mean(list(expected.values())), rtol=1e-5)

    per_anchor, ok, n_own = (np.asarray(a) for a in _nce_per_anchor(name)(z, labels, valid))
    np.testing.assert_allclose(
        per_anchor[ok], [expected[i] for i in np.flatnonzero(ok)], rtol=1e-5
    )
    assert np.all(per_anchor[ok] >= np.log(n_own[ok]) - 1e-5)


# --------------------------------------------------------------------------- T12


@pytest.mark.parametrize(("name", "hp"), CONFIGS, ids=CONFIG_IDS)
def test_t12_permutation_and_relabelling_invariance(name, hp):
    z, labels, valid = _small_batch(seed=13)
    value, grad = _run(name, hp, z, labels, valid)
    order = np.random.default_rng(0).permutation(len(labels))
    permuted, permuted_grad = _run(name, hp, z[order], labels[order], valid[order])
    np.testing.assert_allclose(permuted, value, rtol=1e-5)
    np.testing.assert_allclose(permuted_grad, grad[order], rtol=1e-4, atol=1e-5)
    relabel = np.array([7, -3, 100, 2, 0])
    relabelled, _ = _run(name, hp, z, relabel[labels], valid)
    np.testing.assert_allclose(relabelled, value, rtol=1e-5)


@pytest.mark.parametrize(("name", "hp"), CONFIGS, ids=CONFIG_IDS)
def test_t12_negation(name, hp):
    """z -> -z leaves S, class means, NW labels and odd or average medians (so the
    loss) unchanged; a lower median of an even class does not flip sign with z."""
    rng = np.random.default_rng(14)
    odd = np.array([0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 3])
    z = _clustered(rng, odd)
    value, _ = _run(name, hp, z, odd)
    negated, _ = _run(name, hp, -z, odd)
    np.testing.assert_allclose(negated, value, rtol=1e-5)
    even = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3])
    z = _clustered(rng, even)
    value, _ = _run(name, hp, z, even)
    negated, _ = _run(name, hp, -z, even)
    if hp.get("median_mode") == "lower":
        assert abs(negated - value) > 1e-4
    else:
        np.testing.assert_allclose(negated, value, rtol=1e-5)


@jax.jit
def _median_and_mean(z, labels):
    lb = _lb(z, labels)
    lower = proj.median_prototypes(lb, "lower")
    return lower, proj.median_prototypes(lb, "average"), proj.class_means(lb)


def test_t12_median_modes():
    """Odd class counts: lower = average. Two members, average: f_med = mu_c."""
    rng = np.random.default_rng(15)
    labels = np.array([0, 0, 0, 1, 1, 1, 1, 1, 2, 3, 3, 3])
    lower, average, _ = _median_and_mean(_clustered(rng, labels), labels)
    np.testing.assert_array_equal(lower, average)
    pairs = np.repeat(np.arange(6), 2)
    lower, average, means = _median_and_mean(_clustered(rng, pairs), pairs)
    np.testing.assert_allclose(average, means, rtol=1e-6, atol=1e-7)
    assert not np.allclose(lower, means, atol=1e-3)


# --------------------------------------------------------------------------- robustness

ROBUST_CONFIGS = [
    ("projnce", {}),
    ("soft_supcon", {"distance": "l1", "bandwidth": 0.6}),
    ("soft_supcon", {"distance": "l2", "bandwidth": 0.6}),
    ("soft_supcon", {"distance": "cosine", "bandwidth": 0.6}),
    ("soft_nce", {"distance": "l1", "bandwidth": 0.6}),
    ("med_supcon", {"median_mode": "lower"}),
]


def _robustness_cases():
    """(embeddings [8, 8], labels, valid, temperature, expected value or None)."""
    rng = np.random.default_rng(16)
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    random = rng.normal(size=(8, 8)).astype(np.float32)
    zero_row = random.copy()
    zero_row[2] = 0.0
    everywhere = np.ones(8, bool)
    singleton = labels.copy()
    singleton[3] = 9
    return {
        "collapsed": (np.tile(random[:1], (8, 1)), labels, everywhere, 0.07, None),
        "orthogonal": (np.eye(8, dtype=np.float32), labels, everywhere, 0.07, None),
        "zero_row": (zero_row, labels, everywhere, 0.07, None),
        "temperature_0.01": (random, labels, everywhere, 0.01, None),
        "all_labels_distinct": (random, np.arange(8), everywhere, 0.07, 0.0),
        "singleton_class": (random, singleton, everywhere, 0.07, None),
        "single_class": (random, np.zeros(8, int), everywhere, 0.07, None),
        "all_invalid": (random, labels, np.zeros(8, bool), 0.07, 0.0),
        "one_valid_row": (random, labels, np.arange(8) == 0, 0.07, 0.0),
    }


@pytest.mark.parametrize(("name", "hp"), ROBUST_CONFIGS,
                         ids=[n + "-" + "-".join(map(str, h.values())) for n, h in ROBUST_CONFIGS])
@pytest.mark.matrix
def test_robust_inputs_give_finite_values_and_gradients(name, hp):
    for case, (z, labels, valid, tau, expected) in _robustness_cases().items():
        value, grad = _run(name, hp, z, labels, valid, tau)
        assert np.isfinite(value), case
        assert np.all(np.isfinite(grad)), case
        if expected is not None:
            assert value == expected, case
            np.testing.assert_array_equal(grad, 0.0, err_msg=case)


def test_singleton_anchor_is_not_scored():
    """A singleton's own loss is left out of the mean (it is still a negative)."""
    z, labels, valid = _small_batch(seed=17)
    singleton = [i for i in np.flatnonzero(valid) if np.sum(labels[valid] == labels[i]) == 1]
    assert singleton
    for name, hp in CONFIGS[::2]:
        per_anchor = ref_per_anchor(name, z, labels, valid, **hp)
        assert not set(singleton) & set(per_anchor)
        value, _ = _run(name, hp, z, labels, valid)
        np.testing.assert_allclose(value, np.mean(list(per_anchor.values())), rtol=1e-5)


def test_bfloat16_embeddings_reduce_in_float32():
    """bf16 rows are upcast before any reduction (the shared _labelled_batch path)."""
    z, labels, valid = _small_batch(seed=18)
    z16 = jnp.asarray(z, jnp.bfloat16)
    value = jax.jit(lambda x: pn.projnce(x, labels, valid=jnp.asarray(valid)))(z16)
    assert value.dtype == jnp.float32
    expected, _ = _run("projnce", {}, np.asarray(z16.astype(jnp.float32)), labels, valid)
    np.testing.assert_allclose(value, expected, rtol=1e-6)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("name", list(LOSSES))
def test_bad_inputs_raise(name):
    fn = LOSSES[name]
    z = jnp.ones((4, 3))
    labels = jnp.array([0, 0, 1, 1])
    with pytest.raises(ValueError, match="embeddings"):
        fn(jnp.ones((4,)), labels)
    with pytest.raises(ValueError, match="embeddings"):
        fn(jnp.ones((4, 3), jnp.int32), labels)
    with pytest.raises(ValueError, match="labels"):
        fn(z, jnp.array([0, 1, 1]))
    with pytest.raises(ValueError, match="labels"):
        fn(z, jnp.ones((4,)))
    with pytest.raises(ValueError, match="valid"):
        fn(z, labels, valid=jnp.ones((4,), jnp.int32))
    for tau in (0.0, -0.1):
        with pytest.raises(ValueError, match="temperature"):
            fn(z, labels, temperature=tau)


def test_bad_hyperparameters_raise():
    z, labels = jnp.ones((4, 3)), jnp.array([0, 0, 1, 1])
    with pytest.raises(ValueError, match="beta"):
        pn.projnce(z, labels, beta=-1.0)
    for fn in (pn.soft_supcon, pn.soft_nce):
        for h in (0.0, -1.0):
            with pytest.raises(ValueError, match="bandwidth"):
                fn(z, labels, bandwidth=h)
        with pytest.raises(ValueError, match="distance"):
            fn(z, labels, distance="l3")
    for fn in (pn.med_supcon, pn.med_nce):
        with pytest.raises(ValueError, match="median_mode"):
            fn(z, labels, median_mode="upper")


# --------------------------------------------------------------------------- T13 multi-device

_SHARDED = [
    ("projnce", {"beta": 1.0}),
    ("soft_supcon", {"distance": "l1", "bandwidth": 0.6}),
    ("soft_nce", {"distance": "cosine", "bandwidth": 0.3}),
    ("med_supcon", {"median_mode": "lower"}),
    ("med_nce", {"median_mode": "average"}),
]


def _all_five(embeddings, labels, *, valid=None, axis_name=None):
    """sum_l 2^-l loss_l over the five losses: one program checks all of them."""
    return sum(
        0.5**k * LOSSES[name](embeddings, labels, valid=valid, axis_name=axis_name, **hp)
        for k, (name, hp) in enumerate(_SHARDED)
    )


@pytest.mark.slow
def test_t13_multidevice_matches_single_device():
    """T13: on 8 devices (uneven classes, padded rows) value and gradient of every loss
    equal one device on the concatenated batch (shard_map, grad outside and inside,
    with and without check_vma, and pmap). The five losses are checked as one
    weighted sum to compile once; on failure, check them one by one."""
    z, labels, valid = _sharded_batch()
    assert_multidevice_matches(_all_five, z, labels, valid=valid)
    expected = sum(
        0.5**k * ref_loss(name, z, labels, valid, **hp) for k, (name, hp) in enumerate(_SHARDED)
    )
    value = jax.jit(functools.partial(_all_five, valid=valid))(z, labels)
    np.testing.assert_allclose(value, expected, rtol=1e-5)


def _per_shard_statistics(lb: proj.LabelledBatch) -> proj.LabelledBatch:
    """The same batch, but class statistics see only this device's rows."""
    local = jnp.any(lb.batch.is_self, axis=0)
    candidate_valid = lb.batch.candidate_valid & local
    counts = jax.ops.segment_sum(
        candidate_valid.astype(jnp.float32), lb.class_ids, num_segments=local.shape[0]
    )
    return lb._replace(
        batch=lb.batch._replace(candidate_valid=candidate_valid), class_counts=counts
    )


_PER_SHARD_PROTOTYPES = {
    "projnce": proj.class_means,
    "soft_supcon": lambda lb: references.nw_prototypes(references.nw_soft_labels(lb, 0.6, "l1"), lb),
    "med_supcon": lambda lb: proj.median_prototypes(lb, "lower"),
}


def _per_shard_loss(embeddings, labels, valid, name):
    """The loss with global negatives but per-shard centroids / NW set / medians."""
    lb = proj.labelled_batch(embeddings, labels, 0.07, valid, AXIS)
    g = _PER_SHARD_PROTOTYPES[name](_per_shard_statistics(lb))
    if name == "projnce":
        per_anchor = supcon_per_anchor(lb.logits, lb.positives, lb.others) + pn._adjustment(
            lb, g, 0.07
        )
    else:
        per_anchor = pn._supcon_type(lb, g, 0.07)
    return _core.valid_anchor_mean(per_anchor, lb.anchor_ok, AXIS)


@pytest.mark.parametrize("name", list(_PER_SHARD_PROTOTYPES))
@pytest.mark.slow
def test_t13_negative_control_per_shard_statistics(name):
    """T13 negative control: an implementation with per-shard class statistics gives
    the per-shard reference value on 8 devices, which is far from the global value
    that the loss (test above) reproduces."""
    z, labels, valid = _sharded_batch(seed=1)
    hp = dict(_SHARDED)[name]
    per_shard = jax.jit(
        jax.shard_map(
            functools.partial(_per_shard_loss, name=name),
            mesh=device_mesh(8),
            in_specs=(P(AXIS),) * 3,
            out_specs=P(),
        )
    )(jnp.asarray(z), jnp.asarray(labels), jnp.asarray(valid))
    shards = np.arange(len(labels)) // (len(labels) // 8)
    np.testing.assert_allclose(
        per_shard, ref_loss(name, z, labels, valid, shards=shards, **hp), rtol=1e-5
    )
    global_value = ref_loss(name, z, labels, valid, **hp)
    assert abs(per_shard - global_value) > 1e-2 * abs(global_value)
