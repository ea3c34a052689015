"""The initialisers and the stem's max-pool padding of the TF sources, against their
definitions: TF's ``variance_scaling_initializer()`` for convolutions (SimCLR v1, SupCon TF),
N(0, 0.01^2), Glorot uniform and zeros for the heads' kernels, PyTorch's ``nn.Linear`` default
(HobbitLong/SupContrast's heads), TF's ``SAME`` max-pool."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy import stats

from contrastive_jax import models
from contrastive_jax.errors import ConfigError
from contrastive_jax.models.resnet import stem_pool

#: TF's truncated normal keeps |x| < 2 sigma and rescales sigma by this (the standard
#: deviation of a unit normal truncated at +-2), so that the variance is scale / fan_in.
TF_TRUNCATION = 0.87962566103423978


def _kernels(encoder: nnx.Module) -> list[np.ndarray]:
    return [np.asarray(v.get_value()) for path, v in nnx.iter_graph(encoder)
            if isinstance(v, nnx.Param) and path[-1] == "kernel"]


@pytest.mark.slow
def test_tf_fan_in_is_tfs_variance_scaling_initializer():
    """Every convolution's kernel [k, k, c_in, c_out]: variance 1 / (k k c_in) and no value
    beyond TF's bound 2 sqrt(1 / fan_in) / 0.8796."""
    encoder = models.create_encoder({"name": "resnet18", "stem": "imagenet", "width": 0.5,
                                     "conv_init": "tf_fan_in"}, rngs=nnx.Rngs(0))
    kernels = _kernels(encoder)
    assert len(kernels) == 20  # the stem, 16 block convolutions, 3 shortcuts
    for w in kernels:
        fan_in = math.prod(w.shape[:-1])
        bound = 2 * math.sqrt(1 / fan_in) / TF_TRUNCATION
        assert np.abs(w).max() <= bound * (1 + 1e-6)
        if w.size >= 10_000:  # enough draws for the standard deviation within 3 %
            assert w.std() == pytest.approx(math.sqrt(1 / fan_in), rel=0.03)
            assert abs(w.mean()) < 0.05 * w.std()


@pytest.mark.slow
def test_he_fan_out_stays_the_default():
    encoder = models.create_encoder({"name": "resnet18", "width": 0.5}, rngs=nnx.Rngs(0))
    w = max(_kernels(encoder), key=lambda k: k.size)
    fan_out = math.prod(w.shape[:2]) * w.shape[-1]
    assert w.std() == pytest.approx(math.sqrt(2 / fan_out), rel=0.03)
    assert np.abs(w).max() > 2 * w.std() / TF_TRUNCATION  # a normal, not truncated


@pytest.mark.parametrize("name, head", [
    ("normal_0.01", {"name": "simclr_v1", "hidden_features": 512, "out_features": 128}),
    ("glorot_uniform", {"name": "classifier", "num_classes": 100}),
    ("zeros", {"name": "classifier", "num_classes": 100}),
])
def test_head_kernel_inits_are_the_sources(name, head):
    module = models.create_head({**head, "kernel_init": name}, 512, rngs=nnx.Rngs(0))
    kernels = _kernels(module)
    assert kernels
    for w in kernels:
        fan_in, fan_out = w.shape
        if name == "normal_0.01":  # SimCLR v1 linear_layer: tf.random_normal_initializer(.01)
            assert w.std() == pytest.approx(0.01, rel=0.03) and abs(w.mean()) < 5e-4
        elif name == "glorot_uniform":  # Keras Dense: U(-l, l), l = sqrt(6 / (in + out))
            limit = math.sqrt(6 / (fan_in + fan_out))
            assert np.abs(w).max() <= limit
            assert w.std() == pytest.approx(limit / math.sqrt(3), rel=0.03)
        else:
            assert not w.any()
    biases = [np.asarray(v.get_value()) for path, v in nnx.iter_graph(module)
              if isinstance(v, nnx.Param) and path[-1] == "bias" and "linear" in path]
    assert all(not b.any() for b in biases)


def _params(module: nnx.Module, name: str) -> list[np.ndarray]:
    return [np.asarray(v.get_value()) for path, v in nnx.iter_graph(module)
            if isinstance(v, nnx.Param) and path[-1] == name]


def _is_uniform(draws: np.ndarray, bound: float) -> None:
    """Within [-bound, bound], and U(-bound, bound) by a Kolmogorov-Smirnov test."""
    assert np.abs(draws).max() <= bound
    assert stats.kstest(draws.ravel(), stats.uniform(-bound, 2 * bound).cdf).pvalue > 1e-3


def test_torch_linear_is_pytorchs_linear_default():
    """torch.nn.Linear.reset_parameters: the weight by kaiming_uniform_(a=sqrt(5)), bound
    sqrt(3) * sqrt(2 / (1 + 5)) / sqrt(fan_in) = 1 / sqrt(fan_in); the bias U(-b, b) with the
    same b = 1 / sqrt(fan_in): the classifier's kernel and bias, and each kernel of an MLP
    head (no biases there) from its own fan-in."""
    assert math.sqrt(3) * math.sqrt(2 / (1 + 5)) == pytest.approx(1.0)
    classifier = models.create_head({"name": "classifier", "num_classes": 100,
                                     "kernel_init": "torch_linear"}, 512, rngs=nnx.Rngs(0))
    (kernel,), (bias,) = _params(classifier, "kernel"), _params(classifier, "bias")
    assert kernel.shape == (512, 100) and bias.shape == (100,)
    _is_uniform(kernel, 1 / math.sqrt(512))
    _is_uniform(bias, 1 / math.sqrt(512))
    mlp = models.create_head({"name": "simclr_v2", "hidden_features": 256, "out_features": 128,
                              "kernel_init": "torch_linear"}, 512, rngs=nnx.Rngs(1))
    kernels = _kernels(mlp)
    assert [k.shape for k in kernels] == [(512, 256), (256, 128)]
    for w in kernels:
        _is_uniform(w, 1 / math.sqrt(w.shape[0]))
    assert np.abs(kernels[1]).max() > 1 / math.sqrt(512)  # the second layer's own, wider bound


@pytest.mark.slow
def test_torch_linear_draws_as_torch_does():
    """Against torch itself: our kernel and bias and torch.nn.Linear's weight and bias (the
    weight transposed: [out, in]) from one distribution (two-sample Kolmogorov-Smirnov) with
    the same bound."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    reference = torch.nn.Linear(300, 200)
    theirs_w = reference.weight.detach().numpy().T
    theirs_b = reference.bias.detach().numpy()
    ours = models.create_head({"name": "linear", "out_features": 200,
                               "kernel_init": "torch_linear"}, 300, rngs=nnx.Rngs(0))
    (ours_w,), (ours_b,) = _params(ours, "kernel"), _params(ours, "bias")
    assert ours_w.shape == theirs_w.shape and ours_b.shape == theirs_b.shape
    for mine, theirs in ((ours_w, theirs_w), (ours_b, theirs_b)):
        assert stats.ks_2samp(mine.ravel(), theirs.ravel()).pvalue > 1e-3
        assert np.abs(mine).max() <= 1 / math.sqrt(300) and np.abs(theirs).max() <= 1 / math.sqrt(300)
    assert np.abs(theirs_w).max() == pytest.approx(np.abs(ours_w).max(), rel=1e-3)


def test_a_heads_own_init_is_kept_without_kernel_init():
    supcon = models.create_head({"name": "normalized_linear", "out_features": 128}, 2048,
                                rngs=nnx.Rngs(0))
    assert _kernels(supcon)[0].std() == pytest.approx(0.01, rel=0.03)


def _tf_same_pads(n: int, k: int = 3, s: int = 2) -> tuple[int, int]:
    """TF's SAME padding of one spatial dimension: the total over both sides, the smaller half
    before (tensorflow/core/framework/kernel_shape_util.cc GetWindowedOutputSizeVerbose)."""
    total = max((math.ceil(n / s) - 1) * s + k - n, 0)
    return total // 2, total - total // 2


@pytest.mark.parametrize("side", [112, 7, 8])
@pytest.mark.matrix
def test_same_pool_padding_is_tfs(side):
    x = jax.random.normal(jax.random.key(0), (2, side, side + 1, 4))
    pads = ((0, 0), _tf_same_pads(side), _tf_same_pads(side + 1), (0, 0))
    expected = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), pads)
    np.testing.assert_array_equal(stem_pool(x, "same"), expected)
    symmetric = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                                      ((0, 0), (1, 1), (1, 1), (0, 0)))
    np.testing.assert_array_equal(stem_pool(x, "symmetric"), symmetric)
    if side % 2 == 0:  # an even side: TF pads after only, so the windows differ
        assert not np.array_equal(stem_pool(x, "same"), symmetric)


@pytest.mark.slow
def test_the_resnet_stem_uses_its_pool_padding():
    x = jax.random.normal(jax.random.key(1), (2, 32, 32, 3))
    out = {}
    for padding in ("symmetric", "same"):
        encoder = models.create_encoder({"name": "resnet18", "stem": "imagenet", "width": 0.125,
                                         "pool_padding": padding}, rngs=nnx.Rngs(0))
        out[padding] = np.asarray(encoder(x))
    assert not np.allclose(out["symmetric"], out["same"])


@pytest.mark.parametrize("fields, match", [
    ({"name": "resnet18", "conv_init": "xavier"}, "conv_init must be one of"),
    ({"name": "resnet18", "pool_padding": "valid"}, "pool_padding must be one of"),
])
def test_bad_encoder_options_are_refused(fields, match):
    with pytest.raises(ConfigError, match=match):
        models.create_encoder(fields, rngs=nnx.Rngs(0))


def test_a_bad_head_kernel_init_is_refused():
    with pytest.raises(ConfigError, match="kernel_init must be None or one of"):
        models.create_head({"name": "linear", "kernel_init": "orthogonal"}, 8, rngs=nnx.Rngs(0))
