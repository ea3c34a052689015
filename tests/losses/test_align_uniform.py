"""``align_uniform`` and its parts stream like the other losses.

Streamed (``block_size``, or automatically above ``BLOCKWISE_THRESHOLD`` global rows) equals
dense in value and in every gradient (the rows, ``alpha``, ``t``), with padded rows and
blocks that divide no part's rows; under ``jax.shard_map`` / ``pmap`` with ``axis_name`` and
under ``jax.jit`` on an Explicit mesh it equals one device; and the streamed gradient holds no
[N, N] array.

Tolerances: the streamed and dense forms add the same float32 terms in other orders (sums
and log-sum-exps over at most N = 32 rows of N terms), a relative error of order
``eps * sqrt(N * N)`` = 1.2e-7 * 32 = 4e-6 at worst per reduction; ``RTOL`` = 1e-5 bounds
that with room for the two-step (pair, then row) reductions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax import losses, metrics
from contrastive_jax.losses import blockwise
from tests.losses.multidevice import assert_multidevice_matches, run_style

N = 32
RTOL = 1e-5
#: Gradients are O(1) here; the absolute floor covers entries that cancel to ~0.
ATOL = 1e-6


def _batch(seed: int = 3):
    """Two views per example on consecutive rows, ids shuffled, 5 padded rows."""
    rng = np.random.default_rng(seed)
    z = jnp.asarray(rng.normal(size=(N, 5)), jnp.float32)
    ids = jnp.asarray(np.repeat(rng.permutation(N // 2), 2), jnp.int32)
    valid = np.ones(N, bool)
    valid[[0, 9, 10, 17, 31]] = False  # a lone view (row 0's pair 1 stays)
    return z, ids, jnp.asarray(valid)


@pytest.mark.parametrize(("alpha", "t"), [(2.0, 2.0), (1.3, 3.0)])
@pytest.mark.slow
def test_streamed_matches_dense_value_and_gradient(alpha, t):
    """Blocks of 1 and 5 rows (dividing neither N nor N / 2) = dense, also d/d alpha, d/dt."""
    z, ids, valid = _batch()

    def f(x, a, s, bs):
        return losses.align_uniform(x, ids, alpha=a, t=s, valid=valid, block_size=bs)

    grad_fn = jax.jit(jax.value_and_grad(f, argnums=(0, 1, 2)), static_argnums=3)
    dense_value, dense_grads = grad_fn(z, alpha, t, None)
    for block in (1, 5):
        value, grads = grad_fn(z, alpha, t, block)
        np.testing.assert_allclose(value, dense_value, rtol=RTOL, err_msg=f"block {block}")
        for g, dg in zip(grads, dense_grads, strict=True):
            np.testing.assert_allclose(g, dg, rtol=RTOL, atol=ATOL, err_msg=f"block {block}")
    # Static hyperparameters are compiled in; the undifferentiated call is the primal path.
    static = jax.jit(lambda x: f(x, alpha, t, 5))(z)
    np.testing.assert_allclose(static, dense_value, rtol=RTOL)


@pytest.mark.parametrize("part", ["alignment_from_labels", "uniformity"])
def test_metric_parts_stream(part):
    z, ids, valid = _batch(seed=4)
    fn = getattr(metrics, part)

    def f(x, bs):
        if part == "uniformity":
            return fn(x, t=2.0, valid=valid, block_size=bs)
        return fn(x, ids, alpha=2.0, valid=valid, block_size=bs)

    grad_fn = jax.jit(jax.value_and_grad(f), static_argnums=1)
    dense, streamed = grad_fn(z, None), grad_fn(z, 7)
    np.testing.assert_allclose(streamed[0], dense[0], rtol=RTOL)
    np.testing.assert_allclose(streamed[1], dense[1], rtol=RTOL, atol=ATOL)


def test_too_few_rows_give_zero():
    z, ids, _ = _batch()
    nothing = jnp.zeros(N, bool)
    value, grad = jax.jit(jax.value_and_grad(
        lambda x: losses.align_uniform(x, ids, valid=nothing, block_size=5)))(z)
    assert value == 0.0 and np.all(grad == 0.0)


@pytest.mark.parametrize("block_size", [None, 3], ids=["dense", "streamed"])
@pytest.mark.matrix
def test_multidevice_matches_single_device(block_size):
    """shard_map (gradient outside and inside, with and without varying-axis checks) and
    pmap on 8 devices, 4 rows (2 examples) each, uneven valid counts."""
    z, ids, valid = _batch(seed=5)
    assert_multidevice_matches(
        losses.align_uniform, z, ids, valid=valid, block_size=block_size, rtol=RTOL, atol=ATOL
    )


@pytest.mark.parametrize("block_size", [None, 3], ids=["dense", "streamed"])
@pytest.mark.slow
def test_explicit_mesh_jit_matches_single_device(block_size):
    z, ids, valid = _batch(seed=6)
    ref = run_style("single", losses.align_uniform, z, ids, valid, block_size=block_size)
    value, grad = run_style("jit_explicit", losses.align_uniform, z, ids, valid,
                            block_size=block_size)
    np.testing.assert_allclose(value, ref[0], rtol=RTOL)
    np.testing.assert_allclose(grad, ref[1], rtol=RTOL, atol=ATOL)


def _temp_bytes(fn, *args) -> int:
    return jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes


@pytest.mark.slow
def test_streams_automatically_above_the_threshold(monkeypatch):
    """At N = 2048 the default (``block_size=None``) value and gradient hold about what
    SupCon's do (one [block, N] slab at a time; its parts run one after another), the
    dense form more than one [N, N] float32 array."""
    n = 2 * blockwise.BLOCKWISE_THRESHOLD
    z = jnp.asarray(np.random.default_rng(0).normal(size=(n, 16)), jnp.float32)
    ids = jnp.arange(n) // 2

    def grad(name):
        fn = losses.get(name)
        return jax.value_and_grad(lambda y: fn(y, ids))

    supcon = _temp_bytes(grad("supcon"), z)
    assert _temp_bytes(grad("align_uniform"), z) < 1.5 * supcon
    with monkeypatch.context() as patch:
        patch.setattr(blockwise, "BLOCKWISE_THRESHOLD", n)  # block_size=None: dense
        assert _temp_bytes(grad("align_uniform"), z) > n * n * 4
