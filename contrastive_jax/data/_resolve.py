"""What a data config resolves to for a source: the image side, the evaluation crop and
the augmentation recipe."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from contrastive_jax.data.augment_config import AugmentConfig, augmentation_preset
from contrastive_jax.data.base import Source
from contrastive_jax.errors import ConfigError

if TYPE_CHECKING:
    import ml_collections

__all__ = [
    "DEFAULT_VARIABLE_SIZE",
    "IMAGENET_CROP_FRACTION",
    "resolve_augmentation",
    "resolve_crop_fraction",
    "resolve_image_size",
]


#: Output side for images of variable size when ``config.image_size`` is None
#: (SimCLR's ImageNet resolution).
DEFAULT_VARIABLE_SIZE = 224


def resolve_image_size(config: ml_collections.ConfigDict, source: Source) -> int:
    """``config.image_size``, or the source's native side when None
    (:data:`DEFAULT_VARIABLE_SIZE` for images of variable size)."""
    if config.image_size is not None:
        return int(config.image_size)
    h, w, _ = source.image_shape
    if h is None and w is None:
        return DEFAULT_VARIABLE_SIZE
    if h is None or h != w:
        raise ConfigError(
            f"dataset {source.name!r} has images of shape {source.image_shape}; set config.image_size"
        )
    return int(h)


#: ``eval_crop_fraction`` of datasets of variable-size images (ImageNet's 224 / 256).
IMAGENET_CROP_FRACTION = 0.875


def resolve_crop_fraction(config: ml_collections.ConfigDict, source: Source) -> float:
    """``config.eval_crop_fraction``, or its default for ``source`` when None."""
    if config.eval_crop_fraction is not None:
        return float(config.eval_crop_fraction)
    return IMAGENET_CROP_FRACTION if source.image_shape[0] is None else 1.0


def resolve_augmentation(
    config: ml_collections.ConfigDict, source: Source, image_size: int
) -> AugmentConfig:
    """The preset named by ``config.augmentation`` (``"auto"``: see the config docs), with
    ``config.randaugment_layers`` / ``randaugment_magnitude`` where set."""
    name = config.augmentation
    if name == "auto":
        if source.name in ("digits", "digits_cluttered"):
            name = source.name  # each digits source has its own preset
        elif source.name == "phantoms":
            name = "phantoms"
        else:
            name = "simclr_cifar" if image_size <= 32 else "simclr_imagenet"
    aug = augmentation_preset(name, image_size)
    overrides = {field: getattr(config, field) for field in ("randaugment_layers",
                                                             "randaugment_magnitude")}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if overrides and aug.policy != "randaugment":
        raise ConfigError(
            f"config.data.{next(iter(overrides))} is set, but augmentation {name!r} does not "
            "run RandAugment (a preset with policy='randaugment': supcon_randaugment)")
    return dataclasses.replace(aug, **overrides) if overrides else aug
