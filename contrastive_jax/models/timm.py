"""timm's names and layouts for this package's ViTs (export only; no torch needed).

Our :class:`~contrastive_jax.models.VisionTransformer` with ``pool="cls"`` is the network of
timm's ``VisionTransformer`` with its defaults (``global_pool="token"``, ``class_token=True``,
``qkv_bias=True``, LayerNorm epsilon 1e-6, exact GELU, the position embedding added after the
class token is prepended, the final LayerNorm before the pooling, no ``fc_norm``, no layer
scale): ``vit_ti16``, ``vit_s16`` and ``vit_b16`` are timm's ``vit_tiny_patch16_224``,
``vit_small_patch16_224`` and ``vit_base_patch16_224`` (``img_size`` for another side), the
/4 variants ``timm.models.VisionTransformer(img_size=32, patch_size=4, ...)``; each with
``num_classes=0`` (no classifier: ``model(x)`` gives the features).
``tests/models/test_timm_features.py`` checks the features. ``pool="mean"`` is refused:
there our final LayerNorm comes before the mean, where timm's ``global_pool="avg"``
normalises after it (``fc_norm``).

=====================================  =================================================
ours (Flax)                            timm
=====================================  =================================================
``patch_embed.kernel`` [p, p, C, D]    ``patch_embed.proj.weight`` [D, C, p, p]
``cls_token``, ``pos_embed``           the same names and shapes
``blocks.<i>.attn.query/key/value``    ``blocks.<i>.attn.qkv`` (q, k, v stacked: [3D, D])
  kernels [D, heads, head_dim]
``blocks.<i>.attn.out.kernel``         ``blocks.<i>.attn.proj.weight`` [D, D]
  [heads, head_dim, D]
``blocks.<i>.fc1``, ``fc2``            ``blocks.<i>.mlp.fc1``, ``mlp.fc2`` (weights [out, in])
``*.norm1``, ``norm2``, ``norm``       the same (LayerNorm ``scale`` is ``weight``)
=====================================  =================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from contrastive_jax.errors import ConfigError
from contrastive_jax.models.factory import EncoderSpec
from contrastive_jax.models.vit import VIT_VARIANTS

#: Our ViTs that timm registers under a name (at their default side, 224).
TIMM_NAMES = {"vit_ti16": "vit_tiny_patch16_224", "vit_s16": "vit_small_patch16_224",
              "vit_b16": "vit_base_patch16_224"}


def check_vit(spec: EncoderSpec) -> None:
    """Raises ConfigError unless ``spec`` is a ViT that timm's ``VisionTransformer`` computes
    (``pool="cls"``)."""
    if spec.name not in VIT_VARIANTS:
        raise ConfigError(f"encoder config.name={spec.name!r}: timm's layout is that of its "
                          f"ViTs ({', '.join(VIT_VARIANTS)}); export this encoder with --format "
                          "flax (or --format torchvision for a ResNet)")
    if spec.pool != "cls":
        raise ConfigError(
            f"encoder config.pool={spec.pool!r}: our final LayerNorm comes before the mean "
            "over the tokens, timm's global_pool='avg' normalises after it (fc_norm), so the "
            "features would differ; export this encoder with --format flax")


def timm_recipe(spec: EncoderSpec) -> str:
    """The timm network a ``timm`` export of ``spec`` loads into, as Python."""
    variant = VIT_VARIANTS[spec.name]
    side = spec.image_size or variant.image_size
    if spec.name in TIMM_NAMES:
        size = "" if side == 224 else f", img_size={side}"
        return f'net = timm.create_model("{TIMM_NAMES[spec.name]}", num_classes=0{size})'
    fields = dataclasses.asdict(variant)
    return (f"net = timm.models.VisionTransformer(img_size={side}, patch_size="
            f"{fields['patch_size']}, embed_dim={fields['hidden_size']}, depth={fields['depth']}, "
            f"num_heads={fields['num_heads']}, mlp_ratio={fields['mlp_dim'] / fields['hidden_size']:g}, "
            "num_classes=0)")


def _linear(value: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(value.T)


def to_timm(arrays: Mapping[str, np.ndarray], spec: EncoderSpec) -> dict[str, np.ndarray]:
    """The ViT ``spec``'s variables ``arrays`` (Flax name -> array) as timm's ``state_dict``.
    Raises ConfigError where :func:`check_vit` does."""
    check_vit(spec)
    a = {k: np.asarray(v) for k, v in arrays.items()}
    out = {
        "cls_token": a["cls_token"],
        "pos_embed": a["pos_embed"],
        "patch_embed.proj.weight": np.ascontiguousarray(a["patch_embed.kernel"].transpose(3, 2, 0, 1)),
        "patch_embed.proj.bias": a["patch_embed.bias"],
        "norm.weight": a["norm.scale"],
        "norm.bias": a["norm.bias"],
    }
    for i in range(VIT_VARIANTS[spec.name].depth):
        ours, theirs = f"blocks.{i}", f"blocks.{i}"
        width = a[f"{ours}.norm1.scale"].shape[0]
        qkv = [a[f"{ours}.attn.{p}.kernel"].reshape(width, width) for p in ("query", "key", "value")]
        bias = [a[f"{ours}.attn.{p}.bias"].reshape(width) for p in ("query", "key", "value")]
        out.update({
            f"{theirs}.norm1.weight": a[f"{ours}.norm1.scale"],
            f"{theirs}.norm1.bias": a[f"{ours}.norm1.bias"],
            f"{theirs}.attn.qkv.weight": np.ascontiguousarray(np.concatenate(qkv, axis=1).T),
            f"{theirs}.attn.qkv.bias": np.concatenate(bias),
            f"{theirs}.attn.proj.weight": _linear(a[f"{ours}.attn.out.kernel"].reshape(width, width)),
            f"{theirs}.attn.proj.bias": a[f"{ours}.attn.out.bias"],
            f"{theirs}.norm2.weight": a[f"{ours}.norm2.scale"],
            f"{theirs}.norm2.bias": a[f"{ours}.norm2.bias"],
            f"{theirs}.mlp.fc1.weight": _linear(a[f"{ours}.fc1.kernel"]),
            f"{theirs}.mlp.fc1.bias": a[f"{ours}.fc1.bias"],
            f"{theirs}.mlp.fc2.weight": _linear(a[f"{ours}.fc2.kernel"]),
            f"{theirs}.mlp.fc2.bias": a[f"{ours}.fc2.bias"],
        })
    return out
