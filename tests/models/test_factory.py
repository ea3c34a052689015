"""create_encoder / create_head from ConfigDicts: defaults, every name, partial and
non-ConfigDict configs, ConfigErrors naming the field, and ContrastiveModel."""

from __future__ import annotations

import types

import jax.numpy as jnp
import pytest
from flax import nnx

from contrastive_jax.errors import ConfigError
from contrastive_jax.models import (
    ENCODER_NAMES,
    HEAD_NAMES,
    ContrastiveModel,
    LinearHead,
    MLPHead,
    ResNet,
    create_encoder,
    create_head,
    default_encoder_config,
    default_head_config,
)
from tests.models.utils import output_shape


def abstract_encoder(config):
    return nnx.eval_shape(lambda: create_encoder(config, rngs=nnx.Rngs(0)))


def abstract_head(config, in_features=512):
    return nnx.eval_shape(lambda: create_head(config, in_features, rngs=nnx.Rngs(0)))


def test_defaults():
    encoder = default_encoder_config()
    assert (encoder.name, encoder.stem, encoder.width, encoder.dtype) == (
        "resnet18",
        "cifar",
        1,
        "float32",
    )
    assert encoder.bn_axis_name is None and not encoder.zero_init_residual
    head = default_head_config()
    assert (head.name, head.num_hidden_layers, head.out_features) == ("simclr_v2", 1, 128)
    assert head.hidden_features is None  # = encoder width

    model = abstract_encoder(encoder)
    assert isinstance(model, ResNet) and model.stem == "cifar" and model.num_features == 512
    projector = abstract_head(head, model.num_features)
    assert isinstance(projector, MLPHead) and projector.out_bn is None
    assert len(projector.hidden_linears) == 1
    assert projector.hidden_linears[0].kernel.shape == (512, 512)
    assert projector.out.kernel.shape == (512, 128)


def test_contrastive_model_returns_features_and_projections():
    model = nnx.eval_shape(
        lambda: ContrastiveModel(
            create_encoder(default_encoder_config(), rngs=nnx.Rngs(0)),
            create_head(default_head_config(), 512, rngs=nnx.Rngs(1)),
        )
    )
    features, projections = output_shape(model, (4, 32, 32, 3))
    assert features.shape == (4, 512) and projections.shape == (4, 128)
    assert features.dtype == projections.dtype == jnp.float32


def test_encoder_names():
    """Each name is built through create_encoder by the count tests of test_resnet / test_vit."""
    assert set(ENCODER_NAMES) == {
        "resnet18", "resnet34", "resnet50", "vit_ti16", "vit_s16", "vit_b16", "vit_ti4", "vit_s4",
        "small_cnn", "mlp",
    }  # fmt: skip


@pytest.mark.parametrize(
    "name, overrides, cls, out_features",
    [
        ("simclr_v2", {"num_hidden_layers": 2}, MLPHead, 128),
        ("mio", {}, MLPHead, 128),
        ("linear", {"out_features": 64}, LinearHead, 64),
        ("classifier", {"num_classes": 10}, LinearHead, 10),
    ],
)
def test_every_head_name_builds(name, overrides, cls, out_features):
    assert name in HEAD_NAMES
    config = default_head_config()
    config.name = name
    config.update(overrides)
    head = abstract_head(config, 2048)
    assert isinstance(head, cls)
    assert output_shape(head, (3, 2048)).shape == (3, out_features)
    if name == "mio":
        assert head.out_bn is not None
    if name == "simclr_v2":
        assert len(head.hidden_linears) == 2 and head.out_bn is None


def test_bn_axis_name_and_dtype_reach_every_layer():
    config = default_encoder_config()
    config.bn_axis_name = "data"
    config.dtype = "bfloat16"
    model = abstract_encoder(config)
    bns = [m for _, m in nnx.iter_modules(model) if isinstance(m, nnx.BatchNorm)]
    assert len(bns) == 1 + 8 * 2 + 3  # stem, two per block, three projection shortcuts
    assert all(bn.axis_name == "data" and bn.dtype == jnp.bfloat16 for bn in bns)
    head_config = default_head_config()
    head_config.bn_axis_name = "data"
    head = abstract_head(head_config)
    assert all(bn.axis_name == "data" for bn in head.hidden_bns)


def test_partial_and_attribute_configs():
    """Missing fields take defaults; namespaces and dicts work like ConfigDicts."""
    model = abstract_encoder(types.SimpleNamespace(name="resnet18", stem="imagenet", width=2))
    assert model.num_features == 1024 and model.stem == "imagenet"
    model = abstract_encoder({"name": "vit_ti4", "pool": "mean"})
    assert model.pool == "mean" and model.num_features == 192
    head = abstract_head(types.SimpleNamespace(name="classifier", num_classes=100), 192)
    assert head.linear.kernel.shape == (192, 100)


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"name": "resnet101"}, "encoder config.name"),
        ({"widht": 2}, "widht"),
        ({"dtype": "float16"}, "encoder config.dtype"),
        ({"stem": "cifar10"}, "encoder config.stem"),
        ({"width": 0}, "encoder config.width"),
        ({"width": 0.01}, "encoder config.width"),
        ({"width": -1}, "encoder config.width"),
        ({"zero_init_residual": "yes"}, "encoder config.zero_init_residual"),
        ({"bn_axis_name": 3}, "encoder config.bn_axis_name"),
        ({"bn_momentum": 1.0}, "encoder config.bn_momentum"),
        ({"name": "vit_s4", "image_size": 30}, "encoder config.image_size"),
        ({"name": "vit_s4", "pool": "max"}, "encoder config.pool"),
        ({"name": "vit_s4", "drop_path_rate": 1.0}, "encoder config.drop_path_rate"),
    ],
)
def test_bad_encoder_config_raises_naming_the_field(fields, match):
    with pytest.raises(ConfigError, match=match):
        create_encoder(types.SimpleNamespace(**fields), rngs=nnx.Rngs(0))


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"name": "byol"}, "head config.name"),
        ({"num_layers": 2}, "num_layers"),
        ({"dtype": "float64"}, "head config.dtype"),
        ({"num_hidden_layers": -1}, "head config.num_hidden_layers"),
        ({"out_features": 0}, "head config.out_features"),
        ({"hidden_features": 0}, "head config.hidden_features"),
        ({"name": "classifier"}, "head config.num_classes"),
        ({"name": "classifier", "num_classes": 0}, "head config.num_classes"),
        ({"bn_axis_name": ["data"]}, "head config.bn_axis_name"),
    ],
)
def test_bad_head_config_raises_naming_the_field(fields, match):
    with pytest.raises(ConfigError, match=match):
        create_head(types.SimpleNamespace(**fields), 64, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="in_features"):
        create_head(default_head_config(), 0, rngs=nnx.Rngs(0))
