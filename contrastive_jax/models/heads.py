"""Projection and classification heads in Flax NNX.

- :class:`MLPHead`: ``num_hidden_layers`` × [Linear (no bias) → BN → ReLU], then a
  last Linear without bias and without ReLU, optionally followed by BN.
  - SimCLR v2 (Chen et al., 2020, "Big Self-Supervised Models are Strong
    Semi-Supervised Learners"): ``last_bn=False``. SimCLR v1's head is
    ``num_hidden_layers=1``, v2's "3-layer" head ``num_hidden_layers=2``.
  - SimCLR v1's code (github.com/google-research/simclr, ``model_util.py``
    ``projection_head``/``linear_layer``): ``last_bn=True, last_bn_center=False``, the
    128-d output batch-normalised with a scale and no offset (``center=use_bias=False``).
  - MIO (Manna et al.; reference ``ProjectionHead(use_bn=True, last_bn=True)``):
    ``last_bn=True`` with 1 hidden layer (models A/C) or 2 (models B/D):
    Linear(2048→2048) → BN → ReLU [→ Linear(→2048) → BN → ReLU] → Linear(→128) → BN.
- :class:`LinearHead`: one Linear layer with bias, [B, in] -> [B, out]; the linear
  projection head and the classifier of supervised baselines and soft-target losses.
- :class:`NormalizedLinearHead`: h / ||h|| -> one Linear without bias, [B, in] -> [B, out];
  the SupCon authors' TF code with ``--normalize_embedding=True
  --projection_head_layers=128 --use_projection_batch_norm=False``.
- :class:`IdentityHead`: no parameters, [B, in] -> [B, in]; the loss then sees the
  encoder output itself (the synthetic reproductions, whose embedding is the MLP's output).

All heads map [B, in_features] -> [B, out_features] float32 (the compute ``dtype``
applies inside). ``bn_axis_name`` averages BN statistics over that mesh axis
inside ``jax.shard_map``; ``None`` uses the statistics of the arrays each BN sees.
Modules are created in training mode; ``model.eval()`` uses BN running averages.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

Initializer = nnx.initializers.Initializer
#: Flax's ``nnx.Linear`` default: LeCun normal (variance 1 / fan_in, truncated normal).
DEFAULT_KERNEL_INIT: Initializer = nnx.initializers.lecun_normal()
#: Zeros: the biases' default.
ZEROS_INIT: Initializer = nnx.initializers.zeros_init()
#: N(0, 0.01^2): the SupCon TF code's projection head (``projection_head.py``).
SUPCON_PROJECTION_INIT: Initializer = nnx.initializers.normal(stddev=0.01)


def torch_linear_init(fan_in: int) -> Initializer:
    """PyTorch's ``nn.Linear`` default for a layer of ``fan_in`` inputs: ``U(-b, b)`` with
    ``b = 1 / sqrt(fan_in)``, for the weight and for the bias.

    ``torch.nn.Linear.reset_parameters``: the weight by ``kaiming_uniform_(a=sqrt(5))``, whose
    bound ``sqrt(3) * gain / sqrt(fan_in)`` with ``gain = sqrt(2 / (1 + a^2)) = sqrt(1 / 3)``
    is ``1 / sqrt(fan_in)``; the bias ``uniform_(-1 / sqrt(fan_in), 1 / sqrt(fan_in))``.
    Any shape (a kernel [fan_in, fan_out] or a bias [fan_out]), float32 by default.
    """
    bound = 1.0 / math.sqrt(fan_in)

    def init(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, minval=-bound, maxval=bound)

    return init


def torch_linear_kernel_init(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
    """:func:`torch_linear_init` of a Linear kernel [fan_in, fan_out] (its fan-in read from
    the shape): the heads' ``kernel_init="torch_linear"``."""
    return torch_linear_init(shape[0])(key, shape, dtype)


def _check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


class MLPHead(nnx.Module):
    """MLP projection head (SimCLR v2; MIO with ``last_bn=True``).

    ``__call__``: h [B, in_features] -> z [B, out_features] float32.

    Args:
      in_features: input width (the encoder's ``num_features``).
      out_features: output width.
      hidden_features: width of the hidden layers; ``None`` means ``in_features``.
      num_hidden_layers: number of Linear → BN → ReLU layers before the last
        Linear (0 gives a single bias-free Linear).
      last_bn: BatchNorm after the last Linear (MIO; SimCLR v1's code).
      last_bn_center: that BatchNorm has an offset (beta); False: scale only, as SimCLR
        v1's ``linear_layer(use_bias=False, use_bn=True)`` (``center=False``).
      bn_axis_name: mesh axis over which BN statistics are averaged, or ``None``.
      bn_momentum: running-average decay of BN statistics.
      kernel_init: the initialiser of every Linear's kernel (Flax's LeCun normal by default;
        SimCLR v1's ``linear_layer``: N(0, 0.01^2)).
      dtype: compute dtype; parameters are always float32.
      rngs: parameter initialisation RNGs.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int = 128,
        *,
        hidden_features: int | None = None,
        num_hidden_layers: int = 1,
        last_bn: bool = False,
        last_bn_center: bool = True,
        bn_axis_name: str | None = None,
        bn_momentum: float = 0.9,
        kernel_init: Initializer = DEFAULT_KERNEL_INIT,
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        hidden_features = in_features if hidden_features is None else hidden_features
        _check_positive("in_features", in_features)
        _check_positive("out_features", out_features)
        _check_positive("hidden_features", hidden_features)
        if (
            isinstance(num_hidden_layers, bool)
            or not isinstance(num_hidden_layers, int)
            or num_hidden_layers < 0
        ):
            raise ValueError(
                f"num_hidden_layers must be a non-negative integer, got {num_hidden_layers!r}"
            )
        if not 0.0 <= bn_momentum < 1.0:
            raise ValueError(f"bn_momentum must be in [0, 1), got {bn_momentum!r}")

        def bn(features: int, center: bool = True) -> nnx.BatchNorm:
            # Two-pass batch variance, as the encoders' BatchNorm (models/resnet.py:_bn).
            return nnx.BatchNorm(
                features,
                use_running_average=False,
                use_bias=center,
                momentum=bn_momentum,
                epsilon=1e-5,
                use_fast_variance=False,
                axis_name=bn_axis_name,
                dtype=dtype,
                rngs=rngs,
            )

        widths = [in_features] + [hidden_features] * num_hidden_layers
        self.hidden_linears = nnx.List(
            [
                nnx.Linear(d_in, d_out, use_bias=False, kernel_init=kernel_init, dtype=dtype,
                           rngs=rngs)
                for d_in, d_out in zip(widths[:-1], widths[1:], strict=True)
            ]
        )
        self.hidden_bns = nnx.List([bn(width) for width in widths[1:]])
        self.out = nnx.Linear(widths[-1], out_features, use_bias=False, kernel_init=kernel_init,
                              dtype=dtype, rngs=rngs)
        self.out_bn = bn(out_features, last_bn_center) if last_bn else None

    def __call__(self, h: jax.Array) -> jax.Array:
        x = h
        for linear, norm in zip(self.hidden_linears, self.hidden_bns, strict=True):
            x = nnx.relu(norm(linear(x)))
        x = self.out(x)
        if self.out_bn is not None:
            x = self.out_bn(x)
        return x.astype(jnp.float32)


class LinearHead(nnx.Module):
    """A single Linear layer with bias: h [B, in_features] -> [B, out_features] float32.

    The linear projection head, and the classifier (``out_features`` = number of
    classes) for supervised baselines and soft-target losses. ``kernel_init``: its kernel's
    initialiser (Flax's LeCun normal by default); ``bias_init`` its bias's (zeros by default;
    PyTorch's ``nn.Linear``: :func:`torch_linear_init` of ``in_features``).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        kernel_init: Initializer = DEFAULT_KERNEL_INIT,
        bias_init: Initializer = ZEROS_INIT,
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        _check_positive("in_features", in_features)
        _check_positive("out_features", out_features)
        self.linear = nnx.Linear(in_features, out_features, kernel_init=kernel_init,
                                 bias_init=bias_init, dtype=dtype, rngs=rngs)

    def __call__(self, h: jax.Array) -> jax.Array:
        return self.linear(h).astype(jnp.float32)


class NormalizedLinearHead(nnx.Module):
    """The L2-normalised encoder output through one Linear without bias:
    h [B, in_features] -> (h / ||h||_2) W, float32 [B, out_features].

    The SupCon authors' TF code (google-research/google-research ``supcon/``) with
    ``--normalize_embedding=True`` (``models.py``: the projection head's input is the
    normalised embedding), ``--projection_head_layers=128`` (one Dense layer, the last one,
    which ``projection_head.py`` builds without a bias) and ``--use_projection_batch_norm=False``;
    its kernel is initialised from N(0, 0.01^2), as there, unless ``kernel_init`` says
    otherwise.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        kernel_init: Initializer = SUPCON_PROJECTION_INIT,
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        _check_positive("in_features", in_features)
        _check_positive("out_features", out_features)
        self.linear = nnx.Linear(
            in_features, out_features, use_bias=False, dtype=dtype, kernel_init=kernel_init,
            rngs=rngs)

    def __call__(self, h: jax.Array) -> jax.Array:
        h = h.astype(jnp.float32)
        unit = h * jax.lax.rsqrt(jnp.maximum(jnp.sum(h * h, axis=-1, keepdims=True), 1e-12))
        return self.linear(unit).astype(jnp.float32)


class IdentityHead(nnx.Module):
    """No projection: h [B, in_features] -> h float32 (``out_features = in_features``).

    For objectives defined on the encoder output itself, e.g. ProjNCE's App. D.1 MLPs,
    whose embedding is the MLP output.
    """

    def __init__(self, in_features: int):
        _check_positive("in_features", in_features)
        self.out_features = in_features

    def __call__(self, h: jax.Array) -> jax.Array:
        return h.astype(jnp.float32)
