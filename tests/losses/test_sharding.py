"""Every loss in every way a JAX project shards a batch, against one device.

One parametrised test runs each registered loss, dense (``block_size=None``) and
streamed (a small block that does not divide the rows), as :data:`STYLES` lists it:
one device, ``jax.jit`` on arrays sharded over an Explicit mesh and over an Auto
(GSPMD) one, ``jax.shard_map`` over one axis and over two (``axis_name`` a tuple,
default checks, ``out_specs=P()``), and ``jax.pmap``; value and gradient must equal
the single-device call. The NCE losses and one loss of each other family run by
default; the others are marked ``slow`` (``make test-all``), since each case
compiles its own program. Then: bfloat16 inputs accumulate in float32 in every
style, ``jax.checkpoint`` and ``jax.vmap`` over a leading axis (several heads), a
mesh set with ``jax.set_mesh`` and a sharded feature axis, and the errors of a bad
``axis_name``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from contrastive_jax import losses
from tests.losses.cases import STREAMED, case, loss_kwargs, streams
from tests.losses.multidevice import STYLES, run_style
from tests.pairwise import pair_cover

#: Run in the default test run: the NCE losses and one loss of each other family.
#: (``nt_xent`` is ``supcon`` over instance ids.)
DEFAULT = ("supcon", "sincere", "soft_supcon", "mio", "conditional_uniformity",
           "soft_target_infonce")
#: Run by default under ``jax.vmap`` and ``jax.checkpoint``: one loss of each streaming
#: mechanism (row sums, the fused Gram passes, the online log-sum-exp).
VMAP_DEFAULT = ("supcon", "soft_supcon", "conditional_uniformity")


@functools.cache
def reference(name: str, block_size: int | None):
    loss_fn, first, second, valid = case(name)
    kwargs = loss_kwargs(name, block_size)
    value, grad = run_style("single", loss_fn, first, second, valid, **kwargs)
    return float(value), np.asarray(grad)


def _params():
    cases = [(name, block_size, style) for name in losses.names()
             for block_size in (None, STREAMED)
             # rows are independent (or pairs): nothing to stream
             if not (block_size and not streams(name))
             for style in STYLES[1:]]
    # The default run: every (loss, layout), (loss, style) and (layout, style) pair of the
    # DEFAULT losses once; `make test-all` runs the whole matrix.
    fast = set(pair_cover([c for c in cases if c[0] in DEFAULT]))
    for name, block_size, style in cases:
        marks = () if (name, block_size, style) in fast else (pytest.mark.slow,)
        mode = "dense" if block_size is None else "streamed"
        yield pytest.param(name, block_size, style, marks=marks, id=f"{name}-{mode}-{style}")


@pytest.mark.parametrize(("name", "block_size", "style"), list(_params()))
@pytest.mark.matrix
def test_every_style_equals_one_device(name, block_size, style):
    loss_fn, first, second, valid = case(name)
    ref_value, ref_grad = reference(name, block_size)
    assert np.isfinite(ref_value) and np.all(np.isfinite(ref_grad))
    value, grad = run_style(style, loss_fn, first, second, valid, **loss_kwargs(name, block_size))
    value = np.asarray(value).reshape(-1)
    np.testing.assert_allclose(value, np.full_like(value, ref_value), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), ref_grad, rtol=1e-5, atol=1e-6)


def test_every_registered_loss_is_in_the_matrix():
    names = {p.values[0] for p in _params()}
    assert names == set(losses.names())
    assert set(DEFAULT) <= names


@pytest.mark.parametrize("block_size", [None, STREAMED], ids=["dense", "streamed"])
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.matrix
def test_bfloat16_accumulates_in_float32(style, block_size):
    """bf16 rows give the float32 loss of the same (rounded) rows, to float32 accuracy:
    nothing is accumulated in bf16, whichever way the batch is sharded."""
    loss_fn, first, second, valid = case("supcon")
    first = first.astype(jnp.bfloat16)
    kwargs = loss_kwargs("supcon", block_size)
    value, grad = run_style(style, loss_fn, first, second, valid, **kwargs)
    exact, exact_grad = run_style(
        "single", loss_fn, first.astype(jnp.float32), second, valid, **kwargs
    )
    assert np.asarray(value).dtype == np.float32
    assert grad.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(value).reshape(-1), float(exact), rtol=1e-6)
    np.testing.assert_allclose(
        np.asarray(grad, np.float32), np.asarray(exact_grad.astype(jnp.bfloat16), np.float32),
        rtol=1e-2, atol=1e-3,
    )


def _vmap_cases():
    for name in losses.names():
        for block_size in (None, STREAMED):
            if block_size and name == "soft_target_cross_entropy":
                continue
            marks = () if name in VMAP_DEFAULT else (pytest.mark.slow,)
            mode = "dense" if block_size is None else "streamed"
            yield pytest.param(name, block_size, marks=marks, id=f"{name}-{mode}")


@pytest.mark.parametrize(("name", "block_size"), list(_vmap_cases()))
@pytest.mark.slow
def test_checkpoint_and_vmap_over_heads(name, block_size):
    """``jax.vmap`` over a leading axis of several heads, each loss under
    ``jax.checkpoint``, equals one call per head."""
    loss_fn, first, second, valid = case(name)
    kwargs = loss_kwargs(name, block_size)
    heads = jnp.stack([first, 0.5 * first[::-1] + 0.1])

    def per_head(x):
        return jax.checkpoint(lambda x_: loss_fn(x_, second, valid=valid, **kwargs))(x)

    values, grads = jax.jit(jax.vmap(jax.value_and_grad(per_head)))(heads)
    one_head = jax.jit(jax.value_and_grad(lambda x: loss_fn(x, second, valid=valid, **kwargs)))
    for h in range(heads.shape[0]):
        value, grad = one_head(heads[h])
        np.testing.assert_allclose(values[h], value, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grads[h], grad, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_vmap_over_heads_on_an_explicit_mesh():
    """Heads [H, N, D] with rows sharded over an Explicit axis: ``jax.vmap`` of the loss
    equals one call per head. (Heads sharded over a second axis too fail inside JAX
    0.10.2 when differentiated; ``docs/using-losses.md`` says so.)"""
    loss_fn, first, second, valid = case("supcon")
    heads = jnp.stack([first, 0.5 * first[::-1] + 0.1])
    mesh = jax.make_mesh((2, 4), ("heads", "batch"))
    placed = jax.device_put(heads, NamedSharding(mesh, P(None, "batch")))

    def per_head(x):
        return loss_fn(x, second, valid=valid, temperature=0.5, block_size=STREAMED)

    values, grads = jax.jit(jax.vmap(jax.value_and_grad(per_head)))(placed)
    assert grads.sharding.is_equivalent_to(placed.sharding, 3)
    for h in range(2):
        value, grad = jax.value_and_grad(per_head)(heads[h])
        np.testing.assert_allclose(values[h], value, rtol=1e-5)
        np.testing.assert_allclose(grads[h], grad, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_set_mesh_two_axes_and_a_sharded_feature_axis():
    """Under ``jax.set_mesh``, rows over two Explicit axes and the feature axis over a
    third: the loss gathers the features, shards over the rows' axes, and the gradient
    keeps the embeddings' sharding. A traced temperature is replicated."""
    loss_fn, first, second, valid = case("sincere")
    ref = jax.jit(jax.value_and_grad(
        lambda x, t: loss_fn(x, second, valid=valid, temperature=t, block_size=STREAMED)
    ))(first, 0.5)
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "model"))
    with jax.set_mesh(mesh):
        z = jax.device_put(first, P(("data", "fsdp"), "model"))
        labels, mask = (jax.device_put(x, P(("data", "fsdp"))) for x in (second, valid))

        @jax.jit
        def step(x, t):
            return jax.value_and_grad(
                lambda x_: loss_fn(x_, labels, valid=mask, temperature=t, block_size=STREAMED)
            )(x)

        value, grad = step(z, jnp.float32(0.5))
    assert grad.sharding.is_equivalent_to(z.sharding, 2)
    np.testing.assert_allclose(value, ref[0], rtol=1e-5)
    np.testing.assert_allclose(grad, ref[1], rtol=1e-5, atol=1e-6)


def test_replicated_rows_with_sharded_labels_run_as_one_device():
    loss_fn, first, second, valid = case("supcon")
    mesh = jax.make_mesh((8,), ("batch",))
    labels = jax.device_put(second, NamedSharding(mesh, P("batch")))
    z = jax.device_put(first, NamedSharding(mesh, P()))
    value = jax.jit(lambda x: loss_fn(x, labels, valid=valid, temperature=0.5))(z)
    np.testing.assert_allclose(value, reference("supcon", None)[0], rtol=1e-5)


@pytest.mark.parametrize("axis_name", [("data", 1), (), 3])
def test_bad_axis_name_is_a_value_error(axis_name):
    loss_fn, first, second, _ = case("supcon")
    with pytest.raises(ValueError, match="axis_name"):
        loss_fn(first, second, axis_name=axis_name)


def test_axis_name_outside_its_map_names_the_fix():
    loss_fn, first, second, _ = case("supcon")
    with pytest.raises(ValueError, match="axis_name=None"):
        loss_fn(first, second, axis_name="batch")
