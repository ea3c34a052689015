"""Projection and classification heads: layer structure (SimCLR v2, MIO, linear),
parameter counts, BN train/eval modes, global vs per-device BN under shard_map, bfloat16."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from contrastive_jax.models import LinearHead, MLPHead
from tests.models.utils import count_params, forward, param_leaves, sharded_forward


def paths(module: nnx.Module) -> set[str]:
    """Dotted paths of the module's parameters, e.g. ``hidden_linears.0.kernel``."""
    return {".".join(map(str, path)) for path, _ in nnx.to_flat_state(nnx.state(module, nnx.Param))}


@pytest.mark.parametrize("num_hidden_layers", [0, 1, 2])
def test_simclr_v2_head_layers(num_hidden_layers):
    head = nnx.eval_shape(
        lambda: MLPHead(
            16, 8, hidden_features=32, num_hidden_layers=num_hidden_layers, rngs=nnx.Rngs(0)
        )
    )
    expected = {"out.kernel"}
    for i in range(num_hidden_layers):
        expected |= {f"hidden_linears.{i}.kernel", f"hidden_bns.{i}.scale", f"hidden_bns.{i}.bias"}
    assert paths(head) == expected  # no biases in the Linear layers, no final BN
    widths = [16] + [32] * num_hidden_layers
    hidden = sum(a * b + 2 * b for a, b in zip(widths[:-1], widths[1:], strict=True))
    assert count_params(head) == hidden + widths[-1] * 8
    assert head.out.kernel.shape == (widths[-1], 8)


@pytest.mark.parametrize(
    "num_hidden_layers, expected",
    [
        # Linear(2048->2048) -> BN -> ReLU -> Linear(2048->128) -> BN   (models A/C)
        (1, 2048 * 2048 + 2 * 2048 + 2048 * 128 + 2 * 128),
        # [Linear(->2048) -> BN -> ReLU] x 2 -> Linear(->128) -> BN     (models B/D)
        (2, 2 * (2048 * 2048 + 2 * 2048) + 2048 * 128 + 2 * 128),
    ],
)
def test_mio_head_matches_reference(num_hidden_layers, expected):
    head = nnx.eval_shape(
        lambda: MLPHead(
            2048, 128, num_hidden_layers=num_hidden_layers, last_bn=True, rngs=nnx.Rngs(0)
        )
    )
    assert "out_bn.scale" in paths(head) and "out_bn.bias" in paths(head)
    n = count_params(head)
    print(f"MIO head, {num_hidden_layers} hidden layer(s), 2048 -> 128: {n:,} parameters")
    assert n == expected


def test_hidden_width_defaults_to_input_width():
    head = nnx.eval_shape(lambda: MLPHead(48, 8, rngs=nnx.Rngs(0)))
    assert head.hidden_linears[0].kernel.shape == (48, 48)
    head = nnx.eval_shape(lambda: MLPHead(48, 8, hidden_features=96, rngs=nnx.Rngs(0)))
    assert head.hidden_linears[0].kernel.shape == (48, 96) and head.out.kernel.shape == (96, 8)


@pytest.mark.slow
def test_forward_shapes_and_final_bn():
    h = jax.random.normal(jax.random.key(0), (32, 16))
    simclr = MLPHead(16, 8, hidden_features=32, rngs=nnx.Rngs(0))
    mio = MLPHead(16, 8, hidden_features=32, last_bn=True, rngs=nnx.Rngs(0))
    z, _ = forward(nnx.graphdef(simclr))(nnx.state(simclr), h)
    z_mio, _ = forward(nnx.graphdef(mio))(nnx.state(mio), h)
    for out in (z, z_mio):
        assert out.shape == (32, 8) and out.dtype == jnp.float32
        assert np.any(out < 0)  # no ReLU after the last layer
    # Final BN in train mode at its initial scale 1 / bias 0: standardised columns.
    np.testing.assert_allclose(jnp.mean(z_mio, axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(jnp.var(z_mio, axis=0), 1.0, rtol=1e-3)
    assert not np.allclose(jnp.var(z, axis=0), 1.0, rtol=0.1)


def test_batchnorm_train_updates_running_stats_eval_uses_them():
    head = MLPHead(16, 8, hidden_features=32, last_bn=True, rngs=nnx.Rngs(0))
    h = jax.random.normal(jax.random.key(1), (32, 16)) + 3.0
    h_swapped = h.at[16:].set(jax.random.normal(jax.random.key(2), (16, 16)))

    train_out, new_state = forward(nnx.graphdef(head))(nnx.state(head), h)
    trained = nnx.merge(nnx.graphdef(head), new_state)
    pre_bn = trained.hidden_linears[0](h)
    np.testing.assert_allclose(
        trained.hidden_bns[0].mean[...], 0.1 * pre_bn.mean(0), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        trained.hidden_bns[0].var[...], 0.9 + 0.1 * pre_bn.var(0), rtol=1e-5, atol=1e-6
    )
    swapped, _ = forward(nnx.graphdef(head))(nnx.state(head), h_swapped)
    assert not np.allclose(swapped[:16], train_out[:16], rtol=1e-3)

    trained.eval()
    graphdef, state = nnx.split(trained)
    eval_out, after = forward(graphdef)(state, h)
    eval_swapped, _ = forward(graphdef)(state, h_swapped)
    np.testing.assert_allclose(eval_swapped[:16], eval_out[:16], rtol=1e-6)
    for a, b in zip(
        jax.tree.leaves(nnx.state(trained, nnx.BatchStat)),
        jax.tree.leaves(nnx.state(nnx.merge(graphdef, after), nnx.BatchStat)),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    # Eval BN: (x - running mean) / sqrt(running var + eps), then scale and bias.
    bn = trained.out_bn
    pre_out = trained.out(nnx.relu(trained.hidden_bns[0](trained.hidden_linears[0](h))))
    np.testing.assert_allclose(
        eval_out, (pre_out - bn.mean[...]) / jnp.sqrt(bn.var[...] + 1e-5), rtol=1e-5, atol=1e-5
    )


def test_global_batchnorm_under_shard_map():
    """bn_axis_name="data": 8 devices x 4 rows == one device on all 32 rows, outputs and
    running stats (rtol 1e-5). bn_axis_name=None: each device uses its own 4 rows."""
    head = MLPHead(16, 8, hidden_features=32, num_hidden_layers=2, last_bn=True, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(head)
    global_graphdef = nnx.graphdef(
        MLPHead(
            16,
            8,
            hidden_features=32,
            num_hidden_layers=2,
            last_bn=True,
            bn_axis_name="data",
            rngs=nnx.Rngs(0),
        )
    )
    h = jax.random.normal(jax.random.key(3), (32, 16))

    single, single_state = forward(graphdef)(state, h)
    sharded, sharded_state = sharded_forward(global_graphdef, return_state=True)(state, h)
    np.testing.assert_allclose(sharded, single, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(single_state), jax.tree.leaves(sharded_state), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)

    local = sharded_forward(graphdef, return_state=False)(state, h)
    assert not np.allclose(local, single, rtol=1e-2)
    per_device = np.concatenate(
        [forward(graphdef)(state, h[4 * d : 4 * d + 4])[0] for d in range(8)]
    )
    np.testing.assert_allclose(local, per_device, rtol=1e-5, atol=1e-6)


def test_bfloat16_compute_float32_params():
    head = MLPHead(16, 8, hidden_features=32, last_bn=True, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    reference = MLPHead(16, 8, hidden_features=32, last_bn=True, rngs=nnx.Rngs(0))
    assert all(p.dtype == jnp.float32 for p in param_leaves(head))
    h = jax.random.normal(jax.random.key(4), (32, 16))
    graphdef, state = nnx.split(head)
    assert "bf16[32,16]" in str(jax.make_jaxpr(lambda s, h: nnx.merge(graphdef, s)(h))(state, h))
    out, _ = forward(graphdef)(state, h)
    expected, _ = forward(nnx.graphdef(reference))(nnx.state(reference), h)
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, expected, atol=0.1)


def test_linear_head_is_one_dense_layer_with_bias():
    assert (
        count_params(nnx.eval_shape(lambda: LinearHead(2048, 10, rngs=nnx.Rngs(0))))
        == 2048 * 10 + 10
    )
    head = LinearHead(16, 10, rngs=nnx.Rngs(0))
    assert paths(head) == {"linear.kernel", "linear.bias"}
    out, _ = forward(nnx.graphdef(head))(nnx.state(head), jnp.ones((3, 16)))
    assert out.shape == (3, 10) and out.dtype == jnp.float32


def test_same_seed_same_params():
    a, b, c = (MLPHead(16, 8, hidden_features=32, rngs=nnx.Rngs(s)) for s in (0, 0, 1))
    for p, q in zip(param_leaves(a), param_leaves(b), strict=True):
        np.testing.assert_array_equal(p, q)
    assert not np.array_equal(a.out.kernel[...], c.out.kernel[...])


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"num_hidden_layers": -1}, "num_hidden_layers"),
        ({"out_features": 0}, "out_features"),
        ({"hidden_features": 2.5}, "hidden_features"),
        ({"bn_momentum": -0.1}, "bn_momentum"),
    ],
)
def test_invalid_arguments_raise(kwargs, field):
    with pytest.raises(ValueError, match=field):
        MLPHead(16, **{"out_features": 8, **kwargs}, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="out_features"):
        LinearHead(16, 0, rngs=nnx.Rngs(0))
