"""Build encoders and heads from configs: a ``ml_collections.ConfigDict`` or any mapping.

Encoder config fields (defaults from :func:`default_encoder_config`):

============================  =========================================================
``name``                      ``resnet18`` | ``resnet34`` | ``resnet50`` | ``vit_ti16`` |
                              ``vit_s16`` | ``vit_b16`` | ``vit_ti4`` | ``vit_s4`` |
                              ``small_cnn`` | ``mlp`` (vectors) (default ``resnet18``)
``dtype``                     compute dtype ``float32`` | ``bfloat16``; parameters are
                              always float32 (default ``float32``)
``stem``                      ResNet: ``cifar`` | ``imagenet`` (default ``cifar``)
``width``                     ResNet: channel multiplier, 64·width a whole number
                              (1, 2, 0.25, ...; default 1.0)
``zero_init_residual``        ResNet: zero last BN gamma of each block (default False)
``bn_axis_name``              ResNet: mesh axis for BN statistics, ``None`` = the arrays
                              each BN sees (default None)
``bn_momentum``               ResNet: BN running-average decay (default 0.9)
``image_size``                ViT: input side; ``None`` = 224 for /16, 32 for /4
``pool``                      ViT: ``cls`` | ``mean`` (default ``cls``)
``dropout_rate``              ViT: dropout rate (default 0)
``attention_dropout_rate``    ViT: attention-weight dropout rate (default 0)
``drop_path_rate``            ViT: stochastic depth of the last block (default 0)
``channels``                  small_cnn only: output channels per 3x3 conv (default (32, 64))
``strides``                   small_cnn only: stride per conv (default (1, 2))
``in_features``               mlp only: input width D of the vectors (required)
``widths``                    mlp only: output width per Linear layer (default (16, 16, 2))
``use_bias``                  mlp only: Linear biases (default True)
``init_std``                  mlp only: None = PyTorch's ``nn.Linear`` init, or the std
                              of normal weights with zero biases (default None)
============================  =========================================================

``channels`` and ``strides`` (:data:`SMALL_CNN_DEFAULTS`) and the ``mlp`` fields
(:data:`MLP_DEFAULTS`) are not in :func:`default_encoder_config`: a config sets them
beside ``name="small_cnn"`` / ``name="mlp"``, so the model config (which a checkpoint
records) of every other encoder is unchanged.

Head config fields (defaults from :func:`default_head_config`):

============================  =========================================================
``name``                      ``simclr_v2`` (MLP, BN in hidden layers) | ``simclr_v1``
                              (as simclr_v2, then BN without offset on the output:
                              SimCLR v1's code) | ``mio`` (MLP with a final BN) |
                              ``normalized_linear`` (L2-normalised input, one Linear
                              without bias: SupCon's TF code) | ``linear`` (one Linear) |
                              ``classifier`` (Linear to ``num_classes``) |
                              ``identity`` (no projection: the encoder output)
                              (default ``simclr_v2``)
``num_hidden_layers``         MLP heads: Linear-BN-ReLU layers before the last Linear
                              (default 1, i.e. a 2-layer MLP)
``hidden_features``           MLP heads: hidden width; ``None`` = encoder width
``out_features``              projection width (default 128)
``num_classes``               classifier: number of classes K (required)
``bn_axis_name``              MLP heads: mesh axis for BN statistics (default None)
``bn_momentum``               MLP heads: BN running-average decay (default 0.9)
``dtype``                     compute dtype ``float32`` | ``bfloat16``
============================  =========================================================

Fields a model does not use are ignored (e.g. ``stem`` for a ViT); a field not in
the table raises :class:`~contrastive_jax.errors.ConfigError` (a ``ValueError``),
and so does a missing required or invalid value, naming the field. Missing fields take their defaults, so any attribute-access
object (or mapping) holding a subset of the fields works.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
from flax import nnx

from contrastive_jax.errors import ConfigError, check_fields
from contrastive_jax.models.cnn import SmallCNN
from contrastive_jax.models.heads import IdentityHead, LinearHead, MLPHead, NormalizedLinearHead
from contrastive_jax.models.mlp import MLP
from contrastive_jax.models.resnet import ResNet
from contrastive_jax.models.vit import VIT_VARIANTS, VisionTransformer

RESNET_DEPTHS = {"resnet18": 18, "resnet34": 34, "resnet50": 50}
ENCODER_NAMES = (*RESNET_DEPTHS, *VIT_VARIANTS, "small_cnn", "mlp")
#: Fields of the ``small_cnn`` encoder only, with their defaults.
SMALL_CNN_DEFAULTS = {"channels": (32, 64), "strides": (1, 2)}
#: Fields of the ``mlp`` encoder only, with their defaults (``in_features`` is required).
MLP_DEFAULTS = {"in_features": None, "widths": (16, 16, 2), "use_bias": True, "init_std": None}
HEAD_NAMES = ("simclr_v2", "simclr_v1", "mio", "normalized_linear", "linear", "classifier",
              "identity")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


#: Encoder fields and defaults: a CIFAR-stem ResNet-18 in float32 with per-device BN.
ENCODER_DEFAULTS = {
    "name": "resnet18",
    "dtype": "float32",
    "stem": "cifar",
    "width": 1.0,
    "zero_init_residual": False,
    "bn_axis_name": None,
    "bn_momentum": 0.9,
    "image_size": None,
    "pool": "cls",
    "dropout_rate": 0.0,
    "attention_dropout_rate": 0.0,
    "drop_path_rate": 0.0,
}
#: Head fields and defaults: SimCLR-v2 MLP with one hidden layer of the encoder width, out 128.
HEAD_DEFAULTS = {
    "name": "simclr_v2",
    "num_hidden_layers": 1,
    "hidden_features": None,
    "out_features": 128,
    "num_classes": None,
    "bn_axis_name": None,
    "bn_momentum": 0.9,
    "dtype": "float32",
}
#: The type of the fields whose default is None (the placeholders of the ConfigDicts).
_NONE_TYPES = {"bn_axis_name": str, "image_size": int, "hidden_features": int, "num_classes": int}


def _config_dict(defaults: dict[str, Any]):
    """``defaults`` as an ``ml_collections.ConfigDict`` (None fields typed placeholders)."""
    import ml_collections  # the config layer's library; building models needs no ml_collections
    from ml_collections import config_dict

    return ml_collections.ConfigDict({
        k: config_dict.placeholder(_NONE_TYPES[k]) if v is None else v for k, v in defaults.items()
    })


def default_encoder_config():
    """:data:`ENCODER_DEFAULTS` as an ``ml_collections.ConfigDict`` (needs ml_collections)."""
    return _config_dict(ENCODER_DEFAULTS)


def default_head_config():
    """:data:`HEAD_DEFAULTS` as an ``ml_collections.ConfigDict`` (needs ml_collections)."""
    return _config_dict(HEAD_DEFAULTS)


def _resolve(config: Any, defaults: dict[str, Any], kind: str) -> dict[str, Any]:
    """The config's fields over the defaults, as a plain dict; rejects unknown fields."""
    fields = dict(config.items()) if hasattr(config, "items") else dict(vars(config))
    known = set(defaults)
    values = dict(defaults)
    own = {"small_cnn": SMALL_CNN_DEFAULTS, "mlp": MLP_DEFAULTS}.get(fields.get("name"))
    if kind == "encoder" and own is not None:
        known |= set(own)
        values.update(own)
    check_fields(f"config.model.{kind}", fields, known)
    values.update(fields)
    choices = ENCODER_NAMES if kind == "encoder" else HEAD_NAMES
    if values["name"] not in choices:
        raise ConfigError(f"{kind} config.name must be one of {choices}, got {values['name']!r}")
    if values["dtype"] not in DTYPES:
        raise ConfigError(
            f"{kind} config.dtype must be one of {tuple(DTYPES)}, got {values['dtype']!r}"
        )
    if values["bn_axis_name"] is not None and not isinstance(values["bn_axis_name"], str):
        raise ConfigError(
            f"{kind} config.bn_axis_name must be a string or None, got {values['bn_axis_name']!r}"
        )
    return values


def create_encoder(
    config: Any, *, rngs: nnx.Rngs
) -> SmallCNN | MLP | ResNet | VisionTransformer:
    """Build the encoder named by ``config.name`` (fields: see the module docstring).

    The encoder maps NHWC images [B, H, W, 3] (``mlp``: vectors [B, in_features]) to
    float32 features [B, encoder.num_features] and is in training mode.

    Raises:
      ConfigError: unknown name or field, or an invalid value; the message names the field.
    """
    c = _resolve(config, ENCODER_DEFAULTS, "encoder")
    if not isinstance(c["zero_init_residual"], bool):
        raise ConfigError(
            f"encoder config.zero_init_residual must be a bool, got {c['zero_init_residual']!r}"
        )
    dtype = DTYPES[c["dtype"]]
    try:
        if c["name"] == "small_cnn":
            return SmallCNN(c["channels"], c["strides"], dtype=dtype, rngs=rngs)
        if c["name"] == "mlp":
            if c["in_features"] is None:
                raise ConfigError(
                    "encoder config.in_features (the width D of the input vectors) is required "
                    "for the mlp encoder"
                )
            return MLP(c["in_features"], c["widths"], use_bias=c["use_bias"],
                       init_std=c["init_std"], dtype=dtype, rngs=rngs)
        if c["name"] in RESNET_DEPTHS:
            return ResNet(
                RESNET_DEPTHS[c["name"]],
                stem=c["stem"],
                width=c["width"],
                zero_init_residual=c["zero_init_residual"],
                bn_axis_name=c["bn_axis_name"],
                bn_momentum=c["bn_momentum"],
                dtype=dtype,
                rngs=rngs,
            )
        variant = dataclasses.asdict(VIT_VARIANTS[c["name"]])
        if c["image_size"] is not None:
            variant["image_size"] = c["image_size"]
        return VisionTransformer(
            **variant,
            pool=c["pool"],
            dropout_rate=c["dropout_rate"],
            attention_dropout_rate=c["attention_dropout_rate"],
            drop_path_rate=c["drop_path_rate"],
            dtype=dtype,
            rngs=rngs,
        )
    except ValueError as e:
        raise ConfigError(f"encoder config.{e}") from e


def create_head(config: Any, in_features: int, *, rngs: nnx.Rngs) -> nnx.Module:
    """Build the head named by ``config.name`` on ``in_features``-wide inputs.

    The head maps [B, in_features] to float32 [B, out_features] (``num_classes``
    for the classifier, ``in_features`` for ``identity``) and is in training mode.

    Raises:
      ConfigError: unknown name or field, or an invalid value; the message names the field.
      ValueError: ``in_features`` is not a positive integer (a caller's error, not a config's).
    """
    if isinstance(in_features, bool) or not isinstance(in_features, int) or in_features < 1:
        raise ValueError(f"in_features must be a positive integer, got {in_features!r}")
    c = _resolve(config, HEAD_DEFAULTS, "head")
    dtype = DTYPES[c["dtype"]]
    try:
        if c["name"] in ("simclr_v2", "simclr_v1", "mio"):
            return MLPHead(
                in_features,
                c["out_features"],
                hidden_features=c["hidden_features"],
                num_hidden_layers=c["num_hidden_layers"],
                last_bn=c["name"] in ("simclr_v1", "mio"),
                last_bn_center=c["name"] == "mio",
                bn_axis_name=c["bn_axis_name"],
                bn_momentum=c["bn_momentum"],
                dtype=dtype,
                rngs=rngs,
            )
        if c["name"] == "linear":
            return LinearHead(in_features, c["out_features"], dtype=dtype, rngs=rngs)
        if c["name"] == "normalized_linear":
            return NormalizedLinearHead(in_features, c["out_features"], dtype=dtype, rngs=rngs)
        if c["name"] == "identity":
            return IdentityHead(in_features)
        num_classes = c["num_classes"]
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ConfigError(
                f"num_classes must be a positive integer for the classifier head, got {num_classes!r}"
            )
        return LinearHead(in_features, num_classes, dtype=dtype, rngs=rngs)
    except ValueError as e:
        raise ConfigError(f"head config.{e}") from e
