"""MLP encoder and identity head: the forward pass against numpy, initialisation, config selection."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from contrastive_jax.errors import ConfigError
from contrastive_jax.models import (
    MLP,
    IdentityHead,
    create_encoder,
    create_head,
    default_encoder_config,
)
from tests.models.utils import count_params


def _reference(mlp: MLP, x: np.ndarray) -> np.ndarray:
    for i, layer in enumerate(mlp.layers):
        x = x @ np.asarray(layer.kernel.value)
        if layer.bias is not None:
            x = x + np.asarray(layer.bias.value)
        if i < len(mlp.layers) - 1:
            x = np.maximum(x, 0.0)
    return x


def test_forward_matches_numpy_reference_relu_between_layers_only():
    mlp = MLP(5, (16, 16, 2), rngs=nnx.Rngs(0))
    x = np.random.default_rng(0).normal(size=(7, 5)).astype(np.float32)
    out = mlp(jnp.asarray(x))
    assert out.shape == (7, 2) and out.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(out), _reference(mlp, x), rtol=1e-5, atol=1e-6)
    assert (np.asarray(out) < 0).any()  # no ReLU after the last layer
    assert mlp.num_features == 2
    assert count_params(mlp) == (5 * 16 + 16) + (16 * 16 + 16) + (16 * 2 + 2)


def test_default_init_is_pytorch_uniform_and_init_std_is_normal_without_bias():
    mlp = MLP(400, (300, 4), rngs=nnx.Rngs(0))
    first = np.asarray(mlp.layers[0].kernel.value)
    bound = 1 / np.sqrt(400)
    assert np.abs(first).max() <= bound and np.abs(first).max() > 0.98 * bound
    # U(-b, b) has variance b^2 / 3.
    assert first.var() == pytest.approx(bound**2 / 3, rel=0.02)
    bias = np.asarray(mlp.layers[1].bias.value)
    assert np.abs(bias).max() <= 1 / np.sqrt(300) and np.abs(bias).max() > 0
    linear = MLP(20, (20,), use_bias=False, init_std=0.01, rngs=nnx.Rngs(0))
    kernel = np.asarray(linear.layers[0].kernel.value)
    assert linear.layers[0].bias is None and count_params(linear) == 400
    assert kernel.std() == pytest.approx(0.01, rel=0.15)
    x = np.random.default_rng(1).normal(size=(3, 20)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(linear(jnp.asarray(x))), x @ kernel, rtol=1e-5, atol=1e-7)


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="in_features"):
        MLP(0, (4,), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="widths"):
        MLP(3, (), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="init_std"):
        MLP(3, (4,), init_std=-1.0, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"vectors \[B, D\]"):
        MLP(3, (4,), rngs=nnx.Rngs(0))(jnp.zeros((2, 3, 1)))


def test_selected_by_config_with_its_own_fields():
    config = default_encoder_config()
    config.name = "mlp"
    config.in_features = 8
    config.widths = (32, 32, 4)
    encoder = create_encoder(config, rngs=nnx.Rngs(0))
    assert isinstance(encoder, MLP) and encoder.num_features == 4
    assert encoder(jnp.zeros((2, 8))).shape == (2, 4)
    with pytest.raises(ConfigError, match="in_features"):
        create_encoder({"name": "mlp"}, rngs=nnx.Rngs(0))
    with pytest.raises(ConfigError, match=r"config\.model\.encoder\.widths is not a config field"):
        create_encoder({"name": "resnet18", "widths": (4,)}, rngs=nnx.Rngs(0))
    with pytest.raises(ConfigError, match="widths"):
        create_encoder({"name": "mlp", "in_features": 3, "widths": (0,)}, rngs=nnx.Rngs(0))


def test_identity_head_passes_features_through():
    head = create_head({"name": "identity"}, 3, rngs=nnx.Rngs(0))
    assert isinstance(head, IdentityHead) and count_params(head) == 0
    h = jnp.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(head(h)), np.asarray(h))
    with pytest.raises(ValueError, match="in_features"):
        IdentityHead(0)
