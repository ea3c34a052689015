"""The augmentation recipes: the presets' parameters, the sources' presets and overrides."""

from __future__ import annotations

import numpy as np
import pytest

from contrastive_jax.data._resolve import resolve_augmentation
from contrastive_jax.data.augment_config import PRESET_NAMES, AugmentConfig, augmentation_preset
from contrastive_jax.errors import ConfigError
from tests.data.helpers import digits_config


def test_presets_exist():
    expected = {
        "simclr_cifar",
        "supcon_cifar",
        "simclr_imagenet",
        "byol_imagenet",
        "mio",
        "digits",
        "phantoms",
        "supcon_linear",
        "mio_linear",
        "none",
    }
    assert expected <= set(PRESET_NAMES)
    for name in PRESET_NAMES:
        assert isinstance(augmentation_preset(name, 32), AugmentConfig)
    with pytest.raises(ValueError, match="unknown augmentation preset"):
        augmentation_preset("nope", 32)


def test_preset_parameters():
    cifar = augmentation_preset("simclr_cifar", 32)
    assert cifar.crop_scale == (0.08, 1.0) and cifar.blur_prob == (0.0,)
    np.testing.assert_allclose(cifar.jitter, (0.4, 0.4, 0.4, 0.1))
    assert cifar.jitter_prob == 0.8 and cifar.grayscale_prob == 0.2
    supcon = augmentation_preset("supcon_cifar", 32)
    assert supcon.crop_scale == (0.2, 1.0) and supcon.jitter == (0.4, 0.4, 0.4, 0.1)
    imagenet = augmentation_preset("simclr_imagenet", 224)
    np.testing.assert_allclose(imagenet.jitter, (0.8, 0.8, 0.8, 0.2))
    assert imagenet.blur_prob == (0.5,)
    byol = augmentation_preset("byol_imagenet", 224)
    assert byol.blur_prob == (1.0, 0.1) and byol.solarize_prob == (0.0, 0.2)
    mio_small, mio_large = (
        augmentation_preset("mio", 32),
        augmentation_preset("mio", 96),
    )
    assert mio_small.crop_scale == (0.8, 1.0) and mio_small.blur_prob == (0.0,)
    assert mio_large.blur_prob == (0.5,) and mio_large.solarize_prob == (0.2,)
    digits = augmentation_preset("digits", 16)
    assert digits.crop_scale is None and digits.jitter == (0, 0, 0, 0) and digits.flip_prob == 0
    assert digits.noise_std == (0.1, 0.1) and digits.gain == (0.6, 1.4)


def test_cifar_proxy_preset():
    cfg = augmentation_preset("cifar_proxy", 32)
    assert cfg.crop_scale is None and round(cfg.pad_fraction * 32) == 4 and cfg.flip_prob == 0.5
    assert cfg.jitter == (0.4, 0.4, 0.0, 0.0) and cfg.jitter_prob == 1.0
    assert cfg.channel_gain == (0.8, 1.2) and cfg.grayscale_prob == 0.0
    assert cfg.gain is None and cfg.noise_std == (0.0, 0.0) and cfg.blur_prob == (0.0,)


def test_presets_of_the_sources():
    v1 = augmentation_preset("simclr_v1_imagenet", 224)
    assert (v1.crop_sampler, v1.crop_interpolation, v1.brightness) == (
        "tf_bounding_box", "bicubic", "additive")
    assert v1.crop_scale == (0.08, 1.0) and v1.crop_ratio == (3 / 4, 4 / 3)
    assert v1.jitter == pytest.approx((0.8, 0.8, 0.8, 0.2)) and v1.blur_prob == (0.5,)
    supcon = augmentation_preset("supcon_autoaugment", 224)
    assert (supcon.policy, supcon.crop_fallback, supcon.crop_ratio) == (
        "autoaugment", "center_square", (0.75, 1.33))
    assert supcon.jitter == (0.0,) * 4 and supcon.blur_prob == (0.0,)
    assert supcon.grayscale_prob == 0.0
    with pytest.raises(ConfigError, match="AugmentConfig.policy"):
        AugmentConfig(policy="autoaugment_v1")


def test_randaugment_overrides(digits_source):
    config = digits_config(augmentation="supcon_randaugment", randaugment_layers=1,
                           randaugment_magnitude=9.0)
    aug = resolve_augmentation(config, digits_source, 16)
    assert (aug.randaugment_layers, aug.randaugment_magnitude) == (1, 9.0)
    with pytest.raises(ConfigError, match="randaugment_magnitude"):
        resolve_augmentation(digits_config(augmentation="supcon_randaugment",
                                           randaugment_magnitude=11.0), digits_source, 16)
    with pytest.raises(ConfigError, match="does not run RandAugment"):
        resolve_augmentation(digits_config(augmentation="supcon_autoaugment",
                                           randaugment_layers=1), digits_source, 16)
