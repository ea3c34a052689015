"""Soft-target InfoNCE and soft-target cross-entropy (Hugger & Uhlmann 2024,
arXiv:2404.14076, Eqs. 3, 5 and 12) against float64 references, precomputed golden
values, the paper's Figure 2 code and optax.

Label smoothing, MixUp and the toy experiments are properties of other components
(``tests/train/test_mixing.py``, ``tests/experiments``), not of these two losses.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.test_util import check_grads

from contrastive_jax.losses._soft_target import soft_target_cross_entropy, soft_target_infonce
from tests.losses.multidevice import assert_multidevice_matches

LOSSES = {"sti": soft_target_infonce, "stce": soft_target_cross_entropy}
# Jitted once (per shape) for numeric tests; validation tests call the raw functions.
STI = jax.jit(soft_target_infonce)
JITTED = {"sti": STI, "stce": jax.jit(soft_target_cross_entropy)}

# ----------------------------------------------------------------- numpy references


def _ok_rows(targets, valid):
    """Rows that are anchors and candidates: not padded and with target mass."""
    n = len(targets)
    valid = np.ones(n, bool) if valid is None else np.asarray(valid, bool)
    return [bool(valid[b]) and float(np.sum(targets[b])) > 0 for b in range(n)]


def _log_eta(eta, k):
    return np.zeros(k) if eta is None else np.log(np.asarray(eta, np.float64))


def ref_sti_per_row(logits, targets, tau, eta=None, valid=None):
    """Literal Eq. (12), one anchor and one noise row at a time (float64).

    ``-log exp(E(a,a)) / (exp(E(a,a)) + sum_{b != a} exp(E(a,b)))`` with
    ``E(a,b) = sum_j t_b[j] (L[a,j]/tau - log eta_j)``. None for rows that are
    not anchors.
    """
    logits = np.asarray(logits, np.float64)
    targets = np.asarray(targets, np.float64)
    n, k = logits.shape
    log_eta = _log_eta(eta, k)
    ok = _ok_rows(targets, valid)
    out = []
    for a in range(n):
        if not ok[a]:
            out.append(None)
            continue
        s = [logits[a, j] / tau - log_eta[j] for j in range(k)]

        def energy(b, s=s):
            return sum(targets[b, j] * s[j] for j in range(k))

        numerator = np.exp(energy(a))
        denominator = numerator + sum(np.exp(energy(b)) for b in range(n) if b != a and ok[b])
        out.append(-np.log(numerator / denominator))
    return out


def ref_eq13_per_row(logits, targets, tau, eta=None):
    """Eq. (13): ``-sum_i t_a[i] log( exp(s_i) / D_a )``, D_a the Eq. (12) denominator."""
    logits = np.asarray(logits, np.float64)
    targets = np.asarray(targets, np.float64)
    n, k = logits.shape
    log_eta = _log_eta(eta, k)
    out = []
    for a in range(n):
        s = logits[a] / tau - log_eta
        energies = [float(targets[b] @ s) for b in range(n)]
        d = np.exp(energies[a]) + sum(np.exp(energies[b]) for b in range(n) if b != a)
        out.append(-sum(targets[a, i] * np.log(np.exp(s[i]) / d) for i in range(k)))
    return out


def ref_figure2(logits, targets, tau, eta=None):
    """Figure 2 semantics: tile targets to (N, N, K), score, detached max shift, CE on arange."""
    logits = np.asarray(logits, np.float64)
    targets = np.asarray(targets, np.float64)
    n, k = targets.shape
    tiled = np.tile(targets, (n, 1))[:, None, :].reshape(n, n, k)
    scores = logits / tau - _log_eta(eta, k)[None, :]
    m = (scores[:, None, :] * tiled).sum(-1)
    m = m - m.max(axis=1, keepdims=True)
    log_softmax = m - np.log(np.exp(m).sum(axis=1, keepdims=True))
    return float(-np.mean(log_softmax[np.arange(n), np.arange(n)]))


def ref_posterior_per_row(logits, targets, tau, eta=None):
    """Eq. (9) with ``p_i/eta_i`` modelled by ``r_i = exp(L[a,i]/tau)/eta_i``: ``-log P(S=a|T)``,
    ``P(S=a|T) = prod_i r_i^{t_a[i]} / sum_b prod_j r_j^{t_b[j]}`` (products and powers)."""
    logits = np.asarray(logits, np.float64)
    targets = np.asarray(targets, np.float64)
    n, k = logits.shape
    eta = np.full(k, 1.0 / k) if eta is None else np.asarray(eta, np.float64)
    out = []
    for a in range(n):
        r = np.exp(logits[a] / tau) / eta
        weights = [np.prod(r ** targets[b]) for b in range(n)]
        out.append(-np.log(weights[a] / sum(weights)))
    return out


def ref_hard_infonce_per_row(logits, labels, tau, eta):
    """Eq. (5) with in-batch label negatives: ``M[a,b] = s(z_a, y_{k_b})``, unmasked."""
    logits = np.asarray(logits, np.float64)
    n, k = logits.shape
    log_eta = _log_eta(eta, k)
    out = []
    for a in range(n):
        s = [logits[a, j] / tau - log_eta[j] for j in range(k)]
        denominator = sum(np.exp(s[labels[b]]) for b in range(n))
        out.append(-np.log(np.exp(s[labels[a]]) / denominator))
    return out


def ref_hard_infonce_counts(logits, labels, tau, eta):
    """Count form: ``logsumexp_k (S[a,k] + log n_k) - S[a,k_a]`` over classes with n_k > 0."""
    logits = np.asarray(logits, np.float64)
    n, k = logits.shape
    counts = np.bincount(labels, minlength=k)
    present = counts > 0
    s = logits / tau - _log_eta(eta, k)[None, :]
    out = []
    for a in range(n):
        terms = s[a, present] + np.log(counts[present])
        out.append(np.log(np.sum(np.exp(terms))) - s[a, labels[a]])
    return out


def ref_stce_per_row(logits, targets, tau):
    """Eq. (3): ``-sum_l t(l) log q(l|x)``, ``q = softmax(L/tau)``; None for non-anchors."""
    logits = np.asarray(logits, np.float64)
    targets = np.asarray(targets, np.float64)
    out = []
    for a in range(len(logits)):
        if float(np.sum(targets[a])) <= 0:
            out.append(None)
            continue
        s = logits[a] / tau
        log_z = np.log(sum(np.exp(v) for v in s))
        out.append(-sum(targets[a, j] * (s[j] - log_z) for j in range(len(s))))
    return out


def mean_of(per_row, valid=None):
    rows = [
        v for i, v in enumerate(per_row) if v is not None and (valid is None or valid[i])
    ]
    return float(np.mean(rows)) if rows else 0.0


# ------------------------------------------------------------------------ batches


def soft_batch(seed, n=10, k=4, eps=0.1):
    """Random logits and MixUp-style soft targets (label smoothing + reversed partner)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.0, size=(n, k)).astype(np.float32)
    labels = rng.integers(0, k, n)
    smooth = (1 - eps) * np.eye(k)[labels] + eps / k
    lam = rng.uniform(size=(n, 1))
    targets = lam * smooth + (1 - lam) * smooth[::-1]
    return logits, targets.astype(np.float32)


def random_prior(seed, k):
    p = np.random.default_rng(seed).uniform(0.2, 1.0, size=k)
    return (p / p.sum()).astype(np.float32)


def one_hot(labels, k):
    return np.eye(k, dtype=np.float32)[labels]


# --------------------------------------------------------------------- golden values

GOLDEN_L = np.array([[2, 0.5, -1], [0, 1, 0.3], [-0.5, 0.2, 1.5]])
GOLDEN_T = np.array([[0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.3, 0.2, 0.5]])
GOLDEN_ETA = np.array([0.5, 0.3, 0.2])
GOLDEN_STI = [
    (1.0, GOLDEN_ETA, [0.5703662589, 0.6297912719, 0.6166836957], 0.605613742155053),
    (0.5, GOLDEN_ETA, [0.1742996146, 0.3781298420, 0.4048888696], 0.319106108732876),
    (1.0, None, [0.3963830043, 0.6910324855, 0.7078854788], 0.598433656201336),
]
GOLDEN_HARD_L = np.array([[1, 0, -1], [0.5, 0.5, 0], [0.2, 1.2, -0.3], [0, -0.2, 0.9]])
GOLDEN_HARD_LABELS = np.array([0, 1, 1, 2])
GOLDEN_HARD = [0.9418036955, 1.2555579132, 0.9382177305, 0.4740304952]


@pytest.mark.parametrize(("tau", "eta", "per_row", "mean"), GOLDEN_STI)
@pytest.mark.slow
def test_sti_golden_values(tau, eta, per_row, mean):
    np.testing.assert_allclose(ref_sti_per_row(GOLDEN_L, GOLDEN_T, tau, eta), per_row, rtol=1e-9)
    prior = None if eta is None else jnp.asarray(eta, jnp.float32)
    value = soft_target_infonce(
        jnp.asarray(GOLDEN_L, jnp.float32),
        jnp.asarray(GOLDEN_T, jnp.float32),
        temperature=tau,
        class_prior=prior,
    )
    np.testing.assert_allclose(value, mean, rtol=1e-5)


def test_sti_golden_uniform_eta_equals_explicit_uniform_prior():
    value = STI(
        jnp.asarray(GOLDEN_L, jnp.float32),
        jnp.asarray(GOLDEN_T, jnp.float32),
        class_prior=jnp.full((3,), 1 / 3),
    )
    np.testing.assert_allclose(value, 0.598433656201336, rtol=1e-5)


def test_stce_golden_value():
    per_row = [0.4663112967, 0.7079740119, 1.2020758472]
    np.testing.assert_allclose(ref_stce_per_row(GOLDEN_L, GOLDEN_T, 1.0), per_row, rtol=1e-9)
    value = soft_target_cross_entropy(
        jnp.asarray(GOLDEN_L, jnp.float32), jnp.asarray(GOLDEN_T, jnp.float32)
    )
    np.testing.assert_allclose(value, 0.792120385254051, rtol=1e-5)


def test_hard_infonce_golden_values_via_one_hot_targets():
    """Precomputed hard InfoNCE values (Eq. 5), also via the count form."""
    refs = (
        ref_hard_infonce_per_row(GOLDEN_HARD_L, GOLDEN_HARD_LABELS, 1.0, GOLDEN_ETA),
        ref_hard_infonce_counts(GOLDEN_HARD_L, GOLDEN_HARD_LABELS, 1.0, GOLDEN_ETA),
    )
    for ref in refs:
        np.testing.assert_allclose(ref, GOLDEN_HARD, rtol=1e-9)
    value = STI(
        jnp.asarray(GOLDEN_HARD_L, jnp.float32),
        jnp.asarray(one_hot(GOLDEN_HARD_LABELS, 3)),
        class_prior=jnp.asarray(GOLDEN_ETA, jnp.float32),
    )
    np.testing.assert_allclose(value, 0.902402458584889, rtol=1e-5)


# ------------------------------------------------------- Figure 2, float64 and Eq. (9) references


@pytest.mark.parametrize("tau", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_sti_matches_literal_eq12_reference(tau, seed):
    logits, targets = soft_batch(seed)
    prior = random_prior(seed + 10, 4)
    valid = np.random.default_rng(seed + 20).random(10) > 0.25
    value = STI(
        jnp.asarray(logits), jnp.asarray(targets), temperature=tau,
        class_prior=jnp.asarray(prior), valid=jnp.asarray(valid),
    )
    expected = mean_of(ref_sti_per_row(logits, targets, tau, prior, valid))
    np.testing.assert_allclose(value, expected, rtol=1e-5)


@pytest.mark.parametrize("seed", [2, 3])
def test_sti_matches_figure2_tiled_computation(seed):
    """The einsum form equals the (N, N, K) broadcast of Figure 2 with its max shift."""
    logits, targets = soft_batch(seed, n=7, k=5)
    prior = random_prior(seed, 5)
    value = STI(
        jnp.asarray(logits), jnp.asarray(targets), temperature=0.7, class_prior=jnp.asarray(prior)
    )
    np.testing.assert_allclose(value, ref_figure2(logits, targets, 0.7, prior), rtol=1e-5)


@pytest.mark.parametrize("seed", [4, 5])
def test_eq13_restatement_equals_eq12(seed):
    """The float64 references and the implementation agree."""
    logits, targets = soft_batch(seed, n=6, k=4)
    prior = random_prior(seed, 4)
    exact = np.asarray(targets, np.float64)
    exact /= exact.sum(axis=1, keepdims=True)  # the identity needs rows summing to 1 exactly
    eq12 = ref_sti_per_row(logits, exact, 0.5, prior)
    np.testing.assert_allclose(ref_eq13_per_row(logits, exact, 0.5, prior), eq12, rtol=1e-10)
    value = STI(
        jnp.asarray(logits), jnp.asarray(targets), temperature=0.5, class_prior=jnp.asarray(prior)
    )
    np.testing.assert_allclose(value, np.mean(eq12), rtol=1e-5)


@pytest.mark.parametrize("seed", [6, 7])
def test_loss_is_minus_log_of_eq9_posterior(seed):
    """Per row, exp(-l_a) is the CC posterior of Eq. (9) in product form; one-hot
    targets give the classic NCE posterior (r_{k_a} / sum_b r_{k_b})."""
    logits, targets = soft_batch(seed, n=6, k=4)
    prior = random_prior(seed, 4)
    posterior = ref_posterior_per_row(logits, targets, 0.8, prior)
    np.testing.assert_allclose(posterior, ref_sti_per_row(logits, targets, 0.8, prior), rtol=1e-10)
    value = STI(
        jnp.asarray(logits), jnp.asarray(targets), temperature=0.8, class_prior=jnp.asarray(prior)
    )
    np.testing.assert_allclose(value, np.mean(posterior), rtol=1e-5)

    labels = np.array([0, 2, 2, 1, 3, 0])
    classic = []
    for a in range(6):
        r = np.exp(np.asarray(logits[a], np.float64) / 0.8) / prior
        classic.append(-np.log(r[labels[a]] / sum(r[labels[b]] for b in range(6))))
    hot = ref_posterior_per_row(logits, one_hot(labels, 4), 0.8, prior)
    np.testing.assert_allclose(hot, classic, rtol=1e-10)


# ------------------------------------------------------------- one-hot targets


@pytest.mark.parametrize("tau", [0.2, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_one_hot_targets_give_hard_infonce(tau, seed):
    """Eq. 12 with one-hot targets is Eq. 5 (same-class rows stay in the denominator); count form."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(12, 5)).astype(np.float32)
    labels = rng.choice(5, size=12, p=[0.4, 0.3, 0.2, 0.1, 0.0])  # repeats and an absent class
    prior = random_prior(seed, 5)
    value = STI(
        jnp.asarray(logits), jnp.asarray(one_hot(labels, 5)), temperature=tau,
        class_prior=jnp.asarray(prior),
    )
    literal = ref_hard_infonce_per_row(logits, labels, tau, prior)
    np.testing.assert_allclose(ref_hard_infonce_counts(logits, labels, tau, prior), literal,
                               rtol=1e-10)
    np.testing.assert_allclose(value, np.mean(literal), rtol=1e-5)


@pytest.mark.parametrize("tau", [0.5, 1.0])
@pytest.mark.slow
def test_hard_infonce_is_cross_entropy_plus_log_m_with_balanced_batch(tau):
    """Each class m times and uniform eta -> l_InfoNCE = l_NLL(L/tau) + log m."""
    rng = np.random.default_rng(8)
    m, k = 3, 4
    labels = rng.permutation(np.repeat(np.arange(k), m))
    logits = jnp.asarray(rng.normal(size=(m * k, k)), jnp.float32)
    targets = jnp.asarray(one_hot(labels, k))
    sti = STI(logits, targets, temperature=tau)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits / tau, jnp.asarray(labels))
    np.testing.assert_allclose(sti, jnp.mean(nll) + np.log(m), rtol=1e-5)
    stce = JITTED["stce"](logits, targets, temperature=tau)
    np.testing.assert_allclose(sti, stce + np.log(m), rtol=1e-5)


def test_hard_infonce_with_eta_equal_to_batch_frequencies():
    """In general n_k = B eta_k -> l_a = l_NLL(a) + log n_{k_a}."""
    rng = np.random.default_rng(9)
    labels = rng.permutation(np.array([0] * 5 + [1] * 3 + [2] * 1 + [3] * 3))
    counts = np.bincount(labels, minlength=4)
    logits = jnp.asarray(rng.normal(size=(12, 4)), jnp.float32)
    sti = STI(
        logits, jnp.asarray(one_hot(labels, 4)), class_prior=jnp.asarray(counts / 12.0)
    )
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.asarray(labels))
    np.testing.assert_allclose(sti, jnp.mean(nll) + np.mean(np.log(counts[labels])), rtol=1e-5)


# ------------------------------------------------------------------- prior, bounds, invariance


def test_uniform_prior_cancels_and_non_uniform_prior_matters():
    """A uniform noise prior cancels (target rows sum to 1); a non-uniform one changes the loss."""
    logits, targets = soft_batch(11, k=5)
    logits, targets = jnp.asarray(logits), jnp.asarray(targets)
    base = STI(logits, targets)
    for prior in (jnp.full((5,), 0.2), jnp.full((5,), 0.37), jnp.full((5,), 3.0)):
        np.testing.assert_allclose(
            STI(logits, targets, class_prior=prior), base, rtol=1e-6
        )
    skewed = jnp.asarray([0.5, 0.2, 0.1, 0.1, 0.1])
    assert not np.isclose(STI(logits, targets, class_prior=skewed), base, rtol=1e-3)
    same_rows = jnp.tile(targets[:1], (10, 1))
    np.testing.assert_allclose(
        STI(logits, same_rows, class_prior=skewed),
        STI(logits, same_rows),
        rtol=1e-6,
    )


@pytest.mark.parametrize("seed", range(4))
def test_sti_is_non_negative(seed):
    """Loss >= 0; every target duplicated once -> loss >= log 2."""
    logits, targets = soft_batch(seed, n=8)
    prior = jnp.asarray(random_prior(seed, 4))
    assert STI(jnp.asarray(logits), jnp.asarray(targets), class_prior=prior) >= 0
    twice = np.concatenate([targets[:4], targets[:4]])
    value = STI(jnp.asarray(logits), jnp.asarray(twice), class_prior=prior)
    assert value >= np.log(2) - 1e-6


@pytest.mark.slow
def test_degenerate_batches_give_log_batch_size():
    """Identical target rows, or zero logits with uniform eta -> log B; B = 1 -> 0."""
    logits, targets = soft_batch(12, n=9)
    same = jnp.tile(jnp.asarray(targets[:1]), (9, 1))
    prior = jnp.asarray(random_prior(12, 4))
    np.testing.assert_allclose(
        STI(jnp.asarray(logits), same, class_prior=prior), np.log(9), rtol=1e-6
    )
    np.testing.assert_allclose(
        STI(jnp.zeros((9, 4)), jnp.asarray(targets)), np.log(9), rtol=1e-6
    )
    value, grad = jax.value_and_grad(soft_target_infonce)(
        jnp.asarray(logits[:1]), jnp.asarray(targets[:1])
    )
    assert value == 0.0 and np.all(grad == 0.0)


@pytest.mark.parametrize("name", ["sti", "stce"])
@pytest.mark.parametrize("scale", [5.0, 1e3])
def test_per_row_shift_invariance(name, scale):
    """L[a, :] + c_a leaves the loss unchanged (target rows sum to 1)."""
    logits, targets = soft_batch(13)
    kwargs = {"class_prior": jnp.asarray(random_prior(13, 4))} if name == "sti" else {}
    shift = scale * np.random.default_rng(0).normal(size=(10, 1)).astype(np.float32)
    base = JITTED[name](jnp.asarray(logits), jnp.asarray(targets), **kwargs)
    moved = JITTED[name](jnp.asarray(logits + shift), jnp.asarray(targets), **kwargs)
    np.testing.assert_allclose(moved, base, rtol=1e-5, atol=1e-3 * scale / 1e3)


# -------------------------------------------------------------------- gradients


def _coupling(logits, targets, tau, eta):
    """C_ab = softmax_b M[a,b] in float64."""
    s = np.asarray(logits, np.float64) / tau - np.log(eta)[None, :]
    m = s @ np.asarray(targets, np.float64).T
    c = np.exp(m - m.max(axis=1, keepdims=True))
    return c / c.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("tau", [0.3, 1.0])
def test_gradient_wrt_logits_matches_formula(tau):
    """dl_a/dL[a] = -(1/tau)(t_a - sum_b C_ab t_b); the mean divides by B; rows sum to 0."""
    logits, targets = soft_batch(14, n=6, k=4)
    prior = random_prior(14, 4)
    grad = jax.jit(jax.grad(soft_target_infonce))(
        jnp.asarray(logits), jnp.asarray(targets), temperature=tau, class_prior=jnp.asarray(prior)
    )
    t = np.asarray(targets, np.float64)
    expected = -(t - _coupling(logits, targets, tau, prior) @ t) / (tau * 6)
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(np.sum(np.asarray(grad), axis=1), 0.0, atol=1e-6)


def test_hessian_is_block_diagonal():
    """l_a depends on L[a] only, so d2 loss / dL[a] dL[b] = 0 for a != b."""
    logits, targets = soft_batch(15, n=5, k=3)
    prior = jnp.asarray(random_prior(15, 3))
    hess = np.asarray(jax.jit(jax.hessian(soft_target_infonce))(
        jnp.asarray(logits), jnp.asarray(targets), class_prior=prior
    ))  # [5, 3, 5, 3]
    for a in range(5):
        for b in range(5):
            if a != b:
                assert np.all(hess[a, :, b, :] == 0.0)
    assert np.any(np.abs(hess[0, :, 0, :]) > 1e-3)


def test_gradients_of_embedding_model_match_paper_formulas():
    """With L = Z Y^T: dl/dz_a = -(1/tau)(ybar_a - sum_b C_ab ybar_b) and
    dl/dy_j = -(1/tau) sum_a z_a (t_a[j] - sum_b C_ab t_b[j]) (per-sample; mean over B)."""
    rng = np.random.default_rng(16)
    n, k, d, tau = 6, 4, 3, 0.5
    z = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.normal(size=(k, d)).astype(np.float32)
    _, targets = soft_batch(16, n=n, k=k)
    prior = random_prior(16, k)

    def loss(z_, y_):
        return STI(
            z_ @ y_.T, jnp.asarray(targets), temperature=tau, class_prior=jnp.asarray(prior)
        )

    gz, gy = jax.jit(jax.grad(loss, argnums=(0, 1)))(jnp.asarray(z), jnp.asarray(y))
    z64, y64, t = (np.asarray(v, np.float64) for v in (z, y, targets))
    c = _coupling(z64 @ y64.T, t, tau, prior)
    ybar = t @ y64
    np.testing.assert_allclose(gz, -(ybar - c @ ybar) / (tau * n), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(gy, -((t - c @ t).T @ z64) / (tau * n), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_gradient_of_cosine_scores_is_projected():
    """Eq. (25): with s = zhat . yhat (tau = 1), dl/dz = (I - zhat zhat^T)/|z| dl/dzhat."""
    rng = np.random.default_rng(17)
    z = jnp.asarray(rng.normal(size=(5, 3)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)
    _, targets = soft_batch(17, n=5, k=4)
    yhat = y / jnp.linalg.norm(y, axis=1, keepdims=True)

    def loss_hat(zhat):
        return STI(zhat @ yhat.T, jnp.asarray(targets))

    def loss(z_):
        return loss_hat(z_ / jnp.linalg.norm(z_, axis=1, keepdims=True))

    norm = np.linalg.norm(np.asarray(z, np.float64), axis=1, keepdims=True)
    zhat = np.asarray(z, np.float64) / norm
    g_hat = np.asarray(jax.grad(loss_hat)(jnp.asarray(zhat, jnp.float32)), np.float64)
    projected = (g_hat - zhat * np.sum(zhat * g_hat, axis=1, keepdims=True)) / norm
    np.testing.assert_allclose(jax.grad(loss)(z), projected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["sti", "stce"])
@pytest.mark.slow
def test_check_grads_second_order(name):
    logits, targets = soft_batch(18, n=5, k=3)
    targets = jnp.asarray(targets)

    f = jax.jit(lambda x: LOSSES[name](x, targets, temperature=0.7))
    check_grads(f, (jnp.asarray(logits),), order=2, modes=("fwd", "rev"), atol=1e-2, rtol=1e-2)


def test_gradient_flows_into_targets():
    """Targets are differentiable (e.g. a trained teacher): matches central differences."""
    logits, targets = soft_batch(19, n=5, k=3)
    prior = jnp.asarray(random_prior(19, 3))

    f = jax.jit(lambda t: soft_target_infonce(jnp.asarray(logits), t, class_prior=prior))

    check_grads(f, (jnp.asarray(targets),), order=1, modes=("rev",), atol=1e-2, rtol=1e-2)
    assert np.any(np.abs(np.asarray(jax.grad(f)(jnp.asarray(targets)))) > 1e-3)


# ------------------------------------------------------------ soft-target CE (Eq. 3)


@pytest.mark.parametrize("tau", [0.25, 1.0])
@pytest.mark.slow
def test_stce_one_hot_equals_standard_cross_entropy(tau):
    rng = np.random.default_rng(20)
    logits = jnp.asarray(rng.normal(size=(9, 5)), jnp.float32)
    labels = rng.integers(0, 5, 9)
    value = JITTED["stce"](logits, jnp.asarray(one_hot(labels, 5)), temperature=tau)
    hot = optax.softmax_cross_entropy(logits / tau, jnp.asarray(one_hot(labels, 5)))
    np.testing.assert_allclose(value, jnp.mean(hot), rtol=1e-6)
    integer = optax.softmax_cross_entropy_with_integer_labels(logits / tau, jnp.asarray(labels))
    np.testing.assert_allclose(value, jnp.mean(integer), rtol=1e-6)


@pytest.mark.parametrize("tau", [0.1, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_stce_matches_literal_reference_and_optax(tau, seed):
    logits, targets = soft_batch(seed)
    valid = np.random.default_rng(seed + 30).random(10) > 0.3
    value = JITTED["stce"](
        jnp.asarray(logits), jnp.asarray(targets), temperature=tau, valid=jnp.asarray(valid)
    )
    np.testing.assert_allclose(
        value, mean_of(ref_stce_per_row(logits, targets, tau), valid), rtol=1e-5
    )
    full = JITTED["stce"](jnp.asarray(logits), jnp.asarray(targets), temperature=tau)
    rows = optax.softmax_cross_entropy(jnp.asarray(logits) / tau, jnp.asarray(targets))
    np.testing.assert_allclose(full, jnp.mean(rows), rtol=1e-5)


def test_stce_gradient_is_softmax_minus_targets():
    logits, targets = soft_batch(21, n=6)
    grad = jax.jit(jax.grad(soft_target_cross_entropy))(
        jnp.asarray(logits), jnp.asarray(targets), temperature=0.5
    )
    s = np.asarray(logits, np.float64) / 0.5
    q = np.exp(s - s.max(1, keepdims=True))
    q /= q.sum(1, keepdims=True)
    np.testing.assert_allclose(grad, (q - targets) / (0.5 * 6), rtol=1e-4, atol=1e-7)


# ---------------------------------------------------------- padding, zero rows, edges


@pytest.mark.parametrize("name", ["sti", "stce"])
def test_padded_rows_are_neither_anchors_nor_negatives(name):
    logits, targets = soft_batch(22)
    valid = np.array([1, 1, 0, 1, 1, 1, 0, 1, 1, 0], bool)
    kwargs = {"class_prior": jnp.asarray(random_prior(22, 4))} if name == "sti" else {}
    fn = LOSSES[name]

    def padded(x):
        return fn(x, jnp.asarray(targets), valid=jnp.asarray(valid), **kwargs)

    value, grad = jax.jit(jax.value_and_grad(padded))(jnp.asarray(logits))
    dropped = fn(jnp.asarray(logits[valid]), jnp.asarray(targets[valid]), **kwargs)
    np.testing.assert_allclose(value, dropped, rtol=1e-6)
    assert np.all(np.asarray(grad)[~valid] == 0.0)


@pytest.mark.parametrize("name", ["sti", "stce"])
def test_zero_target_row_is_treated_as_padding(name):
    """A row without target mass has no positive: not an anchor and not a negative."""
    logits, targets = soft_batch(23)
    targets[4] = 0.0
    keep = np.arange(10) != 4
    value, grad = jax.jit(jax.value_and_grad(LOSSES[name]))(
        jnp.asarray(logits), jnp.asarray(targets)
    )
    dropped = JITTED[name](jnp.asarray(logits[keep]), jnp.asarray(targets[keep]))
    np.testing.assert_allclose(value, dropped, rtol=1e-6)
    assert np.all(np.isfinite(np.asarray(grad)))
    assert np.all(np.asarray(grad)[4] == 0.0)


@pytest.mark.parametrize("name", ["sti", "stce"])
@pytest.mark.parametrize("case", ["all_invalid", "all_zero_targets"])
def test_no_anchor_returns_zero_with_zero_gradient(name, case):
    logits, targets = soft_batch(24)
    valid = None
    if case == "all_invalid":
        valid = jnp.zeros(10, bool)
    else:
        targets = np.zeros_like(targets)
    value, grad = jax.jit(jax.value_and_grad(
        lambda x: LOSSES[name](x, jnp.asarray(targets), valid=valid)
    ))(jnp.asarray(logits))
    assert value == 0.0
    assert np.all(grad == 0.0)


@pytest.mark.parametrize("name", ["sti", "stce"])
@pytest.mark.parametrize(
    "case", ["extreme_logits", "tiny_temperature", "equal_logits", "one_hot_duplicates",
             "bfloat16", "prior_with_zero"]
)
@pytest.mark.matrix
def test_finite_value_and_gradient(name, case):
    logits, targets = soft_batch(25, n=8)
    tau = 1.0
    kwargs = {}
    if case == "extreme_logits":
        logits = (1e4 * np.sign(logits)).astype(np.float32)
    elif case == "tiny_temperature":
        tau = 0.01
    elif case == "equal_logits":
        logits = np.ones_like(logits)
    elif case == "one_hot_duplicates":
        targets = one_hot(np.array([0, 0, 0, 1, 1, 2, 3, 3]), 4)
    elif case == "prior_with_zero" and name == "sti":
        targets = one_hot(np.array([0, 1, 1, 2, 0, 2, 1, 0]), 4)  # class 3 absent
        kwargs["class_prior"] = jnp.asarray([0.5, 0.3, 0.2, 0.0])
    dtype = jnp.bfloat16 if case == "bfloat16" else jnp.float32
    value, grad = jax.jit(jax.value_and_grad(
        lambda x: LOSSES[name](x, jnp.asarray(targets, dtype), temperature=tau, **kwargs)
    ))(jnp.asarray(logits, dtype))
    assert value.dtype == jnp.float32
    assert np.isfinite(value) and value >= 0.0
    assert np.all(np.isfinite(np.asarray(grad, np.float32)))


def test_zero_prior_class_is_floored_not_nan():
    """eta_k = 0 uses log eta_k := 0: equals any prior with eta_k = 1 there."""
    logits, _ = soft_batch(26, n=8)
    targets = jnp.asarray(one_hot(np.array([0, 1, 1, 2, 0, 2, 1, 0]), 4))
    zero = STI(
        jnp.asarray(logits), targets, class_prior=jnp.asarray([0.5, 0.3, 0.2, 0.0])
    )
    one = STI(
        jnp.asarray(logits), targets, class_prior=jnp.asarray([0.5, 0.3, 0.2, 1.0])
    )
    np.testing.assert_allclose(zero, one, rtol=1e-6)


def test_extreme_logits_keep_reference_value():
    """Logits of magnitude 1e4 give a finite loss equal to the shifted computation."""
    logits, targets = soft_batch(27, n=6)
    big = logits + 1e4
    value = STI(jnp.asarray(big), jnp.asarray(targets))
    np.testing.assert_allclose(value, ref_figure2(big, targets, 1.0), rtol=1e-3)


@pytest.mark.parametrize("name", ["sti", "stce"])
def test_jit_with_traced_temperature(name):
    logits, targets = soft_batch(28)
    f = jax.jit(lambda x, t, tau: LOSSES[name](x, t, temperature=tau))
    ref = ref_sti_per_row if name == "sti" else ref_stce_per_row
    np.testing.assert_allclose(
        f(jnp.asarray(logits), jnp.asarray(targets), 0.4),
        mean_of(ref(logits, targets, 0.4)),
        rtol=1e-5,
    )


# -------------------------------------------------------------- multi-device


def _multidevice_batch():
    rng = np.random.default_rng(31)
    n, k = 32, 5
    logits = rng.normal(scale=2.0, size=(n, k)).astype(np.float32)
    labels = rng.choice(k, size=n, p=[0.45, 0.25, 0.15, 0.1, 0.05])  # uneven counts
    smooth = 0.9 * np.eye(k)[labels] + 0.1 / k
    lam = rng.uniform(size=(n, 1))
    targets = (lam * smooth + (1 - lam) * smooth[::-1]).astype(np.float32)
    targets[:8] = smooth[:8]  # the first device holds smoothed one-hot targets only
    targets[13] = 0.0  # a row without target mass
    valid = np.ones(n, bool)
    valid[[2, 9, 10, 11, 30]] = False  # uneven valid counts per device
    return logits, targets, valid


@pytest.mark.parametrize("name", ["sti", "stce"])
@pytest.mark.matrix
def test_multidevice_matches_single_device(name):
    logits, targets, valid = _multidevice_batch()
    kwargs = {"class_prior": jnp.asarray(random_prior(31, 5))} if name == "sti" else {}
    assert_multidevice_matches(
        LOSSES[name], logits, targets, valid=valid, temperature=0.5, **kwargs
    )


@pytest.mark.slow
def test_multidevice_target_gradient_matches_single_device():
    """Gradients w.r.t. the gathered targets return to their owners (gather transpose)."""
    logits, targets, valid = _multidevice_batch()

    def by_targets(t, x, **kwargs):
        return soft_target_infonce(x, t, **kwargs)

    assert_multidevice_matches(
        by_targets, targets, logits, valid=valid, temperature=0.5,
        class_prior=jnp.asarray(random_prior(32, 5)),
    )


def test_multidevice_uses_global_negatives():
    """Negative control: the per-device losses on local batches differ from the global one."""
    logits, targets, _ = _multidevice_batch()
    targets[13] = targets[12]
    local = np.mean([
        STI(jnp.asarray(logits[i:i + 4]), jnp.asarray(targets[i:i + 4]))
        for i in range(0, 32, 4)
    ])
    assert not np.isclose(
        local, STI(jnp.asarray(logits), jnp.asarray(targets)), rtol=1e-2
    )


# -------------------------------------------------------------------- bad input


@pytest.mark.parametrize("name", ["sti", "stce"])
def test_bad_input_raises_value_error_naming_the_argument(name):
    fn = LOSSES[name]
    x = jnp.ones((4, 3))
    t = jnp.full((4, 3), 1 / 3)
    cases = [
        ("logits", lambda: fn(jnp.ones((4,)), t)),
        ("logits", lambda: fn(jnp.ones((2, 4, 3)), t)),
        ("logits", lambda: fn(jnp.ones((4, 3), jnp.int32), t)),
        ("targets", lambda: fn(x, jnp.ones((4, 4)) / 4)),
        ("targets", lambda: fn(x, jnp.ones((5, 3)) / 3)),
        ("targets", lambda: fn(x, jnp.ones((4, 3), jnp.int32))),
        ("targets", lambda: fn(x, jnp.ones((12,)))),
        ("temperature", lambda: fn(x, t, temperature=0.0)),
        ("temperature", lambda: fn(x, t, temperature=-0.5)),
        ("temperature", lambda: fn(x, t, temperature=float("inf"))),
        ("valid", lambda: fn(x, t, valid=jnp.ones((4,), jnp.int32))),
        ("valid", lambda: fn(x, t, valid=jnp.ones((3,), bool))),
    ]
    if name == "sti":
        cases += [
            ("class_prior", lambda: fn(x, t, class_prior=jnp.ones((4,)))),
            ("class_prior", lambda: fn(x, t, class_prior=jnp.ones((1, 3)))),
            ("class_prior", lambda: fn(x, t, class_prior=jnp.ones((3,), jnp.int32))),
            ("class_prior", lambda: fn(x, t, class_prior=jnp.asarray([0.5, -0.1, 0.6]))),
            ("class_prior", lambda: fn(x, t, class_prior=jnp.asarray([0.5, jnp.nan, 0.5]))),
            ("class_prior", lambda: fn(x, t, class_prior=jnp.zeros((3,)))),
        ]
    for argument, call in cases:
        with pytest.raises(ValueError, match=argument):
            call()
