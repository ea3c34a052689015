"""A small convolutional encoder for CPU-scale proxies (Flax NNX).

:class:`SmallCNN` is a stack of 3x3 convolutions with bias and ReLU, "SAME"
padding and a per-layer stride, followed by global average pooling; no
normalisation layer, so its features do not depend on the batch. It is the
encoder of the CPU reproductions on 16x16 digits and 32x32 phantoms
(``docs/reproductions.md``): ``channels=(32, 64), strides=(1, 2)`` on digits
(features in R^64), ``channels=(16, 32, 64, 128), strides=(2, 2, 2, 2)`` on
phantoms (R^128). Kernels are He-normal (truncated normal of variance
``2 / (9 C_in)``), biases zero.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx


class SmallCNN(nnx.Module):
    """3x3 conv (+ bias, ReLU) layers, then global average pooling.

    ``__call__``: x [B, H, W, in_channels] -> features [B, channels[-1]] float32.

    Args:
      channels: output channels of each convolution (at least one layer).
      strides: stride of each convolution, one per entry of ``channels``.
      in_channels: input channels (3: the pipeline's RGB images).
      dtype: compute dtype; parameters are always float32.
      rngs: parameter initialisation RNGs.

    Attributes:
      num_features: ``channels[-1]``, the feature width.
    """

    def __init__(
        self,
        channels: Sequence[int] = (32, 64),
        strides: Sequence[int] = (1, 2),
        *,
        in_channels: int = 3,
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        channels, strides = tuple(channels), tuple(strides)
        if not channels:
            raise ValueError("channels must name at least one convolution, got ()")
        for name, values in (("channels", channels), ("strides", strides)):
            if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
                raise ValueError(f"{name} must be positive integers, got {values!r}")
        if len(strides) != len(channels):
            raise ValueError(
                f"strides must have one entry per convolution ({len(channels)}), got {strides!r}"
            )
        widths = (in_channels, *channels)
        self.convs = nnx.List(
            [
                nnx.Conv(
                    c_in,
                    c_out,
                    (3, 3),
                    strides=(s, s),
                    padding="SAME",
                    kernel_init=nnx.initializers.he_normal(),
                    dtype=dtype,
                    rngs=rngs,
                )
                for c_in, c_out, s in zip(widths[:-1], widths[1:], strides, strict=True)
            ]
        )
        self.num_features = channels[-1]

    def __call__(self, x: jax.Array) -> jax.Array:
        for conv in self.convs:
            x = nnx.relu(conv(x))
        return x.mean(axis=(1, 2)).astype(jnp.float32)
