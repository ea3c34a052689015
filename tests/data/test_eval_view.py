"""The evaluation transform on the host (:func:`host_views.eval_view`): its geometry, and its
resamplers against the TensorFlow ops the sources call (TensorFlow: the ``prepare`` extra,
which the test environment has)."""

from __future__ import annotations

import numpy as np
import pytest

from contrastive_jax.data.host_views import eval_view, resize_bicubic_tf1, resize_bilinear_tf1


def _image(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_shapes_and_an_image_already_at_size_is_only_scaled():
    assert eval_view(_image(40, 60), size=32, crop_fraction=0.8).shape == (32, 32, 3)
    same = _image(32, 32)
    out = eval_view(same, size=32, crop_fraction=1.0)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, same.astype(np.float32) / 255)
    assert eval_view(_image(8, 8), size=16, crop_fraction=1.0).shape == (16, 16, 3)


def test_crop_resize_is_simclr_center_crop():
    """SimCLR v1's center_crop: a centred square of rint(f * min(h, w)) pixels at offset
    ((h - side + 1) // 2, (w - side + 1) // 2), then resize_bicubic (the identity at the same
    size), so the output is exactly that window of the input."""
    image = _image(10, 20)
    out = eval_view(image, size=5, crop_fraction=0.5, mode="crop_resize")
    np.testing.assert_array_equal(out, image[3:8, 8:13] / np.float32(255))
    tall = _image(21, 9)  # side rint(0.75 * 9) = 7, offsets (21 - 7 + 1) // 2 = 7 and 1
    out = eval_view(tall, size=7, crop_fraction=0.75, mode="crop_resize")
    np.testing.assert_array_equal(out, tall[7:14, 1:8] / np.float32(255))


@pytest.mark.parametrize(("shape", "out"), [((13, 17), (30, 11)), ((37, 53), (24, 24)),
                                            ((300, 211), (224, 224)), ((32, 32), (224, 224))])
@pytest.mark.slow  # imports TensorFlow, about 5 s in each worker that runs it
def test_bicubic_is_tf1_resize_bicubic(shape, out):
    tf = pytest.importorskip("tensorflow")
    x = np.random.default_rng(1).random((*shape, 3)).astype(np.float32)
    reference = tf.compat.v1.image.resize_bicubic(x[None], list(out))[0].numpy()
    np.testing.assert_allclose(resize_bicubic_tf1(x, *out), reference, atol=3e-6)


def test_crop_resize_clips_the_bicubic_overshoot_and_differs_from_the_default():
    sharp = (np.random.default_rng(0).integers(0, 2, (12, 12, 3)) * 255).astype(np.uint8)
    reference = resize_bicubic_tf1(sharp / np.float32(255), 24, 24)
    assert reference.min() < 0 and reference.max() > 1  # bicubic overshoots at the edges
    out = eval_view(sharp, size=24, crop_fraction=1.0, mode="crop_resize")
    np.testing.assert_array_equal(out, np.clip(reference, 0, 1))
    default = eval_view(sharp, size=24, crop_fraction=1.0)
    assert np.abs(default - out).max() > 0.05


@pytest.mark.parametrize("shape", [(37, 53), (64, 40), (300, 211), (20, 20)])
@pytest.mark.slow  # imports TensorFlow
def test_resize_crop_is_tensorflows_antialiased_resize_and_centre_crop(shape):
    """The default transform against ``tf.image.resize(antialias=True)`` of the shorter side
    to round(S / f) and the centre crop (what torchvision's Resize + CenterCrop do)."""
    tf = pytest.importorskip("tensorflow")
    image = _image(*shape)
    size, fraction = 24, 0.875
    h, w = shape
    scale = round(size / fraction) / min(h, w)
    new_h, new_w = max(round(h * scale), size), max(round(w * scale), size)
    resized = tf.image.resize(image / np.float32(255), [new_h, new_w], antialias=True).numpy()
    top, left = (new_h - size) // 2, (new_w - size) // 2
    np.testing.assert_allclose(eval_view(image, size=size, crop_fraction=fraction),
                               resized[top : top + size, left : left + size], atol=5e-6)


def test_tf_resize_crop_geometry_and_its_bilinear():
    """The SupCon TF code's evaluation path, from its definition: an image whose shorter side
    already is round(S / f) is not resampled (TF1's legacy bilinear at the same size is the
    identity), so the output is the window at offset ((h - S + 1) // 2, (w - S + 1) // 2);
    a 2x upsampling by TF1's legacy bilinear takes pixel i at 2i, the mean of i and i + 1 at
    2i + 1 and repeats the last one; the uint8 cast truncates."""
    image = _image(32, 45)  # shorter side round(24 / 0.75) = 32: offsets 4 and (45 - 24 + 1) // 2
    out = eval_view(image, size=24, crop_fraction=0.75, mode="tf_resize_crop")
    assert out.shape == (24, 24, 3) and out.dtype == np.float32
    np.testing.assert_array_equal(out, image[4:28, 11:35] / np.float32(255))
    x = np.array([[0.0, 10.0, 15.0]], np.float32)[..., None]  # [1, 3, 1]
    np.testing.assert_array_equal(resize_bilinear_tf1(x, 1, 6)[0, :, 0], [0, 5, 10, 12.5, 15, 15])
    odd = np.array([[0, 3], [3, 0]], np.uint8)[..., None].repeat(3, -1)  # means of 1.5 -> 1
    up = eval_view(odd, size=4, crop_fraction=1.0, mode="tf_resize_crop")
    np.testing.assert_array_equal(up[0, :, 0] * 255, [0, 1, 3, 3])
    tall = _image(90, 40)  # the shorter side 40 -> 32: [int(0.8 * 90), 32] = [72, 32]
    assert eval_view(tall, size=24, crop_fraction=0.75, mode="tf_resize_crop").shape == (24, 24, 3)
    assert not np.allclose(eval_view(tall, size=24, crop_fraction=0.75, mode="tf_resize_crop"),
                           eval_view(tall, size=24, crop_fraction=0.75))


@pytest.mark.parametrize("shape", [(375, 500), (500, 333), (300, 211), (256, 256), (224, 224)])
@pytest.mark.slow  # imports TensorFlow
def test_tf_resize_crop_is_supcons_resize_then_crop(shape):
    """Against the source's ops, written as supcon/preprocessing.py (google-research@0c1bbe5)
    runs them: ``_resize_to_min_dim`` (float32 scale, truncating int32 cast) with
    ``tf.compat.v1.image.resize`` bilinear cast back to uint8 (``_resize_image``), then
    ``_center_crop_window``'s offsets; 224 + ``crop_padding`` 32."""
    tf = pytest.importorskip("tensorflow")
    image = _image(*shape, seed=3)
    size, padding = 224, 32
    original = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = tf.cast(size + padding, tf.float32) / tf.reduce_min(original)
    resized = tf.cast(tf.compat.v1.image.resize(
        image, tf.cast(scale * original, tf.int32), method=tf.image.ResizeMethod.BILINEAR),
        tf.uint8).numpy()
    top, left = ((n - size + 1) // 2 for n in resized.shape[:2])
    reference = resized[top : top + size, left : left + size] / np.float32(255)
    out = eval_view(image, size=size, crop_fraction=size / (size + padding), mode="tf_resize_crop")
    np.testing.assert_array_equal(out, reference)
