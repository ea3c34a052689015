"""Augmentation stages and presets (TensorFlow, one example at a time)."""

from __future__ import annotations

import numpy as np
import pytest

from contrastive_jax.data import augment
from contrastive_jax.data._tf import tf


def _image(h=20, w=20, seed=0) -> tf.Tensor:
    return tf.constant(np.random.default_rng(seed).random((h, w, 3)), tf.float32)


def _seed(*values) -> tf.Tensor:
    return tf.constant(values or (1, 2), tf.int64)


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
    assert expected <= set(augment.PRESET_NAMES)
    for name in augment.PRESET_NAMES:
        assert isinstance(augment.augmentation_preset(name, 32), augment.AugmentConfig)
    with pytest.raises(ValueError, match="unknown augmentation preset"):
        augment.augmentation_preset("nope", 32)


def test_preset_parameters():
    cifar = augment.augmentation_preset("simclr_cifar", 32)
    assert cifar.crop_scale == (0.08, 1.0) and cifar.blur_prob == (0.0,)
    np.testing.assert_allclose(cifar.jitter, (0.4, 0.4, 0.4, 0.1))
    assert cifar.jitter_prob == 0.8 and cifar.grayscale_prob == 0.2
    supcon = augment.augmentation_preset("supcon_cifar", 32)
    assert supcon.crop_scale == (0.2, 1.0) and supcon.jitter == (0.4, 0.4, 0.4, 0.1)
    imagenet = augment.augmentation_preset("simclr_imagenet", 224)
    np.testing.assert_allclose(imagenet.jitter, (0.8, 0.8, 0.8, 0.2))
    assert imagenet.blur_prob == (0.5,)
    byol = augment.augmentation_preset("byol_imagenet", 224)
    assert byol.blur_prob == (1.0, 0.1) and byol.solarize_prob == (0.0, 0.2)
    mio_small, mio_large = (
        augment.augmentation_preset("mio", 32),
        augment.augmentation_preset("mio", 96),
    )
    assert mio_small.crop_scale == (0.8, 1.0) and mio_small.blur_prob == (0.0,)
    assert mio_large.blur_prob == (0.5,) and mio_large.solarize_prob == (0.2,)
    digits = augment.augmentation_preset("digits", 16)
    assert digits.crop_scale is None and digits.jitter == (0, 0, 0, 0) and digits.flip_prob == 0
    assert digits.noise_std == (0.1, 0.1) and digits.gain == (0.6, 1.4)


@pytest.mark.parametrize(
    "name", ["simclr_cifar", "simclr_imagenet", "byol_imagenet", "mio", "digits", "phantoms"]
)
def test_augment_view_shape_and_determinism(name):
    cfg = augment.augmentation_preset(name, 16)
    image = _image(24, 20)
    a = augment.augment_view(image, _seed(3, 4), cfg, view=1, size=16).numpy()
    b = augment.augment_view(image, _seed(3, 4), cfg, view=1, size=16).numpy()
    c = augment.augment_view(image, _seed(3, 5), cfg, view=1, size=16).numpy()
    assert a.shape == (16, 16, 3) and a.dtype == np.float32 and np.isfinite(a).all()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_make_views_differ_and_match_augment_view():
    cfg = augment.augmentation_preset("byol_imagenet", 16)
    image, seed = _image(), _seed(7, 8)
    views = augment.make_views(image, seed, cfg, num_views=3, size=16).numpy()
    assert views.shape == (3, 16, 16, 3)
    assert not np.allclose(views[0], views[1])
    for v in range(3):
        single = augment.augment_view(
            image, tf.random.experimental.stateless_fold_in(seed, v), cfg, view=v, size=16
        )
        np.testing.assert_allclose(views[v], single.numpy(), atol=1e-6)


def test_full_crop_is_identity_and_flip_reverses():
    image = _image(16, 16)
    kwargs = dict(size=16, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    same = augment.random_resized_crop(image, _seed(), flip_prob=0.0, **kwargs)
    np.testing.assert_allclose(same.numpy(), image.numpy(), atol=1e-6)
    flipped = augment.random_resized_crop(image, _seed(), flip_prob=1.0, **kwargs)
    np.testing.assert_allclose(flipped.numpy(), image.numpy()[:, ::-1], atol=1e-6)


def test_random_resized_crop_scale_range():
    """Crops of scale (0.25, 0.25) and ratio 1 from a 32x32 ramp cover a 16x16 window."""
    ramp = tf.constant(np.tile(np.arange(32, dtype=np.float32)[None, :, None], (32, 1, 3)))
    for s in range(20):
        out = augment.random_resized_crop(
            ramp, _seed(s, 0), size=16, scale=(0.25, 0.25), ratio=(1.0, 1.0), flip_prob=0.0
        ).numpy()
        assert out[0, -1, 0] - out[0, 0, 0] == pytest.approx(15.0, abs=1e-4)


def test_random_resized_crop_fallback_central():
    """No attempt can fit a 4:1 crop in a square: the central crop is used."""
    image = _image(12, 12)
    out = augment.random_resized_crop(
        image, _seed(), size=12, scale=(0.9, 1.0), ratio=(4.0, 5.0), flip_prob=0.0
    )
    np.testing.assert_allclose(out.numpy()[0], image.numpy()[4], atol=1e-5)


def test_color_ops():
    image = _image()
    jittered = augment.color_jitter(
        image, _seed(), brightness=0.8, contrast=0.8, saturation=0.8, hue=0.2
    ).numpy()
    assert jittered.min() >= 0.0 and jittered.max() <= 1.0
    assert not np.allclose(jittered, image.numpy())
    gray = augment.grayscale(image).numpy()
    np.testing.assert_array_equal(gray[..., 0], gray[..., 2])
    sol = augment.solarize(image, 0.5).numpy()
    x = image.numpy()
    np.testing.assert_allclose(sol, np.where(x >= 0.5, 1 - x, x))


def test_color_jitter_single_op_is_brightness():
    image = _image()
    out = augment.color_jitter(
        image, _seed(), brightness=0.5, contrast=0, saturation=0, hue=0
    ).numpy()
    ratio = out / image.numpy()
    unclipped = out < 1.0
    assert np.ptp(ratio[unclipped]) < 1e-5 and 0.5 <= ratio[unclipped][0] <= 1.5


def test_blur_keeps_constants_and_smooths():
    const = tf.fill([10, 10, 3], 0.3)
    np.testing.assert_allclose(
        augment.gaussian_blur(const, tf.constant(1.5), 3).numpy(), 0.3, atol=1e-6
    )
    image = _image()
    blurred = augment.gaussian_blur(image, tf.constant(2.0), 4).numpy()
    assert blurred.std() < 0.5 * image.numpy().std()


def test_cutout_area():
    out = augment.cutout(tf.ones([16, 16, 3]), _seed(), 4).numpy()
    zeros = (out[..., 0] == 0).sum()
    assert 4 <= zeros <= 16 and (out[..., 0] == out[..., 1]).all()


def test_shift_crop_moves_content():
    image = _image(16, 16)
    shifted = augment.shift_crop(image, _seed(), pad=4, flip_prob=0.0).numpy()
    assert shifted.shape == (16, 16, 3)
    x = image.numpy()
    matches = [
        (dy, dx)
        for dy in range(-4, 5)
        for dx in range(-4, 5)
        if np.allclose(
            shifted[max(0, dy) : 16 + min(0, dy), max(0, dx) : 16 + min(0, dx)],
            x[max(0, -dy) : 16 + min(0, -dy), max(0, -dx) : 16 + min(0, -dx)],
        )
    ]
    assert len(matches) == 1


def test_eval_transform():
    image = _image(40, 60)
    out = augment.eval_transform(image, size=32, crop_fraction=0.8).numpy()
    assert out.shape == (32, 32, 3)
    same = _image(32, 32)
    np.testing.assert_array_equal(augment.eval_transform(same, size=32, crop_fraction=1.0), same)
    up = augment.eval_transform(_image(8, 8), size=16, crop_fraction=1.0)
    assert up.shape == (16, 16, 3)


def test_eval_transform_crop_resize_is_simclr_center_crop():
    """SimCLR v1's center_crop: a centred square of rint(f * min(h, w)) pixels at offset
    ((h - side + 1) // 2, (w - side + 1) // 2), then resize_bicubic (identity at the same
    size), so the output is exactly that window of the input."""
    image = _image(10, 20)
    out = augment.eval_transform(image, size=5, crop_fraction=0.5, mode="crop_resize").numpy()
    np.testing.assert_array_equal(out, image.numpy()[3:8, 8:13])
    tall = _image(21, 9)  # side rint(0.75 * 9) = 7, offsets (21 - 7 + 1) // 2 = 7 and 1
    out = augment.eval_transform(tall, size=7, crop_fraction=0.75, mode="crop_resize").numpy()
    np.testing.assert_array_equal(out, tall.numpy()[7:14, 1:8])


def test_eval_transform_crop_resize_resamples_bicubically_and_clips():
    """Upsampling uses TF1's resize_bicubic (the source's op) and clips its overshoot to
    [0, 1]; the default mode's antialiased bilinear resize gives other pixels."""
    rng = np.random.default_rng(0)
    image = tf.constant(rng.integers(0, 2, (12, 12, 3)).astype(np.float32))  # sharp edges
    out = augment.eval_transform(image, size=24, crop_fraction=1.0, mode="crop_resize").numpy()
    reference = tf.compat.v1.image.resize_bicubic(image[None], [24, 24])[0].numpy()
    assert reference.min() < 0 and reference.max() > 1  # bicubic overshoots at the edges
    np.testing.assert_array_equal(out, np.clip(reference, 0, 1))
    default = augment.eval_transform(image, size=24, crop_fraction=1.0).numpy()
    assert np.abs(default - out).max() > 0.05
