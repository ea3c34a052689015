"""The device-side appearance stages against their definitions.

Deterministic ops (given their parameters) must agree with references written from their
definitions (colorsys, scipy) to float round-off; random stages must draw from their
distributions: per-view output statistics of many draws on the same input are compared
with a reference sampler by a two-sample Kolmogorov-Smirnov test, and each stage runs with
its probability.
"""

from __future__ import annotations

import colorsys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import ndimage, stats

from contrastive_jax.data import device_augment as da
from contrastive_jax.data.augment_config import AugmentConfig, augmentation_preset
from contrastive_jax.errors import ConfigError
from contrastive_jax.parallel import batch_sharding, make_mesh

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


def test_deterministic_stages_match_their_definitions():
    """Luma with ITU-R 601 weights (``tf.image.rgb_to_grayscale``'s), solarisation at the
    threshold, and the blur against scipy's Gaussian filter (same radius, reflect padding)."""
    x = _image()
    luma = x @ np.array([0.2989, 0.5870, 0.1140], np.float32)
    np.testing.assert_allclose(da.grayscale(x), np.repeat(luma[..., None], 3, -1), atol=1e-6)
    np.testing.assert_array_equal(da.solarize(x, 0.5), np.where(x >= 0.5, 1 - x, x))
    for sigma, radius in ((0.3, 2), (1.5, 4), (2.0, 5)):
        reference = ndimage.gaussian_filter(x, sigma, mode="mirror", radius=radius, axes=(0, 1))
        np.testing.assert_allclose(da.gaussian_blur(jnp.asarray(x), jnp.float32(sigma), radius),
                                   reference, atol=2e-6)


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


def _reference_jitter(x: np.ndarray, rng: np.random.Generator,
                     strengths: tuple[float, ...]) -> np.ndarray:
    """torchvision's ``ColorJitter`` written from its definition: factors ``U(max(0, 1 - s),
    1 + s)`` for brightness (scale), contrast (blend with the mean luma) and saturation
    (blend with the luma), a hue shift ``U(-h, h)`` (colorsys), the active ops in a random
    order, each clipped to [0, 1]."""
    b, c, s, h = strengths
    luma = np.array([0.2989, 0.5870, 0.1140])

    def blend(y, other, f):
        return np.clip(f * y + (1 - f) * other, 0, 1)

    def hue(y, delta):
        flat = [colorsys.hsv_to_rgb((hh + delta) % 1.0, ss, vv)
                for hh, ss, vv in (colorsys.rgb_to_hsv(*p) for p in y.reshape(-1, 3))]
        return np.array(flat).reshape(y.shape)

    def factor(strength: float) -> float:
        return rng.uniform(max(0.0, 1.0 - strength), 1.0 + strength)

    ops = []
    if b > 0:
        ops.append((lambda y, f: np.clip(f * y, 0, 1), factor(b)))
    if c > 0:
        ops.append((lambda y, f: blend(y, (y @ luma).mean(), f), factor(c)))
    if s > 0:
        ops.append((lambda y, f: blend(y, (y @ luma)[..., None], f), factor(s)))
    if h > 0:
        ops.append((hue, rng.uniform(-h, h)))
    for i in rng.permutation(len(ops)):
        op, value = ops[i]
        x = op(x, value)
    return x


@pytest.mark.parametrize("strengths", [(0.8, 0.8, 0.8, 0.2), (0.4, 0.4, 0.0, 0.0),
                                       (0.0, 0.0, 0.0, 0.3)])
@pytest.mark.slow
def test_colour_jitter_draws_torchvisions_distribution(strengths):
    x = _image(size=12)
    ours = _jax_draws(lambda im, k: da.color_jitter(im, k, strengths), x)
    rng = np.random.default_rng(11)
    theirs = np.stack([_reference_jitter(x.astype(np.float64), rng, strengths)
                       for _ in range(DRAWS)])
    _same_distribution(_summaries(ours), _summaries(theirs))


@pytest.mark.parametrize(("field", "stage"), [("solarize_prob", "solarize"),
                                              ("blur_prob", "blur"), ("cutout_prob", "cutout")])
@pytest.mark.slow
def test_each_stage_runs_with_its_views_probability(field, stage):
    """One stage on, probability 0.3 for view 0 and 0.7 for view 1 (the per-view stages)
    or 0.3 for both (cutout): the fraction of changed views is that probability."""
    probs = (0.3,) if field == "cutout_prob" else (0.3, 0.7)
    cfg = AugmentConfig(crop_scale=None, jitter=(0.0,) * 4, grayscale_prob=0.0,
                        blur_sigma=(1.0, 2.0), cutout_fraction=0.5,
                        **{field: probs[0] if field == "cutout_prob" else probs})
    x = jnp.asarray(_image(size=SIZE))
    keys = jax.random.split(jax.random.key(3), 2000)
    for view, p in enumerate(probs):
        out = np.asarray(jax.jit(jax.vmap(lambda k, v=view: da.appearance(x, k, cfg, view=v)))(
            keys))
        changed = np.abs(out - np.asarray(x)).max(axis=(1, 2, 3)) > 1e-4
        assert abs(changed.mean() - p) < 4 * np.sqrt(p * (1 - p) / len(keys)), (stage, view)


def test_gain_scales_and_the_noise_has_its_sigma():
    """digits_cluttered's appearance: one gain U(0.8, 1.2) per view, then luminance noise
    N(0, 0.05) shared by the channels."""
    cfg = augmentation_preset("digits_cluttered", SIZE)
    x = jnp.full((SIZE, SIZE, 3), 0.5, jnp.float32)
    keys = jax.random.split(jax.random.key(5), 1000)
    out = np.asarray(jax.jit(jax.vmap(lambda k: da.appearance(x, k, cfg, view=0)))(keys))
    np.testing.assert_array_equal(out[..., 0], out[..., 2])  # one noise for the channels
    gain = out[..., 0].mean(axis=(1, 2)) / 0.5  # the noise averages out over 576 pixels
    assert stats.kstest(gain, stats.uniform(0.8, 0.4).cdf).pvalue > 1e-3
    noise = out[..., 0] - out[..., 0].mean(axis=(1, 2), keepdims=True)
    assert abs(noise.std() - 0.05) < 0.002


@pytest.mark.slow
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


def test_blur_sigma_group_is_simclr_v1s_batch_random_blur():
    """SimCLR v1's batch_random_blur (google-research/simclr@be133b3 data_util.py), from its
    definition: for each view, one sigma U(0.1, 2) for a per-core batch (here G = 4
    consecutive rows), blurred images chosen one by one with the blur's probability. On a
    batch of one image: every blurred row of a group is gaussian_blur(x, sigma) with the sigma
    its first row draws, every other row is x, and the groups' (and views') sigmas differ."""
    cfg = AugmentConfig(crop_scale=None, blur_prob=(0.5,), blur_sigma_group=4)
    image = (np.asarray(_image()) * 255).astype(np.uint8)
    x = jnp.asarray(image, jnp.float32) / 255.0
    batch = 64
    views = np.broadcast_to(image, (batch, 2, SIZE, SIZE, 3))
    index, step = np.arange(100, 100 + batch), np.full(batch, 7)
    out = np.asarray(da.make_device_augment(cfg, seed=1, mean=(0.0,) * 3, std=(1.0,) * 3)(
        views, index, step))
    radius = da.blur_radius(cfg, SIZE)
    blurred_rows = 0
    for v in range(2):
        sigmas = []
        for first in range(0, batch, 4):
            sigma = da.blur_sigma(da.view_key(1, 7, index[first], v), cfg)
            sigmas.append(float(sigma))
            blurred = np.asarray(da.gaussian_blur(x, sigma, radius))
            for row in range(first, first + 4):
                is_blurred = not np.allclose(out[row, v], x, atol=1e-6)
                blurred_rows += is_blurred
                np.testing.assert_allclose(out[row, v], blurred if is_blurred else x, atol=2e-6)
        assert len(set(sigmas)) == batch // 4 and 0.1 <= min(sigmas) and max(sigmas) <= 2.0
    assert abs(blurred_rows / (2 * batch) - 0.5) < 4 * np.sqrt(0.25 / (2 * batch))
    # without the group, a row's sigma is its own: rows of a group blur differently
    own = np.asarray(da.make_device_augment(
        AugmentConfig(crop_scale=None, blur_prob=(1.0,)), seed=1, mean=(0.0,) * 3,
        std=(1.0,) * 3)(views, index, step))
    assert not np.allclose(own[1, 0], own[2, 0], atol=1e-4)


def test_blur_sigma_group_is_checked_and_set_by_the_v1_preset():
    assert augmentation_preset("simclr_v1_imagenet", 224).blur_sigma_group == 4096 // 128
    assert augmentation_preset("simclr_imagenet", 224).blur_sigma_group is None
    for bad in (0, -2, True, 1.5):
        with pytest.raises(ConfigError, match="blur_sigma_group"):
            AugmentConfig(blur_sigma_group=bad)


@pytest.mark.slow
def test_a_grouped_blur_does_not_depend_on_the_device_count():
    """With the v1 preset's groups of 32 rows, a batch of 64 over 8 devices (groups across
    shards) draws what it draws on one device."""
    cfg = augmentation_preset("simclr_v1_imagenet", SIZE)
    augment_fn = da.make_device_augment(cfg, seed=3, mean=(0.5,) * 3, std=(0.25,) * 3)
    rng = np.random.default_rng(1)
    views = rng.integers(0, 256, (64, 2, SIZE, SIZE, 3), dtype=np.uint8)
    index, step = rng.permutation(1000)[:64], np.full(64, 2)
    sharding = batch_sharding(make_mesh())
    sharded = augment_fn(*(jax.device_put(a, sharding) for a in (views, index, step)))
    single = augment_fn(views, index, step)
    np.testing.assert_allclose(np.asarray(sharded), np.asarray(single), rtol=0, atol=1e-5)
