"""The SimCLR v1 / SupCon crop (TensorFlow's ``sample_distorted_bounding_box``), the bicubic
resize and the additive brightness of the source recipes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from contrastive_jax.data import host_views
from contrastive_jax.data.augment_config import AugmentConfig
from contrastive_jax.data.device_augment import color_jitter


def _windows(height, width, n, **kwargs):
    kwargs = {"scale": (0.08, 1.0), "ratio": (3 / 4, 4 / 3), **kwargs}
    rngs = (np.random.default_rng([5, k]) for k in range(n))
    return np.array([host_views.tf_crop_window(height, width, rng, **kwargs) for rng in rngs])


@pytest.mark.parametrize("shape", [(375, 500), (224, 224), (500, 333)])
def test_tf_crop_window_statistics(shape):
    height, width = shape
    top, left, h, w = _windows(height, width, 3000).T
    area = h * w / (height * width)
    ratio = w / h
    # area in [0.08, 1], and >= 0.1 as min_object_covered=0.1 on the whole image demands;
    # aspect ratio in [3/4, 4/3] up to the rounding of w = rint(h a).
    assert area.min() >= 0.1 and area.max() <= 1.0
    assert np.all(ratio >= 3 / 4 - 1 / h) and np.all(ratio <= 4 / 3 + 1 / h)
    assert np.all((top >= 0) & (top + h <= height) & (left >= 0) & (left + w <= width))
    # Offsets uniform in [0, H - h) (TensorFlow never reaches the last one).
    assert np.all((top < height - h) | (h == height))
    # The aspect ratio is uniform (not log-uniform): its mean is the interval's midpoint.
    assert abs(ratio.mean() - (3 / 4 + 4 / 3) / 2) < 0.01


@pytest.mark.slow
def test_tf_crop_window_matches_tensorflows_sampler():
    tf = pytest.importorskip("tensorflow")
    height, width, n = 375, 500, 1500
    ours = _windows(height, width, n)
    box = tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4])
    theirs = np.array([
        tf.image.sample_distorted_bounding_box(
            [height, width, 3], box, min_object_covered=0.1, aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=(0.08, 1.0), max_attempts=100, seed=k)[1].numpy()[:2]
        for k in range(n)])
    ours_area = ours[:, 2] * ours[:, 3] / (height * width)
    theirs_area = theirs[:, 0] * theirs[:, 1] / (height * width)
    # Same distribution: quantiles agree within sampling error (n = 1500).
    for q in (0.1, 0.25, 0.5, 0.75, 0.9):
        assert abs(np.quantile(ours_area, q) - np.quantile(theirs_area, q)) < 0.04
    assert abs(theirs_area.min() - 0.1) < 0.01


def test_tf_crop_window_falls_back_after_100_attempts():
    # No window of aspect 3-4 can hold 90 % of a square: every attempt fails.
    kwargs = {"scale": (0.9, 1.0), "ratio": (3.0, 4.0)}
    rng = np.random.default_rng(0)
    assert host_views.tf_crop_window(100, 100, rng, **kwargs) == (0, 0, 100, 100)
    # SupCon's fallback: the central square, offset (W - side + 1) // 2 (_center_crop_window).
    assert host_views.tf_crop_window(60, 101, rng, fallback="center_square", **kwargs) == (
        0, 21, 60, 60)


def test_bicubic_crop_is_pillows_bicubic():
    from PIL import Image

    image = np.random.default_rng(1).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    cfg = AugmentConfig(crop_sampler="tf_bounding_box", crop_interpolation="bicubic",
                        flip_prob=0.0)
    view = host_views.views_of(image, [np.random.default_rng(4)], cfg, 16)[0]
    top, left, h, w = host_views.tf_crop_window(40, 50, np.random.default_rng(4),
                                                scale=cfg.crop_scale, ratio=cfg.crop_ratio)
    expected = Image.fromarray(image).resize((16, 16), Image.Resampling.BICUBIC,
                                             box=(left, top, left + w, top + h))
    np.testing.assert_array_equal(view, np.asarray(expected))


@pytest.mark.slow
def test_additive_brightness_shifts_by_uniform_delta():
    x = jnp.full((4, 4, 3), 0.5, jnp.float32)
    keys = jax.random.split(jax.random.key(0), 2000)
    out = jax.vmap(lambda k: color_jitter(x, k, (0.4, 0.0, 0.0, 0.0),
                                          additive_brightness=True))(keys)
    delta = np.asarray(out[:, 0, 0, 0]) - 0.5
    assert np.allclose(np.asarray(out) - 0.5, delta[:, None, None, None], atol=1e-6)
    assert delta.min() >= -0.4 and delta.max() <= 0.4  # tf.image.random_brightness(0.4)
    assert abs(delta.mean()) < 0.02 and abs(delta.std() - 0.8 / np.sqrt(12)) < 0.02
    # Additive: a dark pixel moves as much as a bright one (multiplicative would not).
    dark = jnp.full((4, 4, 3), 0.2, jnp.float32)
    shifted = color_jitter(dark, keys[0], (0.4, 0.0, 0.0, 0.0), additive_brightness=True)
    np.testing.assert_allclose(np.asarray(shifted) - 0.2,
                               np.clip(0.5 + delta[0], 0, 1) - 0.5, atol=1e-6)
