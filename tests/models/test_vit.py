"""Vision Transformers: published parameter counts, shapes of every variant, pooling,
dropout / stochastic depth in train vs eval mode, determinism and bfloat16."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from contrastive_jax.models import (
    VIT_VARIANTS,
    LinearHead,
    VisionTransformer,
    create_encoder,
    default_encoder_config,
)
from tests.models.utils import count_params, forward, output_shape, param_leaves


def encoder_config(**overrides):
    config = default_encoder_config()
    config.update(overrides)
    return config


STOCHASTIC = dict(dropout_rate=0.1, attention_dropout_rate=0.1, drop_path_rate=0.2)


def tiny_vit(seed: int = 0, **overrides) -> VisionTransformer:
    """2 blocks of width 32 on 8x8 images with 4x4 patches: 4 patch tokens.

    Tests feed it [4, 8, 8, 3] batches so that the jitted forwards are shared."""
    kwargs = dict(image_size=8, patch_size=4, hidden_size=32, depth=2, num_heads=4, mlp_dim=64)
    return VisionTransformer(**{**kwargs, **overrides}, rngs=nnx.Rngs(seed))


@pytest.mark.parametrize(
    "name, expected",
    [
        # timm vit_{tiny,small,base}_patch16_224 minus the 1000-class head.
        ("vit_ti16", 5_524_416),
        ("vit_s16", 21_665_664),
        ("vit_b16", 85_798_656),
        # 32x32 inputs, 4x4 patches: 64 + 1 position embeddings instead of 196 + 1.
        ("vit_ti4", 5_524_416 - 16 * 16 * 3 * 192 + 4 * 4 * 3 * 192 - 132 * 192),
        ("vit_s4", 21_665_664 - 16 * 16 * 3 * 384 + 4 * 4 * 3 * 384 - 132 * 384),
    ],
)
@pytest.mark.slow
def test_parameter_counts_and_output_shape(name, expected):
    variant = VIT_VARIANTS[name]
    model = nnx.eval_shape(lambda: create_encoder(encoder_config(name=name), rngs=nnx.Rngs(0)))
    n = count_params(model)
    print(f"{name} at {variant.image_size}x{variant.image_size}: {n:,} parameters (no head)")
    assert n == expected
    assert model.num_features == variant.hidden_size
    tokens = (variant.image_size // variant.patch_size) ** 2 + 1
    assert model.pos_embed.shape == (1, tokens, variant.hidden_size)
    out = output_shape(model, (2, variant.image_size, variant.image_size, 3))
    assert out.shape == (2, variant.hidden_size) and out.dtype == jnp.float32
    if name == "vit_b16":
        # With the 1000-class head: 86.6M (Dosovitskiy et al., 2021, Table 1: "86M").
        head = nnx.eval_shape(lambda: LinearHead(model.num_features, 1000, rngs=nnx.Rngs(0)))
        n_with_head = n + count_params(head)
        print(f"vit_b16 + 1000-class head: {n_with_head:,} parameters")
        assert n_with_head == 86_567_656


@pytest.mark.slow
def test_image_size_and_pool_options():
    config = encoder_config(name="vit_s4", image_size=64, pool="mean")
    model = nnx.eval_shape(lambda: create_encoder(config, rngs=nnx.Rngs(0)))
    assert model.pos_embed.shape == (1, 16 * 16, 384)  # no class token
    assert model.cls_token is None
    out = output_shape(model, (2, 64, 64, 3))
    assert out.shape == (2, 384) and out.dtype == jnp.float32


@pytest.mark.parametrize("pool", ["cls", "mean"])
@pytest.mark.slow
def test_pooling_follows_final_layernorm(pool):
    """With the final LayerNorm at its initial scale 1 and bias 0, every token, and so
    their mean, has zero mean over features; the class token also has unit variance."""
    model = tiny_vit(pool=pool)
    x = jax.random.normal(jax.random.key(0), (4, 8, 8, 3))
    out, _ = forward(nnx.graphdef(model))(nnx.state(model), x)
    np.testing.assert_allclose(jnp.mean(out, axis=-1), 0.0, atol=1e-5)
    if pool == "cls":
        np.testing.assert_allclose(jnp.var(out, axis=-1), 1.0, rtol=1e-3)


@pytest.mark.slow
def test_dropout_and_stochastic_depth_in_train_mode_only():
    model = tiny_vit(**STOCHASTIC)
    assert [b.drop_path.rate for b in model.blocks] == [0.0, 0.2]
    x = jax.random.normal(jax.random.key(1), (4, 8, 8, 3))
    graphdef, state = nnx.split(model)
    first, state = forward(graphdef)(state, x)
    second, _ = forward(graphdef)(state, x)
    assert first.shape == (4, 32) and np.all(np.isfinite(first))
    assert not np.allclose(first, second, rtol=1e-4)  # fresh masks each step

    model.eval()
    assert all(d.deterministic for _, d in nnx.iter_modules(model) if isinstance(d, nnx.Dropout))
    graphdef, state = nnx.split(model)
    first, state = forward(graphdef)(state, x)
    second, _ = forward(graphdef)(state, x)
    np.testing.assert_array_equal(first, second)


@pytest.mark.slow
def test_stochastic_depth_drops_whole_residual_branches():
    block = tiny_vit(drop_path_rate=0.9).blocks[1]
    assert block.drop_path.rate == 0.9
    x = jax.random.normal(jax.random.key(2), (64, 5, 32))
    out, _ = forward(nnx.graphdef(block))(nnx.state(block), x)
    unchanged = np.all(np.asarray(out) == np.asarray(x), axis=(1, 2))
    assert 0.6 < unchanged.mean() < 0.99  # both branches dropped w.p. 0.81, per example
    block.eval()
    out, _ = forward(nnx.graphdef(block))(nnx.state(block), x)
    assert not np.any(np.all(np.asarray(out) == np.asarray(x), axis=(1, 2)))


def test_same_seed_same_params_and_outputs():
    a, b, c = tiny_vit(0, **STOCHASTIC), tiny_vit(0, **STOCHASTIC), tiny_vit(1, **STOCHASTIC)
    for p, q in zip(param_leaves(a), param_leaves(b), strict=True):
        np.testing.assert_array_equal(p, q)
    assert not np.array_equal(a.pos_embed[...], c.pos_embed[...])
    assert not np.array_equal(a.blocks[0].fc1.kernel[...], c.blocks[0].fc1.kernel[...])
    x = jax.random.normal(jax.random.key(3), (4, 8, 8, 3))
    run = forward(nnx.graphdef(a))
    np.testing.assert_array_equal(
        run(nnx.state(a), x)[0], run(nnx.state(b), x)[0]
    )  # same masks too


@pytest.mark.slow
def test_bfloat16_compute_float32_params():
    model = tiny_vit(dtype=jnp.bfloat16)
    reference = tiny_vit()
    assert all(p.dtype == jnp.float32 for p in param_leaves(model))
    x = jax.random.normal(jax.random.key(4), (4, 8, 8, 3))
    graphdef, state = nnx.split(model)
    jaxpr = str(jax.make_jaxpr(lambda s, x: nnx.merge(graphdef, s)(x))(state, x))
    assert "bf16[4,5,64]" in jaxpr  # the MLP hidden layer runs in bfloat16
    out, _ = forward(graphdef)(state, x)
    expected, _ = forward(nnx.graphdef(reference))(nnx.state(reference), x)
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, expected, atol=0.1)


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"pool": "max"}, "pool"),
        ({"image_size": 30}, "image_size"),
        ({"dropout_rate": 1.0}, "dropout_rate"),
        ({"attention_dropout_rate": -0.1}, "attention_dropout_rate"),
        ({"drop_path_rate": 1.5}, "drop_path_rate"),
    ],
)
def test_invalid_config_raises_naming_the_field(overrides, field):
    config = encoder_config(name="vit_ti4", **overrides)
    with pytest.raises(ValueError, match=f"config.{field}"):
        create_encoder(config, rngs=nnx.Rngs(0))


def test_rejects_wrong_input_size():
    with pytest.raises(ValueError, match=r"\[B, 8, 8, C\]"):
        tiny_vit()(jnp.ones((2, 16, 16, 3)))
