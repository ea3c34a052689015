"""Build encoders and heads from configs: an :class:`EncoderSpec` / :class:`HeadSpec`, a
``ml_collections.ConfigDict`` or any mapping.

Every field and its default is declared once, in the frozen dataclasses :class:`EncoderSpec`
and :class:`HeadSpec`, which check every value; :func:`default_encoder_config` and
:func:`default_head_config` are the command line's ``ConfigDict`` of them, and
:func:`encoder_spec` / :func:`head_spec` read a config into them.

Encoder config fields:

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
``conv_init``                 ResNet: ``he_fan_out`` (Kaiming normal, fan-out:
                              torchvision's) | ``tf_fan_in`` (TF's ``variance_scaling``:
                              scale 1, fan-in, truncated normal; the SimCLR v1 and SupCon
                              TF codes') (default ``he_fan_out``)
``pool_padding``              ResNet, ImageNet stem: the max-pool's padding ``symmetric``
                              (PyTorch's) | ``same`` (TF's ``SAME``: an even side padded
                              after only) (default ``symmetric``)
============================  =========================================================

``channels`` and ``strides`` and the ``mlp`` fields (:data:`ENCODER_ONLY`) are not in
:func:`default_encoder_config`: a config sets them
beside ``name="small_cnn"`` / ``name="mlp"``, so the model config (which a checkpoint
records) of every other encoder is unchanged.

Head config fields:

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
``kernel_init``               the Linear kernels' initialiser: ``None`` (the head's own:
                              LeCun normal, N(0, 0.01^2) for ``normalized_linear``) |
                              ``lecun_normal`` | ``normal_0.01`` | ``glorot_uniform`` |
                              ``zeros`` | ``torch_linear`` (PyTorch's ``nn.Linear``:
                              kernel and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)))
                              (:data:`HEAD_KERNEL_INITS`) (default None)
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

from contrastive_jax._sections import check_domains, section_fields
from contrastive_jax.errors import ConfigError, check_fields
from contrastive_jax.models.cnn import SmallCNN
from contrastive_jax.models.heads import (
    IdentityHead,
    LinearHead,
    MLPHead,
    NormalizedLinearHead,
    torch_linear_init,
    torch_linear_kernel_init,
)
from contrastive_jax.models.mlp import MLP
from contrastive_jax.models.resnet import CONV_INITS, POOL_PADDINGS, ResNet
from contrastive_jax.models.vit import VIT_VARIANTS, VisionTransformer

RESNET_DEPTHS = {"resnet18": 18, "resnet34": 34, "resnet50": 50}
ENCODER_NAMES = (*RESNET_DEPTHS, *VIT_VARIANTS, "small_cnn", "mlp")
HEAD_NAMES = ("simclr_v2", "simclr_v1", "mio", "normalized_linear", "linear", "classifier",
              "identity")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
#: ``config.model.head.kernel_init``: the heads' Linear kernels' initialisers. LeCun normal is
#: Flax's default; N(0, 0.01^2) SimCLR v1's ``linear_layer`` and SupCon TF's projection head;
#: Glorot uniform Keras's ``Dense`` default (SupCon TF's classifier); zeros SimCLR's
#: ``--zero_init_logits_layer``; ``torch_linear`` PyTorch's ``nn.Linear`` default
#: (HobbitLong/SupContrast's heads and classifier, :func:`.heads.torch_linear_init`), the
#: one whose biases (the ``linear`` and ``classifier`` heads') start at
#: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) too; with the others biases start at zero.
HEAD_KERNEL_INITS = {
    "lecun_normal": nnx.initializers.lecun_normal(),
    "normal_0.01": nnx.initializers.normal(stddev=0.01),
    "glorot_uniform": nnx.initializers.glorot_uniform(),
    "zeros": nnx.initializers.zeros_init(),
    "torch_linear": torch_linear_kernel_init,
}


#: Fields of one encoder only (beside ``name``), not in :func:`default_encoder_config`.
ENCODER_ONLY = {"small_cnn": ("channels", "strides"),
                "mlp": ("in_features", "widths", "use_bias", "init_std")}


@dataclasses.dataclass(frozen=True)
class EncoderSpec:
    """``config.model.encoder``: every field and its default (the table above); frozen, every
    value checked. Default: a CIFAR-stem ResNet-18 in float32 with per-device BN."""

    name: str = "resnet18"
    dtype: str = "float32"
    stem: str = "cifar"
    width: float = 1.0
    zero_init_residual: bool = False
    bn_axis_name: str | None = None
    bn_momentum: float = 0.9
    image_size: int | None = None
    pool: str = "cls"
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    channels: tuple[int, ...] = (32, 64)  # small_cnn
    strides: tuple[int, ...] = (1, 2)  # small_cnn
    in_features: int | None = None  # mlp (required)
    widths: tuple[int, ...] = (16, 16, 2)  # mlp
    use_bias: bool = True  # mlp
    init_std: float | None = None  # mlp
    conv_init: str = "he_fan_out"  # ResNet
    pool_padding: str = "symmetric"  # ResNet, ImageNet stem

    def __post_init__(self) -> None:
        _check_common("encoder", self.name, ENCODER_NAMES, self.dtype, self.bn_axis_name)
        if self.conv_init not in CONV_INITS:
            raise ConfigError(f"encoder config.conv_init must be one of {tuple(CONV_INITS)}, "
                              f"got {self.conv_init!r}")
        if self.pool_padding not in POOL_PADDINGS:
            raise ConfigError(f"encoder config.pool_padding must be one of {POOL_PADDINGS}, "
                              f"got {self.pool_padding!r}")
        if not isinstance(self.zero_init_residual, bool):
            raise ConfigError(f"encoder config.zero_init_residual must be a bool, got "
                              f"{self.zero_init_residual!r}")
        if self.name == "mlp" and self.in_features is None:
            raise ConfigError(
                "encoder config.in_features (the width D of the input vectors) is required "
                "for the mlp encoder"
            )
        check_domains(self, ENCODER_DOMAINS, "encoder config")


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """``config.model.head``: every field and its default (the table above); frozen, every
    value checked. Default: SimCLR-v2's MLP, one hidden layer of the encoder's width, out 128."""

    name: str = "simclr_v2"
    num_hidden_layers: int = 1
    hidden_features: int | None = None
    out_features: int = 128
    num_classes: int | None = None
    bn_axis_name: str | None = None
    bn_momentum: float = 0.9
    dtype: str = "float32"
    kernel_init: str | None = None  # a key of HEAD_KERNEL_INITS; None: the head's own

    def __post_init__(self) -> None:
        _check_common("head", self.name, HEAD_NAMES, self.dtype, self.bn_axis_name)
        if self.kernel_init is not None and self.kernel_init not in HEAD_KERNEL_INITS:
            raise ConfigError(f"head config.kernel_init must be None or one of "
                              f"{tuple(HEAD_KERNEL_INITS)}, got {self.kernel_init!r}")
        k = self.num_classes
        if self.name == "classifier" and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ConfigError(f"head config.num_classes must be a positive integer for the "
                              f"classifier head, got {k!r}")
        check_domains(self, HEAD_DOMAINS, "head config")


#: The domain of each numeric field of :class:`EncoderSpec` and :class:`HeadSpec` (None:
#: unset, where allowed).
ENCODER_DOMAINS = {
    "width": "> 0", "bn_momentum": "[0, 1)", "image_size": "int >= 1",
    "dropout_rate": "[0, 1)", "attention_dropout_rate": "[0, 1)", "drop_path_rate": "[0, 1)",
    "channels": "int >= 1", "strides": "int >= 1", "in_features": "int >= 1",
    "widths": "int >= 1", "init_std": "> 0",
}
HEAD_DOMAINS = {"num_hidden_layers": "int >= 0", "hidden_features": "int >= 1",
                "out_features": "int >= 1", "num_classes": "int >= 1", "bn_momentum": "[0, 1)"}


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """``config.model``: the encoder's and the head's sections."""

    encoder: EncoderSpec = dataclasses.field(default_factory=EncoderSpec)
    head: HeadSpec = dataclasses.field(default_factory=HeadSpec)


def _check_common(kind: str, name: str, names: tuple[str, ...], dtype: str,
                  bn_axis_name: str | None) -> None:
    if name not in names:
        raise ConfigError(f"{kind} config.name must be one of {names}, got {name!r}")
    if dtype not in DTYPES:
        raise ConfigError(f"{kind} config.dtype must be one of {tuple(DTYPES)}, got {dtype!r}")
    if bn_axis_name is not None and not isinstance(bn_axis_name, str):
        raise ConfigError(
            f"{kind} config.bn_axis_name must be a string or None, got {bn_axis_name!r}")


def _fields(config: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(config):
        return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    return dict(config.items()) if hasattr(config, "items") else dict(vars(config))


def encoder_spec(config: Any) -> EncoderSpec:
    """The :class:`EncoderSpec` of ``config.model.encoder`` (any mapping or attribute object of
    some fields; an :class:`EncoderSpec` is returned as it is). Raises ConfigError naming a
    field that is not one (the fields of :data:`ENCODER_ONLY` only beside their encoder's
    name) or a bad value."""
    if isinstance(config, EncoderSpec):
        return config
    fields = _fields(config)
    only = {f for fs in ENCODER_ONLY.values() for f in fs}
    known = {f.name for f in dataclasses.fields(EncoderSpec)} - only
    check_fields("config.model.encoder", fields,
                 known | set(ENCODER_ONLY.get(fields.get("name", ""), ())))
    return EncoderSpec(**fields)


def head_spec(config: Any) -> HeadSpec:
    """The :class:`HeadSpec` of ``config.model.head`` (as :func:`encoder_spec`)."""
    if isinstance(config, HeadSpec):
        return config
    fields = _fields(config)
    check_fields("config.model.head", fields, [f.name for f in dataclasses.fields(HeadSpec)])
    return HeadSpec(**fields)


def model_spec(config: Any) -> ModelSpec:
    """The :class:`ModelSpec` of ``config.model`` (its ``encoder`` and ``head``)."""
    fields = _fields(config)
    check_fields("config.model", fields, ("encoder", "head"))
    return ModelSpec(encoder_spec(fields.get("encoder", {})), head_spec(fields.get("head", {})))


def default_encoder_config():
    """:class:`EncoderSpec`'s fields but :data:`ENCODER_ONLY`'s, with their defaults, as an
    ``ml_collections.ConfigDict`` (needs ml_collections)."""
    import ml_collections  # the config layer's library; building models needs no ml_collections

    only = {f for fs in ENCODER_ONLY.values() for f in fs}
    return ml_collections.ConfigDict(
        {k: v for k, v in section_fields(EncoderSpec).items() if k not in only})


def default_head_config():
    """:class:`HeadSpec`'s fields and defaults as an ``ml_collections.ConfigDict`` (needs
    ml_collections)."""
    import ml_collections

    return ml_collections.ConfigDict(section_fields(HeadSpec))


def create_encoder(
    config: Any, *, rngs: nnx.Rngs
) -> SmallCNN | MLP | ResNet | VisionTransformer:
    """Build the encoder named by ``config.name`` (fields: see the module docstring).

    The encoder maps NHWC images [B, H, W, 3] (``mlp``: vectors [B, in_features]) to
    float32 features [B, encoder.num_features] and is in training mode.

    Raises:
      ConfigError: unknown name or field, or an invalid value; the message names the field.
    """
    c = encoder_spec(config)
    dtype = DTYPES[c.dtype]
    try:
        if c.name == "small_cnn":
            return SmallCNN(c.channels, c.strides, dtype=dtype, rngs=rngs)
        if c.name == "mlp":
            return MLP(c.in_features, c.widths, use_bias=c.use_bias, init_std=c.init_std,
                       dtype=dtype, rngs=rngs)
        if c.name in RESNET_DEPTHS:
            return ResNet(
                RESNET_DEPTHS[c.name],
                stem=c.stem,
                width=c.width,
                zero_init_residual=c.zero_init_residual,
                bn_axis_name=c.bn_axis_name,
                bn_momentum=c.bn_momentum,
                conv_init=c.conv_init,
                pool_padding=c.pool_padding,
                dtype=dtype,
                rngs=rngs,
            )
        variant = dataclasses.asdict(VIT_VARIANTS[c.name])
        if c.image_size is not None:
            variant["image_size"] = c.image_size
        return VisionTransformer(
            **variant,
            pool=c.pool,
            dropout_rate=c.dropout_rate,
            attention_dropout_rate=c.attention_dropout_rate,
            drop_path_rate=c.drop_path_rate,
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
    c = head_spec(config)
    dtype = DTYPES[c.dtype]
    init = {} if c.kernel_init is None else {"kernel_init": HEAD_KERNEL_INITS[c.kernel_init]}
    # PyTorch's nn.Linear draws the bias too (the heads with one: linear, classifier)
    bias = {"bias_init": torch_linear_init(in_features)} if c.kernel_init == "torch_linear" else {}
    try:
        if c.name in ("simclr_v2", "simclr_v1", "mio"):
            return MLPHead(
                in_features,
                c.out_features,
                hidden_features=c.hidden_features,
                num_hidden_layers=c.num_hidden_layers,
                last_bn=c.name in ("simclr_v1", "mio"),
                last_bn_center=c.name == "mio",
                bn_axis_name=c.bn_axis_name,
                bn_momentum=c.bn_momentum,
                dtype=dtype,
                rngs=rngs,
                **init,
            )
        if c.name == "linear":
            return LinearHead(in_features, c.out_features, dtype=dtype, rngs=rngs, **init,
                              **bias)
        if c.name == "normalized_linear":
            return NormalizedLinearHead(in_features, c.out_features, dtype=dtype, rngs=rngs,
                                        **init)
        if c.name == "identity":
            return IdentityHead(in_features)
        return LinearHead(in_features, c.num_classes, dtype=dtype, rngs=rngs, **init, **bias)
    except ValueError as e:
        raise ConfigError(f"head config.{e}") from e
