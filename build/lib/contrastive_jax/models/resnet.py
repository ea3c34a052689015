"""ResNet-18/34/50 encoders (He et al., 2016, "Deep Residual Learning") in Flax NNX.

Inputs are NHWC float images; the output is the globally average-pooled feature
vector [B, F] with F = 512·width (ResNet-18/34) or 2048·width (ResNet-50).

- Stems: ``"imagenet"`` (7×7 conv stride 2 + 3×3 max-pool stride 2) and
  ``"cifar"`` (3×3 conv stride 1, no max-pool; SimCLR, Chen et al. 2020, App. B.9).
- ``width`` multiplies every channel count, the stem included (SimCLR's
  ResNet-50 (2×), (4×)); fractions such as 0.25 give the narrow networks of
  CPU-scale experiments (``64·width`` must be a whole number of channels).
- Bottleneck blocks put the stride on the 3×3 convolution (ResNet "v1.5", as in
  torchvision and SimCLR); projection shortcuts are 1×1 conv + BN.
- ``zero_init_residual`` initialises the scale (gamma) of the last BN of every
  residual branch to zero, so each block starts as the identity (Goyal et al.,
  2017, "Accurate, Large Minibatch SGD").
- ``bn_axis_name``: BatchNorm statistics are averaged over that mesh axis when the
  forward pass runs inside ``jax.shard_map`` (SimCLR's global BN); ``None`` uses
  the statistics of the arrays each BN sees.

Modules are created in training mode; ``model.eval()`` switches every BatchNorm
to its running averages and ``model.train()`` back.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

#: The convolutions' initialisers (``conv_init``): ``"he_fan_out"``, Kaiming-normal on the
#: fan-out, torchvision's ResNet's; ``"tf_fan_in"``, TF's ``variance_scaling_initializer()``
#: (scale 1, fan-in, a normal truncated at two standard deviations and rescaled to keep the
#: variance 1 / fan_in), what the SimCLR v1 (``resnet.py``) and SupCon TF (``blocks.py``) codes
#: use.
CONV_INITS = {
    "he_fan_out": nnx.initializers.variance_scaling(2.0, "fan_out", "normal"),
    "tf_fan_in": nnx.initializers.variance_scaling(1.0, "fan_in", "truncated_normal"),
}
#: The ImageNet stem's 3x3 stride-2 max-pool padding (``pool_padding``): ``"symmetric"`` (one
#: pixel each side, PyTorch's ``padding=1``) or ``"same"`` (TF's ``padding='SAME'``: the
#: total ``max((ceil(n / 2) - 1) * 2 + 3 - n, 0)`` split with the smaller half before, so an
#: even side is padded after only).
POOL_PADDINGS = ("symmetric", "same")

STEMS = ("cifar", "imagenet")

# depth -> (bottleneck?, blocks per stage)
_DEPTHS: dict[int, tuple[bool, tuple[int, ...]]] = {
    18: (False, (2, 2, 2, 2)),
    34: (False, (3, 4, 6, 3)),
    50: (True, (3, 4, 6, 3)),
}


def _conv(
    in_features: int,
    out_features: int,
    kernel_size: int,
    strides: int,
    *,
    init: str,
    dtype: jnp.dtype,
    rngs: nnx.Rngs,
) -> nnx.Conv:
    """A bias-free k×k convolution with symmetric padding k // 2 (PyTorch's, and for odd k
    the TF codes' ``conv2d_fixed_padding``), initialised by ``CONV_INITS[init]``."""
    pad = kernel_size // 2
    return nnx.Conv(
        in_features,
        out_features,
        (kernel_size, kernel_size),
        strides=strides,
        padding=((pad, pad), (pad, pad)),
        use_bias=False,
        kernel_init=CONV_INITS[init],
        dtype=dtype,
        rngs=rngs,
    )


def _bn(
    num_features: int,
    *,
    zero_scale: bool = False,
    axis_name: str | None,
    momentum: float,
    dtype: jnp.dtype,
    rngs: nnx.Rngs,
) -> nnx.BatchNorm:
    """BatchNorm in training mode; ``zero_scale`` starts its gamma at zero.

    The batch variance is computed in two passes, ``E[(x - E[x])^2]``, as PyTorch does, not
    Flax's default ``E[x^2] - E[x]^2``, which cancels catastrophically when a channel's mean
    is large against its spread (it tripled the float32 gradient error of a ResNet-18 step
    against float64: ``experiments/parity/README.md``).
    """
    return nnx.BatchNorm(
        num_features,
        use_running_average=False,
        momentum=momentum,
        epsilon=1e-5,
        use_fast_variance=False,
        axis_name=axis_name,
        scale_init=nnx.initializers.zeros_init() if zero_scale else nnx.initializers.ones_init(),
        dtype=dtype,
        rngs=rngs,
    )


class _Shortcut(nnx.Module):
    """Projection shortcut: 1×1 conv (with stride) + BN. [B, H, W, C] -> [B, H/s, W/s, C'].

    ``bn``: the keyword arguments of :func:`_bn` (``axis_name``, ``momentum``,
    ``dtype``, ``rngs``), shared with the block's own BatchNorms.
    """

    def __init__(self, in_features: int, out_features: int, strides: int, conv_init: str,
                 **bn):
        self.conv = _conv(in_features, out_features, 1, strides, init=conv_init,
                          dtype=bn["dtype"], rngs=bn["rngs"])
        self.bn = _bn(out_features, **bn)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.bn(self.conv(x))


class BasicBlock(nnx.Module):
    """Two 3×3 convolutions with a residual connection (ResNet-18/34).

    [B, H, W, in_features] -> [B, H/strides, W/strides, features]; ``features`` is
    also the output width (expansion 1).
    """

    expansion = 1

    def __init__(
        self,
        in_features: int,
        features: int,
        strides: int = 1,
        *,
        zero_init_residual: bool = False,
        bn_axis_name: str | None = None,
        bn_momentum: float = 0.9,
        conv_init: str = "he_fan_out",
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        bn = dict(axis_name=bn_axis_name, momentum=bn_momentum, dtype=dtype, rngs=rngs)
        self.conv1 = _conv(in_features, features, 3, strides,
                           init=conv_init, dtype=dtype, rngs=rngs)
        self.bn1 = _bn(features, **bn)
        self.conv2 = _conv(features, features, 3, 1, init=conv_init, dtype=dtype, rngs=rngs)
        self.bn2 = _bn(features, zero_scale=zero_init_residual, **bn)
        self.shortcut = _shortcut(in_features, features, strides, conv_init, **bn)

    def __call__(self, x: jax.Array) -> jax.Array:
        residual = x if self.shortcut is None else self.shortcut(x)
        y = nnx.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return nnx.relu(y + residual)


def _shortcut(in_features: int, out_features: int, strides: int, conv_init: str,
              **bn) -> _Shortcut | None:
    """The projection shortcut a block needs when its shape changes, else None (identity)."""
    if strides == 1 and in_features == out_features:
        return None
    return _Shortcut(in_features, out_features, strides, conv_init, **bn)


class Bottleneck(nnx.Module):
    """1×1 reduce, 3×3 (strided), 1×1 expand, with a residual connection (ResNet-50).

    [B, H, W, in_features] -> [B, H/strides, W/strides, 4·features].
    """

    expansion = 4

    def __init__(
        self,
        in_features: int,
        features: int,
        strides: int = 1,
        *,
        zero_init_residual: bool = False,
        bn_axis_name: str | None = None,
        bn_momentum: float = 0.9,
        conv_init: str = "he_fan_out",
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        out_features = features * self.expansion
        bn = dict(axis_name=bn_axis_name, momentum=bn_momentum, dtype=dtype, rngs=rngs)
        self.conv1 = _conv(in_features, features, 1, 1, init=conv_init, dtype=dtype, rngs=rngs)
        self.bn1 = _bn(features, **bn)
        self.conv2 = _conv(features, features, 3, strides, init=conv_init, dtype=dtype, rngs=rngs)
        self.bn2 = _bn(features, **bn)
        self.conv3 = _conv(features, out_features, 1, 1, init=conv_init, dtype=dtype, rngs=rngs)
        self.bn3 = _bn(out_features, zero_scale=zero_init_residual, **bn)
        self.shortcut = _shortcut(in_features, out_features, strides, conv_init, **bn)

    def __call__(self, x: jax.Array) -> jax.Array:
        residual = x if self.shortcut is None else self.shortcut(x)
        y = nnx.relu(self.bn1(self.conv1(x)))
        y = nnx.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return nnx.relu(y + residual)


def stem_pool(x: jax.Array, padding: str) -> jax.Array:
    """The ImageNet stem's 3x3 stride-2 max-pool: x [B, H, W, C] -> [B, ceil(H/2), ceil(W/2),
    C] with ``padding`` one of :data:`POOL_PADDINGS` (padded cells never win)."""
    if padding == "same":
        return nnx.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
    return nnx.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))


def _base_features(width: float) -> int:
    """Channels of the stem and first stage, ``64·width``; ValueError unless a positive integer."""
    if isinstance(width, bool) or not isinstance(width, int | float) or not width > 0:
        raise ValueError(f"width must be a positive number, got {width!r}")
    base = 64 * width
    if base != int(base):
        raise ValueError(f"width must make 64·width a whole number of channels, got {width!r}")
    return int(base)


class ResNet(nnx.Module):
    """ResNet-18, -34 or -50 encoder without the classifier.

    ``__call__``: x [B, H, W, in_channels] float -> pooled features
    [B, num_features] float32 (the compute ``dtype`` applies inside; pooling and
    the output are float32). ``num_features`` = 512·width for depth 18/34 and
    2048·width for depth 50.

    Args:
      depth: 18, 34 or 50.
      stem: ``"cifar"`` (3×3 stride-1 conv, no max-pool) or ``"imagenet"``
        (7×7 stride-2 conv + 3×3 stride-2 max-pool).
      width: channel multiplier > 0 with ``64·width`` a whole number (1, 2, 0.25, ...).
      zero_init_residual: zero-initialise the last BN gamma of each block.
      bn_axis_name: mesh axis over which BN statistics are averaged, or ``None``.
      bn_momentum: running-average decay of BN statistics (0.9 = PyTorch's 0.1).
      conv_init: the convolutions' initialiser, a key of :data:`CONV_INITS`.
      pool_padding: the ImageNet stem's max-pool padding, one of :data:`POOL_PADDINGS`.
      in_channels: input channels.
      dtype: compute dtype; parameters are always float32.
      rngs: parameter initialisation RNGs.
    """

    def __init__(
        self,
        depth: int,
        *,
        stem: str = "cifar",
        width: float = 1,
        zero_init_residual: bool = False,
        bn_axis_name: str | None = None,
        bn_momentum: float = 0.9,
        conv_init: str = "he_fan_out",
        pool_padding: str = "symmetric",
        in_channels: int = 3,
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        if depth not in _DEPTHS:
            raise ValueError(f"depth must be one of {sorted(_DEPTHS)}, got {depth!r}")
        if stem not in STEMS:
            raise ValueError(f"stem must be one of {STEMS}, got {stem!r}")
        if conv_init not in CONV_INITS:
            raise ValueError(f"conv_init must be one of {tuple(CONV_INITS)}, got {conv_init!r}")
        if pool_padding not in POOL_PADDINGS:
            raise ValueError(
                f"pool_padding must be one of {POOL_PADDINGS}, got {pool_padding!r}")
        base = _base_features(width)
        if not 0.0 <= bn_momentum < 1.0:
            raise ValueError(f"bn_momentum must be in [0, 1), got {bn_momentum!r}")

        bottleneck, stage_sizes = _DEPTHS[depth]
        block_cls = Bottleneck if bottleneck else BasicBlock
        stem_features = base
        self.stem = stem
        self.pool_padding = pool_padding
        if stem == "imagenet":
            self.conv1 = _conv(in_channels, stem_features, 7, 2,
                               init=conv_init, dtype=dtype, rngs=rngs)
        else:
            self.conv1 = _conv(in_channels, stem_features, 3, 1,
                               init=conv_init, dtype=dtype, rngs=rngs)
        self.bn1 = _bn(
            stem_features, axis_name=bn_axis_name, momentum=bn_momentum, dtype=dtype, rngs=rngs
        )

        blocks = []
        in_features = stem_features
        for stage, num_blocks in enumerate(stage_sizes):
            features = base * 2**stage
            for i in range(num_blocks):
                strides = 2 if stage > 0 and i == 0 else 1
                blocks.append(
                    block_cls(
                        in_features,
                        features,
                        strides,
                        zero_init_residual=zero_init_residual,
                        bn_axis_name=bn_axis_name,
                        bn_momentum=bn_momentum,
                        conv_init=conv_init,
                        dtype=dtype,
                        rngs=rngs,
                    )
                )
                in_features = features * block_cls.expansion
        self.blocks = nnx.List(blocks)
        self.num_features: int = in_features

    def __call__(self, x: jax.Array) -> jax.Array:
        if x.ndim != 4:
            raise ValueError(f"x must be NHWC [B, H, W, C], got shape {x.shape}")
        x = nnx.relu(self.bn1(self.conv1(x)))
        if self.stem == "imagenet":
            x = stem_pool(x, self.pool_padding)
        for block in self.blocks:
            x = block(x)
        return jnp.mean(x.astype(jnp.float32), axis=(1, 2))
