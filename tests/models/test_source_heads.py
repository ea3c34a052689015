"""The projection heads of the papers' own code: SimCLR v1's (``simclr_v1``: the 128-d output
batch-normalised without an offset) and the SupCon TF code's (``normalized_linear``: one
Linear without bias on the L2-normalised encoder output), each against its source's
definition written out in numpy."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from contrastive_jax.models import MLPHead, NormalizedLinearHead, create_head
from tests.models.test_heads import paths


@pytest.mark.slow
def test_simclr_v1_head_is_the_v1_codes():
    """model_util.py ``linear_layer(use_bias=False, use_bn=True)`` on the last layer: a Dense
    without bias, then ``batch_norm_relu(relu=False, center=False)``: gamma, no beta."""
    head = create_head({"name": "simclr_v1", "hidden_features": 12, "out_features": 6}, 8,
                       rngs=nnx.Rngs(0))
    assert isinstance(head, MLPHead)
    assert paths(head) == {"hidden_linears.0.kernel", "hidden_bns.0.scale", "hidden_bns.0.bias",
                           "out.kernel", "out_bn.scale"}
    head.out_bn.scale.value = jnp.linspace(0.5, 2.0, 6)  # a gamma that is not all ones
    x = np.random.default_rng(0).normal(size=(32, 8)).astype(np.float32)
    # the v1 definition, written out: Dense -> BN(center) -> ReLU -> Dense -> BN(no center)
    def bn(v, gamma, beta):
        mean, var = v.mean(0), v.var(0)
        return gamma * (v - mean) / np.sqrt(var + 1e-5) + beta
    hidden = np.maximum(bn(x @ np.asarray(head.hidden_linears[0].kernel.value),
                           np.asarray(head.hidden_bns[0].scale.value),
                           np.asarray(head.hidden_bns[0].bias.value)), 0)
    z = bn(hidden @ np.asarray(head.out.kernel.value), np.asarray(head.out_bn.scale.value), 0.0)
    np.testing.assert_allclose(np.asarray(head(jnp.asarray(x))), z, rtol=2e-4, atol=2e-5)


def test_mio_head_keeps_its_centred_output_bn():
    head = create_head({"name": "mio", "hidden_features": 12, "out_features": 6}, 8,
                       rngs=nnx.Rngs(0))
    assert {"out_bn.scale", "out_bn.bias"} <= paths(head)


def test_normalized_linear_head_is_the_supcon_tf_codes():
    """``--normalize_embedding=True --projection_head_layers=128
    --use_projection_batch_norm=False``: h / ||h|| -> Dense(128, use_bias=False), kernel from
    N(0, 0.01^2)."""
    head = create_head({"name": "normalized_linear", "out_features": 128}, 256,
                       rngs=nnx.Rngs(0))
    assert isinstance(head, NormalizedLinearHead)
    assert paths(head) == {"linear.kernel"}
    kernel = np.asarray(head.linear.kernel.value)
    assert kernel.std() == pytest.approx(0.01, rel=0.05)
    h = np.random.default_rng(1).normal(size=(4, 256)).astype(np.float32) * 7.0
    expected = (h / np.linalg.norm(h, axis=1, keepdims=True)) @ kernel
    out = np.asarray(head(jnp.asarray(h)))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(head(jnp.asarray(3.0 * h))), out, rtol=1e-5,
                               atol=1e-7)  # the scale of the encoder output does not reach it


def test_normalized_linear_head_in_bfloat16_returns_float32():
    head = NormalizedLinearHead(16, 8, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    assert head(jnp.ones((2, 16))).dtype == jnp.float32
