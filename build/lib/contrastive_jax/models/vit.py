"""Vision Transformer encoders (Dosovitskiy et al., 2021, "An Image is Worth 16x16
Words") in Flax NNX.

Inputs are NHWC float images [B, H, W, C] with H = W = ``image_size``; the output
is the pooled feature vector [B, hidden_size] after a final LayerNorm.

- Patch embedding: a p×p convolution with stride p, then learned position
  embeddings (one per patch, plus one for the class token when ``pool="cls"``).
- Pre-norm blocks: x + DropPath(MHSA(LN(x))), then x + DropPath(MLP(LN(x))),
  MLP = Linear(D→4D) → GELU → Dropout → Linear(4D→D) → Dropout.
- Pooling: ``"cls"`` takes the class token, ``"mean"`` averages the patch tokens
  (no class token; big_vision's ``gap``). Both after the final LayerNorm.
- Stochastic depth (Huang et al., 2016): per-block drop rate growing linearly
  from 0 to ``drop_path_rate`` over the depth, as in DeiT/timm.

Dropout and stochastic depth draw keys from the ``dropout`` stream of the
``rngs`` given at construction (its ``default`` stream if it has no
``dropout`` stream); they are active only in training mode (the default;
``model.eval()`` makes them deterministic). Under ``jax.shard_map`` the streams
are replicated, so give each device its own masks with ``nnx.reseed``, e.g.
``nnx.reseed(model, dropout=jax.random.fold_in(key, jax.lax.axis_index("data")))``
(use ``default=`` when the model was built with ``nnx.Rngs(seed)``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

POOLS = ("cls", "mean")

_dense_init = nnx.initializers.xavier_uniform()
_pos_init = nnx.initializers.normal(stddev=0.02)


@dataclasses.dataclass(frozen=True)
class ViTVariant:
    """Architecture of a ViT size: patch size, width D, depth, heads, MLP width, default image size."""

    patch_size: int
    hidden_size: int
    depth: int
    num_heads: int
    mlp_dim: int
    image_size: int


VIT_VARIANTS: dict[str, ViTVariant] = {
    "vit_ti16": ViTVariant(16, 192, 12, 3, 768, 224),
    "vit_s16": ViTVariant(16, 384, 12, 6, 1536, 224),
    "vit_b16": ViTVariant(16, 768, 12, 12, 3072, 224),
    "vit_ti4": ViTVariant(4, 192, 12, 3, 768, 32),
    "vit_s4": ViTVariant(4, 384, 12, 6, 1536, 32),
}


def _check_rate(name: str, value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")


class EncoderBlock(nnx.Module):
    """Pre-norm Transformer block. [B, N, D] -> [B, N, D]."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        mlp_dim: int,
        *,
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        self.norm1 = nnx.LayerNorm(hidden_size, epsilon=1e-6, dtype=dtype, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(
            num_heads,
            hidden_size,
            kernel_init=_dense_init,
            broadcast_dropout=False,
            dropout_rate=attention_dropout_rate,
            deterministic=False,
            decode=False,
            dtype=dtype,
            rngs=rngs,
        )
        self.norm2 = nnx.LayerNorm(hidden_size, epsilon=1e-6, dtype=dtype, rngs=rngs)
        self.fc1 = nnx.Linear(hidden_size, mlp_dim, kernel_init=_dense_init, dtype=dtype, rngs=rngs)
        self.fc2 = nnx.Linear(mlp_dim, hidden_size, kernel_init=_dense_init, dtype=dtype, rngs=rngs)
        self.dropout = nnx.Dropout(dropout_rate, rngs=rngs)
        # Stochastic depth: one Bernoulli draw per example, shared over tokens and channels.
        self.drop_path = nnx.Dropout(drop_path_rate, broadcast_dims=(1, 2), rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.dropout(self.attn(self.norm1(x)))
        x = x + self.drop_path(y)
        y = self.fc2(self.dropout(nnx.gelu(self.fc1(self.norm2(x)), approximate=False)))
        return x + self.drop_path(self.dropout(y))


class VisionTransformer(nnx.Module):
    """ViT encoder without a classifier.

    ``__call__``: x [B, image_size, image_size, in_channels] float -> pooled
    features [B, num_features] float32 (num_features = hidden_size; the compute
    ``dtype`` applies inside, the output is cast to float32).

    Args:
      image_size: input height and width; a multiple of ``patch_size``. Fixes the
        number of position embeddings, (image_size / patch_size)² (+1 with cls).
      patch_size: side of the square patches.
      hidden_size: token width D.
      depth: number of Transformer blocks.
      num_heads: attention heads (divides D).
      mlp_dim: hidden width of the block MLP.
      pool: ``"cls"`` (class token) or ``"mean"`` (mean of patch tokens).
      dropout_rate: dropout after the position embedding, the attention
        projection and both MLP layers.
      attention_dropout_rate: dropout on the attention weights.
      drop_path_rate: stochastic-depth rate of the last block (linear from 0).
      in_channels: input channels.
      dtype: compute dtype; parameters are always float32.
      rngs: parameter initialisation and dropout RNGs.
    """

    def __init__(
        self,
        *,
        image_size: int,
        patch_size: int,
        hidden_size: int,
        depth: int,
        num_heads: int,
        mlp_dim: int,
        pool: str = "cls",
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        in_channels: int = 3,
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        if pool not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}, got {pool!r}")
        if (
            isinstance(image_size, bool)
            or not isinstance(image_size, int)
            or image_size < patch_size
            or image_size % patch_size
        ):
            raise ValueError(
                f"image_size must be a positive multiple of the patch size {patch_size}, "
                f"got {image_size!r}"
            )
        _check_rate("dropout_rate", dropout_rate)
        _check_rate("attention_dropout_rate", attention_dropout_rate)
        _check_rate("drop_path_rate", drop_path_rate)

        self.image_size = image_size
        self.pool = pool
        self.patch_embed = nnx.Conv(
            in_channels,
            hidden_size,
            (patch_size, patch_size),
            strides=patch_size,
            padding="VALID",
            dtype=dtype,
            rngs=rngs,
        )
        num_tokens = (image_size // patch_size) ** 2 + (pool == "cls")
        self.cls_token = (
            nnx.Param(jnp.zeros((1, 1, hidden_size), jnp.float32)) if pool == "cls" else None
        )
        self.pos_embed = nnx.Param(_pos_init(rngs.params(), (1, num_tokens, hidden_size)))
        self.dropout = nnx.Dropout(dropout_rate, rngs=rngs)
        self.blocks = nnx.List(
            [
                EncoderBlock(
                    hidden_size,
                    num_heads,
                    mlp_dim,
                    dropout_rate=dropout_rate,
                    attention_dropout_rate=attention_dropout_rate,
                    drop_path_rate=drop_path_rate * i / max(depth - 1, 1),
                    dtype=dtype,
                    rngs=rngs,
                )
                for i in range(depth)
            ]
        )
        self.norm = nnx.LayerNorm(hidden_size, epsilon=1e-6, dtype=dtype, rngs=rngs)
        self.num_features: int = hidden_size

    def __call__(self, x: jax.Array) -> jax.Array:
        if x.ndim != 4 or x.shape[1] != self.image_size or x.shape[2] != self.image_size:
            raise ValueError(
                f"x must be NHWC [B, {self.image_size}, {self.image_size}, C], got shape {x.shape}"
            )
        x = self.patch_embed(x)
        batch, height, width, features = x.shape
        x = x.reshape(batch, height * width, features)
        if self.cls_token is not None:
            cls = jnp.broadcast_to(self.cls_token[...].astype(x.dtype), (batch, 1, features))
            x = jnp.concatenate([cls, x], axis=1)
        x = self.dropout(x + self.pos_embed[...].astype(x.dtype))
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        pooled = x[:, 0] if self.pool == "cls" else jnp.mean(x.astype(jnp.float32), axis=1)
        return pooled.astype(jnp.float32)
