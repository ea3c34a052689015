"""Streamed (row-block) losses equal the dense ones.

Every streamed loss is checked against its dense form in value and gradient
(rtol 1e-5, float32), with padded rows, singleton classes and block sizes that
do not divide the batch, with and without ``axis_name``; the streamed gradient
must also keep memory O(N·block). The blockwise Nadaraya–Watson projection of
SoftSupCon/SoftNCE is checked against the dense [N, N] soft labels.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax import losses
from contrastive_jax.losses import _core, blockwise
from contrastive_jax.losses import _projection as proj
from contrastive_jax.losses import _projnce_streamed as streamed
from tests.losses import references
from tests.losses.multidevice import assert_multidevice_matches
from tests.pairwise import only_in_make_test

N = 24


METADATA_LOSSES = ("y_aware_infonce", "conditional_alignment", "conditional_uniformity")


def _labelled_batch(name: str, seed: int = 31):
    """Embeddings, second argument, valid mask; with a singleton class and padding."""
    rng = np.random.default_rng(seed)
    z = jnp.asarray(rng.normal(size=(N, 5)), jnp.float32)
    if name == "nt_xent":
        second = jnp.asarray(rng.permutation(np.repeat(np.arange(N // 2), 2)))
    elif name in METADATA_LOSSES or name == "global_uniformity":
        second = jnp.asarray(rng.normal(size=(N, 2)), jnp.float32)
        second = second.at[3].set(second[4])  # tied metadata: a zero repulsion weight
    else:
        second = jnp.asarray(rng.integers(0, 4, N)).at[7].set(99)  # a singleton class
    valid = jnp.asarray(rng.random(N) > 0.25)
    return z, second, valid


def _gradient_atol(dense_grad) -> float:
    """Absolute tolerance of a float32 gradient summed in another order (blocks vs dense):
    the worst-case rounding of an N-term sum, ``N eps``, at the gradient's own scale, so an
    entry near zero (a sum that cancels) is held to the error of the sum, not to its size."""
    return N * float(np.finfo(np.float32).eps) * float(np.max(np.abs(dense_grad)))


def _loss(name: str):
    """The registered loss with a uniform ``(embeddings, second, **kwargs)`` signature."""
    fn = losses.get(name.split("-")[0])
    if name == "global_uniformity":
        return lambda x, second, **kwargs: fn(x, **kwargs)
    return fn


STREAMED = [
    "supcon", "sincere", "nt_xent", "y_aware_infonce", "mio", "mio-no_l2", "projnce",
    "soft_supcon-l1",
    "soft_supcon-l2", "soft_supcon-cosine", "soft_nce-l1", "soft_nce-cosine", "med_supcon",
    "med_nce", "conditional_alignment", "global_uniformity", "conditional_uniformity",
]
#: One case of each streamed block function and distance path in `make test` (nt_xent is
#: supcon over instance ids; the others differ from a kept case in a hyperparameter).
STREAMED_FAST = [name for name in STREAMED
                 if name not in ("nt_xent", "soft_supcon-l2", "soft_nce-cosine", "med_supcon")]
#: On 8 devices the gather and the global self mask are shared by all: one loss per family.
MULTIDEVICE_FAST = ["supcon", "sincere", "y_aware_infonce", "mio", "projnce",
                    "soft_supcon-cosine", "soft_nce-l1", "conditional_uniformity"]
HPARAMS = {
    "y_aware_infonce": {"sigma": 0.7},
    "conditional_alignment": {"sigma": 0.7},
    "conditional_uniformity": {"sigma": 0.7},
    "mio": {"l2_weight": 0.5},
    "mio-no_l2": {"l2_weight": 0.0},  # the streamed block drops the L2 term's passes
    "projnce": {"beta": 1.5},
    "soft_supcon-l1": {"distance": "l1", "bandwidth": 1.6},
    "soft_supcon-l2": {"distance": "l2", "bandwidth": 0.8},
    "soft_supcon-cosine": {"distance": "cosine", "bandwidth": 0.4},
    "soft_nce-l1": {"distance": "l1", "bandwidth": 1.6},
    "soft_nce-cosine": {"distance": "cosine", "bandwidth": 0.4},
    "med_nce": {"median_mode": "average"},
}
#: Losses that take ``num_classes`` (a static bound on the labels: same value).
CLASS_LOSSES = ("projnce", "soft_supcon", "soft_nce", "med_supcon", "med_nce")


@pytest.mark.parametrize("name", only_in_make_test(STREAMED, STREAMED_FAST))
@pytest.mark.slow
def test_streamed_matches_dense_value_and_gradient(name):
    """Blocks of 1 and 5 (not dividing N) rows = dense, also d/dtau."""
    z, second, valid = _labelled_batch(name)
    fn = _loss(name)

    def f(x, tau, bs):
        return fn(x, second, temperature=tau, valid=valid, block_size=bs, **HPARAMS.get(name, {}))

    grad_fn = jax.jit(jax.value_and_grad(f, argnums=(0, 1)), static_argnums=2)
    dense_value, dense_grads = grad_fn(z, 0.2, None)
    for block in (1, 5):
        value, grads = grad_fn(z, 0.2, block)
        np.testing.assert_allclose(value, dense_value, rtol=1e-5, err_msg=f"block {block}")
        np.testing.assert_allclose(grads[0], dense_grads[0], rtol=1e-5,
                                   atol=_gradient_atol(dense_grads[0]))
        np.testing.assert_allclose(grads[1], dense_grads[1], rtol=1e-5, atol=1e-7)
    # The undifferentiated call takes the primal path of the custom VJP.
    np.testing.assert_allclose(jax.jit(f, static_argnums=2)(z, 0.2, 5), dense_value, rtol=1e-5)


@pytest.mark.slow
def test_soft_target_infonce_streamed_matches_dense():
    """Gradients into logits, targets, temperature and the class prior."""
    rng = np.random.default_rng(5)
    logits = jnp.asarray(rng.normal(size=(N, 7)), jnp.float32)
    targets = jax.nn.softmax(jnp.asarray(rng.normal(size=(N, 7)) * 3, jnp.float32))
    targets = targets.at[3].set(0.0)  # no target mass: neither anchor nor negative
    valid = jnp.asarray(rng.random(N) > 0.2)
    prior = jnp.asarray(rng.random(7) + 0.1, jnp.float32)

    def f(lg, tg, tau, eta, bs):
        return losses.soft_target_infonce(
            lg, tg, temperature=tau, class_prior=eta, valid=valid, block_size=bs
        )

    grad_fn = jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2, 3)), static_argnums=4)
    dense_value, dense_grads = grad_fn(logits, targets, 0.7, prior, None)
    for block in (1, 5):
        value, grads = grad_fn(logits, targets, 0.7, prior, block)
        np.testing.assert_allclose(value, dense_value, rtol=1e-5)
        for g, dg in zip(grads, dense_grads, strict=True):
            np.testing.assert_allclose(g, dg, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", only_in_make_test(
    [name for name in STREAMED if name != "nt_xent"], MULTIDEVICE_FAST))
@pytest.mark.matrix
def test_streamed_multidevice_matches_single_device(name):
    """Local anchors streamed against the gathered batch on 8 devices = one device."""
    z, second, _ = _labelled_batch(name, seed=22)
    z = jnp.concatenate([z, z[:8] * 0.5])  # 32 rows: 4 per device
    second = jnp.concatenate([second, second[:8]])
    valid = np.ones(32, bool)
    valid[[0, 9, 10, 11]] = False  # uneven valid counts across devices
    assert_multidevice_matches(
        _loss(name), z, second, valid=valid, temperature=0.1, block_size=3,
        **HPARAMS.get(name, {}),
    )


@pytest.mark.parametrize("name", ["projnce", "soft_supcon-cosine", "med_supcon", "med_nce"])
@pytest.mark.slow
def test_num_classes_gives_the_same_value_and_gradient(name):
    """Labels as class slots (``num_classes``) = distinct-label indices, dense and streamed."""
    z, labels, valid = _labelled_batch(name)
    labels = labels.at[7].set(9)  # still a singleton class, now inside [0, 10)
    fn = _loss(name)

    def f(x, bs, k):
        return fn(x, labels, valid=valid, block_size=bs, num_classes=k, **HPARAMS.get(name, {}))

    grad_fn = jax.jit(jax.value_and_grad(f), static_argnums=(1, 2))
    ref_value, ref_grad = grad_fn(z, None, None)
    for block in (None, 5):
        value, grad = grad_fn(z, block, 10)
        np.testing.assert_allclose(value, ref_value, rtol=1e-5)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=_gradient_atol(ref_grad))


def test_num_classes_is_checked():
    z, labels = jnp.ones((4, 3)), jnp.array([0, 0, 1, 1])
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="num_classes"):
            losses.projnce(z, labels, num_classes=bad)
    with pytest.raises(ValueError, match=r"labels.*\[0, num_classes=1\)"):
        losses.med_nce(z, labels, num_classes=1)


@pytest.mark.parametrize("distance", ["l1", "l2", "cosine"])
@pytest.mark.slow
def test_blockwise_nadaraya_watson_matches_dense_soft_labels(distance):
    """The projection over row blocks (custom VJP) = Eq. (18) from the dense [m, m]
    soft labels of Eq. (17), in value and in the gradient into rows and bandwidth,
    with padding, a singleton class, duplicated rows and blocks not dividing m."""
    z, labels, valid = _labelled_batch("projnce", seed=3)
    z = _core.l2_normalize(z.at[5].set(z[6]))  # a duplicated row: zero distance
    lb = proj.labelled_batch(z, labels, 0.1, valid, None)
    weights = jax.random.normal(jax.random.PRNGKey(0), (N, z.shape[1]))

    def dense(x, h):
        batch = lb._replace(batch=lb.batch._replace(candidates=x))
        return jnp.sum(weights * references.nw_prototypes(references.nw_soft_labels(batch, h, distance), batch))

    def blocked(x, h, block):
        onehot = jax.nn.one_hot(lb.class_ids, N) if block == 5 else None
        g = proj.nw_projection(x, h, valid, lb.class_ids, onehot, distance, N, block)
        return jnp.sum(weights * g)

    h = 1.6 if distance == "l1" else 0.6
    ref_value, ref_grads = jax.value_and_grad(dense, argnums=(0, 1))(lb.batch.candidates, h)
    assert np.abs(ref_grads[1]) > 1e-3  # the bandwidth matters on this batch
    for block in (1, 5, N):
        value, grads = jax.jit(jax.value_and_grad(blocked, argnums=(0, 1)), static_argnums=2)(
            lb.batch.candidates, jnp.float32(h), block
        )
        np.testing.assert_allclose(value, ref_value, rtol=1e-5)
        np.testing.assert_allclose(grads[0], ref_grads[0], rtol=1e-5,
                                   atol=_gradient_atol(ref_grads[0]))
        np.testing.assert_allclose(grads[1], ref_grads[1], rtol=1e-5)



@pytest.mark.parametrize("class_sums", ["onehot", "segment"])
@pytest.mark.parametrize("name", ["soft_supcon", "soft_nce"])
@pytest.mark.slow
def test_fused_cosine_path_matches_dense(name, class_sums, monkeypatch):
    """With the cosine kernel the streamed losses take the kernel and the logits from the
    same Gram blocks (``nw_gram``): value and gradients into the rows, the temperature and
    the bandwidth equal the dense form, with one-hot class sums (soft labels kept, one
    symmetric product per block) and with segment sums (soft labels recomputed, two
    products); SoftSupCon also on 8 devices."""
    if class_sums == "segment":
        monkeypatch.setattr(proj, "ONEHOT_MAX_CLASSES", 0)
    ids = jnp.zeros(N, jnp.int32)
    assert (proj.class_onehot(ids, N, N) is None) == (class_sums == "segment")
    z, labels, valid = _labelled_batch("projnce", seed=7)
    fn = losses.get(name)

    def f(x, tau, h, bs):
        return fn(x, labels, temperature=tau, bandwidth=h, distance="cosine", valid=valid,
                  block_size=bs)

    grad_fn = jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2)), static_argnums=3)
    dense_value, dense_grads = grad_fn(z, 0.2, 0.4, None)
    assert abs(float(dense_grads[2])) > 1e-3  # the bandwidth matters on this batch
    for block in (1, 5):
        value, grads = grad_fn(z, 0.2, 0.4, block)
        np.testing.assert_allclose(value, dense_value, rtol=1e-5, err_msg=f"block {block}")
        for g, dg in zip(grads, dense_grads, strict=True):
            np.testing.assert_allclose(g, dg, rtol=1e-5, atol=1e-6)
    if name == "soft_supcon":
        big = jnp.concatenate([z, z[:8] * 0.5])  # 32 rows: 4 per device
        assert_multidevice_matches(
            fn, big, jnp.concatenate([labels, labels[:8]]),
            valid=jnp.concatenate([valid, valid[:8]]), temperature=0.1, block_size=3,
            distance="cosine", bandwidth=0.4,
        )


def _nw_float32_error_bound(monkeypatch, objective, x, h, weights, distance):
    """Float64 ``(value, d/dx, d/dh)`` of ``objective(x, h, weights)`` (flat) and a first-order
    bound on the rounding error of any float32 evaluation of them from the same float32 inputs.

    Each rounding is a relative perturbation of at most ``u = eps/2`` of its result; pushed
    back to the inputs, the ``~2 sqrt(N)`` roundings on a path (the length-N sums of the
    soft labels and prototypes, combined like a random walk: the rule of thumb of Higham 2002,
    Sec. 2.8) perturb each input relatively by about ``eps sqrt(N)``. The bound of an output ``o_i`` is
    therefore ``eps sqrt(N) sum_a |do_i/da| |a|`` over the inputs (its componentwise
    condition number times ``eps sqrt(N) |o_i|``), with derivatives taken in float64. The
    Gram form of ``l2`` (``||u||² + ||v||² - 2 u.v``) also rounds each squared distance at
    the scale of its operands: ``eps (||z_j||² + ||z_l||²)``, propagated by ``do_i/dd²_jl``.
    """
    sq_distance = references.squared_scaled_distance

    def outputs(x, h, weights, gram_error):
        monkeypatch.setattr(references, "squared_scaled_distance", lambda z, d, b: (
            sq_distance(z, d, b) + gram_error / jnp.square(b)))
        value, (dx, dh) = jax.value_and_grad(objective, argnums=(0, 1))(x, h, weights)
        return jnp.concatenate([value[None], dx.ravel(), dh[None]])

    with jax.enable_x64(True):
        inputs = (jnp.asarray(np.asarray(x), jnp.float64), jnp.float64(np.float32(h)),
                  jnp.asarray(np.asarray(weights), jnp.float64), jnp.zeros((N, N), jnp.float64))
        exact = outputs(*inputs)
        *d_inputs, d_sq = jax.jacrev(outputs, argnums=(0, 1, 2, 3))(*inputs)
        eps = float(np.finfo(np.float32).eps)
        bound = eps * np.sqrt(N) * sum(
            np.sum(np.abs(d * a).reshape(len(exact), -1), axis=1)
            for d, a in zip(d_inputs, inputs[:3], strict=True))
        x64 = inputs[0]
        if distance == "l2":
            norms = jnp.sum(jnp.square(x64), axis=1)
            bound = bound + np.sum(np.abs(d_sq) * eps * (norms[:, None] + norms[None, :]), (1, 2))
    monkeypatch.undo()
    return np.asarray(exact), np.asarray(bound)


@pytest.mark.parametrize("distance", only_in_make_test(["l1", "l2"], ("l2",)))
@pytest.mark.slow
def test_nadaraya_watson_lone_blocks_match_dense(distance, monkeypatch):
    """Row blocks whose rows have no kernel neighbour but themselves skip the distances in
    the backward pass (one-hot soft labels): same value and gradients as the dense
    Eq. (17)-(18), on a batch where a near-duplicate pair couples one block only. (The
    skip does not depend on the distance; a cosine pair near enough to leave the other
    pairs outside the support is too near for float32 Gram entries to resolve.)

    The pair's distance is a difference of nearby unit rows, so d/dh has a condition
    number of ~10³ (l1): the blocked and the dense float32 results are each checked
    against the float64 dense one, within the first-order bound of their rounding
    (:func:`_nw_float32_error_bound`), not within a tolerance fitted to one CPU."""
    z, labels, valid = _labelled_batch("projnce", seed=3)
    # Gram-based distances (l2, cosine) lose digits for near pairs: keep them apart.
    step = {"l1": 0.02, "l2": 0.2}[distance]
    z = _core.l2_normalize(z.at[6].set(z[5] + step * z[9]))
    labels = labels.at[6].set(labels[5] + 1)  # the pair straddles two classes
    valid = valid.at[5:7].set(True)
    lb = proj.labelled_batch(z, labels, 0.1, valid, None)
    weights = jax.random.normal(jax.random.PRNGKey(1), (N, z.shape[1]))
    # t = 1/2 for the pair; every other pair is far outside the kernel's support.
    pair = references.squared_scaled_distance(lb.batch.candidates, distance, 1.0)[5, 6]
    h = 2.0 * float(np.sqrt(pair))

    def dense(x, h, weights):
        batch = lb._replace(batch=lb.batch._replace(candidates=x))
        return jnp.sum(weights * references.nw_prototypes(references.nw_soft_labels(batch, h, distance), batch))

    def blocked(x, h, block):
        g = proj.nw_projection(x, h, valid, lb.class_ids, None, distance, N, block)
        return jnp.sum(weights * g)

    exact, bound = _nw_float32_error_bound(
        monkeypatch, dense, lb.batch.candidates, h, weights, distance)
    assert np.abs(exact[-1]) > 1e-3  # the coupled pair's distance matters

    def check(value, grads, what):
        got = np.concatenate([np.ravel(value), np.ravel(grads[0]), np.ravel(grads[1])])
        error = np.abs(got.astype(np.float64) - exact)
        worst = int(np.argmax(error - bound))
        assert np.all(error <= bound), (
            f"{what}: output {worst} (0: value, last: d/dh) is {got[worst]!r}, float64 "
            f"{exact[worst]!r}: error {error[worst]:.3g} > bound {bound[worst]:.3g}")

    check(*jax.value_and_grad(dense, argnums=(0, 1))(lb.batch.candidates, h, weights), "dense")
    for block in (1, 5):
        coupled = proj._nw_forward(
            lb.batch.candidates, jnp.float32(h), valid, lb.class_ids, None, distance, N, block
        )[1][-1]
        assert 0 < int(np.sum(coupled)) < coupled.shape[0]  # both branches run
        value, grads = jax.jit(jax.value_and_grad(blocked, argnums=(0, 1)), static_argnums=2)(
            lb.batch.candidates, jnp.float32(h), block
        )
        check(value, grads, f"block {block}")


CLASS_SLOT_CASES = ["projnce", "soft_supcon-l1", "soft_nce-cosine", "med_supcon", "med_nce"]


@pytest.mark.parametrize("name", CLASS_SLOT_CASES)
@pytest.mark.slow
def test_class_slot_branches_match_dense(name, monkeypatch):
    """Without ``num_classes`` the streamed losses pick, at run time, the smallest
    compiled number of class slots that holds the batch's distinct labels: with slot
    sizes (2, 8, 24) batches with 2, 5 and 12 distinct labels take each branch and
    equal the dense form in value and gradient."""
    monkeypatch.setattr(streamed, "CLASS_SLOTS_MIN", 2)
    assert streamed.class_slot_sizes(N) == (2, 8, N)
    z, labels, valid = _labelled_batch(name)
    fn = _loss(name)
    for distinct in (2, 5, 12):
        second = jnp.asarray(np.arange(N) * 7 % distinct * 3 + 1)  # not dense ids
        if distinct > 2:
            second = second.at[7].set(99)  # a singleton class

        def f(x, bs, y=second):
            return fn(x, y, valid=valid, block_size=bs, temperature=0.2,
                      **HPARAMS.get(name, {}))

        grad_fn = jax.jit(jax.value_and_grad(f), static_argnums=1)
        dense_value, dense_grad = grad_fn(z, None)
        value, grad = grad_fn(z, 5)
        np.testing.assert_allclose(value, dense_value, rtol=1e-5, err_msg=f"{distinct}")
        np.testing.assert_allclose(grad, dense_grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", only_in_make_test(CLASS_SLOT_CASES, ["projnce", "soft_supcon-l1"]))
@pytest.mark.slow
def test_class_slot_branches_multidevice_matches_single_device(name, monkeypatch):
    """The branch is chosen from the gathered labels: 8 devices = one device."""
    monkeypatch.setattr(streamed, "CLASS_SLOTS_MIN", 2)
    z, second, _ = _labelled_batch(name, seed=22)
    z = jnp.concatenate([z, z[:8] * 0.5])  # 32 rows: 4 per device
    second = jnp.concatenate([second, second[:8]])  # 5 distinct labels: slots (2, 8, 32)
    valid = np.ones(32, bool)
    valid[[0, 9, 10, 11]] = False
    assert_multidevice_matches(
        _loss(name), z, second, valid=valid, temperature=0.1, block_size=3,
        **HPARAMS.get(name, {}),
    )

@pytest.mark.slow
def test_soft_target_infonce_multidevice_matches_single_device():
    rng = np.random.default_rng(8)
    logits = rng.normal(size=(16, 5)).astype(np.float32)
    targets = np.asarray(jax.nn.softmax(rng.normal(size=(16, 5)) * 2), np.float32)
    assert_multidevice_matches(
        losses.soft_target_infonce, logits, targets, temperature=0.5, block_size=1
    )


@pytest.mark.parametrize("name", ["supcon", "sincere"])
@pytest.mark.slow
def test_edge_cases_are_finite(name):
    """One class, all singletons, a tiny temperature, nothing valid."""
    fn = losses.get(name)
    z = jnp.ones((12, 4))
    for labels in (jnp.zeros(12, jnp.int32), jnp.arange(12)):
        value, grad = jax.value_and_grad(
            lambda x, y=labels: fn(x, y, temperature=0.01, block_size=5)
        )(z)
        assert np.isfinite(value) and np.all(np.isfinite(grad))
    value, grad = jax.value_and_grad(
        lambda x: fn(x, jnp.arange(12), valid=jnp.zeros(12, bool), block_size=5)
    )(z)
    assert value == 0.0 and np.all(grad == 0.0)


def test_block_size_choice():
    t = blockwise.BLOCKWISE_THRESHOLD
    assert blockwise.choose_block(None, t) is None
    assert blockwise.choose_block(None, 2 * t) == blockwise.BLOCK_ELEMENTS // (2 * t)
    assert blockwise.choose_block(7, 10) == 7
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="block_size"):
            blockwise.choose_block(bad, 10)
    with pytest.raises(ValueError, match="block_size"):
        losses.supcon(jnp.ones((4, 3)), jnp.arange(4), block_size=0)


def _temp_bytes(fn, *args) -> int:
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize(
    "name",
    ["supcon", "sincere", "y_aware_infonce", "projnce", "soft_supcon-cosine", "med_nce",
     "global_uniformity", "conditional_uniformity", "mio"],
)
@pytest.mark.slow
def test_streamed_gradient_does_not_hold_the_n_by_n_matrix(name, monkeypatch):
    """Compiled temporaries of value_and_grad: dense holds several N² arrays, the
    streamed form stays well under one."""
    n, block = 2048, 64
    rng = np.random.default_rng(0)
    z = jnp.asarray(rng.normal(size=(n, 16)), jnp.float32)
    if name in METADATA_LOSSES or name == "global_uniformity":
        second = jnp.asarray(rng.normal(size=(n,)), jnp.float32)
    else:
        second = jnp.arange(n) // 2
    fn = _loss(name)
    kwargs = dict(HPARAMS.get(name, {}))
    if name.split("-")[0] in CLASS_LOSSES:
        kwargs["num_classes"] = n // 2

    def grad(bs):
        return jax.value_and_grad(lambda x: fn(x, second, block_size=bs, **kwargs))

    one_matrix = n * n * 4
    with monkeypatch.context() as patch:
        patch.setattr(blockwise, "BLOCKWISE_THRESHOLD", n)  # block_size=None: dense
        assert _temp_bytes(grad(None), z) > one_matrix
    assert _temp_bytes(grad(block), z) < one_matrix // 4


@pytest.mark.slow
def test_soft_l1_projection_does_not_hold_n_by_n_by_d():
    """SoftNCE with the l1 distance: the Nadaraya–Watson pass keeps one [block, D, m]
    slab of coordinate differences, far below the [N, N, D] array (here 1 GiB)."""
    n, d = 4096, 16
    z = jnp.asarray(np.random.default_rng(0).normal(size=(n, d)), jnp.float32)
    labels = jnp.arange(n) % 10

    def f(x):
        return losses.soft_nce(x, labels, distance="l1", num_classes=10)

    assert _temp_bytes(jax.value_and_grad(f), z) < n * n * d * 4 // 8
