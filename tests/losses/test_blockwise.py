"""Streamed (row-block) losses equal the dense ones (spec/sincere-supcon.md T12, issue 7).

Every streamed loss is checked against its dense form in value and gradient
(rtol 1e-5, float32), with padded rows, singleton classes and block sizes that
do not divide the batch, with and without ``axis_name``; the streamed gradient
must also keep memory O(N·block).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax import losses
from contrastive_jax.losses import blockwise
from tests.losses.multidevice import assert_multidevice_matches

N = 24


def _labelled_batch(name: str, seed: int = 31):
    """Embeddings, second argument, valid mask; with a singleton class and padding."""
    rng = np.random.default_rng(seed)
    z = jnp.asarray(rng.normal(size=(N, 5)), jnp.float32)
    if name == "nt_xent":
        second = jnp.asarray(rng.permutation(np.repeat(np.arange(N // 2), 2)))
    elif name == "y_aware_infonce":
        second = jnp.asarray(rng.normal(size=(N, 2)), jnp.float32)
    else:
        second = jnp.asarray(rng.integers(0, 4, N)).at[7].set(99)  # a singleton class
    valid = jnp.asarray(rng.random(N) > 0.25)
    return z, second, valid


STREAMED = ["supcon", "sincere", "nt_xent", "y_aware_infonce", "mio"]
HPARAMS = {"y_aware_infonce": {"sigma": 0.7}, "mio": {"l2_weight": 0.5}}


@pytest.mark.parametrize("name", STREAMED)
def test_streamed_matches_dense_value_and_gradient(name):
    """Blocks of 1 and 5 (not dividing N) rows = dense, also d/dtau."""
    z, second, valid = _labelled_batch(name)
    fn = losses.get(name)

    def f(x, tau, bs):
        return fn(x, second, temperature=tau, valid=valid, block_size=bs, **HPARAMS.get(name, {}))

    grad_fn = jax.jit(jax.value_and_grad(f, argnums=(0, 1)), static_argnums=2)
    dense_value, dense_grads = grad_fn(z, 0.2, None)
    for block in (1, 5):
        value, grads = grad_fn(z, 0.2, block)
        np.testing.assert_allclose(value, dense_value, rtol=1e-5, err_msg=f"block {block}")
        np.testing.assert_allclose(grads[0], dense_grads[0], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(grads[1], dense_grads[1], rtol=1e-5, atol=1e-7)
    # The undifferentiated call takes the primal path of the custom VJP.
    np.testing.assert_allclose(jax.jit(f, static_argnums=2)(z, 0.2, 5), dense_value, rtol=1e-5)


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


@pytest.mark.parametrize("name", ["supcon", "sincere", "y_aware_infonce", "mio"])
def test_streamed_multidevice_matches_single_device(name):
    """Local anchors streamed against the gathered batch on 8 devices = one device."""
    z, second, _ = _labelled_batch(name, seed=22)
    z = jnp.concatenate([z, z[:8] * 0.5])  # 32 rows: 4 per device
    second = jnp.concatenate([second, second[:8]])
    valid = np.ones(32, bool)
    valid[[0, 9, 10, 11]] = False  # uneven valid counts across devices
    assert_multidevice_matches(
        losses.get(name), z, second, valid=valid, temperature=0.1, block_size=3,
        **HPARAMS.get(name, {}),
    )


def test_soft_target_infonce_multidevice_matches_single_device():
    rng = np.random.default_rng(8)
    logits = rng.normal(size=(16, 5)).astype(np.float32)
    targets = np.asarray(jax.nn.softmax(rng.normal(size=(16, 5)) * 2), np.float32)
    assert_multidevice_matches(
        losses.soft_target_infonce, logits, targets, temperature=0.5, block_size=1
    )


@pytest.mark.parametrize("name", ["supcon", "sincere"])
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


@pytest.mark.parametrize("name", ["supcon", "sincere", "y_aware_infonce"])
def test_streamed_gradient_does_not_hold_the_n_by_n_matrix(name):
    """Compiled temporaries of value_and_grad: dense holds several N² arrays, the
    streamed form stays well under one."""
    n, block = 2048, 64
    rng = np.random.default_rng(0)
    z = jnp.asarray(rng.normal(size=(n, 16)), jnp.float32)
    second = (
        jnp.asarray(rng.normal(size=(n,)), jnp.float32)
        if name == "y_aware_infonce"
        else jnp.arange(n) // 2
    )
    fn = losses.get(name)

    def grad(bs):
        return jax.value_and_grad(lambda x: fn(x, second, block_size=bs))

    one_matrix = n * n * 4
    assert _temp_bytes(grad(None), z) > one_matrix
    assert _temp_bytes(grad(block), z) < one_matrix // 4
