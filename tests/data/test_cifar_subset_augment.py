"""The CIFAR proxies' augmentation: preset ``cifar_proxy`` and the per-channel gain stage."""

from __future__ import annotations

import numpy as np

from contrastive_jax.data import augment
from contrastive_jax.data._tf import tf


def _image(size=32, seed=0) -> tf.Tensor:
    rng = np.random.default_rng(seed)
    return tf.constant(0.1 + 0.8 * rng.random((size, size, 3)), tf.float32)


def test_cifar_proxy_preset():
    cfg = augment.augmentation_preset("cifar_proxy", 32)
    assert cfg.crop_scale is None and round(cfg.pad_fraction * 32) == 4 and cfg.flip_prob == 0.5
    assert cfg.jitter == (0.4, 0.4, 0.0, 0.0) and cfg.jitter_prob == 1.0
    assert cfg.channel_gain == (0.8, 1.2) and cfg.grayscale_prob == 0.0
    assert cfg.gain is None and cfg.noise_std == (0.0, 0.0) and cfg.blur_prob == (0.0,)


def test_channel_gain_multiplies_each_channel_and_clips():
    image = _image()
    seed = tf.constant([3, 4], tf.int64)
    out = augment.channel_gain(image, seed, (0.8, 1.2)).numpy()
    x = image.numpy()
    ratios = out / x
    per_channel = ratios.reshape(-1, 3)
    unclipped = out < 1.0
    for c in range(3):
        values = ratios[..., c][unclipped[..., c]]
        assert np.ptp(values) < 1e-5 and 0.8 <= values[0] <= 1.2
    assert np.ptp(per_channel[0]) > 1e-3  # the channels get different factors
    np.testing.assert_array_equal(out, augment.channel_gain(image, seed, (0.8, 1.2)).numpy())
    bright = augment.channel_gain(tf.fill([4, 4, 3], 0.95), seed, (1.5, 1.5)).numpy()
    np.testing.assert_array_equal(bright, 1.0)
    np.testing.assert_allclose(augment.channel_gain(image, seed, (1.0, 1.0)).numpy(), x)


def test_cifar_proxy_views_shape_range_determinism_and_colour():
    cfg = augment.augmentation_preset("cifar_proxy", 32)
    image = _image()
    seed = tf.constant([1, 2], tf.int64)
    views = augment.make_views(image, seed, cfg, num_views=2, size=32).numpy()
    assert views.shape == (2, 32, 32, 3) and views.dtype == np.float32
    assert views.min() >= 0.0 and views.max() <= 1.0
    np.testing.assert_array_equal(
        views, augment.make_views(image, seed, cfg, num_views=2, size=32).numpy()
    )
    assert np.abs(views[0] - views[1]).mean() > 0.02
    # The per-channel gain changes the channels' ratios (a grey-level gain would not).
    x = image.numpy()
    ratio_in = x.mean((0, 1)) / x.mean()
    ratio_out = views.mean((1, 2)) / views.mean((1, 2, 3))[:, None]
    assert np.abs(ratio_out - ratio_in).max() > 0.02


def test_channel_gain_off_keeps_existing_recipes():
    """Presets without a channel gain give the same views as before the stage existed: the
    stage draws from its own seed and is skipped when off."""
    cfg = augment.augmentation_preset("cifar_proxy", 32)
    without = augment.AugmentConfig(
        crop_scale=None, pad_fraction=cfg.pad_fraction, jitter=cfg.jitter, jitter_prob=1.0
    )
    image, seed = _image(), tf.constant([5, 6], tf.int64)
    with_gain = augment.augment_view(image, seed, cfg, view=0, size=32).numpy()
    plain = augment.augment_view(image, seed, without, view=0, size=32).numpy()
    gains = with_gain.reshape(-1, 3) / np.maximum(plain.reshape(-1, 3), 1e-6)
    inside = (plain.reshape(-1, 3) > 0.05).all(1) & (with_gain.reshape(-1, 3) < 1.0).all(1)
    # Same geometry and jitter: the views differ by one factor per channel.
    assert np.ptp(gains[inside], axis=0).max() < 1e-4
