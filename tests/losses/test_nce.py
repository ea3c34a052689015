"""NT-Xent, SupCon and SINCERE (Feeney & Hughes 2023, arXiv:2309.14277): formulas, hand-computed
values, gradient properties and edge cases (docs/losses.md, "NCE family")."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax.losses._nce import (
    nt_xent,
    sincere,
    sincere_per_anchor,
    supcon,
    supcon_per_anchor,
)
from tests.losses.multidevice import assert_multidevice_matches

LOSSES = {"supcon": supcon, "sincere": sincere, "nt_xent": nt_xent}


# ----------------------------------------------------------------- numpy reference


def _unit(z):
    z = np.asarray(z, np.float64)
    return z / np.linalg.norm(z, axis=1, keepdims=True)


def reference_per_anchor(z, labels, tau, kind, valid=None):
    """Literal Eqs. (3) and (12), one anchor and one positive at a time (float64).

    Returns a list with the per-anchor loss, or None for anchors that are not
    valid (padded or without a positive).
    """
    z = _unit(z)
    n = len(z)
    valid = np.ones(n, bool) if valid is None else np.asarray(valid)
    out = []
    for t in range(n):
        others = [j for j in range(n) if j != t and valid[j]]
        pos = [p for p in others if labels[p] == labels[t]]
        neg = [j for j in others if labels[j] != labels[t]]
        if not valid[t] or not pos:
            out.append(None)
            continue
        s = {j: z[t] @ z[j] / tau for j in others}
        terms = []
        for p in pos:
            if kind == "sincere":
                denom = np.exp(s[p]) + sum(np.exp(s[j]) for j in neg)
            else:
                denom = sum(np.exp(s[j]) for j in others)
            terms.append(-np.log(np.exp(s[p]) / denom))
        out.append(np.mean(terms))
    return out


def reference_loss(z, labels, tau, kind, valid=None):
    per = [v for v in reference_per_anchor(z, labels, tau, kind, valid) if v is not None]
    return float(np.mean(per)) if per else 0.0


def random_batch(seed, n=16, d=6, classes=3):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype(np.float32), rng.integers(0, classes, n)


# --------------------------------------------------------------------- T15 golden


GOLDEN_THETA = np.array([0.0, 0.3, 2.0, 1.2, -1.0, 2.8])
GOLDEN_Z = np.stack([np.cos(GOLDEN_THETA), np.sin(GOLDEN_THETA)], 1)


@pytest.mark.parametrize(
    ("fn", "tau", "expected"),
    [
        (supcon, 0.5, 2.579096953594394),
        (sincere, 0.5, 2.402699627970648),
        (supcon, 0.1, 9.466395251151436),
        (sincere, 0.1, 8.730709068055809),
    ],
)
@pytest.mark.slow
def test_golden_values_with_an_anchor_without_positive(fn, tau, expected):
    labels = jnp.array([0, 0, 0, 1, 1, 2])
    value = fn(jnp.asarray(GOLDEN_Z, jnp.float32), labels, temperature=tau)
    np.testing.assert_allclose(value, expected, rtol=1e-5)


@pytest.mark.parametrize(("tau", "expected"), [(0.5, 1.6046994905523349), (0.1, 4.901944518366892)])
@pytest.mark.parametrize("fn", [supcon, sincere, nt_xent])
def test_golden_values_every_label_twice(fn, tau, expected):
    labels = jnp.array([0, 0, 1, 1, 2, 2])
    value = fn(jnp.asarray(GOLDEN_Z, jnp.float32), labels, temperature=tau)
    np.testing.assert_allclose(value, expected, rtol=1e-5)


# ------------------------------------------------------------------ T1 reference


@pytest.mark.parametrize("kind", ["supcon", "sincere"])
@pytest.mark.parametrize("tau", [0.05, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.slow
def test_matches_literal_numpy_reference(kind, tau, seed):
    z, labels = random_batch(seed, n=12, classes=4)
    valid = np.random.default_rng(seed + 100).random(12) > 0.2
    value = LOSSES[kind](jnp.asarray(z), jnp.asarray(labels), temperature=tau, valid=valid)
    np.testing.assert_allclose(value, reference_loss(z, labels, tau, kind, valid), rtol=1e-5)


def test_nt_xent_matches_partner_formula_view_major():
    """ℓ_i = -S_{i,p(i)} + log Σ_{j≠i} e^{S_ij}, p(a) = (a + B) mod n."""
    rng = np.random.default_rng(3)
    b = 5
    z = rng.normal(size=(2 * b, 4))
    ids = np.concatenate([np.arange(b), np.arange(b)])
    u = _unit(z)
    s = u @ u.T / 0.2
    per = []
    for i in range(2 * b):
        others = [j for j in range(2 * b) if j != i]
        per.append(-s[i, (i + b) % (2 * b)] + np.log(np.sum(np.exp(s[i, others]))))
    value = nt_xent(jnp.asarray(z, jnp.float32), jnp.asarray(ids), temperature=0.2)
    np.testing.assert_allclose(value, np.mean(per), rtol=1e-5)


# --------------------------------------------------------- T2–T4 identities, bounds


def test_one_positive_per_anchor_makes_all_three_equal():
    rng = np.random.default_rng(5)
    z = jnp.asarray(rng.normal(size=(10, 3)), jnp.float32)
    labels = jnp.asarray(rng.permutation(np.repeat(np.arange(5), 2)))
    values = [fn(z, labels, temperature=0.3) for fn in (nt_xent, supcon, sincere)]
    np.testing.assert_allclose(values[1], values[0], rtol=1e-6)
    np.testing.assert_allclose(values[2], values[0], rtol=1e-6)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.slow
def test_sincere_never_exceeds_supcon_per_anchor(seed):
    z, labels = random_batch(seed, n=14, classes=3)
    sup = reference_per_anchor(z, labels, 0.1, "supcon")
    logits, pos, neg, cand = _logits_and_masks(z, labels, 0.1)
    sin = np.asarray(sincere_per_anchor(logits, pos, neg))
    sup_jax = np.asarray(supcon_per_anchor(logits, pos, cand))
    for t, s in enumerate(sup):
        if s is not None:
            np.testing.assert_allclose(sup_jax[t], s, rtol=1e-5)
            assert sin[t] <= sup_jax[t] + 1e-5
            assert sin[t] >= 0.0
            assert sup_jax[t] >= np.log(pos[t].sum()) - 1e-5


@pytest.mark.slow
def test_all_logits_equal_reference_values():
    """ℓ^SupCon = log(n − 1), ℓ^SINCERE = log(1 + |N_t|) when all S are equal."""
    n = 9
    labels = jnp.array([0, 0, 0, 0, 1, 1, 1, 2, 2])
    z = jnp.ones((n, 4))
    np.testing.assert_allclose(supcon(z, labels), np.log(n - 1), rtol=1e-6)
    counts = np.array([4, 4, 4, 4, 3, 3, 3, 2, 2])
    np.testing.assert_allclose(sincere(z, labels), np.mean(np.log(1 + n - counts)), rtol=1e-6)


# --------------------------------------------------------------- T5–T8 gradients


def _logits_and_masks(z, labels, tau):
    u = jnp.asarray(_unit(z), jnp.float32)
    logits = u @ u.T / tau
    labels = jnp.asarray(labels)
    same = labels[:, None] == labels[None, :]
    eye = jnp.eye(len(labels), dtype=bool)
    return logits, same & ~eye, ~same, ~eye


def test_gradient_wrt_anchor_matches_eq13_and_eq14():
    """jax.grad of ℓ_t w.r.t. z_t (others fixed, raw dot products) = Eqs. (13)/(14)."""
    rng = np.random.default_rng(7)
    z = _unit(rng.normal(size=(8, 3)))
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    tau, t = 0.2, 0
    pos = [j for j in range(8) if j != t and labels[j] == labels[t]]
    neg = [j for j in range(8) if labels[j] != labels[t]]
    others = pos + neg

    def per_anchor(zt, kind):
        zz = jnp.asarray(z, jnp.float32).at[t].set(zt)
        logits = zz @ zz.T / tau
        lab = jnp.asarray(labels)
        same = lab[:, None] == lab[None, :]
        eye = jnp.eye(8, dtype=bool)
        if kind == "sincere":
            return sincere_per_anchor(logits, same & ~eye, ~same)[t]
        return supcon_per_anchor(logits, same & ~eye, ~eye)[t]

    s = {j: z[t] @ z[j] / tau for j in others}
    eq13 = np.zeros(3)
    for p in pos:
        den = np.exp(s[p]) + sum(np.exp(s[j]) for j in neg)
        g = z[p] * (np.exp(s[p]) / den - 1) + sum(z[j] * np.exp(s[j]) / den for j in neg)
        eq13 += g / (tau * len(pos))
    den_all = sum(np.exp(s[j]) for j in others)
    eq14 = sum(z[p] * (np.exp(s[p]) / den_all - 1 / len(pos)) for p in pos) / tau
    eq14 = eq14 + sum(z[j] * np.exp(s[j]) / den_all for j in neg) / tau
    zt = jnp.asarray(z[t], jnp.float32)
    np.testing.assert_allclose(jax.grad(per_anchor)(zt, "sincere"), eq13, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(jax.grad(per_anchor)(zt, "supcon"), eq14, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_supcon_row_without_candidates_has_zero_gradient():
    """A row whose candidate mask is empty gets finite values and exactly zero gradient."""
    logits = jnp.asarray(np.random.default_rng(5).normal(size=(3, 4)), jnp.float32)
    candidates = jnp.array([[0, 1, 1, 1], [0, 0, 0, 0], [1, 1, 0, 1]], bool)
    positives = candidates & jnp.array([[0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]], bool)
    value, vjp = jax.vjp(lambda s: supcon_per_anchor(s, positives, candidates), logits)
    grad = np.asarray(vjp(jnp.ones(3))[0])
    assert np.all(np.isfinite(value)) and np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grad[1], 0.0)
    np.testing.assert_allclose(grad[[0, 2]].sum(axis=1), 0.0, atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.slow
def test_coefficient_signs_on_positives_and_negatives(seed):
    """SINCERE: ∂ℓ_t/∂S_tp ∈ [−1/|P_t|, 0]; both losses: ∂ℓ_t/∂S_tn ≥ 0; rows sum to 0."""
    z, labels = random_batch(seed, n=12, classes=3)
    logits, pos, neg, cand = _logits_and_masks(z, labels, 0.1)
    for fn, mask in ((sincere_per_anchor, neg), (supcon_per_anchor, cand)):
        jac = np.asarray(jax.jacobian(lambda s, f=fn, m=mask: f(s, pos, m))(logits))
        rows = np.arange(12)
        grad_rows = jac[rows, rows]  # ∂ℓ_t/∂S_t· for each t
        count = np.asarray(pos).sum(1)
        has_pos = count > 0  # rows without a positive are not anchors
        np.testing.assert_allclose(grad_rows[has_pos].sum(1), 0.0, atol=1e-5)
        assert np.all(grad_rows[has_pos][np.asarray(neg)[has_pos]] >= -1e-7)
        if fn is sincere_per_anchor:
            gp = grad_rows[np.asarray(pos)]
            bound = np.repeat(-1.0 / np.maximum(count, 1), count)
            assert np.all(gp <= 1e-7) and np.all(gp >= bound - 1e-6)


@pytest.mark.slow
def test_supcon_repels_a_near_duplicate_positive_worked_example():
    """Hand-computed (SINCERE Sec. 3.3 gradients): SupCon's scalar on z_1 is +0.4999092, SINCERE's
    −9.0792e-05."""
    logits = jnp.array([[10.0, -10.0, 0.0, 0.0]])
    pos = jnp.array([[True, True, False, False]])
    neg = ~pos
    cand = jnp.ones((1, 4), bool)
    g_sup = jax.grad(lambda s: supcon_per_anchor(s, pos, cand)[0])(logits)[0]
    g_sin = jax.grad(lambda s: sincere_per_anchor(s, pos, neg)[0])(logits)[0]
    # Scalars in the paper's form: SupCon π_tp − 1/|P_t| = ∂ℓ/∂S_tp; SINCERE |P_t|·∂ℓ/∂S_tp.
    np.testing.assert_allclose(g_sup[0], 0.4999092, rtol=1e-5)
    np.testing.assert_allclose(g_sup[1], -0.4999999979, rtol=1e-6)
    np.testing.assert_allclose(2 * g_sin[0], -9.0792e-05, rtol=1e-3)
    np.testing.assert_allclose(2 * g_sin[1], -0.9999773, rtol=1e-6)
    np.testing.assert_allclose(supcon_per_anchor(logits, pos, cand)[0], 10.0000908, rtol=1e-6)
    np.testing.assert_allclose(sincere_per_anchor(logits, pos, neg)[0], 5.3466303, rtol=1e-6)


@pytest.mark.slow
def test_supcon_positive_coefficient_never_positive_with_one_positive():
    z, _ = random_batch(11, n=10)
    labels = np.repeat(np.arange(5), 2)
    logits, pos, _, cand = _logits_and_masks(z, labels, 0.1)
    jac = jax.jacobian(lambda s: supcon_per_anchor(s, pos, cand))(logits)
    grad_rows = np.asarray(jac)[np.arange(10), np.arange(10)]
    assert np.all(grad_rows[np.asarray(pos)] <= 0)


@pytest.mark.parametrize("shift", [3.0, -50.0, 1e4])
def test_row_shift_invariance(shift):
    z, labels = random_batch(2, n=10)
    logits, pos, neg, cand = _logits_and_masks(z, labels, 0.1)
    shifted = logits + shift * jnp.arange(10.0)[:, None] / 10
    for before, after in (
        (sincere_per_anchor(logits, pos, neg), sincere_per_anchor(shifted, pos, neg)),
        (supcon_per_anchor(logits, pos, cand), supcon_per_anchor(shifted, pos, cand)),
    ):
        assert np.all(np.isfinite(after))
        np.testing.assert_allclose(after, before, rtol=1e-4, atol=1e-3 * max(1.0, shift / 1e3))


def test_sincere_pair_term_ignores_other_positives():
    """T8: perturbing S_tq for another positive q leaves the (t, p) term unchanged."""
    logits = jnp.array([[2.0, 1.0, 0.5, -1.0]])
    pos = jnp.array([[True, True, False, False]])
    only_p = jnp.array([[True, False, False, False]])
    neg = jnp.array([[False, False, True, True]])
    cand = jnp.ones((1, 4), bool)
    moved = logits.at[0, 1].add(3.0)
    np.testing.assert_allclose(
        sincere_per_anchor(moved, only_p, neg), sincere_per_anchor(logits, only_p, neg)
    )
    assert not np.allclose(
        supcon_per_anchor(moved, pos, cand), supcon_per_anchor(logits, pos, cand)
    )


# ----------------------------------------------------------------- T9 invariances


@pytest.mark.parametrize("name", ["supcon", "sincere"])
def test_invariant_to_permutation_relabelling_and_rotation(name):
    fn = LOSSES[name]
    z, labels = random_batch(4, n=12, d=5)
    base = fn(jnp.asarray(z), jnp.asarray(labels))
    perm = np.random.default_rng(0).permutation(12)
    np.testing.assert_allclose(fn(jnp.asarray(z[perm]), jnp.asarray(labels[perm])), base, rtol=1e-5)
    relabel = np.array([2, 0, 1])[labels]
    np.testing.assert_allclose(fn(jnp.asarray(z), jnp.asarray(relabel)), base, rtol=1e-6)
    q, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(5, 5)))
    np.testing.assert_allclose(
        fn(jnp.asarray(z @ q, jnp.float32), jnp.asarray(labels)), base, rtol=1e-5
    )
    np.testing.assert_allclose(fn(jnp.asarray(3.7 * z), jnp.asarray(labels)), base, rtol=1e-5)


# --------------------------------------------------------------- T10 edge cases


@pytest.mark.slow
def test_anchors_without_positive_are_excluded_from_the_mean():
    z, _ = random_batch(8, n=7)
    labels = np.array([0, 0, 1, 1, 1, 2, 3])  # anchors 5 and 6 have no positive
    for kind in ("supcon", "sincere"):
        value = LOSSES[kind](jnp.asarray(z), jnp.asarray(labels))
        per = reference_per_anchor(z, labels, 0.1, kind)
        assert per[5] is None and per[6] is None
        np.testing.assert_allclose(value, np.mean(per[:5]), rtol=1e-5)


@pytest.mark.slow
def test_single_class_batch():
    z, _ = random_batch(9, n=8)
    labels = jnp.zeros(8, jnp.int32)
    value, grad = jax.value_and_grad(sincere)(jnp.asarray(z), labels)
    assert value == 0.0 and np.all(grad == 0.0)
    sup = supcon(jnp.asarray(z), labels)
    assert np.isfinite(sup) and sup >= np.log(7) - 1e-5


@pytest.mark.parametrize("name", ["supcon", "sincere", "nt_xent"])
@pytest.mark.parametrize(
    "case", ["collapsed", "orthogonal", "zero_row", "tiny_temperature", "distinct", "singleton",
             "duplicated", "two_rows", "bfloat16"]
)
@pytest.mark.matrix
def test_finite_value_and_gradient(name, case):
    fn = LOSSES[name]
    z, labels = random_batch(10, n=8, d=8)
    tau = 0.1
    if case == "collapsed":
        z = np.ones_like(z)
    elif case == "orthogonal":
        z = np.eye(8, dtype=np.float32)
    elif case == "zero_row":
        z[3] = 0.0
    elif case == "tiny_temperature":
        tau = 0.01
    elif case == "distinct":
        labels = np.arange(8)
    elif case == "singleton":
        labels = np.array([0, 0, 0, 1, 1, 1, 1, 2])
    elif case == "duplicated":
        z[1] = z[0]
        z[5] = z[0]
    elif case == "two_rows":
        z, labels = z[:2], np.array([0, 0])
    z = jnp.asarray(z, jnp.bfloat16 if case == "bfloat16" else jnp.float32)
    value, grad = jax.value_and_grad(lambda x: fn(x, jnp.asarray(labels), temperature=tau))(z)
    assert value.dtype == jnp.float32
    assert np.isfinite(value)
    assert np.all(np.isfinite(np.asarray(grad, np.float32)))


@pytest.mark.parametrize("name", ["supcon", "sincere", "nt_xent"])
def test_all_invalid_returns_zero_with_zero_gradient(name):
    z, labels = random_batch(12, n=8)
    valid = jnp.zeros(8, bool)
    value, grad = jax.value_and_grad(
        lambda x: LOSSES[name](x, jnp.asarray(labels), valid=valid)
    )(jnp.asarray(z))
    assert value == 0.0
    assert np.all(grad == 0.0)


@pytest.mark.slow
def test_padded_rows_are_neither_anchors_nor_candidates():
    z, labels = random_batch(13, n=10)
    valid = np.array([1, 1, 1, 0, 1, 1, 0, 1, 1, 1], bool)
    for name in ("supcon", "sincere"):
        padded = LOSSES[name](jnp.asarray(z), jnp.asarray(labels), valid=jnp.asarray(valid))
        dropped = LOSSES[name](jnp.asarray(z[valid]), jnp.asarray(labels[valid]))
        np.testing.assert_allclose(padded, dropped, rtol=1e-6)
        grad = jax.grad(
            lambda x, n=name: LOSSES[n](x, jnp.asarray(labels), valid=jnp.asarray(valid))
        )(jnp.asarray(z))
        assert np.all(np.asarray(grad)[~valid] == 0.0)


def test_jit_with_traced_temperature():
    z, labels = random_batch(14, n=8)
    f = jax.jit(lambda x, y, t: sincere(x, y, temperature=t))
    np.testing.assert_allclose(
        f(jnp.asarray(z), jnp.asarray(labels), 0.3),
        reference_loss(z, labels, 0.3, "sincere"),
        rtol=1e-5,
    )


# ---------------------------------------------------------- T11 multi-device


@pytest.mark.parametrize("name", ["supcon", "sincere", "nt_xent"])
@pytest.mark.matrix
def test_multidevice_matches_single_device(name):
    rng = np.random.default_rng(21)
    n = 32
    z = rng.normal(size=(n, 6)).astype(np.float32)
    if name == "nt_xent":
        labels = rng.permutation(np.repeat(np.arange(n // 2), 2))
    else:
        labels = rng.choice(4, size=n, p=[0.55, 0.25, 0.15, 0.05])  # uneven counts
    valid = np.ones(n, bool)
    valid[[3, 4, 5, 17, 30]] = False  # uneven valid counts per device
    assert_multidevice_matches(LOSSES[name], z, labels, valid=valid, temperature=0.1)


@pytest.mark.slow
def test_local_self_mask_would_be_wrong():
    """Negative control: self-masking at local indices changes the loss."""
    from jax.sharding import PartitionSpec as P

    from contrastive_jax.losses import _core
    from tests.losses.multidevice import AXIS, device_mesh

    rng = np.random.default_rng(3)
    z = jnp.asarray(rng.normal(size=(16, 4)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, 2, 16))

    def wrong(x, y):
        batch = _core.contrast_batch(x, y, None, AXIS)
        local_eye = jnp.arange(x.shape[0])[:, None] == jnp.arange(16)[None, :]
        logits = _core.similarity_logits(batch.anchors, batch.candidates, 0.1)
        same = y[:, None] == batch.candidate_labels[None, :]
        per = supcon_per_anchor(logits, same & ~local_eye, ~local_eye)
        return _core.valid_anchor_mean(per, jnp.any(same & ~local_eye, 1), AXIS)

    value = jax.shard_map(
        wrong, mesh=device_mesh(8), in_specs=(P(AXIS), P(AXIS)), out_specs=P()
    )(z, labels)
    assert not np.allclose(value, supcon(z, labels), rtol=1e-3)


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize("name", ["supcon", "sincere", "nt_xent"])
def test_bad_input_raises_value_error_naming_the_argument(name):
    fn = LOSSES[name]
    z = jnp.ones((4, 3))
    y = jnp.arange(4)
    with pytest.raises(ValueError, match="embeddings"):
        fn(jnp.ones((4,)), y)
    with pytest.raises(ValueError, match="embeddings"):
        fn(jnp.ones((4, 3), jnp.int32), y)
    with pytest.raises(ValueError, match="labels"):
        fn(z, jnp.arange(5))
    with pytest.raises(ValueError, match="labels"):
        fn(z, jnp.ones((4,), jnp.float32))
    with pytest.raises(ValueError, match="labels"):
        fn(z, jnp.ones((4, 1), jnp.int32))
    with pytest.raises(ValueError, match="temperature"):
        fn(z, y, temperature=0.0)
    with pytest.raises(ValueError, match="temperature"):
        fn(z, y, temperature=-1.0)
    with pytest.raises(ValueError, match="valid"):
        fn(z, y, valid=jnp.ones((4,), jnp.int32))
    with pytest.raises(ValueError, match="valid"):
        fn(z, y, valid=jnp.ones((3,), bool))
