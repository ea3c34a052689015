"""A multilayer perceptron encoder for vector data (Flax NNX).

:class:`MLP` maps feature vectors [B, in_features] through Linear layers with ReLU
between them (none after the last layer) to [B, widths[-1]]; no normalisation
layer, so its output does not depend on the batch. It is the encoder of the
synthetic reproductions on vectors (``docs/reproductions.md``): the ProjNCE
App. D.1 MLPs ``5 -> 16 -> 16 -> 2`` and ``8 -> 32 -> 32 -> 4``
(``widths=(16, 16, 2)``, ``(32, 32, 4)``) and the linear softmax model of the
soft-target toy (``widths=(20,)``, ``use_bias=False``, ``init_std=0.01``).

Initialisation: ``init_std=None`` is PyTorch's default for ``nn.Linear``,
weights and biases ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``; a number draws
weights from ``N(0, init_std^2)`` and sets biases to zero.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from contrastive_jax.models.heads import torch_linear_init


class MLP(nnx.Module):
    """Linear layers with ReLU between them: x [B, in_features] -> [B, widths[-1]] float32.

    Args:
      in_features: input width D (at least 1).
      widths: output width of each Linear layer (at least one layer).
      use_bias: whether the layers have biases.
      init_std: None: PyTorch's ``nn.Linear`` default (see the module docstring);
        a positive number: weights ``N(0, init_std^2)``, zero biases.
      dtype: compute dtype; parameters are always float32.
      rngs: parameter initialisation RNGs.

    Attributes:
      num_features: ``widths[-1]``, the feature width.
    """

    def __init__(
        self,
        in_features: int,
        widths: Sequence[int] = (16, 16, 2),
        *,
        use_bias: bool = True,
        init_std: float | None = None,
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        widths = tuple(widths)
        if isinstance(in_features, bool) or not isinstance(in_features, int) or in_features < 1:
            raise ValueError(f"in_features must be a positive integer, got {in_features!r}")
        if not widths or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
            raise ValueError(f"widths must be one or more positive integers, got {widths!r}")
        if not isinstance(use_bias, bool):
            raise ValueError(f"use_bias must be a bool, got {use_bias!r}")
        if init_std is not None and not (isinstance(init_std, int | float) and init_std > 0):
            raise ValueError(f"init_std must be None or a positive number, got {init_std!r}")
        layers = []
        for fan_in, fan_out in zip((in_features, *widths[:-1]), widths, strict=True):
            if init_std is None:
                kernel_init = bias_init = torch_linear_init(fan_in)
            else:
                kernel_init = nnx.initializers.normal(float(init_std))
                bias_init = nnx.initializers.zeros_init()
            layers.append(
                nnx.Linear(fan_in, fan_out, use_bias=use_bias, kernel_init=kernel_init,
                           bias_init=bias_init, dtype=dtype, rngs=rngs)
            )
        self.layers = nnx.List(layers)
        self.num_features = widths[-1]

    def __call__(self, x: jax.Array) -> jax.Array:
        if x.ndim != 2:
            raise ValueError(f"MLP input must be vectors [B, D], got shape {x.shape}")
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = nnx.relu(x)
        return x.astype(jnp.float32)
