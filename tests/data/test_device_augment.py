"""The device-side appearance stages against the TensorFlow host stages they replace.

Deterministic ops (given their parameters) must agree with TensorFlow's to float
round-off; random stages must draw from the same distributions: per-view output statistics
of many draws on the same input are compared with a two-sample Kolmogorov-Smirnov test.
"""

from __future__ import annotations

import colorsys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from contrastive_jax.data import device_augment as da
from contrastive_jax.data.augment_config import AugmentConfig, augmentation_preset
from contrastive_jax.parallel import batch_sharding, make_mesh

tf = pytest.importorskip("tensorflow")
from contrastive_jax.data import _image_ops, augment  # noqa: E402

DRAWS = 300
SIZE = 24


def _image(seed: int = 0, size: int = SIZE) -> np.ndarray:
    """A smooth colourful float32 [S, S, 3] image in [0, 1] (gradients plus noise)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    base = np.stack([yy, xx, 1 - (yy + xx) / 2], -1)
    return np.clip(0.7 * base + 0.3 * rng.random((size, size, 3)), 0, 1).astype(np.float32)


def test_hue_rotation_matches_colorsys():
    pixels = np.random.default_rng(1).random((500, 3)).astype(np.float32)
    for delta in (-0.4, -0.05, 0.1, 0.37):
        got = np.asarray(da.adjust_hue(pixels, delta))
        want = []
        for p in pixels:
            h, s, v = colorsys.rgb_to_hsv(*p)
            want.append(colorsys.hsv_to_rgb((h + delta) % 1.0, s, v))
        np.testing.assert_allclose(got, np.array(want), atol=2e-6)
        np.testing.assert_allclose(got, tf.image.adjust_hue(pixels[None], delta)[0], atol=2e-6)


def test_deterministic_stages_match_tensorflow():
    x = _image()
    np.testing.assert_allclose(da.grayscale(x), _image_ops.grayscale(x), atol=1e-6)
    np.testing.assert_allclose(da.solarize(x, 0.5), _image_ops.solarize(x, 0.5), atol=0)
    for sigma, radius in ((0.3, 2), (1.5, 4), (2.0, 5)):
        np.testing.assert_allclose(
            da.gaussian_blur(jnp.asarray(x), jnp.float32(sigma), radius),
            _image_ops.gaussian_blur(x, tf.constant(sigma), radius), atol=2e-6,
        )


def _summaries(views: np.ndarray) -> np.ndarray:
    """Per-view statistics [N, 4]: mean, std, mean of channel 0 and of channel 2."""
    return np.stack([views.mean((1, 2, 3)), views.std((1, 2, 3)),
                     views[..., 0].mean((1, 2)), views[..., 2].mean((1, 2))], -1)


def _same_distribution(ours: np.ndarray, theirs: np.ndarray) -> None:
    for k in range(ours.shape[1]):
        p = stats.ks_2samp(ours[:, k], theirs[:, k]).pvalue
        assert p > 1e-3, (k, p, ours[:, k].mean(), theirs[:, k].mean())


def _jax_draws(fn, x: np.ndarray) -> np.ndarray:
    keys = jax.random.split(jax.random.key(7), DRAWS)
    return np.asarray(jax.jit(jax.vmap(lambda k: fn(jnp.asarray(x), k)))(keys))


def _tf_draws(fn, x: np.ndarray) -> np.ndarray:
    traced = tf.function(lambda s: fn(tf.constant(x), s))
    return np.stack([traced(tf.constant([11, i], tf.int64)).numpy() for i in range(DRAWS)])


@pytest.mark.parametrize("strengths", [(0.8, 0.8, 0.8, 0.2), (0.4, 0.4, 0.0, 0.0),
                                       (0.0, 0.0, 0.0, 0.3)])
def test_colour_jitter_draws_the_same_distribution(strengths):
    x = _image()
    b, c, s, h = strengths
    ours = _jax_draws(lambda im, k: da.color_jitter(im, k, strengths), x)
    theirs = _tf_draws(lambda im, seed: _image_ops.color_jitter(
        im, seed, brightness=b, contrast=c, saturation=s, hue=h), x)
    _same_distribution(_summaries(ours), _summaries(theirs))


@pytest.mark.parametrize(("preset", "view"), [
    ("simclr_imagenet", 0), ("byol_imagenet", 0), ("byol_imagenet", 1), ("mio", 0),
    ("digits", 0), ("phantoms", 0), ("cifar_proxy", 0), ("simclr_cifar", 1),
])
def test_every_stage_of_a_preset_draws_the_same_distribution(preset, view):
    """The appearance stages of each preset (geometry off) against augment._appearance."""
    size = 40  # above 32, so the mio preset blurs and solarises
    cfg = augmentation_preset(preset, size)
    x = _image(size=size)
    ours = _jax_draws(lambda im, k: da.appearance(im, k, cfg, view=view), x)

    def theirs_fn(im, seed):
        seeds = tf.unstack(tf.random.experimental.stateless_split(seed, 12))
        return augment._appearance(im, seeds, cfg, view=view, size=size)

    _same_distribution(_summaries(ours), _summaries(_tf_draws(theirs_fn, x)))


def test_a_view_does_not_depend_on_its_batch_or_the_device_count():
    cfg = augmentation_preset("byol_imagenet", SIZE)
    augment_fn = da.make_device_augment(cfg, seed=3, mean=(0.4, 0.5, 0.6), std=(0.2, 0.25, 0.3))
    rng = np.random.default_rng(0)
    big = rng.integers(0, 256, (32, 2, SIZE, SIZE, 3), dtype=np.uint8)
    index = rng.permutation(1000)[:32]
    step = np.full(32, 5)
    sharding = batch_sharding(make_mesh())
    assert jax.device_count() == 8
    sharded = augment_fn(*(jax.device_put(a, sharding) for a in (big, index, step)))
    assert len(sharded.sharding.device_set) == 8
    rows = [3, 17, 30, 8, 0, 21, 9, 12]  # the same examples, another batch, one device
    small = augment_fn(big[rows], index[rows], step[rows])
    # The same draws; the two programs (batch 32 over 8 devices, batch 8 on one) may round
    # the blur's and the contrast's sums differently (up to ~1e-6), other draws move views by ~0.1.
    np.testing.assert_allclose(np.asarray(sharded)[rows], np.asarray(small), rtol=0, atol=1e-5)
    # Another step or another seed draws other views.
    moved = augment_fn(big[rows], index[rows], step[rows] + 1)
    assert not np.allclose(np.asarray(moved), np.asarray(small))


def test_views_must_be_uint8():
    augment_fn = da.make_device_augment(AugmentConfig(), seed=0, mean=(0.5,) * 3, std=(1.0,) * 3)
    with pytest.raises(ValueError, match="uint8"):
        augment_fn(np.zeros((2, 2, 4, 4, 3), np.float32), np.arange(2), np.zeros(2, int))


def test_the_quickstart_views_have_one_distribution_on_both_paths():
    """The quickstart's 16 px cluttered digits (shift of up to 2 px, gain U(0.8, 1.2), noise
    sigma 0.05): host shifts + device stages against the tf.data path's whole-batch
    augmentation (batch_augment, on which the quickstart's recorded results were measured).

    Per image, over many draws: each pixel's mean (the shift), and with a two-sample KS test
    each view's mean intensity (the gain) and its vertical high-pass energy (the noise).
    Calibrated: a shift of 1 px instead of 2 gives z-scores of spread 3.3, a gain U(0.75,
    1.25) a KS p-value of 8e-5, a noise sigma of 0.055 one of 2e-4."""
    from contrastive_jax.data import batch_augment, digits, host_views

    draws, count, size = 150, 12, 16
    cfg = augmentation_preset("digits_cluttered", size)
    images = digits.digits_splits(cluttered=True)["train"].images[:count]  # uint8 [12, 16, 16, 3]
    steps = np.repeat(np.arange(draws), count)
    index = np.tile(np.arange(count), draws)
    tiled = np.tile(images, (draws, 1, 1, 1))
    keys = batch_augment.view_keys(0, tf.constant(steps, tf.int64), tf.constant(index, tf.int64), 2)
    theirs = batch_augment.augment_batch(tf.constant(tiled), keys, cfg, size=size).numpy()
    host = np.stack([host_views.views_of(im, host_views.view_rngs(0, int(k), int(i), 2), cfg, size)
                     for im, k, i in zip(tiled, steps, index, strict=True)])
    augment_fn = da.make_device_augment(cfg, seed=0, mean=(0.0,) * 3, std=(1.0,) * 3)
    ours = np.asarray(augment_fn(jnp.asarray(host), jnp.asarray(index), jnp.asarray(steps)))
    a = theirs.reshape(draws, count, 2, size, size, 3)[..., 0]  # grey: one channel
    b = ours.reshape(draws, count, 2, size, size, 3)[..., 0]
    z = (a.mean(axis=(0, 2)) - b.mean(axis=(0, 2))) / np.sqrt(
        (a.var(axis=(0, 2)) + b.var(axis=(0, 2))) / (2 * draws))
    # 3,072 z-scores, about standard normal (the two views of a draw share the image).
    assert abs(z.mean()) < 0.1 and z.std() < 1.2, (z.mean(), z.std())

    def summaries(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x.mean(axis=(-2, -1)), ((x[..., 1:, :] - x[..., :-1, :]) ** 2).mean(axis=(-2, -1))

    for ours_stat, theirs_stat in zip(summaries(b), summaries(a), strict=True):
        p_values = [stats.ks_2samp(ours_stat[:, i].ravel(), theirs_stat[:, i].ravel()).pvalue
                    for i in range(count)]
        assert min(p_values) > 1e-3, p_values
