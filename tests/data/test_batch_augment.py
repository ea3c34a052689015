"""Whole-batch augmentation: same stages and distributions as the per-example path."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from contrastive_jax import data
from contrastive_jax.data import batch_augment
from contrastive_jax.data._tf import tf
from contrastive_jax.data.augment import AugmentConfig, augment_view, augmentation_preset
from tests.data.helpers import digits_config

SIZE = 16
PLAIN = AugmentConfig(crop_scale=None, flip_prob=0.0)  # every stage off


def _images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(n, SIZE, SIZE, 3), dtype=np.uint8)


def _keys(n: int, views: int = 2, step: int = 0, seed: int = 0) -> tf.Tensor:
    steps = tf.fill([n], tf.constant(step, tf.int64))
    return batch_augment.view_keys(seed, steps, tf.range(n, dtype=tf.int64), views)


def _augment(images: np.ndarray, cfg: AugmentConfig, keys: tf.Tensor) -> np.ndarray:
    return batch_augment.augment_batch(tf.constant(images), keys, cfg, size=SIZE).numpy()


def _shifted(image: np.ndarray, pad: int, dy: int, dx: int, flip: bool) -> np.ndarray:
    padded = np.pad(image, [(pad, pad), (pad, pad), (0, 0)])
    crop = padded[dy : dy + SIZE, dx : dx + SIZE]
    return crop[:, ::-1] if flip else crop


def test_batchable_presets():
    for name in ("digits", "digits_cluttered", "none"):
        assert batch_augment.is_batchable(augmentation_preset(name, SIZE)), name
    for name in ("simclr_cifar", "supcon_cifar", "phantoms", "byol_imagenet", "cifar_proxy"):
        cfg = augmentation_preset(name, 32)
        assert not batch_augment.is_batchable(cfg), name
        with pytest.raises(ValueError, match="per-example stage"):
            batch_augment.augment_batch(tf.zeros([1, 32, 32, 3]), _keys(1), cfg, size=32)


def test_uniforms_are_uniform_and_keys_distinct():
    keys = _keys(500, views=4)
    assert len(np.unique(keys.numpy())) == 2000
    u = batch_augment.uniforms(keys, 0, 64).numpy().ravel()
    assert u.min() >= 0.0 and u.max() < 1.0
    counts = np.histogram(u, bins=16, range=(0, 1))[0]
    expected = u.size / 16
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 45  # 15 degrees of freedom: p < 1e-4 above 45
    # Another step, another seed: other keys.
    assert not np.intersect1d(keys.numpy(), _keys(500, 4, step=1).numpy()).size
    assert not np.intersect1d(keys.numpy(), _keys(500, 4, seed=1).numpy()).size


def test_shift_and_flip_are_zero_padded_crops_at_every_offset():
    cfg = dataclasses.replace(PLAIN, pad_fraction=0.125, flip_prob=0.5)  # pad 2
    images = _images(200)
    views = _augment(images, cfg, _keys(200))
    seen = set()
    for image, pair in zip(images / 255.0, views, strict=True):
        for view in pair:
            matches = [
                (dy, dx, flip)
                for dy in range(5)
                for dx in range(5)
                for flip in (False, True)
                if np.allclose(view, _shifted(image, 2, dy, dx, flip))
            ]
            assert len(matches) == 1
            seen.add(matches[0])
    assert len(seen) == 5 * 5 * 2  # every offset, with and without the flip


def test_gain_noise_and_cutout_follow_their_distributions():
    images = np.full((400, SIZE, SIZE, 3), 128, np.uint8)
    base = 128 / 255
    gain = _augment(images, dataclasses.replace(PLAIN, gain=(0.6, 1.4)), _keys(400))
    factors = gain[..., 0, 0, 0] / base
    np.testing.assert_allclose(
        gain / base, np.broadcast_to(factors[..., None, None, None], gain.shape), rtol=1e-6
    )
    assert 0.6 <= factors.min() < 0.62 and 1.38 < factors.max() < 1.4
    assert abs(factors.mean() - 1.0) < 0.03

    noisy = _augment(images, dataclasses.replace(PLAIN, noise_std=(0.1, 0.1)), _keys(400))
    noise = noisy - base
    np.testing.assert_array_equal(noise[..., 0], noise[..., 2])  # shared by the channels
    assert abs(noise.mean()) < 2e-3 and abs(noise.std() - 0.1) < 2e-3
    ranged = _augment(images, dataclasses.replace(PLAIN, noise_std=(0.0, 0.05)), _keys(400))
    stds = (ranged - base).std(axis=(2, 3, 4))
    assert stds.min() < 0.005 and 0.045 < stds.max() < 0.06

    cut = _augment(images, dataclasses.replace(PLAIN, cutout_prob=0.5), _keys(400))
    zeros = (cut[..., 0] == 0).sum(axis=(2, 3))  # [B, V] zeroed pixels per view
    assert 0.4 < (zeros > 0).mean() < 0.6
    assert zeros.max() == 16  # a 4 x 4 patch, clipped at the borders
    for view in cut.reshape(-1, SIZE, SIZE, 3)[:100]:
        rows, cols = np.nonzero(view[..., 0] == 0)
        if rows.size:
            assert rows.size == (np.ptp(rows) + 1) * (np.ptp(cols) + 1)  # one rectangle


def test_same_views_whatever_the_batch_order():
    cfg = augmentation_preset("digits_cluttered", SIZE)
    images = _images(16)
    order = np.random.default_rng(1).permutation(16)
    steps = tf.fill([16], tf.constant(7, tf.int64))
    ids = tf.range(16, dtype=tf.int64)
    keys = batch_augment.view_keys(3, steps, ids, 2)
    shuffled = batch_augment.view_keys(3, steps, tf.gather(ids, order), 2)
    np.testing.assert_array_equal(
        _augment(images, cfg, keys)[order], _augment(images[order], cfg, shuffled)
    )


def test_same_statistics_as_the_per_example_path():
    cfg = augmentation_preset("digits", SIZE)
    images = _images(300)
    batched = _augment(images, cfg, _keys(300))[:, 0]
    view = tf.function(functools.partial(augment_view, cfg=cfg, view=0, size=SIZE))
    single = np.stack(
        [
            view(tf.constant(image / 255.0, tf.float32), tf.constant([0, i])).numpy()
            for i, image in enumerate(images)
        ]
    )
    for stat in (np.mean, np.std):
        a, b = stat(batched, axis=(1, 2, 3)), stat(single, axis=(1, 2, 3))
        assert abs(a.mean() - b.mean()) < 3 * np.hypot(a.std(), b.std()) / np.sqrt(300)


def test_pipeline_uses_the_batch_path_for_in_memory_digits(digits_source):
    config = digits_config()
    iterator = data.make_pretrain_iterator(config, seed=5, source=digits_source)
    assert batch_augment.is_batchable(iterator.augmentation)
    batch = next(iterator)
    train = digits_source.split("train")
    keys = batch_augment.view_keys(
        5, tf.zeros([16], tf.int64), tf.constant(batch["index"]), iterator.num_views
    )
    rows = np.searchsorted(train.ids, batch["index"])
    views = batch_augment.augment_batch(
        tf.constant(train.images[rows]), keys, iterator.augmentation, size=iterator.image_size
    ).numpy()
    mean, std = np.asarray(digits_source.mean), np.asarray(digits_source.std)
    np.testing.assert_allclose(batch["views"], (views - mean) / std, rtol=1e-5, atol=1e-5)


def test_a_stage_the_batch_path_lacks_keeps_the_per_example_path():
    digits = augmentation_preset("digits", SIZE)
    assert not batch_augment.is_batchable(dataclasses.replace(digits, channel_gain=(0.8, 1.2)))
    assert not batch_augment.is_batchable(dataclasses.replace(digits, crop_scale=(0.5, 1.0)))
    assert not batch_augment.is_batchable(dataclasses.replace(digits, jitter=(0.4, 0, 0, 0)))
    assert batch_augment.is_batchable(dataclasses.replace(digits, jitter_prob=0.3))
