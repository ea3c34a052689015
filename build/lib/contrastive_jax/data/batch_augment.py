"""Whole-batch augmentation for recipes made of shift, flip, gain, cutout and noise.

:mod:`contrastive_jax.data.augment` transforms one example at a time; on small
in-memory images (16x16 digits) its cost is dominated by the dozens of tiny
TensorFlow ops run per view, about 80 us per example, which on a host whose cores
also run the step (the CPU "device" of the quickstart) is time taken from
training. A recipe without a resized crop, colour jitter, grayscale, blur or
solarisation (:func:`is_batchable`: the ``digits``, ``digits_cluttered`` and
``none`` presets) is applied here instead to the whole batch ``[B, h, w, 3]`` at
once, with a few ops on ``[B, V, S, S, 3]``. The stages and their distributions
are those of :func:`~contrastive_jax.data.augment.augment_view`, in its order:

1. resize to ``S x S`` if needed (bilinear, antialiased);
2. zero-pad by ``round(pad_fraction * S)`` per side and crop ``S x S`` back at an
   offset uniform over the valid offsets; horizontal flip with ``flip_prob``;
3. gain ``U(gain)``;
4. with ``cutout_prob``, zero a ``side x side`` patch (``side =
   round(cutout_fraction * S)``) centred uniformly, clipped to the image;
5. Gaussian noise shared by the channels, standard deviation ``U(noise_std)``.

Randomness is counter-based, not TensorFlow's stateless ops: every random number
of view ``v`` of an example is SplitMix64 (Steele, Lea & Flood 2014, "Fast
splittable pseudorandom number generators", OOPSLA) of a key hashed from
``(seed, step, example id, v)`` and a counter. So a view is a pure function of
(image, seed, step, id, view) as on the per-example path (the draws differ from
:func:`~contrastive_jax.data.augment.augment_view`'s): independent of the
example's place in the batch, of the batch size and of the number of processes.
"""

from __future__ import annotations

import dataclasses
import math

from contrastive_jax.data._tf import tf
from contrastive_jax.data.augment import AugmentConfig

_GOLDEN = 0x9E3779B97F4A7C15  # SplitMix64's increment (2^64 / golden ratio)
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB

# Counters of the scalar draws of one view; the noise uses counters from _NOISE on.
_SHIFT_Y, _SHIFT_X, _FLIP, _GAIN, _CUTOUT, _CUTOUT_Y, _CUTOUT_X, _NOISE_STD = range(8)
_NOISE = 8


#: The fields :func:`augment_batch` applies, and the parameters that only matter with
#: a stage it does not have (the resized crop's ratio, the blur's sigma, the
#: solarisation threshold, the jitter probability when every strength is 0).
_HANDLED = (
    "pad_fraction",
    "flip_prob",
    "gain",
    "cutout_prob",
    "cutout_fraction",
    "noise_std",
    "crop_ratio",
    "blur_sigma",
    "solarize_threshold",
)


def is_batchable(cfg: AugmentConfig) -> bool:
    """Whether every stage of ``cfg`` is one :func:`augment_batch` applies.

    True when ``cfg`` with the handled fields reset equals the recipe that does
    nothing (the ``none`` preset), so a stage added to :class:`AugmentConfig`
    later is per-example until this module learns it.
    """
    nothing = AugmentConfig(crop_scale=None, flip_prob=0.0)
    reset = {name: getattr(nothing, name) for name in _HANDLED}
    if not any(s > 0 for s in cfg.jitter):
        reset["jitter_prob"] = nothing.jitter_prob
    return dataclasses.replace(cfg, **reset) == nothing


def _u64(value: int) -> tf.Tensor:
    return tf.constant(value, tf.uint64)


def _splitmix(x: tf.Tensor) -> tf.Tensor:
    """SplitMix64's output function of the state ``x + golden`` (uint64, elementwise)."""
    shift = tf.bitwise.right_shift
    x = x + _u64(_GOLDEN)
    x = tf.bitwise.bitwise_xor(x, shift(x, _u64(30))) * _u64(_MIX1)
    x = tf.bitwise.bitwise_xor(x, shift(x, _u64(27))) * _u64(_MIX2)
    return tf.bitwise.bitwise_xor(x, shift(x, _u64(31)))


def _as_u64(x: tf.Tensor) -> tf.Tensor:
    return tf.bitcast(tf.cast(x, tf.int64), tf.uint64)


def view_keys(seed: int, step: tf.Tensor, index: tf.Tensor, num_views: int) -> tf.Tensor:
    """uint64 [B, V] keys of the views of a batch.

    Args:
      seed: run seed.
      step: int64 [B], the step of each example.
      index: int64 [B], the example ids.
      num_views: V.
    """
    key = _splitmix(_splitmix(_u64(seed % 2**64)) ^ _splitmix(_as_u64(step)))
    key = _splitmix(key ^ _as_u64(index))
    views = _as_u64(tf.range(num_views, dtype=tf.int64))
    return _splitmix(key[:, None] ^ _splitmix(views)[None, :])


def uniforms(keys: tf.Tensor, start: int, count: int) -> tf.Tensor:
    """float32 [*keys.shape, count] in [0, 1): draws ``start .. start + count - 1`` of each key.

    Draw ``c`` of key ``k`` is the top 24 bits of ``splitmix(k + c * golden)``.
    """
    counters = _as_u64(tf.range(start, start + count, dtype=tf.int64)) * _u64(_GOLDEN)
    bits = _splitmix(keys[..., None] + counters)
    return tf.cast(tf.bitwise.right_shift(bits, _u64(40)), tf.float32) * (1.0 / 2**24)


def _normals(keys: tf.Tensor, start: int, count: int) -> tf.Tensor:
    """float32 [*keys.shape, count] standard normals (Box-Muller on pairs of draws)."""
    pairs = (count + 1) // 2
    u = uniforms(keys, start, 2 * pairs)
    radius = tf.sqrt(-2.0 * tf.math.log(1.0 - u[..., :pairs]))  # 1 - u in (0, 1]
    angle = (2.0 * math.pi) * u[..., pairs:]
    return tf.concat([radius * tf.cos(angle), radius * tf.sin(angle)], axis=-1)[..., :count]


def _below(u: tf.Tensor, n: int) -> tf.Tensor:
    """int32 uniform in [0, n) from uniforms in [0, 1)."""
    return tf.minimum(tf.cast(u * n, tf.int32), n - 1)


def _shift_flip(images: tf.Tensor, draws: tf.Tensor, cfg: AugmentConfig, size: int) -> tf.Tensor:
    """[B, V, S, S, C] shifted and flipped copies of ``images`` [B, S, S, C]."""
    pad = round(cfg.pad_fraction * size)
    grid = tf.range(size)
    offset_y = offset_x = tf.zeros(tf.shape(draws)[:-1], tf.int32)[..., None]  # [B, V, 1]
    if pad > 0:
        images = tf.pad(images, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
        offset_y = _below(draws[..., _SHIFT_Y], 2 * pad + 1)[..., None]
        offset_x = _below(draws[..., _SHIFT_X], 2 * pad + 1)[..., None]
    rows = offset_y + grid  # [B, V, S]
    cols = offset_x + grid
    if cfg.flip_prob > 0:
        flip = (draws[..., _FLIP] < cfg.flip_prob)[..., None]
        cols = tf.where(flip, offset_x + size - 1 - grid, cols)
    views = tf.gather(images, rows, axis=1, batch_dims=1)  # [B, V, S, W + 2 pad, C]
    return tf.gather(views, cols, axis=3, batch_dims=2)  # [B, V, S, S, C]


def _cutout(x: tf.Tensor, draws: tf.Tensor, cfg: AugmentConfig, size: int) -> tf.Tensor:
    side = round(cfg.cutout_fraction * size)
    grid = tf.range(size)
    start_y = _below(draws[..., _CUTOUT_Y], size)[..., None] - side // 2
    start_x = _below(draws[..., _CUTOUT_X], size)[..., None] - side // 2
    rows = (grid >= start_y) & (grid < start_y + side)  # [B, V, S]
    cols = (grid >= start_x) & (grid < start_x + side)
    applied = (draws[..., _CUTOUT] < cfg.cutout_prob)[..., None, None]
    inside = rows[..., :, None] & cols[..., None, :] & applied
    return tf.where(inside[..., None], tf.zeros_like(x), x)


def augment_batch(
    images: tf.Tensor, keys: tf.Tensor, cfg: AugmentConfig, *, size: int
) -> tf.Tensor:
    """Views of a batch under a recipe for which :func:`is_batchable` holds.

    Args:
      images: uint8 or float [B, h, w, 3]; uint8 is scaled to [0, 1].
      keys: uint64 [B, V] from :func:`view_keys`.
      cfg: the recipe.
      size: output side S.

    Returns:
      float32 [B, V, S, S, 3], not normalised (noise may leave [0, 1]).
    """
    if not is_batchable(cfg):
        raise ValueError(f"augment_batch cannot apply {cfg}: it has a per-example stage")
    x = tf.cast(images, tf.float32)
    if images.dtype == tf.uint8:
        x = x / 255.0
    if x.shape[1] != size or x.shape[2] != size:
        x = tf.image.resize(x, [size, size], antialias=True)
    draws = uniforms(keys, 0, _NOISE)  # [B, V, 8]
    x = _shift_flip(x, draws, cfg, size)
    if cfg.gain is not None:
        lo, hi = cfg.gain
        x = x * (lo + (hi - lo) * draws[..., _GAIN])[..., None, None, None]
    if cfg.cutout_prob > 0:
        x = _cutout(x, draws, cfg, size)
    if cfg.noise_std[1] > 0:
        lo, hi = cfg.noise_std
        std = lo + (hi - lo) * draws[..., _NOISE_STD] if lo < hi else tf.fill(tf.shape(keys), lo)
        noise = _normals(keys, _NOISE, size * size)  # [B, V, S * S]
        noise = tf.reshape(noise, tf.concat([tf.shape(keys), [size, size, 1]], 0))
        x = x + std[..., None, None, None] * noise
    return tf.ensure_shape(x, [None, keys.shape[1], size, size, 3])
