"""SmallCNN: shapes, the conv arithmetic against a numpy reference, config selection."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from contrastive_jax.errors import ConfigError
from contrastive_jax.models import SmallCNN, create_encoder, default_encoder_config
from tests.models.utils import count_params


def _reference(cnn: SmallCNN, x: np.ndarray) -> np.ndarray:
    """3x3 SAME convolutions (stride s) + bias + ReLU, then the spatial mean, in numpy."""
    for conv in cnn.convs:
        w = np.asarray(conv.kernel.value)  # [3, 3, C_in, C_out]
        b = np.asarray(conv.bias.value)
        s = conv.strides[0]
        n, h, wd, _ = x.shape
        out_h, out_w = -(-h // s), -(-wd // s)
        # XLA's SAME padding: total pad max((out - 1) s + 3 - in, 0), the smaller half first.
        pad_h = max((out_h - 1) * s + 3 - h, 0)
        pad_w = max((out_w - 1) * s + 3 - wd, 0)
        xp = np.pad(x, ((0, 0), (pad_h // 2, pad_h - pad_h // 2),
                        (pad_w // 2, pad_w - pad_w // 2), (0, 0)))
        y = np.zeros((n, out_h, out_w, w.shape[-1]))
        for i in range(out_h):
            for j in range(out_w):
                patch = xp[:, i * s : i * s + 3, j * s : j * s + 3, :]
                y[:, i, j] = np.einsum("nhwc,hwco->no", patch, w)
        x = np.maximum(y + b, 0.0)
    return x.mean(axis=(1, 2))


@pytest.mark.slow
def test_forward_matches_numpy_reference():
    cnn = SmallCNN((4, 6), (1, 2), rngs=nnx.Rngs(0))
    cnn.convs[0].bias.value = jnp.linspace(-0.1, 0.1, 4)
    x = np.random.default_rng(0).normal(size=(2, 7, 7, 3)).astype(np.float32)
    out = cnn(jnp.asarray(x))
    assert out.shape == (2, 6) and out.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(out), _reference(cnn, x), rtol=1e-4, atol=1e-5)


def test_parameter_count_and_width():
    cnn = SmallCNN((32, 64), (1, 2), rngs=nnx.Rngs(0))
    assert cnn.num_features == 64
    assert count_params(cnn) == (9 * 3 * 32 + 32) + (9 * 32 * 64 + 64)


@pytest.mark.slow
def test_selected_by_config_with_its_own_fields():
    config = default_encoder_config()
    config.name = "small_cnn"
    config.channels = (16, 32, 64, 128)
    config.strides = (2, 2, 2, 2)
    encoder = create_encoder(config, rngs=nnx.Rngs(0))
    assert isinstance(encoder, SmallCNN) and encoder.num_features == 128
    assert encoder(jnp.zeros((2, 32, 32, 3))).shape == (2, 128)
    default = create_encoder({"name": "small_cnn"}, rngs=nnx.Rngs(0))
    assert [c.out_features for c in default.convs] == [32, 64]


def test_cnn_fields_are_refused_for_other_encoders():
    with pytest.raises(ConfigError, match="channels"):
        create_encoder({"name": "resnet18", "channels": (8,)}, rngs=nnx.Rngs(0))


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"channels": ()}, "channels must name at least one"),
        ({"channels": (8, 0), "strides": (1, 1)}, "channels must be an int >= 1"),
        ({"channels": (8, 16), "strides": (1,)}, "strides must have one entry per"),
    ],
)
def test_bad_fields_name_the_field(fields, match):
    with pytest.raises(ConfigError, match=f"encoder config.{match}"):
        create_encoder({"name": "small_cnn", **fields}, rngs=nnx.Rngs(0))
