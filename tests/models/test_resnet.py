"""ResNet encoders: published parameter counts, shapes, BN modes, global BN under
shard_map, determinism, bfloat16, and a forward on real CIFAR-10 images.

Real (non-abstract) ResNets here are seeded with RBG keys, ``rngs(seed)``: XLA on CPU
compiles their normal sampler about 4x faster than threefry's, once per kernel shape,
which keeps this file fast. The module code is the same for either key type; the
test_vit / test_heads models use plain ``nnx.Rngs(seed)``."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from contrastive_jax.models import (
    BasicBlock,
    Bottleneck,
    ContrastiveModel,
    MLPHead,
    ResNet,
    create_encoder,
    default_encoder_config,
)
from contrastive_jax.models import resnet as resnet_lib
from tests.models.utils import count_params, forward, output_shape, param_leaves, sharded_forward

CIFAR10 = Path(__file__).resolve().parents[3] / "shared" / "data" / "cifar10" / "test"
CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32)
CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], np.float32)


def rngs(seed: int) -> nnx.Rngs:
    return nnx.Rngs(jax.random.key(seed, impl="rbg"))


def encoder_config(**overrides):
    config = default_encoder_config()
    config.update(overrides)
    return config


@pytest.fixture(scope="module")
def resnet18():
    """The default encoder (CIFAR-stem ResNet-18, seed 0) as (graphdef, state); built once."""
    return nnx.split(create_encoder(default_encoder_config(), rngs=rngs(0)))


@pytest.mark.parametrize(
    "name, stem, width, expected",
    [
        # torchvision resnet18/34/50 minus the 1000-class fc layer.
        ("resnet18", "imagenet", 1, 11_176_512),
        ("resnet34", "imagenet", 1, 21_284_672),
        ("resnet50", "imagenet", 1, 23_508_032),
        # SimCLR's ResNet-50 (2x): 94M (Chen et al., 2020, Table 13 / Fig. 7).
        ("resnet50", "imagenet", 2, 93_907_072),
        # The CIFAR stem swaps the 7x7x3x64 conv for a 3x3x3x64 one.
        ("resnet18", "cifar", 1, 11_176_512 - (7 * 7 - 3 * 3) * 3 * 64),
    ],
)
def test_parameter_counts_match_published(name, stem, width, expected):
    config = encoder_config(name=name, stem=stem, width=width)
    model = nnx.eval_shape(lambda: create_encoder(config, rngs=nnx.Rngs(0)))
    n = count_params(model)
    print(f"{name} stem={stem} width={width}: {n:,} parameters (no classifier)")
    assert n == expected


@pytest.mark.parametrize("width, base", [(0.125, 8), (0.25, 16), (1.5, 96)])
def test_fractional_width_scales_every_stage(width, base):
    config = encoder_config(name="resnet18", stem="cifar", width=width)
    model = nnx.eval_shape(lambda: create_encoder(config, rngs=nnx.Rngs(0)))
    assert model.conv1.kernel.shape == (3, 3, 3, base)
    assert model.num_features == 8 * base


@pytest.mark.parametrize(
    "name, stem, width, size, features",
    [
        ("resnet18", "cifar", 1, 32, 512),
        ("resnet18", "imagenet", 1, 64, 512),
        ("resnet34", "imagenet", 2, 64, 1024),
        ("resnet50", "cifar", 2, 32, 4096),
    ],
)
def test_output_shape(name, stem, width, size, features):
    config = encoder_config(name=name, stem=stem, width=width)
    model = nnx.eval_shape(lambda: create_encoder(config, rngs=nnx.Rngs(0)))
    assert model.num_features == features
    out = output_shape(model, (3, size, size, 3))
    assert out.shape == (3, features) and out.dtype == jnp.float32


@pytest.mark.parametrize(
    "stem, kernel, strides, max_pool", [("cifar", 3, 1, False), ("imagenet", 7, 2, True)]
)
def test_stems(stem, kernel, strides, max_pool):
    model = nnx.eval_shape(lambda: ResNet(18, stem=stem, rngs=nnx.Rngs(0)))
    assert model.conv1.kernel.shape == (kernel, kernel, 3, 64)
    assert model.conv1.strides == strides
    graphdef, state = nnx.split(model)
    x = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
    jaxpr = str(jax.make_jaxpr(lambda s, x: nnx.merge(graphdef, s)(x))(state, x))
    assert ("reduce_window_max" in jaxpr) == max_pool


@pytest.mark.slow
def test_cifar_resnet18_forward_on_real_images(resnet18):
    if not CIFAR10.is_dir():
        pytest.skip(f"CIFAR-10 image folder not found at {CIFAR10}")
    from PIL import Image

    classes = sorted(p for p in CIFAR10.iterdir() if p.is_dir())
    files = [sorted(c.glob("*.jpg"))[0] for c in classes[:8]]
    images = np.stack([np.asarray(Image.open(f).convert("RGB"), np.float32) / 255.0 for f in files])
    assert images.shape == (8, 32, 32, 3)
    x = jnp.asarray((images - CIFAR_MEAN) / CIFAR_STD)

    graphdef, state = resnet18
    features, new_state = forward(graphdef)(state, x)
    assert features.shape == (8, 512) and features.dtype == jnp.float32
    assert np.all(np.isfinite(features))
    assert np.all(features >= 0)  # average of post-ReLU activations
    assert np.mean(features > 0) > 0.5
    assert not np.allclose(features[0], features[1], rtol=1e-3)  # images differ
    stats = jax.tree.leaves(nnx.state(nnx.merge(graphdef, new_state), nnx.BatchStat))
    assert all(np.all(np.isfinite(s)) for s in stats)


def batch_stats(model: nnx.Module) -> list[jax.Array]:
    return jax.tree.leaves(nnx.state(model, nnx.BatchStat))


def batch_norms(model: nnx.Module) -> list[nnx.BatchNorm]:
    return [m for _, m in nnx.iter_modules(model) if isinstance(m, nnx.BatchNorm)]


@pytest.mark.slow
def test_batchnorm_train_updates_running_stats_eval_uses_them(resnet18):
    graphdef, state = resnet18
    x = jax.random.normal(jax.random.key(1), (8, 32, 32, 3))
    # Same first half, different second half: the first half's outputs depend on the
    # second half in train mode (batch statistics) and not in eval mode.
    x_swapped = x.at[4:].set(jax.random.normal(jax.random.key(2), (4, 32, 32, 3)))

    train_out, new_state = forward(graphdef)(state, x)
    trained = nnx.merge(graphdef, new_state)
    pre_bn = trained.conv1(x)
    np.testing.assert_allclose(
        trained.bn1.mean[...], 0.1 * jnp.mean(pre_bn, axis=(0, 1, 2)), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        trained.bn1.var[...], 0.9 + 0.1 * jnp.var(pre_bn, axis=(0, 1, 2)), rtol=1e-5, atol=1e-6
    )
    assert all(
        not np.array_equal(a, b)
        for a, b in zip(
            batch_stats(trained),
            jax.tree.leaves(nnx.state(nnx.merge(graphdef, state), nnx.BatchStat)),
            strict=True,
        )
    )
    swapped_out, _ = forward(graphdef)(state, x_swapped)
    assert not np.allclose(swapped_out[:4], train_out[:4], rtol=1e-3)

    trained.eval()
    assert all(bn.use_running_average for bn in batch_norms(trained))
    eval_graphdef, eval_state = nnx.split(trained)
    eval_out, after = forward(eval_graphdef)(eval_state, x)
    eval_swapped, _ = forward(eval_graphdef)(eval_state, x_swapped)
    np.testing.assert_allclose(eval_swapped[:4], eval_out[:4], rtol=1e-5, atol=1e-6)
    for a, b in zip(
        batch_stats(trained), batch_stats(nnx.merge(eval_graphdef, after)), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(eval_out, train_out, rtol=1e-3)

    trained.train()
    assert not any(bn.use_running_average for bn in batch_norms(trained))


@pytest.mark.slow
def test_global_batchnorm_under_shard_map_matches_single_device(resnet18):
    """bn_axis_name="data": 8 devices x 2 images == one device on all 16 (outputs and
    running stats). bn_axis_name=None: each device normalises with its own 2 images."""
    graphdef, encoder_state = resnet18
    head = MLPHead(512, 16, hidden_features=32, last_bn=True, rngs=rngs(1))
    graphdef, state = nnx.split(ContrastiveModel(nnx.merge(graphdef, encoder_state), head))
    global_graphdef = nnx.graphdef(
        nnx.eval_shape(
            lambda: ContrastiveModel(
                create_encoder(encoder_config(bn_axis_name="data"), rngs=nnx.Rngs(0)),
                MLPHead(
                    512, 16, hidden_features=32, last_bn=True, bn_axis_name="data", rngs=nnx.Rngs(1)
                ),
            )
        )
    )
    x = jax.random.normal(jax.random.key(2), (16, 8, 8, 3))

    (features, projections), single_state = forward(graphdef)(state, x)
    (g_features, g_projections), global_state = sharded_forward(global_graphdef, return_state=True)(
        state, x
    )
    # float32 reduction order (pmean of per-device moments) differs; over 20 BN layers
    # this leaves ~3e-5 absolute on features of size ~3.
    np.testing.assert_allclose(g_features, features, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(g_projections, projections, rtol=1e-5, atol=1e-4)
    for a, b in zip(
        batch_stats(nnx.merge(graphdef, single_state)),
        batch_stats(nnx.merge(global_graphdef, global_state)),
        strict=True,
    ):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)

    # Per-device statistics: each device normalises its own 2 images.
    l_features, l_projections = sharded_forward(graphdef, return_state=False)(state, x)
    assert not np.allclose(l_features, features, rtol=1e-2)
    assert not np.allclose(l_projections, projections, rtol=1e-2)


def test_same_seed_same_params_and_outputs():
    # A narrow ResNet-18 (8-channel stem): the same code as the full width, a fraction of its
    # compile.
    narrow = encoder_config(width=0.125)
    graphdef, state = nnx.split(create_encoder(narrow, rngs=rngs(0)))
    again = create_encoder(narrow, rngs=rngs(0))
    other = create_encoder(narrow, rngs=rngs(1))
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(nnx.state(again)), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not all(
        np.array_equal(a, b)
        for a, b in zip(param_leaves(nnx.merge(graphdef, state)), param_leaves(other), strict=True)
    )
    x = jax.random.normal(jax.random.key(3), (8, 16, 16, 3))
    run = forward(graphdef)
    np.testing.assert_array_equal(run(state, x)[0], run(nnx.state(again), x)[0])


@pytest.mark.slow
def test_bfloat16_compute_float32_params(resnet18):
    graphdef, state = resnet18
    model = create_encoder(encoder_config(dtype="bfloat16"), rngs=rngs(0))
    assert all(p.dtype == jnp.float32 for p in param_leaves(model))
    assert all(s.dtype == jnp.float32 for s in batch_stats(model))
    x = jax.random.normal(jax.random.key(4), (8, 32, 32, 3))
    bf16_graphdef, bf16_state = nnx.split(model)
    jaxpr = str(jax.make_jaxpr(lambda s, x: nnx.merge(bf16_graphdef, s)(x))(bf16_state, x))
    assert "conv_general_dilated" in jaxpr and "bf16[8,32,32,64]" in jaxpr
    out, _ = forward(bf16_graphdef)(bf16_state, x)
    reference, _ = forward(graphdef)(state, x)
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(
        out, reference, rtol=0.1, atol=0.05 * float(jnp.abs(reference).max())
    )


@pytest.mark.slow
def test_zero_init_residual(resnet18):
    """The last BN gamma of every residual branch starts at 0, so blocks start as identities."""
    model = ResNet(18, zero_init_residual=True, rngs=rngs(0))
    for block in model.blocks:
        np.testing.assert_array_equal(block.bn2.scale[...], 0.0)
        np.testing.assert_array_equal(block.bn1.scale[...], 1.0)
    graphdef, state = resnet18
    assert all(np.all(b.bn2.scale[...] == 1.0) for b in nnx.merge(graphdef, state).blocks)

    block = model.blocks[0]  # 64 -> 64, identity shortcut
    x = jax.random.normal(jax.random.key(5), (2, 4, 4, 64))
    out, _ = forward(nnx.graphdef(block))(nnx.state(block), x)
    np.testing.assert_allclose(out, nnx.relu(x), atol=1e-6)

    bottleneck = Bottleneck(16, 4, zero_init_residual=True, rngs=rngs(0))
    np.testing.assert_array_equal(bottleneck.bn3.scale[...], 0.0)
    np.testing.assert_array_equal(bottleneck.bn2.scale[...], 1.0)


def test_strided_blocks_project_the_shortcut():
    block = nnx.eval_shape(lambda: Bottleneck(64, 128, strides=2, rngs=nnx.Rngs(0)))
    assert block.shortcut is not None
    assert output_shape(block, (2, 8, 8, 64)).shape == (2, 4, 4, 512)
    assert nnx.eval_shape(lambda: BasicBlock(64, 64, rngs=nnx.Rngs(0))).shortcut is None


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"depth": 101}, "depth"),
        ({"stem": "tiny"}, "stem"),
        ({"width": 0}, "width"),
        ({"width": 0.3}, "width"),
        ({"bn_momentum": 1.0}, "bn_momentum"),
    ],
)
def test_invalid_arguments_raise(kwargs, field):
    kwargs = {"depth": 18, **kwargs}
    with pytest.raises(ValueError, match=field):
        ResNet(kwargs.pop("depth"), **kwargs, rngs=nnx.Rngs(0))


def test_rejects_non_image_input():
    model = nnx.eval_shape(lambda: ResNet(18, rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match="NHWC"):
        output_shape(model, (2, 32, 32))


@pytest.mark.slow
def test_batchnorm_variance_is_two_pass():
    """A channel whose mean is large against its spread: E[x^2] - E[x]^2 cancels in float32
    (about 2^-24 * 1000^2 = 0.06 of round-off against a variance of 1e-2); the two-pass
    variance of the encoders' and the MLP head's BatchNorms normalises it to unit spread."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(1000.0 + 0.1 * rng.standard_normal((256, 4)), jnp.float32)
    bn = resnet_lib._bn(4, axis_name=None, momentum=0.9, dtype=jnp.float32, rngs=nnx.Rngs(0))
    np.testing.assert_allclose(np.std(np.asarray(bn(x)), axis=0), 1.0, rtol=1e-2)
    head = MLPHead(4, 2, rngs=nnx.Rngs(0))
    norms = [m for _, m in nnx.iter_graph(head) if isinstance(m, nnx.BatchNorm)]
    assert norms and not any(m.use_fast_variance for m in norms)
    fast = nnx.BatchNorm(4, use_running_average=False, rngs=nnx.Rngs(0))  # Flax's default
    assert abs(float(np.std(np.asarray(fast(x)), axis=0).mean()) - 1.0) > 0.1
