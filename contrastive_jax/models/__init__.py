"""Encoders (ResNet, ViT, a small CNN, an MLP for vectors), projection/classification heads and their factories (Flax NNX).

Needs the ``train`` extra (``pip install 'contrastive_jax[train]'``).
"""

from contrastive_jax._extras import require

require("contrastive_jax.models", ("flax",))

from contrastive_jax.models.cnn import SmallCNN
from contrastive_jax.models.factory import (
    DTYPES,
    ENCODER_NAMES,
    ENCODER_ONLY,
    HEAD_NAMES,
    EncoderSpec,
    HeadSpec,
    ModelSpec,
    create_encoder,
    create_head,
    default_encoder_config,
    default_head_config,
    encoder_spec,
    head_spec,
    model_spec,
)
from contrastive_jax.models.heads import IdentityHead, LinearHead, MLPHead, NormalizedLinearHead
from contrastive_jax.models.mlp import MLP
from contrastive_jax.models.model import ContrastiveModel
from contrastive_jax.models.resnet import BasicBlock, Bottleneck, ResNet
from contrastive_jax.models.vit import VIT_VARIANTS, EncoderBlock, VisionTransformer, ViTVariant
from contrastive_jax.models.weights import export_weights, load_encoder, load_network

__all__ = [
    "DTYPES",
    "ENCODER_NAMES",
    "ENCODER_ONLY",
    "HEAD_NAMES",
    "VIT_VARIANTS",
    "BasicBlock",
    "Bottleneck",
    "ContrastiveModel",
    "EncoderBlock",
    "EncoderSpec",
    "HeadSpec",
    "IdentityHead",
    "LinearHead",
    "MLP",
    "MLPHead",
    "ModelSpec",
    "NormalizedLinearHead",
    "ResNet",
    "SmallCNN",
    "ViTVariant",
    "VisionTransformer",
    "create_encoder",
    "create_head",
    "default_encoder_config",
    "default_head_config",
    "encoder_spec",
    "export_weights",
    "head_spec",
    "load_encoder",
    "load_network",
    "model_spec",
]
